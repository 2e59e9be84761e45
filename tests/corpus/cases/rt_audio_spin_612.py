"""Held out. A real-time audio thread gone into a busy loop on 6.12: `audio-rt`, SCHED_FIFO priority 60,
pinned to CPU 2, spins for 20 s (a processing callback that stopped blocking on its device); nothing else
loads the node. Only the kernel's real-time throttling (and the fair server) leave other tasks a sliver of
CPU 2. explain must name the real-time process and its class."""

HELD_OUT = True
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "rt",
          "root_cause": r"^audio-rt \(pid \d+\), SCHED_FIFO priority 60$"}


def run(x):
    with x.episode():
        x.wait(x.tool("audio-rt", "rtspin", 20, 2, 60))
