"""Held out at 92ede60 (scored once there), in-sample since. A fork storm inside a pod: the `queue-worker` container's main process (comm `celery`, in the
container's cgroup, pinned to CPU 2) forks a child per task that works 2 ms and exits, for 15 s (a worker
with max-tasks-per-child 1). The pod's names are in containerd's bundle and kubelet's logs (their layouts;
no kubelet in the guest). explain must lead with the group of celery processes started by celery and say
which pod it runs in (jobs/queue-worker-6f8d7c5b9-m2n4p)."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group",
          "root_cause": r"^group: celery processes started by celery \(pid \d+\).*pod jobs/queue-worker-6f8d7c5b9-m2n4p"}

UID = "2a3b4c5d-6e7f-4809-9a1b-2c3d4e5f6a7b"
CID = "b7" * 32

WORKER = r"""
import ctypes, os, time
ctypes.CDLL(None).prctl(15, b"celery", 0, 0, 0)
os.sched_setaffinity(0, {2})
end = time.time() + 15
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        t = time.time() + 0.002
        while time.time() < t:
            pass
        os._exit(0)
    os.waitpid(pid, 0)
"""


def setup(x):
    from _common import pod_container

    x.rel = pod_container(x, "jobs", "queue-worker-6f8d7c5b9-m2n4p", UID, "queue-worker", CID)


def run(x):
    with open("/run/corpus-celery.py", "w") as f:
        f.write(WORKER)
    with x.episode():
        x.wait(x.spawn(["sh", "-c", f"echo $$ > /sys/fs/cgroup/{x.rel}/cgroup.procs && exec {x.python} /run/corpus-celery.py"]))
