"""A busy loop in user space pinned to CPU 2 for 25 s: the plainest hot core. explain must name the
loop (user space) as the root cause and reject every kernel family."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "user",
          "root_cause": r"^spin-user \(pid \d+\), in user space$"}


def run(x):
    with x.episode():
        x.wait(x.tool("spin-user", "spin", 25, 2))
