"""Held out at 92ede60 (scored once there), in-sample since. Thread churn on 6.1: a process named java, pinned to CPU 3, creates a thread per task that
runs 5 ms and ends (an executor without a pool), for 15 s. One process, thousands of short threads; their
time is the process's. explain must lead with the java process in user space."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 3, "family": "user",
          "root_cause": r"^java \(pid \d+\), in user space$"}


def run(x):
    with x.episode():
        x.wait(x.tool("java", "threads", 15, 3, 5))
