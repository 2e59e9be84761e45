"""A memcg walk over LIVE cgroups on 5.10 (cgroup v1): during the recording a batch agent gives each of
6,000 tasks a memory cgroup of its own and never removes them (live, not dying: no zombie anywhere),
each charged with one 8 KB page; then the lab's data loader, pinned to CPU 1 in a memory-limited pod
under the same parent, reads at 8 MB/s: every direct reclaim under the parent's limit walks all 6,000
memcgs and CPU 1 saturates. The mechanism of the zombie incident, with live cgroups (a public case:
182k live nested cgroups starved ksoftirqd). explain must lead with the memcg walk over live cgroups and
name the agent that made them (from the churn trace), not call it generic kernel time."""

KERNEL = "5.10"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "memcg_walk",
          "root_cause": r"^batch-agent made \d+ live memory cgroups like "}

LAB = "corpus-live"
N = 6000


def setup(x):
    from nodesleuth.node.cgroupfs import Memcg

    mc = Memcg()
    mc.make(LAB + "/kubepods/job")
    mc.make(LAB + "/tasks", children=True)
    x.sh("truncate -s 200G /run/disk/data.bin")
    x.mc = mc


def run(x):
    from _common import live_cgroups, live_memcgs, loader_under_limit

    before = live_memcgs()
    live_cgroups(x, x.mc.path(LAB + "/tasks"), N)
    x.note(f"live memcgs (/proc/cgroups) {before} -> {live_memcgs()} after batch-agent made {N}")
    loader_under_limit(x, x.mc, LAB, LAB + "/kubepods/job")
