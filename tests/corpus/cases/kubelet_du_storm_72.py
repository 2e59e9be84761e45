"""Held out at 92ede60 (scored once there), in-sample since. kubelet forking `du` over and over on 7.2: a process named kubelet, pinned to CPU 2, runs a
4 ms `du` (corpus_tool named du, spinning 4 ms: the time a du of a pod's volume takes) one after another
for 15 s, as kubelet's volume accounting does on a node with many emptyDir volumes. Each du lives between
two 1 s scans; together they saturate CPU 2. explain must lead with the group of du processes started by
kubelet."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "7.2"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group",
          "root_cause": r"^group: du processes started by kubelet \(pid \d+\)"}

KUBELET = r"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(15, b"kubelet", 0, 0, 0)
os.sched_setaffinity(0, {2})
end = time.time() + 15
while time.time() < end:
    subprocess.run(["/run/du", "du", "spin", "0.004", "-1"])
"""


def setup(x):
    x.sh(f"cp {x.tool_path} /run/du && chmod +x /run/du")


def run(x):
    with x.episode():
        x.wait(x.spawn([x.python, "-c", KUBELET]))
