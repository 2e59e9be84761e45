"""The memcg walk over live cgroups (issue 40 part 2), recorded for real on this host: thousands of live
nested memory cgroups made during a recording by one process, then a stats reader on CPU 1 reading every
one's memory.stat in a loop (tests/live/statwalk.c: what a node agent's housekeeping does, kubelet's
cAdvisor reading every container cgroup). explain must lead with the memcg walk over live cgroups, say
that the memcgs are live (zombies are not the bulk) and name who made them by path pattern. Every cgroup
made is removed; none is charged a page, so none stays dying (docs/live-cgroups.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import Busy, memcg, missing, needs_root, nodesleuth, retry_when_busy, wait_ticks
from nodesleuth.node.cgroupfs import remove_cgroup_tree

pytestmark = needs_root
HERE = os.path.dirname(os.path.abspath(__file__))
JOBS, TASKS = 60, 50  # 3,000 task cgroups under 60 job cgroups

MAKER = r"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"ns-cgmaker", 0, 0, 0)
import time
base, jobs, tasks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(jobs):  # over ~6 s: a recorder that started tracing late still sees most of them
    time.sleep(0.1)
    os.mkdir(os.path.join(base, f"job{i}"))
    for j in range(tasks):
        os.mkdir(os.path.join(base, f"job{i}", f"task{j}"))
"""


@pytest.mark.slow  # 26 s of real recording
@retry_when_busy()
def test_explain_names_the_walk_over_live_cgroups_and_their_maker(tmp_path):
    for tool in ("gcc", "perf", "taskset"):
        if not subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).stdout:
            missing(f"{tool} is not installed")
    walker_bin = str(tmp_path / "statwalk")
    subprocess.run(["gcc", "-O2", "-o", walker_bin, os.path.join(HERE, "live", "statwalk.c")], check=True)
    mc = memcg()
    base = mc.make(f"nodesleuth-live-{os.getpid()}", children=True)
    store = str(tmp_path / f"st-{time.time_ns()}")  # an attempt of its own (retry_when_busy)
    walker = rec = None
    try:
        rec = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--quiet",
                                "--duration", "26s", "--profile", "--profile-rotate", "3", "--trace-churn",
                                "--live-every", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_ticks(store, rec)  # the recorder's start (perf, the first tick) takes seconds on a busy machine
        time.sleep(2)
        # on CPU 0: CPU 1's episode is the reader's, so the incident's census counts every cgroup made
        subprocess.run(["taskset", "-c", "0", sys.executable, "-c", MAKER, base, str(JOBS), str(TASKS)], check=True,
                       timeout=120)
        paths = str(tmp_path / "stats")
        with open(paths, "w") as f:
            f.write("".join(os.path.join(d, "memory.stat") + "\n" for d, _, _ in os.walk(base)))
        walker = subprocess.Popen(["taskset", "-c", "1", walker_bin, paths, "ns-statwalk"], stdout=subprocess.PIPE)
        assert int(walker.stdout.readline()) == 1 + JOBS + JOBS * TASKS
        walked = (time.time(), time.time() + 10)
        time.sleep(10)
        walker.kill()
        walker.wait()
        _, err = rec.communicate(timeout=120)
        assert rec.returncode == 0, err
    finally:
        for p in (walker, rec):  # a recorder that did not stop in time (seen once, stuck at its end) dies too
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        remove_cgroup_tree(base)
    assert not os.path.exists(base)
    ex = nodesleuth("explain", "--store", store, "--json", timeout=300)
    assert ex.returncode == 0, ex.stderr
    doc = json.loads(ex.stdout)
    on1 = [i for i in doc["incidents"] if i["title"].startswith("CPU 1 ")]
    if not on1:  # the hot-core rule also needs the other CPUs quiet: busy only when they were not
        others = _cpu0_busy(store, *walked)
        if others >= 60:
            raise Busy(f"CPU 0 averaged {others:.0f}% while the reader ran (the rule wants the others < 60%)")
        pytest.fail(f"no incident on CPU 1 with CPU 0 at {others:.0f}%: "
                    + "; ".join(i["title"] for i in doc["incidents"]))
    inc = on1[0]
    hyp = {h["family"]: h for h in inc["hypotheses"]}
    walk = hyp["memcg_walk"]
    assert walk["data"]["over"] == "live", walk
    # the counts at the incident's start (an episode that other jobs started before the reader ran counts fewer)
    assert walk["data"]["live"] > 2 * walk["data"]["dying"], walk
    mk = walk["data"]["live_maker"]
    assert (mk["comm"], mk["pattern"]) == ("ns-cgmaker", "/nodesleuth-live-*/job*/task*"), mk
    # all of them, or the part made once the trace had started (the live growth is counted from its start)
    assert JOBS * TASKS // 2 <= mk["kept"] <= JOBS * TASKS and mk["verdict"] == "proven", mk
    assert mk["live_growth"] >= mk["kept"], mk  # to the incident's end: every cgroup made was live then
    if walk["verdict"] != "proven":  # another job shared CPU 1: the walker's share of it fell under the rule's
        raise Busy(f"the memcg walk took {walk['share']} of CPU 1's excess: {walk['evidence']}")
    top = next(lk for lk in inc["links"] if lk["name"] == "processes")["data"]["top"][0]
    if top["comm"] != "ns-statwalk":  # another job's process held CPU 1 longer than the reader (seen: a busy loop)
        raise Busy(f"{top['comm']} (pid {top['pid']}) held CPU 1 more than the reader: {inc['leading']}")
    assert inc["family"] == "memcg_walk", (inc["family"], inc["leading"])
    assert "/nodesleuth-live-*/job*/task*" in inc["root_cause"] and "ns-cgmaker" in inc["root_cause"], inc["root_cause"]
    assert "live memory cgroups" in inc["leading"], inc["leading"]
    assert hyp["reclaim"]["verdict"] != "proven", hyp["reclaim"]
    txt = nodesleuth("explain", "--store", store)
    assert "/nodesleuth-live-*/job*/task*" in txt.stdout, txt.stdout[-2000:]


def _cpu0_busy(store: str, t0: float, t1: float) -> float:
    """CPU 0's mean busy % over [t0, t1] of the recording (`dump` prints one tick per line)."""
    p = nodesleuth("dump", "--store", store, "--format", "json")
    busy = []
    for line in p.stdout.splitlines():
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t0 <= t.get("time", 0) <= t1 and "0" in (t.get("cpus") or {}):
            busy.append(t["cpus"]["0"]["busy"])
    assert busy, p.stderr[-500:]
    return sum(busy) / len(busy)
