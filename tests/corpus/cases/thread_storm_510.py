"""Many short-lived threads on 5.10 (cgroup v1): `conn-handler`, pinned to CPU 2, starts a thread per
connection that works 2 ms and exits, joins it and starts the next, for 15 s (a thread-per-connection
server under a flood of short requests). The kernel adds each exited thread's time to its process: the
process's own CPU holds the storm. explain must lead with the process in user space."""

KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "user",
          "root_cause": r"^conn-handler \(pid \d+\), in user space$"}


def run(x):
    with x.episode():
        x.wait(x.tool("conn-handler", "threads", 15, 2, 2))
