"""Held out. A prefork storm on 7.2: a Celery worker's master, `celery`, pinned to CPU 1, runs its pool with
max_tasks_per_child = 1 under a flood of tiny tasks: it keeps two pool children alive, each forked (no exec)
to run one task (3 ms of work) and exit, and forks the next as each is reaped, for 20 s. The children carry
the master's name. explain must lead with the group (celery processes started by celery)."""

HELD_OUT = True
KERNEL = "7.2"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: celery processes started by celery \(pid \d+\)"}

MASTER = r"""
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"celery", 0, 0, 0)
os.sched_setaffinity(0, {1})
end = time.time() + 20
running = 0
while time.time() < end or running:
    while running < 2 and time.time() < end:
        pid = os.fork()
        if pid == 0:
            t = time.time() + 0.003
            while time.time() < t:
                pass
            os._exit(0)
        running += 1
    os.waitpid(-1, 0)
    running -= 1
"""


def run(x):
    with x.episode():
        x.wait(x.spawn(["python3", "-c", MASTER]))
