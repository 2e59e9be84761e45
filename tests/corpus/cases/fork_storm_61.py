"""A fork storm without exec on 6.1: a prefork server's master, `pgmaster`, pinned to CPU 1, forks a
worker that runs 2 ms of work and exits, and waits for it, again and again for 15 s (a worker pool
whose workers die at once and are respawned). No exec: the children carry the parent's name. explain
must lead with the group (pgmaster processes started by pgmaster), with its started-per-second."""

KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: pgmaster processes started by pgmaster \(pid \d+\)"}

MASTER = r"""
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"pgmaster", 0, 0, 0)
os.sched_setaffinity(0, {1})
end = time.time() + 15
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        t = time.time() + 0.002
        while time.time() < t:
            pass
        os._exit(1)
    os.waitpid(pid, 0)
"""


def run(x):
    with x.episode():
        x.wait(x.spawn(["python3", "-c", MASTER]))
