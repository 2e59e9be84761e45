"""Held out. Live job cgroups walked on 6.1 (cgroup v2): during the recording a job manager, `jobd`, gives
each of 5,000 jobs a memory cgroup of its own and keeps them (live, not dying; each charged with one 8 KB
tmpfs page), at a moderate pace (it sleeps as long as each cgroup took it: about half a CPU, not a hot
core); then a data loader pinned to CPU 1 in a memory-limited job under the same parent reads at 8 MB/s:
each reclaim under the parent's limit walks the 5,000 live memcgs and CPU 1 saturates. explain must lead
with the memcg walk over live cgroups and name jobd as their maker (from the churn trace)."""

HELD_OUT = True
KERNEL = "6.1"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "memcg_walk",
          "root_cause": r"^jobd made \d+ live memory cgroups like "}

LAB = "corpus-jobd"
N = 5000


def setup(x):
    from nodesleuth.node.cgroupfs import Memcg

    mc = Memcg()
    mc.make(LAB + "/loader/job")
    mc.make(LAB + "/jobs", children=True)
    x.sh("truncate -s 200G /run/disk/data.bin")
    x.mc = mc


def run(x):
    from _common import live_cgroups, live_memcgs, loader_under_limit

    before = live_memcgs()
    live_cgroups(x, x.mc.path(LAB + "/jobs"), N, data="/run/corpus-jobd", pace=1.0, comm="jobd")
    x.note(f"live memcgs (/proc/cgroups) {before} -> {live_memcgs()} after jobd made {N}")
    loader_under_limit(x, x.mc, LAB, LAB + "/loader/job")
