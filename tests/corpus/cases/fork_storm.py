"""A fork storm without exec: a process named `forker` pinned to CPU 1 forks a copy of itself that
exits at once, and waits for it, over and over for 15 s (a prefork server respawning workers, a
shell's subshells in a loop). No exec: the children carry the parent's name. explain must lead with
the group (forker processes started by forker), with its started-per-second and share."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: forker processes started by forker \(pid \d+\)"}

FORKER = r"""
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"forker", 0, 0, 0)
os.sched_setaffinity(0, {1})
end = time.time() + 15
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
"""


def run(x):
    with x.episode():
        x.wait(x.spawn(["python3", "-c", FORKER]))
