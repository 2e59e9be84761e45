"""A training job's data loader in a memory-limited pod: reads a (sparse) data file at a steady rate,
pinned to one CPU. Every page it caches is charged to its cgroup; over the limit the kernel reclaims
on its behalf (direct reclaim), and that reclaim walks every memory cgroup under the limited parent,
dying ones included. With tens of thousands of zombies there, this process's CPU goes to the kernel.

usage: python -m nodesleuth.lab.actors.dataloader CGROUP_PROCS CPU FILE MB_PER_S [SECONDS [START_MB]]

SECONDS 0 = until killed; START_MB: where to start reading (a fresh region, not pages an earlier run
left in the cache).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

CHUNK = 1 << 20


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the lab
    libc.prctl(15, b"dataloader", 0, 0, 0)
    procs, cpu, path, rate = argv[0], int(argv[1]), argv[2], float(argv[3])
    until = time.time() + float(argv[4]) if len(argv) > 4 and float(argv[4]) > 0 else None
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
    os.sched_setaffinity(0, {cpu})
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    off = (int(argv[5]) * CHUNK if len(argv) > 5 else 0) % size
    start = time.time()
    done = 0
    while until is None or time.time() < until:
        os.pread(fd, CHUNK, off)
        off = (off + CHUNK) % size
        done += 1
        ahead = done / rate - (time.time() - start)
        if ahead > 0:
            time.sleep(ahead)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
