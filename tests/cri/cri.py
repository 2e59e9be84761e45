"""Debian's containerd driven through the CRI API as kubelet drives it (see README.md beside this).

`containerd()` starts a private containerd whose runtime state lives where a node keeps it
(/run/containerd), imports a pause and a busybox image built here from Debian's static busybox, and
yields a `Kubelet` client. Everything it made (containers, sandboxes, cgroups, logs, images, the
daemon and its shims) is gone when the context exits.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = "/run/containerd"  # containerd's default state directory: where a node's bundles are
PAUSE = "localhost/nodesleuth-pause:1"
BUSYBOX = "localhost/nodesleuth-busybox:1"
BUSYBOX_BIN = "/bin/busybox"  # Debian's busybox-static


def stubs(out: Path):
    """Compile api.proto with grpcio-tools into `out` and import it (api_pb2, api_pb2_grpc)."""
    from grpc_tools import protoc

    src = (HERE / "api.proto").read_text()
    # gogoproto's import and options steer Go code generation only; protoc here does not have them
    src = "\n".join(l for l in src.splitlines()
                    if not l.startswith('import "github.com/gogo/') and not l.startswith("option (gogoproto."))
    (out / "api.proto").write_text(src)
    rc = protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--grpc_python_out={out}", str(out / "api.proto")])
    if rc != 0:
        raise RuntimeError(f"protoc failed on {HERE / 'api.proto'} ({rc})")
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
    finally:
        sys.path.remove(str(out))


def _tar_bytes(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in sorted({str(Path(n).parent) for n in files} - {"."}):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            t.addfile(ti)
        for name, (data, mode) in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), mode
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def oci_archive(path: Path, ref: str, entrypoint: list[str]) -> None:
    """An OCI image archive (image-spec v1.0 layout) of one layer holding Debian's static busybox,
    written without a registry or a build tool: the image-spec's own files, nothing else."""
    bb = Path(BUSYBOX_BIN).read_bytes()
    layer_tar = _tar_bytes({"bin/busybox": (bb, 0o755), "bin/sh": (bb, 0o755), "tmp/.keep": (b"", 0o644)})
    layer = gzip.compress(layer_tar, mtime=0)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return f"sha256:{d}"

    layer_d = blob(layer)
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_tar).hexdigest()}"]},
    }).encode()
    config_d = blob(config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_d, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_d, "size": len(layer)}],
    }).encode()
    manifest_d = blob(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_d, "size": len(manifest),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref}}]}).encode()
    files = {"oci-layout": (b'{"imageLayoutVersion":"1.0.0"}', 0o644), "index.json": (index, 0o644)}
    files |= {f"blobs/sha256/{d}": (b, 0o644) for d, b in blobs.items()}
    path.write_bytes(_tar_bytes(files))


@dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    qos: str  # guaranteed | burstable | besteffort
    sandbox_id: str = ""
    log_dir: str = ""
    cgroup_parent: str = ""  # cgroupfs driver form, as kubelet passes it
    attempts: dict = field(default_factory=dict)  # container name -> restart count so far


