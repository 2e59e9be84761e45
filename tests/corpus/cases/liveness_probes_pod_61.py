"""Held out. Exec probes of a pod on 6.1 (cgroup v2, kubelet's systemd driver): a containerd shim in
containerd's own cgroup, pinned to CPU 2, runs the `redis-cli ping` liveness and readiness probes of pod
cache/redis-1 over and over for 18 s, three at a time: each probe is a child that joins the redis
container's cgroup and execs `redis-cli` (corpus_tool spinning 25 ms: the client's start and a PING), then
is reaped. Each probe lives between two 1 s scans; together they saturate CPU 2. The pod's names are in
containerd's bundle and kubelet's log directory (written in their layouts; no kubelet runs in the guest).
explain must lead with the group (the probes started by the shim) and name the pod they run in."""

HELD_OUT = True
KERNEL = "6.1"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 2, "family": "group",
          "root_cause": r"^group: redis-cli(, \S+)? processes started by containerd-shim \(pid \d+\).*"
                        r"pod cache/redis-1"}

UID = "7b2e9c41-6d3a-4f85-b0c2-8e1f4a5d6c97"
CID = "c7" * 32


def setup(x):
    from _common import pod_container

    x.sh(f"cp {x.tool_path} /run/redis-cli && chmod +x /run/redis-cli")
    x.rel = pod_container(x, "cache", "redis-1", UID, "redis", CID)
    x.shim_cg = x.cgroup("system.slice/containerd.service", controllers=("cpu",))


def run(x):
    procs = f"/sys/fs/cgroup/{x.rel}/cgroup.procs"
    with x.episode():
        x.wait(x.spawn(["sh", "-c", f"echo $$ > {x.shim_cg}/cgroup.procs && exec {x.tool_path} containerd-shim shim 18 2 3 "
                        f"{procs} /run/redis-cli redis-cli spin 0.025 -1"]))
