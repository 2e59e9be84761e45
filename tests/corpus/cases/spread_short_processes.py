"""Held out at 92ede60 (scored once there), in-sample since. Many short processes and no hot core: a shell, not pinned, starts a 3 ms program and sleeps
10 ms, again and again for 20 s (a busy cron-like loop the scheduler spreads over the 4 CPUs: a few
percent each). A group exists, but no core is saturated: explain must find no incident."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    x.sh(f"cp {x.tool_path} /run/tick && chmod +x /run/tick")


def run(x):
    with x.episode():
        x.wait(x.spawn(["timeout", "20", "sh", "-c", "while :; do /run/tick tick spin 0.003 -1; sleep 0.01; done"]))
