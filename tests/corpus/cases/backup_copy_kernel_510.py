"""Held out. A backup job's copy loop on 5.10 (cgroup v1 hierarchies, the seed host's generation):
`backup-copy`, pinned to CPU 2, reads /dev/zero 1 MiB at a time again and again for 22 s (a copy of a
sparse or zero-filled image with big blocks: nearly all of its time is the kernel filling its buffer,
clear_user, not its own code). A hot core spent in the kernel on behalf of one process: explain must
name the process, in the kernel."""

HELD_OUT = True
KERNEL = "5.10"
HIERARCHY = "v1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "kernel",
          "root_cause": r"^backup-copy \(pid \d+\), in the kernel"}


def run(x):
    with x.episode():
        x.wait(x.tool("backup-copy", "readzero", 22, 2, 1048576))
