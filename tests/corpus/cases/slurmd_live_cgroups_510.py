"""Held out at 92ede60 (scored once there), in-sample since. Live job cgroups walked on 5.10 (cgroup v1): during the recording slurmd gives each of 8,000
job steps a memory cgroup and keeps them (live; each charged with one 8 KB page), then a data loader
pinned to CPU 1 in a memory-limited job under the same parent reads at 8 MB/s: each reclaim under the
parent's limit walks the 8,000 live memcgs. explain must lead with the memcg walk over live cgroups and
name slurmd as their maker."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "5.10"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "memcg_walk",
          "root_cause": r"^slurmd made \d+ live memory cgroups like "}

LAB = "corpus-slurm"
N = 8000


def setup(x):
    from nodesleuth.node.cgroupfs import Memcg

    mc = Memcg()
    mc.make(LAB + "/job_1/step_0")
    mc.make(LAB + "/steps", children=True)
    x.sh("truncate -s 200G /run/disk/data.bin")
    x.mc = mc


def run(x):
    from _common import live_cgroups, live_memcgs, loader_under_limit

    before = live_memcgs()
    live_cgroups(x, x.mc.path(LAB + "/steps"), N, data="/run/corpus-slurm", comm="slurmd")
    x.note(f"live memcgs (/proc/cgroups) {before} -> {live_memcgs()} after slurmd made {N}")
    loader_under_limit(x, x.mc, LAB, LAB + "/job_1/step_0")
