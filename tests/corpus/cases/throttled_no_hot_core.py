"""Throttling without a hot core: a busy loop pinned to CPU 1 in a cgroup with cpu.max 50000 100000
(half a CPU): the quota throttles it every period, the core sits at ~50%. No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    x.cgroup("corpus-quota", controllers=("cpu",), cpu_max="50000 100000")


def run(x):
    with x.episode():
        x.wait(x.tool("quota-spin", "spin", 30, 1, cgroup="corpus-quota"))
