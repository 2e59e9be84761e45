"""Held out at 92ede60 (scored once there), in-sample since. Two hot cores, two kinds: a shell pinned to CPU 1 runs a 3 ms `healthcheck` (corpus_tool)
over and over for 15 s, while `encoder` spins in user space on CPU 3 for the same 15 s. explain must find
both: CPU 1 led by the group of healthcheck processes started by sh, CPU 3 by encoder in user space."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: healthcheck(, sh)? processes started by sh \(pid \d+\)",
          "also": [{"kind": "hot_core", "cpu": 3, "family": "user", "root_cause": r"^encoder \(pid \d+\), in user space$"}]}


def setup(x):
    x.sh(f"cp {x.tool_path} /run/healthcheck && chmod +x /run/healthcheck")


def run(x):
    with x.episode():
        spin = x.tool("encoder", "spin", 15, 3)
        x.wait(x.spawn(["timeout", "15", "taskset", "-c", "1", "sh", "-c",
                        "while :; do /run/healthcheck healthcheck spin 0.003 1; done"]), spin)
