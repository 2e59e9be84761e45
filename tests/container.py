"""Run the DaemonSet's containers, and node-problem-detector's custom plugin, with podman, exactly as
the manifests say.

The manifests are read (PyYAML, json), never copied: `podman_argv(ds, "exporter")` turns one container
of deploy/kubernetes/daemonset.yaml into the `podman --runtime /usr/sbin/runc run` command a kubelet
would amount to on this node:

- securityContext.privileged -> --privileged; hostPID -> --pid=host; hostNetwork -> --network=host
  (a pod without it gets --network=none: a pod network is not modelled, and podman's default bridge
  would leave an interface and firewall chains behind);
- every volumeMount of a hostPath volume -> -v HOST:MOUNTPATH[:ro],PROPAGATION (mountPropagation
  HostToContainer -> rslave, Bidirectional -> rshared, None/absent -> rprivate; podman's -v is a
  recursive bind, as the kubelet's is); hostPath types DirectoryOrCreate/Directory/CharDevice/... are
  honoured (created or checked) when the container starts;
- resources.limits.cpu/memory -> --cpus/--memory (requests only schedule: ignored);
- command -> --entrypoint; the image and args as they are; env values -> -e.

Two workarounds for the machines this runs on (the project's container notes): runc, not crun (crun
refuses the hybrid cgroup layout), and explicit --ulimit values: root here lacks CAP_SYS_RESOURCE, so the
runtime cannot raise a limit above its parent's hard limit and podman's defaults (1048576) fail with
"error setting rlimit ... operation not permitted". We pass the most the runtime can set: RLIMIT_NOFILE
= our hard limit; RLIMIT_NPROC = min(our hard limit, kernel.pid_max) (measured: conmon runs with
RLIMIT_NPROC = pid_max, 32768 works and 32769 is refused).

Cleanup is guaranteed by `Pod` (a context manager): every container it starts is removed with
`podman rm -f` when it closes, at interpreter exit (atexit), on SIGTERM (then raised as
KeyboardInterrupt, so pytest runs the other teardowns as on Ctrl-C), and, for a run that was
killed outright, by the next Pod (containers carry the label io.nodesleuth.test=PID of the process that
started them; those of dead PIDs are removed). Containers go under their own cgroup parent
(/nodesleuth-image-test, with conmon's cgroup in it), which is removed from every hierarchy at the end,
so no cgroup, process or mount is left behind: only the image stays.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import time
import uuid

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAEMONSET = os.path.join(REPO, "deploy", "kubernetes", "daemonset.yaml")
NPD_PLUGIN = os.path.join(REPO, "deploy", "npd", "nodesleuth-plugin-monitor.json")
BUILD = os.path.join(REPO, "deploy", "image", "build.sh")
RUNTIME = "/usr/sbin/runc"
CGROUP_PARENT = "/nodesleuth-image-test"
LABEL = "io.nodesleuth.test"
PROPAGATION = {None: "rprivate", "None": "rprivate", "HostToContainer": "rslave", "Bidirectional": "rshared"}


# --- the version and the image ----------------------------------------------------------------------

def package_version() -> str:
    """__version__ of src/nodesleuth/__init__.py: the one place the version is defined."""
    with open(os.path.join(REPO, "src", "nodesleuth", "__init__.py")) as f:
        m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", f.read(), re.M)
    assert m, "no __version__ in src/nodesleuth/__init__.py"
    return m.group(1)


def image_name() -> str:
    return f"localhost/nodesleuth:{package_version()}"


def podman_available() -> str | None:
    """None when podman and runc are here, else why not."""
    if not shutil.which("podman"):
        return "podman is not installed (scripts/setup-tests.sh installs it)"
    if not os.access(RUNTIME, os.X_OK):
        return f"{RUNTIME} is not installed"
    return None


def image_exists(image: str | None = None) -> bool:
    return subprocess.run(["podman", "image", "exists", image or image_name()]).returncode == 0


def build_image(*extra: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """bash deploy/image/build.sh, as a user would run it (niced: the machine is shared)."""
    return subprocess.run(["nice", "-n", "10", "bash", BUILD, *extra], capture_output=True, text=True,
                          timeout=timeout)


# --- reading the manifests ----------------------------------------------------------------------------

def load_daemonset(path: str = DAEMONSET) -> dict:
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d.get("kind") == "DaemonSet"]
    assert len(ds) == 1, f"{path}: expected one DaemonSet, found {len(ds)}"
    return ds[0]


def load_npd_plugin(path: str = NPD_PLUGIN) -> dict:
    with open(path) as f:
        return json.load(f)


def pod_spec(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


def container_spec(ds: dict, name: str) -> dict:
    for c in pod_spec(ds)["containers"]:
        if c["name"] == name:
            return c
    raise KeyError(f"no container {name!r} in the DaemonSet")


def parse_cpu(q: str | int | float) -> float:
    """Kubernetes CPU quantity -> cores: '200m' -> 0.2, '1' -> 1.0, 0.5 -> 0.5."""
    s = str(q).strip()
    return int(s[:-1]) / 1000 if s.endswith("m") else float(s)


_MEM = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
        "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18, "m": 1e-3}


def parse_memory(q: str | int) -> int:
    """Kubernetes memory quantity -> bytes: '128Mi' -> 134217728, '1G' -> 10**9, '1e3' -> 1000."""
    s = str(q).strip()
    m = re.fullmatch(r"([0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?", s)
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {q!r}")
    return int(float(m.group(1)) * _MEM.get(m.group(2) or "", 1))


def parse_duration(s: str) -> float:
    """Go duration as NPD writes it ('30s', '1m30s', '500ms') -> seconds."""
    total, pos = 0.0, 0
    for m in re.finditer(r"([0-9.]+)(ms|us|µs|ns|h|m|s)", s):
        assert m.start() == pos, f"not a duration: {s!r}"
        pos = m.end()
        total += float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
                                      "ns": 1e-9}[m.group(2)]
    assert pos == len(s) and s, f"not a duration: {s!r}"
    return total


def ulimit_flags() -> list[str]:
    """--ulimit values the runtime can set here (module docstring): at most what it has itself."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    cap = 1 << 20  # podman's own default
    nofile = cap if nofile == resource.RLIM_INFINITY else min(nofile, cap)
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def host_path_volumes(ds: dict) -> dict[str, dict]:
    vols = {}
    for v in pod_spec(ds).get("volumes", []):
        if "hostPath" not in v:
            raise NotImplementedError(f"volume {v['name']}: only hostPath volumes are modelled")
        vols[v["name"]] = v["hostPath"]
    return vols


