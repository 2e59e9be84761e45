"""Fixture nodes of any size for the benchmarks: the lab's 96-CPU node generator
(fixtures.trees.make_v1_node) plus the per-CPU kernel threads a real node has and the
recorder reads every second: one ksoftirqd/N per CPU with its /proc/PID/stat and schedstat, listed
as kthreadd's children. Line shapes copied from this machine (kernel 6.18, 2026-12-03):
    /proc/14/stat      14 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 16 1904 0 0 20 0 1 0 14 0 0 ...
    /proc/14/schedstat 19212301212 396895528530 175697
"""

from __future__ import annotations

import os

from fixtures.trees import make_v1_node

KSOFTIRQD_STAT = ("{pid} (ksoftirqd/{cpu}) S 2 0 0 0 -1 69238848 0 0 0 0 16 1904 0 0 20 0 1 0 14 0 0 "
                  "18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 {cpu} 0 0 0 0 0 0 0 0 0 0 0 0 0\n")


def _w(root: str, rel: str, text: str) -> None:
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def add_ksoftirqd(root: str, ncpu: int, first_pid: int) -> list[int]:
    pids = [first_pid + c for c in range(ncpu)]
    for c, pid in enumerate(pids):
        _w(root, f"proc/{pid}/stat", KSOFTIRQD_STAT.format(pid=pid, cpu=c))
        _w(root, f"proc/{pid}/comm", f"ksoftirqd/{c}\n")
        _w(root, f"proc/{pid}/schedstat", f"{19212301212 + c} {396895528530 + c} {175697 + c}\n")
    _w(root, "proc/2/task/2/children", " ".join(map(str, pids)) + " ")
    _w(root, "proc/2/stat", KSOFTIRQD_STAT.format(pid=2, cpu=0).replace("(ksoftirqd/0) S 2", "(kthreadd) S 0"))
    _w(root, "proc/2/comm", "kthreadd\n")
    return pids


def make_node(root: str, cpus: int = 96, procs: int = 1000, memcgs: int = 70000, live: int = 240) -> str:
    """A cgroup v1 node with `cpus` CPUs, `procs` user processes plus one ksoftirqd per CPU, and
    `memcgs` memory cgroups counted by the kernel of which `live` are directories."""
    live = max(2, min(live, memcgs))
    make_v1_node(root, ncpu=cpus, nprocs=procs, tracked=memcgs, live=live, busy_cpu=39 % cpus)
    add_ksoftirqd(root, cpus, 100 + procs + 10)
    return root
