"""A busy loop pinned to CPU 1 in a cgroup whose CPU quota (cpu.max 95000 100000) throttles it to 95%
of a CPU: the core is still saturated (>= 90%), by the loop; the throttling shows in the notes."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "user",
          "root_cause": r"^quota-spin \(pid \d+\), in user space$"}


def setup(x):
    x.cgroup("corpus-quota", controllers=("cpu",), cpu_max="95000 100000")


def run(x):
    with x.episode():
        x.wait(x.tool("quota-spin", "spin", 25, 1, cgroup="corpus-quota"))
