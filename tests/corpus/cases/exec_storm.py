"""An exec storm: a shell pinned to CPU 1 starts a ~3 ms program (corpus_tool `main`, spinning 3 ms)
over and over for 15 s, as an exec probe, a cron-like loop or a crash-looping binary would. Each
process takes a sliver of the core and most live between two 1 s scans; together they saturate it.
explain must lead with the group (`main` processes started by sh), with its started-per-second and
share, not with one of its processes."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: main(, sh)? processes started by sh \(pid \d+\)"}


def setup(x):
    # the program in the guest's memory: exec from the 9p share waits on the host, and a core that waits
    # is not saturated (the storm is the exec and its 3 ms, not the share's latency)
    x.sh(f"cp {x.tool_path} /run/main && chmod +x /run/main")


def run(x):
    with x.episode():
        x.wait(x.spawn(["timeout", "15", "taskset", "-c", "1", "sh", "-c",
                        "while :; do /run/main main spin 0.003 1; done"]))
