"""Held out. Live job cgroups walked on 5.10 (cgroup v1): during the recording slurmd gives each of 8,000
job steps a memory cgroup and keeps them (live; each charged with one 8 KB page), then a data loader
pinned to CPU 1 in a memory-limited job under the same parent reads at 8 MB/s: each reclaim under the
parent's limit walks the 8,000 live memcgs. explain must lead with the memcg walk over live cgroups and
name slurmd as their maker."""

import time

HELD_OUT = True
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


def _limit(mc) -> None:
    mc.set_limit(LAB, max(mc.usage(LAB) - mc.usage(LAB + "/job_1/step_0"), 0) + (64 << 20))


def run(x):
    from _common import LIVE_MAKER, live_memcgs

    mc = x.mc
    before = live_memcgs()
    path = "/run/corpus-slurmd.py"
    with open(path, "w") as f:
        f.write(LIVE_MAKER.replace('b"batch-agent"', 'b"slurmd"'))
    x.wait(x.spawn([x.python, path, mc.path(LAB + "/steps"), str(N), "/run/corpus-slurm"]), timeout=1200)
    x.note(f"live memcgs (/proc/cgroups) {before} -> {live_memcgs()} after slurmd made {N}")
    _limit(mc)
    loader = x.spawn([x.python, "-m", "nodesleuth.lab.actors.dataloader",
                      mc.path(LAB + "/job_1/step_0/cgroup.procs"), "1", "/run/disk/data.bin", "8"])
    with x.episode():
        end = time.time() + 40
        while time.time() < end:
            _limit(mc)
            time.sleep(1)
        loader.kill()