class Kubelet:
    """The calls kubelet makes, with what kubelet passes (cgroupfs driver, host network)."""

    def __init__(self, api, channel, log_root: str = "/var/log/pods"):
        self.pb = api[0]
        self.rt = api[1].RuntimeServiceStub(channel)
        self.log_root = log_root
        self.pods: list[Pod] = []
        self.daemon_pid = 0  # containerd's (set by containerd())
        self.sock = ""

    @contextlib.contextmanager
    def runtime_on(self, cpus: set[int]):
        """containerd, its shims and every container they start after this (affinity is inherited) run
        on `cpus` until the block ends, as a node's reserved CPUs (kubelet --reserved-cpus, systemd
        CPUAffinity) keep the runtime off the others. On a 2-CPU host a back-to-back restart loop costs
        about a whole CPU of containerd, shim and runc: left free to run anywhere it keeps the other CPU
        over the hot-core rule's 60% and no incident can qualify."""
        def pin(to):
            for pid in [self.daemon_pid, *shim_pids(self.sock)]:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(int(tid), to)

        everywhere = os.sched_getaffinity(self.daemon_pid)
        pin(cpus)
        try:
            yield
        finally:
            pin(everywhere)

    def run_pod(self, namespace: str, name: str, qos: str = "burstable") -> Pod:
        pb = self.pb
        pod = Pod(namespace, name, str(uuid.uuid4()), qos)
        # kubelet: /kubepods[/<qos>]/pod<UID> (Guaranteed pods sit directly under kubepods)
        pod.cgroup_parent = "/kubepods" + ("" if qos == "guaranteed" else f"/{qos}") + f"/pod{pod.uid}"
        pod.log_dir = f"{self.log_root}/{namespace}_{name}_{pod.uid}"
        os.makedirs(pod.log_dir, exist_ok=True)
        labels = {"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace,
                  "io.kubernetes.pod.uid": pod.uid}
        cfg = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, namespace=namespace, uid=pod.uid, attempt=0),
            hostname="", log_directory=pod.log_dir, labels=labels,  # host network: the node's own UTS
            annotations={"kubernetes.io/config.source": "api"},
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=pod.cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE, pid=pb.CONTAINER, ipc=pb.POD))))
        self.pods.append(pod)  # cleaned up at exit even when the runtime fails half way
        pod.sandbox_id = self.rt.RunPodSandbox(pb.RunPodSandboxRequest(config=cfg), timeout=120).pod_sandbox_id
        pod._cfg = cfg
        return pod

    def start_container(self, pod: Pod, name: str, args: list[str], cpuset: str = "",
                        mounts: dict[str, str] | None = None) -> str:
        """Create and start container `name` in `pod` (its next restart when it ran before); `cpuset`
        pins it as kubelet's static CPU manager does (LinuxContainerResources.cpuset_cpus)."""
        pb = self.pb
        attempt = pod.attempts.get(name, -1) + 1
        pod.attempts[name] = attempt
        os.makedirs(f"{pod.log_dir}/{name}", exist_ok=True)
        labels = {"io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.namespace": pod.namespace,
                  "io.kubernetes.pod.uid": pod.uid, "io.kubernetes.container.name": name}
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=attempt), image=pb.ImageSpec(image=BUSYBOX),
            command=["/bin/busybox"], args=args, labels=labels,
            annotations={"io.kubernetes.container.restartCount": str(attempt)},
            log_path=f"{name}/{attempt}.log",
            mounts=[pb.Mount(host_path=h, container_path=c) for h, c in (mounts or {}).items()],
            linux=pb.LinuxContainerConfig(resources=pb.LinuxContainerResources(cpuset_cpus=cpuset) if cpuset else None))
        cid = self.rt.CreateContainer(pb.CreateContainerRequest(
            pod_sandbox_id=pod.sandbox_id, config=cfg, sandbox_config=pod._cfg), timeout=120).container_id
        self.rt.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=120)
        return cid

    @contextlib.contextmanager
    def crash_loop(self, pod: Pod, name: str, data: str, pause: float = 0.0, file_kib: int = 256):
        """Container `name` of `pod` in a restart loop, as kubelet restarts a CrashLoopBackOff container
        (its back-off cut to `pause` s between a removal and the next start): each run writes a `file_kib`
        KiB file to the hostPath `data` (mounted at /data) and exits 1; the dead container is removed before
        the next start (a new container cgroup each time, the old one removed while the page cache its
        file holds stays charged to it). Runs on a thread until the block exits; yields the list of errors
        it met (empty when all went well)."""
        import threading

        stop = threading.Event()
        errors: list = []

        def loop():
            try:
                while not stop.is_set():
                    cid = self.start_container(pod, name, [
                        "sh", "-c", f"dd if=/dev/zero of=/data/run-$$-$(date +%s%N) bs=1k count={file_kib} 2>/dev/null; exit 1"],
                        mounts={data: "/data"})
                    self.wait_exit(cid, timeout=120)
                    self.stop_container(cid)
                    stop.wait(pause)
            except Exception as e:  # noqa: BLE001 -- handed to the caller
                errors.append(e)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        try:
            yield errors
        finally:
            stop.set()
            t.join(120)

    def container_pid(self, cid: str) -> int:
        st = self.rt.ContainerStatus(self.pb.ContainerStatusRequest(container_id=cid, verbose=True), timeout=30)
        return int(json.loads(st.info["info"])["pid"])

    def wait_exit(self, cid: str, timeout: float = 30) -> int:
        """Wait until container `cid` exited; its exit code."""
        pb = self.pb
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.rt.ContainerStatus(pb.ContainerStatusRequest(container_id=cid), timeout=30).status
            if st.state == pb.CONTAINER_EXITED:
                return st.exit_code
            time.sleep(0.05)
        raise TimeoutError(f"container {cid} still running after {timeout} s")

    def stop_container(self, cid: str, remove: bool = True) -> None:
        pb = self.pb
        self.rt.StopContainer(pb.StopContainerRequest(container_id=cid, timeout=2), timeout=60)
        if remove:
            self.rt.RemoveContainer(pb.RemoveContainerRequest(container_id=cid), timeout=60)

    def remove_pod(self, pod: Pod) -> None:
        pb = self.pb
        with contextlib.suppress(Exception):
            if pod.sandbox_id:
                self.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=60)
        with contextlib.suppress(Exception):
            if pod.sandbox_id:
                self.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=pod.sandbox_id), timeout=60)
        remove_cgroup(pod.cgroup_parent)  # kubelet's pod cleanup removes the pod cgroup
        shutil.rmtree(pod.log_dir, ignore_errors=True)
        if pod in self.pods:
            self.pods.remove(pod)


