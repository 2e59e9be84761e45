"""Pieces several corpus cases share (imported by the cases inside the VM; not a case itself)."""

from __future__ import annotations

import contextlib
import os
import threading
import time

# ENA 2.11 lines built from the format strings of amzn-drivers ena_netdev.c (check_for_rx_interrupt_queue /
# check_missing_comp_in_tx_queue, ena_fw_reset_device): GENERATED, not a real report's lines. Written to
# the guest's /dev/kmsg after a marker line that says so (there is no ENA device in the VM).
ENA = [
    (4, "ena 0000:00:05.0 ens5: TX q 3 is paused for too long (threshold 5000000). Time since last napi "
        "6596000 usec. napi scheduled: 1"),
    (4, "ena 0000:00:05.0 ens5: napi handler hasn't been called for a long time but is scheduled"),
    (6, "ena 0000:00:05.0: Trigger reset is on"),
    (6, "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]
ENA_ORIGIN = ("generated from amzn-drivers ena_netdev.c 2.11 format strings (see rules/kernel-net.json, family "
              "ena); written to the guest's /dev/kmsg by the scenario: there is no ENA device in the VM")
ENA_MARKER = "nodesleuth-corpus: the next ENA lines are written by the corpus scenario (no ENA device here)"


def ena(x) -> float:
    return x.kmsg(ENA, ENA_ORIGIN, ENA_MARKER)


# A unit that, like an ECS agent that cannot reach its cluster, makes a container cgroup per start and
# fails; it charges nothing to them, so the kernel frees each at once: a crash loop without zombies.
FREED_AT_ONCE = r'''
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"ecs-agent", 0, 0, 0)
CG = "/sys/fs/cgroup"
parent = os.path.join(CG, sys.argv[1], "docker")
os.makedirs(parent, exist_ok=True)
home = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.startswith("0::"))
for _ in range(20):
    cg = os.path.join(parent, os.urandom(32).hex())
    os.mkdir(cg)
    open(os.path.join(cg, "cgroup.procs"), "w").write(str(os.getpid()))
    open(os.path.join(CG + home, "cgroup.procs"), "w").write(str(os.getpid()))
    os.rmdir(cg)
print('level=critical msg="Unable to register as a container instance with ECS"', flush=True)
sys.exit(1)
'''


def freed_crash_loop(x, parent: str, restart_sec: str):
    """The namespace's systemd with ecs.service installed and enabled: FREED_AT_ONCE under `parent`,
    restarted every `restart_sec` (a crash loop that leaves no zombies); returns the systemd."""
    ns = systemd(x)
    path = "/run/corpus-agent.py"
    with open(path, "w") as f:
        f.write(FREED_AT_ONCE)
    ns.install_unit("ecs.service", unit(f"{x.python} {path} {parent}", restart_sec=restart_sec))
    ns.systemctl("enable", "ecs.service", check=False)
    return ns


def unit(exec_start: str, restart_sec: str = "300ms") -> str:
    return f"""[Unit]
Description=Amazon ECS Agent (nodesleuth corpus: cannot reach its cluster)
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={exec_start}
Restart=on-failure
RestartSec={restart_sec}

[Install]
WantedBy=multi-user.target
"""


def systemd(x):
    """A real systemd as PID 1 of a PID namespace (nodesleuth.lab.systemd); the recorder reads its units."""
    from nodesleuth.lab.systemd import SystemdNamespace

    ns = SystemdNamespace()
    ns.start(timeout=400)
    x.cleanup.append(ns.stop)
    x.record_args += ["--systemd-pid", str(ns.pid)]
    x.note(f"systemd {ns.pid} in a PID namespace (basic.target)")
    return ns


def busy(cpu: int) -> float:
    """CPU's busy % over the last second (from /proc/stat)."""
    def read():
        for ln in open("/proc/stat"):
            if ln.startswith(f"cpu{cpu} "):
                v = list(map(int, ln.split()[1:9]))
                return sum(v), v[3] + v[4]
    a = read()
    time.sleep(1.0)
    b = read()
    tot = b[0] - a[0]
    return 100.0 * (tot - (b[1] - a[1])) / tot if tot else 0.0


def zombies(n: int, parent: str = "corpus-zombies", data: str = "/run/corpus-zdata") -> int:
    """n dying memcgs under /sys/fs/cgroup/PARENT, each pinned by a page of tmpfs (no swap): made
    by a forked child (nodesleuth.node.cgroupfs.make_zombies)."""
    from nodesleuth.node.cgroupfs import make_zombies

    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:  # the parent gets the memory controller
        f.write("+memory")
    return make_zombies(n, os.path.join("/sys/fs/cgroup", parent), data, file_bytes=4096)


def dying() -> int | None:
    from nodesleuth.node.cgroupfs import Memcg

    return Memcg().count()


# A batch agent that gives every task a memory cgroup of its own and never removes it: each cgroup LIVE
# (not dying), charged with one 8 KB tmpfs page its task wrote. The cgroups stay live; what grows is
# the number of memcgs every reclaim under their parent's limit walks.
LIVE_MAKER = r'''
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"batch-agent", 0, 0, 0)
parent, n, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pace = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0  # sleep this many times each cgroup's own time
os.makedirs(data, exist_ok=True)
leave = os.path.join(parent, "_leave")
os.makedirs(leave, exist_ok=True)
me = str(os.getpid())
names = [os.path.join(data, f"task-{i}") for i in range(n)]
for name in names:  # created outside the new cgroups: only each file's data is charged to its cgroup
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
import time
for i in range(n):
    t0 = time.monotonic()
    cg = os.path.join(parent, f"task-{i:05d}")
    os.mkdir(cg)
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(me)
    fd = os.open(names[i], os.O_WRONLY)
    os.write(fd, b"t" * 8192)
    os.close(fd)
    with open(os.path.join(leave, "cgroup.procs"), "w") as f:
        f.write(me)
    if pace:
        time.sleep(pace * (time.monotonic() - t0))
print(n, flush=True)
'''


def live_cgroups(x, parent_path: str, n: int, data: str = "/run/corpus-live", pace: float = 0.0,
                 comm: str = "batch-agent") -> None:
    """LIVE_MAKER, named `comm`, run to completion: n live memcgs under parent_path (a memory-controller
    directory); with pace, it sleeps pace times each cgroup's own time after it (pace 1: half a CPU)."""
    path = f"/run/corpus-live-{comm}.py"
    with open(path, "w") as f:
        f.write(LIVE_MAKER.replace('b"batch-agent"', f'b"{comm}"'))
    x.wait(x.spawn([x.python, path, parent_path, str(n), data, str(pace)]), timeout=1500)


def loader_under_limit(x, mc, lab: str, job: str, seconds: float = 40.0) -> None:
    """The episode of the memcg-walk cases: the lab's data loader, pinned to CPU 1 in the memcg `job`, reads
    /run/disk/data.bin at 8 MB/s for `seconds` while the parent `lab` is limited to what its other memcgs hold
    plus 64 MB (set again every second), so each of its charges reclaims under that limit."""
    def limit() -> None:
        mc.set_limit(lab, max(mc.usage(lab) - mc.usage(job), 0) + (64 << 20))

    limit()
    loader = x.spawn([x.python, "-m", "nodesleuth.lab.actors.dataloader", mc.path(job + "/cgroup.procs"), "1",
                      "/run/disk/data.bin", "8"])
    with x.episode():
        end = time.time() + seconds
        while time.time() < end:
            limit()
            time.sleep(1)
        loader.kill()


def live_memcgs() -> int | None:
    """The kernel's live memory-cgroup count (/proc/cgroups num_cgroups)."""
    for ln in open("/proc/cgroups"):
        f = ln.split()
        if f and f[0] == "memory":
            return int(f[2])
    return None


# A pod's identity on a node as kubelet and containerd leave it (layouts: src/nodesleuth/model/kube.py):
# the pod's cgroups (systemd driver on cgroup v2, cgroupfs driver on v1), containerd's OCI bundle
# config.json per container (the CRI annotations) and kubelet's /var/log/pods/NS_POD_UID/CONTAINER/N.log
# with /var/log/containers links. The guest runs no kubelet or containerd: these files are written in
# those programs' layouts; the cgroups and the processes in them are real.
BUNDLES = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"


def pod_cgroup(uid: str, cid: str, v1: bool) -> str:
    """The container's cgroup path relative to a hierarchy's mount."""
    if v1:
        return f"kubepods/burstable/pod{uid}/{cid}"
    u = uid.replace("-", "_")
    return f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{cid}.scope"


def pod_files(x, ns: str, pod: str, uid: str, container: str, cid: str, restarts: int = 0) -> None:
    """containerd's bundle for the container (and its pause sandbox) and kubelet's log files, restarts+1 of them."""
    import json

    if not os.path.ismount("/var/log"):
        x.sh("mount -t tmpfs -o size=64m tmpfs /var/log")
        x.cleanup.append(lambda: x.sh("umount -l /var/log", check=False))
    ann = {"io.kubernetes.cri.sandbox-namespace": ns, "io.kubernetes.cri.sandbox-name": pod,
           "io.kubernetes.cri.sandbox-uid": uid, "io.kubernetes.cri.container-name": container,
           "io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": "0" * 64}
    d = os.path.join(BUNDLES, cid)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.1.0", "annotations": ann}, f)
    logs = f"/var/log/pods/{ns}_{pod}_{uid}/{container}"
    os.makedirs(logs, exist_ok=True)
    os.makedirs("/var/log/containers", exist_ok=True)
    for i in range(restarts + 1):
        open(os.path.join(logs, f"{i}.log"), "a").close()
    link = f"/var/log/containers/{pod}_{ns}_{container}-{cid}.log"
    if not os.path.lexists(link):
        os.symlink(os.path.join(logs, f"{restarts}.log"), link)


def pod_container(x, ns: str, pod: str, uid: str, container: str, cid: str, v1: bool = False) -> str:
    """The container's cgroup (memory and cpu on v1, under each hierarchy; v2: one path) and its files;
    returns the path of the cgroup.procs a process joins it by (v1: the memory hierarchy's, the others
    joined too by the caller through `join`)."""
    rel = pod_cgroup(uid, cid, v1)
    if v1:
        for h in ("memory", "cpu,cpuacct", "pids"):
            os.makedirs(os.path.join("/sys/fs/cgroup", h, rel), exist_ok=True)
        x.cleanup.append(lambda: [_rmtree_cg(os.path.join("/sys/fs/cgroup", h, "kubepods"))
                                  for h in ("memory", "cpu,cpuacct", "pids")])
    else:
        x.cgroup(rel, controllers=("memory", "cpu", "pids"))
    pod_files(x, ns, pod, uid, container, cid)
    return rel


def join_cmd(rel: str, v1: bool) -> str:
    """Shell words that move the current shell ($$) into the container's cgroup(s)."""
    if v1:
        return " && ".join(f"echo $$ > '/sys/fs/cgroup/{h}/{rel}/cgroup.procs'" for h in ("memory", "cpu,cpuacct", "pids"))
    return f"echo $$ > '/sys/fs/cgroup/{rel}/cgroup.procs'"


def _rmtree_cg(path: str) -> None:
    for dp, _, _ in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(dp)
        except OSError:
            pass


@contextlib.contextmanager
def container_crash_loop(x, ns: str, pod: str, uid: str, container: str, cpu: int, first: int):
    """While the block runs: `container` of the pod starts (a new container id, cgroup scope and kubelet log
    file: restart count `first`, `first` + 1, ...), works 0.3 s on `cpu` as /run/CONTAINER and exits, and is
    started again 4 s later, as a container in a restart loop is. The restarts made go to x.results."""
    stop = threading.Event()

    def loop() -> None:
        n = first
        while not stop.is_set():
            cid = os.urandom(32).hex()
            rel = pod_cgroup(uid, cid, v1=False)
            x.cgroup(rel, controllers=("memory", "cpu", "pids"))
            pod_files(x, ns, pod, uid, container, cid, restarts=n)
            x.spawn(["sh", "-c", f"echo $$ > /sys/fs/cgroup/{rel}/cgroup.procs && exec /run/{container} {container} "
                     f"spin 0.3 {cpu}"]).wait()
            try:
                os.rmdir(f"/sys/fs/cgroup/{rel}")
            except OSError:
                pass
            n += 1
            stop.wait(4)
        x.results["restarts"] = n - 1

    t = threading.Thread(target=loop)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
