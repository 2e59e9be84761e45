"""An exec storm on 5.10 (cgroup v1): a cron-like shell loop, pinned to CPU 1, runs a 5 ms program
(`logrotate-chk`, corpus_tool spinning 5 ms) again and again for 15 s, as a cron job in a tight loop or a
monitoring agent's check script does. Each process takes a sliver of the core and most live between two
1 s scans; together they saturate it. explain must lead with the group (the program's processes
started by the shell) with its started-per-second and share, on the older kernel and hierarchy too.
The recorder's own `perf record` (not pinned) took CPU 3 for 4 s in this recording (99%, in the kernel
formatting the new processes' records: vsnprintf, under emulation): a real hot core, its own, that explain
names as such (also expected); docs/self-cost.md says what an exec storm costs the profiler."""

KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: logrotate-chk(, sh)? processes started by sh \(pid \d+\)",
          "also": [{"kind": "hot_core", "cpu": 3, "family": "kernel", "root_cause": r"^perf \(pid \d+\), in the kernel"}]}


def setup(x):
    x.sh(f"cp {x.tool_path} /run/chk && chmod +x /run/chk")  # in the guest's memory, not on the 9p share


def run(x):
    with x.episode():
        x.wait(x.spawn(["timeout", "15", "taskset", "-c", "1", "sh", "-c",
                        "while :; do /run/chk logrotate-chk spin 0.005 1; done"]))