def shim_pids(sock: str) -> list[int]:
    """containerd-shim-runc-v2 processes serving the containerd at `sock` (its -address argument)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in argv:
                out.append(int(d.name))
    return out


def v1_mounts() -> list[str]:
    """Every cgroup v1 hierarchy's mount point, and the v2 one (the test host is hybrid)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in ("cgroup", "cgroup2"):
            out.append(pre.split()[4])
    return out


def remove_cgroup(rel: str) -> None:
    """rmdir a cgroup and its children (deepest first) in every hierarchy, as kubelet's cleanup does."""
    for m in v1_mounts():
        top = Path(m) / rel.lstrip("/")
        if not top.is_dir():
            continue
        for d in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
    for qos in ("burstable", "besteffort", ""):
        for m in v1_mounts():
            p = Path(m) / "kubepods" / qos
            with contextlib.suppress(OSError):
                if p.is_dir() and not any(x.is_dir() for x in p.iterdir()):
                    p.rmdir()


CONFIG = """version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # root here lacks CAP_SYS_RESOURCE: the sandbox's oom_score_adj (-998) cannot go below containerd's own
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{tmp}/cni-bin"
    conf_dir = "{tmp}/cni-conf"
"""


def available() -> str | None:
    """What is missing for these tests, or None."""
    for exe in ("containerd", "ctr", "containerd-shim-runc-v2"):
        if not shutil.which(exe):
            return f"{exe} (Debian package containerd)"
    if not shutil.which("runc") and not os.path.exists("/usr/sbin/runc"):
        return "runc"
    if not os.path.exists(BUSYBOX_BIN):
        return f"{BUSYBOX_BIN} (Debian package busybox-static)"
    try:
        importlib.import_module("grpc_tools")
    except ImportError:
        return "grpcio-tools (the test extra)"
    if live(f"{STATE}/containerd.sock"):
        return f"another containerd uses {STATE}"
    return None