def mounts(ds: dict, container: str, host_paths: dict[str, str] | None = None) -> list[tuple[str, str, dict]]:
    """(host path, mount path, hostPath volume) per volumeMount; host_paths replaces a volume's host path
    (a test's store goes to a temporary directory instead of the node's /var/lib/nodesleuth)."""
    vols = host_path_volumes(ds)
    out = []
    for m in container_spec(ds, container).get("volumeMounts", []):
        hp = vols[m["name"]]
        out.append(((host_paths or {}).get(m["name"], hp["path"]), m["mountPath"], {**hp, "mount": m}))
    return out


def podman_argv(ds: dict, container: str, *, name: str, host_paths: dict[str, str] | None = None,
                args: list[str] | None = None, entrypoint: list[str] | None = None, detach: bool = True,
                labels: dict[str, str] | None = None, image: str | None = None) -> list[str]:
    """The exact `podman run` for one container of the pod. `args`/`entrypoint`/`image` replace the
    manifest's (only for running NPD's plugin with the pod's settings, or a changed --listen port)."""
    spec = pod_spec(ds)
    c = container_spec(ds, container)
    argv = ["podman", "--runtime", RUNTIME, "run", "--name", name, "--pull=never",
            "--cgroup-parent", CGROUP_PARENT]
    for k, v in (labels or {}).items():
        argv += ["--label", f"{k}={v}"]
    argv.append("-d" if detach else "--rm")
    if c.get("securityContext", {}).get("privileged"):
        argv.append("--privileged")
    argv.append("--pid=host" if spec.get("hostPID") else "--pid=private")
    argv.append("--network=host" if spec.get("hostNetwork") else "--network=none")
    if spec.get("hostIPC"):
        argv.append("--ipc=host")
    for src, dst, v in mounts(ds, container, host_paths):
        m = v["mount"]
        opts = (["ro"] if m.get("readOnly") else []) + [PROPAGATION[m.get("mountPropagation")]]
        if m.get("subPath"):
            raise NotImplementedError("subPath mounts are not modelled")
        argv += ["-v", f"{src}:{dst}:{','.join(opts)}"]
    limits = c.get("resources", {}).get("limits", {})
    if "cpu" in limits:
        argv += ["--cpus", f"{parse_cpu(limits['cpu']):g}"]
    if "memory" in limits:
        argv += ["--memory", str(parse_memory(limits["memory"]))]
    argv += ulimit_flags()
    for e in c.get("env", []):
        if "value" in e:
            argv += ["-e", f"{e['name']}={e['value']}"]
    if c.get("workingDir"):
        argv += ["--workdir", c["workingDir"]]
    ep = entrypoint if entrypoint is not None else c.get("command")
    if ep:
        argv += ["--entrypoint", json.dumps(ep)]
    argv.append(image or c["image"])
    argv += c.get("args", []) if args is None else args
    return argv


