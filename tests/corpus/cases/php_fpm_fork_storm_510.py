"""Held out at 92ede60 (scored once there), in-sample since. A prefork storm on 5.10 (cgroup v1): php-fpm's master, pinned to CPU 1, forks a worker that
handles one request (1.5 ms of work) and exits (pm.max_requests = 1), again and again for 15 s. No exec:
the children carry the master's name. explain must lead with the group (php-fpm processes started by
php-fpm)."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: php-fpm processes started by php-fpm \(pid \d+\)"}

MASTER = r"""
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"php-fpm", 0, 0, 0)
os.sched_setaffinity(0, {1})
end = time.time() + 15
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        t = time.time() + 0.0015
        while time.time() < t:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
"""


def run(x):
    with x.episode():
        x.wait(x.spawn(["python3", "-c", MASTER]))
