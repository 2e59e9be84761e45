"""A Python busy loop pinned to CPU 1 on Debian's 5.10 with the cgroup v1 hierarchies (systemd's hybrid
layout, as the seed host had): the user-space hot core on the oldest kernel generation."""

KERNEL = "5.10"
HIERARCHY = "v1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "user",
          "root_cause": r"^py-spin \(pid \d+\), in user space$"}

LOOP = r"""
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, b"py-spin", 0, 0, 0)
os.sched_setaffinity(0, {1})
end = time.time() + float(sys.argv[1])
def loop():
    x = 0
    while time.time() < end:
        for _ in range(10000):
            x += 1
loop()
"""


def run(x):
    with x.episode():
        x.wait(x.spawn([x.python, "-c", LOOP, "25"]))