def npd_plugin_rule(npd: dict, index: int = 0) -> tuple[str, list[str], float]:
    """(path, args, timeout seconds) of one rule of the custom plugin monitor, as NPD runs it: the rule's
    timeout, else pluginConfig.timeout."""
    assert npd.get("plugin") == "custom", "not a custom plugin monitor config"
    rule = npd["rules"][index]
    timeout = rule.get("timeout") or npd.get("pluginConfig", {}).get("timeout", "5s")
    return rule["path"], list(rule.get("args", [])), parse_duration(timeout)


def with_listen_port(args: list[str], port: int) -> list[str]:
    """args with --listen's port replaced (host network: the only way to move the exporter's port)."""
    out = list(args)
    i = out.index("--listen")
    host = out[i + 1].rsplit(":", 1)[0]
    out[i + 1] = f"{host}:{port}"
    return out


def listen_port(args: list[str]) -> int:
    return int(args[args.index("--listen") + 1].rsplit(":", 1)[1])


# --- running, and cleaning up -----------------------------------------------------------------------

def _podman(*args: str, timeout: float = 60, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def remove_stale() -> list[str]:
    """Remove containers a killed test run left (labelled with the PID of a process that is gone)."""
    p = _podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.ID}} {{.Labels}}")
    removed = []
    for line in p.stdout.splitlines():
        cid = line.split()[0]
        insp = _podman("inspect", "--format", "{{index .Config.Labels \"%s\"}}" % LABEL, cid)
        owner = insp.stdout.strip()
        if owner.isdigit() and not _pid_alive(int(owner)):
            _podman("rm", "-f", "-t", "0", cid)
            removed.append(cid)
    remove_cgroup_parent()
    return removed


def remove_cgroup_parent() -> list[str]:
    """rmdir CGROUP_PARENT (deepest first) in every cgroup hierarchy; what could not go is returned."""
    left = []
    base = "/sys/fs/cgroup"
    roots = [os.path.join(base, h) for h in os.listdir(base)] if os.path.isdir(base) else []
    roots.append(base)  # pure cgroup v2
    for r in roots:
        top = os.path.join(r, CGROUP_PARENT.lstrip("/"))
        if not os.path.isdir(top) or os.path.islink(r):
            continue
        for d, _, _ in sorted(os.walk(top), key=lambda t: -t[0].count("/")):
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(d)
    return left


def _ensure_host_path(src: str, v: dict) -> None:
    t = v.get("type", "")
    if t == "DirectoryOrCreate":
        os.makedirs(src, mode=0o755, exist_ok=True)
    elif t == "Directory":
        assert os.path.isdir(src), f"hostPath {src}: not a directory"
    elif t == "CharDevice":
        assert stat.S_ISCHR(os.stat(src).st_mode), f"hostPath {src}: not a character device"
    elif t == "File":
        assert os.path.isfile(src), f"hostPath {src}: not a file"
    elif t == "FileOrCreate":
        open(src, "a").close()


