"""Held out. A cron-like maintenance script gone tight on 6.12: a shell pinned to CPU 2 runs `stat-check`
(corpus_tool spinning 4 ms: a short status probe of a disk or service) over and over with no sleep between
runs, for 20 s, as a maintenance script whose `sleep` was lost or whose loop condition never holds does.
Each process takes a sliver of the core and most live between two 1 s scans; together they saturate it.
explain must lead with the group (stat-check processes started by sh), not with one of its processes."""

HELD_OUT = True
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group",
          "root_cause": r"^group: stat-check(, sh)? processes started by sh \(pid \d+\)"}


def setup(x):
    # the program in the guest's memory, not on the 9p share (exec from the share waits on the host)
    x.sh(f"cp {x.tool_path} /run/stat-check && chmod +x /run/stat-check")


def run(x):
    with x.episode():
        x.wait(x.spawn(["timeout", "20", "taskset", "-c", "2", "sh", "-c",
                        "while :; do /run/stat-check stat-check spin 0.004 2; done"]))
