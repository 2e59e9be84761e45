"""read(2) of 64 KiB from /dev/zero again and again, pinned to CPU 1: a hot core spent in the kernel
(clearing user memory) on behalf of one process. explain must name the process, in the kernel."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "kernel",
          "root_cause": r"^readzero \(pid \d+\), in the kernel"}


def run(x):
    with x.episode():
        x.wait(x.tool("readzero", "readzero", 25, 1, 65536))
