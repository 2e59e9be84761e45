"""Memory pressure without a hot core: a reader limited to 3 MB/s (the lab's data loader) in a memory
cgroup limited to 64 MB reads a file larger than the limit; every page it caches goes through direct
reclaim, but the core is far from saturated. No incident."""

import os

KERNEL = "6.12"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    x.sh("truncate -s 100G /run/disk/data.bin")
    x.cgroup("corpus-rc", controllers=("memory",), memory_max="64M")


def run(x):
    with x.episode():
        p = x.spawn([x.python, "-m", "nodesleuth.lab.actors.dataloader", "/sys/fs/cgroup/corpus-rc/cgroup.procs",
                     "1", "/run/disk/data.bin", "3", "30"], env={**os.environ})
        x.wait(p)
