"""The /dev/zero reader of kernel_readzero on Debian's 7.2 kernel, pinned to CPU 3."""

KERNEL = "7.2"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 3, "family": "kernel",
          "root_cause": r"^readzero \(pid \d+\), in the kernel"}


def run(x):
    with x.episode():
        x.wait(x.tool("readzero", "readzero", 25, 3, 65536))
