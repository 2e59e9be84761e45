"""A container crash loop beside a hot core it does not cause: pod payments/api-6d5f7b9c8-qz7lm's `api`
container starts, works 0.3 s on CPU 3 and exits, and is started again 4 s later as a new container
(new id, new cgroup scope, one more kubelet log file: its restart count rises from 12), while an
unrelated `etl-worker` spins on CPU 2. The crash loop is present and counted, but its cost is a sliver
of CPU 3 and its cgroups do not stay dying: presence is not proof. explain must lead CPU 2 with
etl-worker in user space and not name the crash-looping container as a cause."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "user",
          "root_cause": r"^etl-worker \(pid \d+\), in user space$"}

NS, POD, UID, CONTAINER = "payments", "api-6d5f7b9c8-qz7lm", "9b2e4c1d-7a3f-4d5e-8c6b-0f1e2d3c4b5a", "api"


def setup(x):
    from _common import pod_files

    x.sh(f"cp {x.tool_path} /run/api && chmod +x /run/api")
    pod_files(x, NS, POD, UID, CONTAINER, "c0" * 32, restarts=12)
    x.shim_cg = x.cgroup("system.slice/containerd.service", controllers=("cpu",))


def run(x):
    from _common import container_crash_loop

    with container_crash_loop(x, NS, POD, UID, CONTAINER, cpu=3, first=13):
        x.sleep(6)
        with x.episode():
            x.wait(x.tool("etl-worker", "spin", 15, 2))
        x.sleep(6)
