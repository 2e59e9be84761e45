"""Exec probes of a pod: a containerd shim (corpus_tool's shim mode, in containerd's own cgroup, not the
pod's), pinned to CPU 1,
runs the pod's exec probes over and over for 15 s, four at a time (liveness and readiness of two containers): each probe is a child that joins the container's
cgroup and execs `grpc_health_probe` (corpus_tool spinning 30 ms: a Go binary's start and a health call), then is
reaped (a liveness probe with periodSeconds 1 on a pod of many replicas' worth, compressed into one pod).
Each probe lives between two 1 s scans; together they saturate CPU 1. The pod's names are in containerd's
bundle and kubelet's log directory (written in their layouts; no kubelet runs in the guest). explain must
lead with the group (the probes started by the shim) and say which pod they run in. The recorder's own perf
took CPU 3 for 3 s (in the kernel, handling the storm's records under emulation): a real hot core, its own,
that explain names as such (also expected; docs/self-cost.md)."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "group",
          "root_cause": r"^group: grpc_health_pro(, \S+)? processes started by containerd-shim \(pid \d+\).*"
                        r"pod default/web-7c9d8f6b5-x2k4q",
          "also": [{"kind": "hot_core", "cpu": 3, "family": "kernel", "root_cause": r"^perf \(pid \d+\), in the kernel"}]}

UID = "3f1c2a9e-8d4b-4e6f-a1b2-5c7d9e0f1a2b"
CID = "a3" * 32


def setup(x):
    from _common import pod_container

    x.sh(f"cp {x.tool_path} /run/grpc_health_probe && chmod +x /run/grpc_health_probe")
    x.rel = pod_container(x, "default", "web-7c9d8f6b5-x2k4q", UID, "web", CID)
    x.shim_cg = x.cgroup("system.slice/containerd.service", controllers=("cpu",))


def run(x):
    procs = f"/sys/fs/cgroup/{x.rel}/cgroup.procs"
    with x.episode():
        x.wait(x.spawn(["sh", "-c", f"echo $$ > {x.shim_cg}/cgroup.procs && exec {x.tool_path} containerd-shim shim 15 1 4 "
                        f"{procs} /run/grpc_health_probe grpc_health_pro spin 0.03 -1"]))
