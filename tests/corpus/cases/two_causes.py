"""Two causes at once on two CPUs: a user-space loop on CPU 1 and a /dev/zero reader (kernel) on CPU 3,
both for 25 s. explain must find both hot cores and name each one's own cause."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "user",
          "root_cause": r"^spin-user \(pid \d+\), in user space$",
          "also": [{"kind": "hot_core", "cpu": 3, "family": "kernel", "root_cause": r"^readzero \(pid \d+\), in the kernel"}]}


def run(x):
    with x.episode():
        a = x.tool("spin-user", "spin", 25, 1)
        b = x.tool("readzero", "readzero", 25, 3, 65536)
        x.wait(a, b)
