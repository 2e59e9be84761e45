"""Short spikes: a loop pinned to CPU 2 busy 1.8 s, asleep 1.5 s, again for 30 s. The core is hot many
times but never for the rule's 3 s. No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode():
        x.wait(x.tool("spiky", "bursts", 30, 2, 1800, 1500))
