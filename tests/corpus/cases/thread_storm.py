"""Many short-lived threads of one process: `threader`, pinned to CPU 1, starts a thread that spins 3 ms
and exits, joins it and starts the next, for 15 s (a thread-per-request server, a pool that is torn
down and rebuilt). One pid, thousands of thread ids: a thread lives between two 1 s scans, but the
kernel adds an exited thread's time to its process, so the process's own CPU holds the storm.
explain must lead with the process itself in user space, not with a group or an unnamed kernel cost."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "user",
          "root_cause": r"^threader \(pid \d+\), in user space$"}


def run(x):
    with x.episode():
        x.wait(x.tool("threader", "threads", 15, 1, 3))
