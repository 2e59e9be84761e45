"""The cost of the read every node's kubelet makes: one read of the root memory cgroup's memory.stat,
timed every EVERY ticks (wall time, and the reading thread's CPU time (CLOCK_THREAD_CPUTIME_ID): the
read is kernel work, the few system calls' user side is negligible).

On old kernels (before the rstat rework, 5.x) that read walked every memory cgroup, dying ones
included: the seed incident's mechanism. Timing it on the node, beside the dying count, shows
whether this kernel still pays per zombie (explain's dose-response section). One read of one file
every EVERY seconds: bounded whatever the node's size.
"""

from __future__ import annotations

import os
import time

from ..model.errors import InputError
from ..model.records import StatRead
from ..node.cgroupfs import mounts, v1_mount, v2_mount
from ..node.pread import Preader
from ..node.root import Root
from .registry import Collector, collector

EVERY = 10  # ticks between reads
CHUNK = 1 << 16


def stat_path(root: Root) -> str | None:
    """The root memory cgroup's memory.stat: the v1 memory hierarchy's, else cgroup2's (None: neither)."""
    try:
        ms = mounts(root)
    except InputError:
        return None
    for base in (v1_mount(ms, "memory"), v2_mount(ms)):
        if base and os.path.exists(root.join(os.path.join(base, "memory.stat"))):
            return os.path.join(base, "memory.stat")
    return None


def _cpu_ns() -> int:
    """This thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID: the scheduler's exact runtime, brought up
    to date at the call; /proc/thread-self/schedstat and getrusage lag to the last tick)."""
    return time.thread_time_ns()


def timed_read(path: str) -> tuple[float, float, int]:
    """(wall us, CPU us of this thread, bytes) of open + read to the end + close."""
    c0 = _cpu_ns()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    n = 0
    try:
        while True:
            b = os.read(fd, CHUNK)
            if not b:
                break
            n += len(b)
    finally:
        os.close(fd)
    t1 = time.perf_counter()
    return (t1 - t0) * 1e6, (_cpu_ns() - c0) / 1e3, n


@collector("stat_read", uses=("record", "exporter"), every=EVERY)
class StatReadReader(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root = root
        self.path = stat_path(root)

    def read(self, interval: float, seen=None) -> StatRead | None:
        if self.path is None:
            raise InputError(self.root.join("/sys/fs/cgroup"), "no root memory.stat (no memory controller mounted)")
        full = self.root.join(self.path)
        try:
            wall, cpu_us, n = timed_read(full)
        except OSError as e:
            raise InputError(full, e.strerror or str(e)) from None
        return StatRead(self.path, round(wall, 1), round(cpu_us, 1), n)
