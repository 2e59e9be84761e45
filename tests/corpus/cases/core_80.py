"""A core at ~80%: a loop pinned to CPU 2 busy 80 ms of every 100 ms for 30 s. Busy, under the rule's
90%. No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode():
        x.wait(x.tool("duty80", "duty", 30, 2, 80, 100))