class Pod:
    """Runs containers of one DaemonSet pod; removes every one of them when closed (see module doc)."""

    _live: set["Pod"] = set()
    _handlers_installed = False

    def __init__(self, ds: dict | None = None, image: str | None = None):
        self.ds = ds if ds is not None else load_daemonset()
        self.image = image
        self.names: list[str] = []
        self.tag = uuid.uuid4().hex[:8]
        remove_stale()
        Pod._live.add(self)
        Pod._install_handlers()

    @classmethod
    def _install_handlers(cls) -> None:
        if cls._handlers_installed:
            return
        cls._handlers_installed = True
        atexit.register(cls._close_all)
        prev = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            cls._close_all()
            if callable(prev):
                prev(signum, frame)
            elif prev == signal.SIG_IGN:
                return
            # as Ctrl-C: pytest (or whoever runs this) unwinds and runs its own cleanups (a test's
            # temporary store, ...) instead of dying here
            raise KeyboardInterrupt("SIGTERM")

        try:
            signal.signal(signal.SIGTERM, on_term)
        except ValueError:
            pass  # not the main thread: atexit and the next run's remove_stale() still clean up

    @classmethod
    def _close_all(cls) -> None:
        for p in list(cls._live):
            p.close()

    def __enter__(self) -> "Pod":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def argv(self, container: str, name: str, **kw) -> list[str]:
        return podman_argv(self.ds, container, name=name, labels={LABEL: str(os.getpid())}, image=self.image, **kw)

    def _prepare(self, container: str, host_paths: dict[str, str] | None) -> None:
        for src, _, v in mounts(self.ds, container, host_paths):
            _ensure_host_path(src, v)

    def start(self, container: str, host_paths: dict[str, str] | None = None, args: list[str] | None = None,
              timeout: float = 120) -> str:
        """podman run -d; returns the container's name."""
        name = f"nodesleuth-test-{container}-{self.tag}-{len(self.names)}"
        self._prepare(container, host_paths)
        argv = self.argv(container, name, host_paths=host_paths, args=args, detach=True)
        self.names.append(name)  # before starting: a half-started container is removed too
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}\nexit {p.returncode}: {p.stderr.strip()}")
        return name

    def run(self, container: str, *, entrypoint: list[str] | None = None, args: list[str] | None = None,
            host_paths: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """podman run --rm in the foreground, with the pod settings of `container`; the container is
        removed even when the timeout strikes."""
        name = f"nodesleuth-test-{container}-{self.tag}-{len(self.names)}"
        self._prepare(container, host_paths)
        argv = self.argv(container, name, host_paths=host_paths, args=args, entrypoint=entrypoint, detach=False)
        self.names.append(name)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        finally:
            self.remove(name)

    def logs(self, name: str) -> str:
        p = _podman("logs", name)
        return p.stdout + p.stderr

    def running(self, name: str) -> bool:
        p = _podman("inspect", "--format", "{{.State.Running}}", name)
        return p.stdout.strip() == "true"

    def stop(self, name: str, timeout: int = 20) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` s (as the kubelet's grace period); the exit code."""
        _podman("stop", "-t", str(timeout), name, timeout=timeout + 60)
        p = _podman("inspect", "--format", "{{.State.ExitCode}}", name)
        return int(p.stdout.strip()) if p.stdout.strip().lstrip("-").isdigit() else None

    def remove(self, name: str) -> None:
        _podman("rm", "-f", "-t", "2", name, timeout=120)
        # `run --rm` may still be removing it: wait until it is gone
        for _ in range(100):
            if _podman("container", "exists", name).returncode != 0:
                break
            time.sleep(0.1)
        _end_orphan(name)
        if name in self.names:
            self.names.remove(name)

    def close(self) -> None:
        for name in list(self.names):
            try:
                self.remove(name)
            except Exception:  # noqa: BLE001 - keep removing the others
                pass
        Pod._live.discard(self)
        if not Pod._live:
            remove_cgroup_parent()


def _conmons(name: str | None = None) -> list[int]:
    """conmon processes of this suite's containers (of container `name` when given)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline") as f:
                    cmd = f.read().split("\0")
            except OSError:
                continue
            if cmd and os.path.basename(cmd[0]) == "conmon" and (
                    any("nodesleuth-test-" in a for a in cmd) if name is None else name in cmd):
                out.append(int(d))
    return out


def _end_orphan(name: str) -> None:
    """`podman rm -f` once forgot a running container (a rehearsal of 2026-12-07: no longer listed, its conmon and
    exporter still running 45 min later, never signalled; the exporter ended at once on a SIGTERM by hand): end
    what it left, SIGTERM first as podman would, and say so."""
    for pid in _conmons(name):
        kids = []
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids += [int(x) for x in f.read().split()]
        print(f"podman left container {name}'s conmon {pid} and {kids} running: ended by the test harness")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in kids + [pid]:
                with contextlib.suppress(OSError):
                    os.kill(p, sig)
            for _ in range(50):
                if not any(_pid_alive(p) for p in kids + [pid]):
                    return
                time.sleep(0.1)


def leftovers() -> dict[str, list]:
    """What a test run could leave: its containers, conmon processes of them, container mounts of
    podman's storage, and its cgroup parent. Empty lists when clean."""
    cont = _podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split()
    mounts_left = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if "/var/lib/containers/storage/overlay/" in line and "/merged" in line:
                mounts_left.append(line.split()[4])
    conmons = _conmons()
    cgs = []
    base = "/sys/fs/cgroup"
    for h in (os.listdir(base) if os.path.isdir(base) else []):
        if os.path.isdir(os.path.join(base, h, CGROUP_PARENT.lstrip("/"))):
            cgs.append(os.path.join(base, h, CGROUP_PARENT.lstrip("/")))
    return {"containers": cont, "conmon": conmons, "mounts": mounts_left, "cgroups": cgs}
