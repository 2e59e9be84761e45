"""Processes that live under a second on a hot core: their CPU reaches the recording through their
parent's cutime/cstime (collect/procs.py), with a real burst of short processes pinned to a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nodesleuth.collect.procs import TaskSampler
from nodesleuth.collect.sampler import Sampler
from nodesleuth.node.root import Root

# A parent named ns-spawner on CPU 1 that starts, one after the other, shells that count for ~0.15 s
# and exit (each lives well under a second, most between two 1 s reads), as a cron-like job or a
# readiness probe that forks per check would.
SPAWNER = r"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the test
ctypes.CDLL(None).prctl(15, b"ns-spawner", 0, 0, 0)
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.time() + float(sys.argv[2])
while time.time() < end:
    subprocess.run(["sh", "-c", "i=0; while [ $i -lt %s ]; do i=$((i+1)); done" % sys.argv[3]])
"""


def _loops_for(seconds: float) -> int:
    """How far sh counts in about `seconds` of CPU on this machine."""
    n = 20000
    before = os.times()
    subprocess.run(["sh", "-c", f"i=0; while [ $i -lt {n} ]; do i=$((i+1)); done"])
    ru = os.times()  # this sh's CPU: the children's times grow by what it took (earlier children excluded)
    took = max(1e-3, ru.children_user + ru.children_system - before.children_user - before.children_system)
    return max(2000, int(n * seconds / took))


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_a_burst_of_short_processes_is_attributed_to_their_parent():
    from conftest import missing

    if len(os.sched_getaffinity(0)) < 2:
        missing("needs CPU 1 (a machine with 2 CPUs or more)")
    loops = _loops_for(0.15)
    s = Sampler(Root("/"), kmsg=False, irqs=False)
    s.prime()
    p = subprocess.Popen([sys.executable, "-c", SPAWNER, "1", "12", str(loops)])
    ticks = []
    try:
        time.sleep(1.0)
        for _ in range(9):
            time.sleep(1.0)
            ticks.append(s.tick())
    finally:
        p.kill()
        p.wait()
        s.close()
    kids = [[u for u in t.procs if u.pid == p.pid and u.comm == "ns-spawner (exited children)"] for t in ticks]
    assert sum(1 for k in kids if k) >= 5, [[(u.comm, u.cpu, round(u.pct)) for u in t.procs if u.cpu == 1]
                                              for t in ticks]
    assert all(u.estimate for k in kids for u in k)
    # what the children burnt shows where it was spent: CPU 1 (busy with them), not spread thin
    on1 = sum(u.pct for k in kids for u in k if u.cpu == 1)
    anywhere = sum(u.pct for k in kids for u in k)
    assert on1 >= 0.6 * anywhere, (on1, anywhere)
    # and the seconds add up: the children fill what the scan alone (the few children alive at a
    # read, and whatever else runs on CPU 1 of this shared machine) left unexplained, never more
    # than CPU 1 was busy
    busy1 = sum(t.cpu[1].busy for t in ticks if 1 in t.cpu) / len(ticks) if ticks[0].cpu else None
    seen1 = sum(u.pct for t in ticks for u in t.procs if u.cpu == 1) / len(ticks)
    alive1 = sum(u.pct for t in ticks for u in t.procs if u.cpu == 1 and "exited children" not in u.comm) / len(ticks)
    assert on1 / len(ticks) >= 20.0 and seen1 >= alive1 + 20.0, (busy1, seen1, alive1)
    if busy1 is not None:
        assert seen1 <= busy1 + 5.0, (busy1, seen1, alive1)


def _stat(pid: int, comm: str, ppid: int, ticks: int, cticks: int, cpu: int, start: int) -> str:
    return (f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 100 0 0 0 {ticks} 0 {cticks} 0 20 0 1 0 {start} "
            f"1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {cpu} 0 0 0 0 0 0 0 0 0 0 0 0 0\n")


def test_children_seen_alive_are_not_counted_twice(tmp_path):
    """A child read while it ran, then reaped: the parent's cutime holds all its CPU, of which what
    was attributed to the child alive is owed and only the rest is the parent's 'exited children'."""
    root = tmp_path / "root"
    proc = root / "proc"

    def write(pid, text):
        (proc / str(pid)).mkdir(parents=True, exist_ok=True)
        (proc / str(pid) / "stat").write_text(text)

    write(100, _stat(100, "spawner", 1, 10, 0, 3, 50))
    ts = TaskSampler(Root(str(root)), threads=False)
    ts.sample(0, uptime=1000)
    # second 1: a child appears (started after the last full scan) and has run 40 ticks
    write(200, _stat(200, "child", 100, 40, 0, 3, 1050))
    u1 = ts.sample(100, uptime=1100, cpu_busy={3: 100})
    assert {(u.pid, u.comm) for u in u1} == {(200, "child")}
    # second 2: it ran 30 more, exited and was reaped (70 ticks into the parent's cutime); another
    # child came and went between the reads (50 ticks, never seen)
    os.remove(proc / "200" / "stat")
    os.rmdir(proc / "200")
    write(100, _stat(100, "spawner", 1, 11, 120, 3, 50))
    u2 = ts.sample(100, uptime=1200, cpu_busy={3: 90})
    kids = [u for u in u2 if u.comm == "spawner (exited children)"]
    got = sum(u.pct for u in kids)
    # 120 reaped - 40 already attributed to the child alive = 80 ticks: the unseen child's 50 and the
    # 30 the seen one ran after its last read
    assert got == pytest.approx(80.0), [(u.comm, u.cpu, u.pct) for u in u2]
    assert all(u.estimate and u.cpu == 3 for u in kids)
