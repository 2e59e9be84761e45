"""A memcg walk over LIVE cgroups on 6.12 (cgroup v2): during the recording a batch agent gives each of
3,000 tasks a memory cgroup of its own (pausing 1.5x each one's own time: a first recording whose agent made
6,000 flat out under emulation saturated a core of its own, and its perf the others, for minutes) and
never removes them (live, not dying: no zombie anywhere),
each charged with one 8 KB page; then the lab's data loader, pinned to CPU 1 in a memory-limited pod
under the same parent, reads at 8 MB/s: every direct reclaim under the parent's limit walks all 3,000
memcgs and CPU 1 saturates. The mechanism of the zombie incident, with live cgroups (a public case:
182k live nested cgroups starved ksoftirqd). explain must lead with the memcg walk over live cgroups and
name the agent that made them (from the churn trace), not call it generic kernel time."""

import time

KERNEL = "6.12"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "memcg_walk",
          "root_cause": r"^batch-agent made \d+ live memory cgroups like "}

LAB = "corpus-live"
N = 3000


def setup(x):
    from nodesleuth.node.cgroupfs import Memcg

    mc = Memcg()
    mc.make(LAB + "/kubepods/job")
    mc.make(LAB + "/tasks", children=True)
    x.sh("truncate -s 200G /run/disk/data.bin")
    x.mc = mc


def _limit(mc) -> None:
    mc.set_limit(LAB, max(mc.usage(LAB) - mc.usage(LAB + "/kubepods/job"), 0) + (64 << 20))


def run(x):
    from _common import live_cgroups, live_memcgs

    mc = x.mc
    before = live_memcgs()
    live_cgroups(x, mc.path(LAB + "/tasks"), N, pace=1.5)
    x.note(f"live memcgs (/proc/cgroups) {before} -> {live_memcgs()} after batch-agent made {N}")
    _limit(mc)
    loader = x.spawn([x.python, "-m", "nodesleuth.lab.actors.dataloader", mc.path(LAB + "/kubepods/job/cgroup.procs"),
                      "1", "/run/disk/data.bin", "8"])
    with x.episode():
        end = time.time() + 40
        while time.time() < end:
            _limit(mc)
            time.sleep(1)
        loader.kill()
