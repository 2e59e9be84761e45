"""Held out. A quiet node on 5.10 with only a light monitoring agent: `telegraf`, pinned to CPU 0, collects
for 50 ms of every 500 ms (10% of CPU 0) for the whole window; nothing else runs but the recorder. No core
is saturated. No incident."""

HELD_OUT = True
KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def run(x):
    with x.episode("quiet"):
        x.wait(x.tool("telegraf", "duty", 30, 0, 10, 500))