def live(sock: str) -> bool:
    """Whether a containerd serves `sock`, or shims of one still run: state a killed run left
    (no daemon, no shim; /run keeps it until reboot) is not a containerd in use, and ours reuses it."""
    import socket

    if shim_pids(sock):
        return True
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(sock)
            return True
        except OSError:
            return False


def clear_stale() -> None:
    """Remove what a killed run left (its mounts and state under STATE, its empty pod cgroups), so a
    run after a SIGKILL starts as on a fresh node. Only called when no containerd serves STATE."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == STATE or point.startswith(STATE + "/"):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(STATE, ignore_errors=True)
    remove_cgroup("/kubepods")


@contextlib.contextmanager
def containerd():
    """A private containerd driven through CRI; yields a Kubelet. Removes all it made at exit."""
    import grpc

    sock = f"{STATE}/containerd.sock"
    if live(sock):
        raise RuntimeError(f"another containerd uses {STATE}")
    clear_stale()
    tmp = Path(tempfile.mkdtemp(prefix="nodesleuth-cri-", dir="/var/tmp"))
    runc = shutil.which("runc") or "/usr/sbin/runc"
    for d in ("root", "cni-bin", "cni-conf", "stubs"):
        (tmp / d).mkdir()
    (tmp / "config.toml").write_text(CONFIG.format(root=tmp / "root", state=STATE, sock=sock, pause=PAUSE,
                                                   runc=runc, tmp=tmp))
    log = open(tmp / "containerd.log", "w")
    from nodesleuth.node.children import spawn

    proc = spawn(["containerd", "--config", str(tmp / "config.toml")], stdout=log, stderr=subprocess.STDOUT)
    kube = None
    try:
        for _ in range(300):
            if os.path.exists(sock):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"containerd exited {proc.returncode}: {(tmp / 'containerd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        for ref, entry in ((PAUSE, ["/bin/busybox", "sleep", "2147483647"]), (BUSYBOX, ["/bin/busybox"])):
            arch = tmp / (re.sub(r"\W", "_", ref) + ".tar")
            oci_archive(arch, ref, entry)
            for attempt in range(6):  # containerd's GC can remove a blob mid-import (containerd#5690): import
                # again. Named by the index's own io.containerd.image.name, not --index-name: the index blob that
                # option writes was lost to the GC in 2 of 10 set-ups on a loaded host, every retry alike
                # (0 of 12 without it, same load)
                r = subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--snapshotter",
                                    "native", str(arch)], capture_output=True, text=True, timeout=120)
                if r.returncode == 0 or "not found" not in r.stderr:
                    break
                time.sleep(1 + attempt)
            if r.returncode != 0:
                raise RuntimeError(f"ctr images import {ref} exited {r.returncode}: {r.stderr.strip()[-1500:]}; "
                                   f"containerd's log: {(tmp / 'containerd.log').read_text()[-1500:]}")
        api = stubs(tmp / "stubs")
        channel = grpc.insecure_channel(f"unix://{sock}")
        kube = Kubelet(api, channel)
        kube.daemon_pid, kube.sock = proc.pid, sock
        yield kube
    finally:
        if kube is not None:
            for pod in list(kube.pods):
                with contextlib.suppress(Exception):
                    for c in kube.rt.ListContainers(kube.pb.ListContainersRequest(
                            filter=kube.pb.ContainerFilter(pod_sandbox_id=pod.sandbox_id)), timeout=30).containers:
                        kube.stop_container(c.id)
                kube.remove_pod(pod)
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # a shim outlives its containerd by design (it is reparented to init): end those of our state
        for pid in shim_pids(sock):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        log.close()
        for sub in ("io.containerd.runtime.v2.task", "io.containerd.grpc.v1.cri", "io.containerd.runtime.v1.linux"):
            p = Path(STATE) / sub
            if p.exists():
                subprocess.run(["umount", "-R", "-l", str(p)], capture_output=True, check=False)
        shutil.rmtree(STATE, ignore_errors=True)
        subprocess.run(["umount", "-R", "-l", str(tmp / "root")], capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
