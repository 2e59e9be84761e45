"""A roaming loop: one busy loop that moves to the next CPU every 1.5 s for 30 s (the node is a quarter
busy; each core is hot 1.5 s at a time, never 3 s). No incident."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode():
        x.wait(x.tool("roamer", "roam", 30, 1500, 4))
