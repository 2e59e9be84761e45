"""Held out at 92ede60 (scored once there), in-sample since. Exec probes of a pod on 5.10 (cgroup v1, kubelet's cgroupfs driver: kubepods/burstable/
pod<uid>/<container id> under each hierarchy): a containerd shim in its own cgroup, pinned to CPU 2, runs
the pod's `pg_isready` probes (corpus_tool spinning 30 ms) over and over for 15 s, four at a time, each child joining the
container's cgroups before exec. explain must lead with the group of probe processes started by the shim
and name the pod (db/postgres-0) they run in."""

HELD_OUT = False  # held out at 92ede60 (scored once there: docs/explain.md), in-sample since the rules changed after it
KERNEL = "5.10"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group",
          "root_cause": r"^group: pg_isready(, \S+)? processes started by containerd-shim \(pid \d+\).*pod db/postgres-0"}

UID = "5e8d1c2b-3a4f-4b6c-9d7e-1f2a3b4c5d6e"
CID = "d4" * 32


def setup(x):
    from _common import pod_container

    x.sh(f"cp {x.tool_path} /run/pg_isready && chmod +x /run/pg_isready")
    x.rel = pod_container(x, "db", "postgres-0", UID, "postgres", CID, v1=True)
    import os
    os.makedirs("/sys/fs/cgroup/cpu,cpuacct/system.slice/containerd.service", exist_ok=True)


def run(x):
    procs = ",".join(f"/sys/fs/cgroup/{h}/{x.rel}/cgroup.procs" for h in ("memory", "cpu,cpuacct", "pids"))
    with x.episode():
        x.wait(x.spawn(["sh", "-c", "echo $$ > '/sys/fs/cgroup/cpu,cpuacct/system.slice/containerd.service/cgroup.procs' "
                        f"&& exec {x.tool_path} containerd-shim shim 15 2 4 {procs} /run/pg_isready pg_isready "
                        "spin 0.03 -1"]))
