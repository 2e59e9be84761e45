"""The container image and the DaemonSet, run for real: the image built by deploy/image/build.sh, each
container started exactly as deploy/kubernetes/daemonset.yaml says (tests/container.py reads it), and
node-problem-detector's custom plugin run as deploy/npd/nodesleuth-plugin-monitor.json says.

The manifest tests are quick; the container tests are `slow` and `image` (they build the image when it
is missing or older than the checkout: a few seconds with the cached root file system, a minute or two
from nothing). Every container they start is removed, and the run fails if a container, a conmon, a
container mount or the test cgroup parent is left.

`--root /host` is the live host through a mount (node/root.py tells it from a recorded tree by the
procfs mounted at /host/proc): NIC counters through ethtool in the host's network namespace, units
through the host's systemd, packages from /host/var/lib/dpkg, as the exporter on the host reads them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import container as C  # noqa: E402
from conftest import missing


# --- the manifests (no container needed) -------------------------------------------------------------

def _raw_manifest() -> str:
    with open(C.DAEMONSET) as f:
        return f.read()


def test_daemonset_names_the_package_version():
    ds = C.load_daemonset()
    images = {c["name"]: c["image"] for c in C.pod_spec(ds)["containers"]}
    assert set(images) == {"exporter", "recorder"}
    assert set(images.values()) == {C.image_name()}, images
    assert C.image_name() == f"localhost/nodesleuth:{C.package_version()}"
    with open(os.path.join(C.REPO, "deploy", "image", "build.sh")) as f:
        assert "localhost/nodesleuth:$version" in f.read()


def test_daemonset_is_a_live_host_deployment():
    ds = C.load_daemonset()
    spec = C.pod_spec(ds)
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    vols = C.host_path_volumes(ds)
    root = [n for n, v in vols.items() if v["path"] == "/"]
    assert len(root) == 1, vols
    for c in spec["containers"]:
        assert c["securityContext"]["privileged"] is True
        m = [m for m in c["volumeMounts"] if m["name"] == root[0]]
        assert m == [{"name": root[0], "mountPath": "/host", "readOnly": True,
                      "mountPropagation": "HostToContainer"}], c["name"]
    exp, rec = C.container_spec(ds, "exporter"), C.container_spec(ds, "recorder")
    assert exp["args"] == ["exporter", "--root", "/host", "--systemd-pid", "1", "--listen", "0.0.0.0:9846",
                           "--state-dir", "/var/lib/nodesleuth"]  # the probes' state: a writable hostPath
    state = [m for m in exp["volumeMounts"] if m["mountPath"] == "/var/lib/nodesleuth"]
    assert len(state) == 1 and not state[0].get("readOnly")
    assert rec["args"][:7] == ["record", "--root", "/host", "--systemd-pid", "1", "--store", "/var/lib/nodesleuth"]
    assert rec["args"][-1] == "--profile"
    store = [m for m in rec["volumeMounts"] if m["mountPath"] == "/var/lib/nodesleuth"]
    assert len(store) == 1 and not store[0].get("readOnly")
    assert vols[store[0]["name"]]["type"] == "DirectoryOrCreate"
    # the recorder's resources cover what benchmarks/pod_resources.py measured and derived for 96 CPUs
    with open(os.path.join(C.REPO, "benchmarks", "results", "pod_resources.json")) as f:
        at96 = json.load(f)["at_96_cpus"]
    res = rec["resources"]
    assert _millicores(res["requests"]["cpu"]) >= 10 * at96["cpu_pct_96"], (res, at96)
    assert _mib(res["limits"]["memory"]) >= 1.5 * at96["memory_peak_mb_96"], (res, at96)
    assert _mib(res["requests"]["memory"]) >= 1.2 * at96["recorder_rss_mb_fixture_96"] + at96["rings_extra_mb_96"]
    assert "benchmarks/pod_resources.py" in _raw_manifest()


def _millicores(q: str) -> float:
    return float(q[:-1]) if q.endswith("m") else 1000 * float(q)


def _mib(q: str) -> float:
    return float(q[:-2]) * {"Mi": 1, "Gi": 1024}[q[-2:]]


def test_daemonset_validates_against_kubernetes_schemas():
    try:
        import kubernetes_validate as kv
    except ImportError:
        missing("pip install kubernetes-validate (scripts/setup-tests.sh)")
    import kubernetes_validate.utils as kvu

    ds = C.load_daemonset()
    versions = sorted({kvu.major_minor(v) for v in kvu.all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
    for v in (versions[0], versions[-1]):  # the oldest and the newest schemas the package bundles
        kv.validate(ds, v, strict=True)  # raises ValidationError
    bad = json.loads(json.dumps(ds))
    C.pod_spec(bad)["hostNetwork"] = "yes"
    with pytest.raises(kvu.ValidationError):
        kv.validate(bad, versions[-1], strict=True)


def test_npd_plugin_runs_the_image_path():
    npd = C.load_npd_plugin()
    for i in range(len(npd["rules"])):
        path, args, timeout = C.npd_plugin_rule(npd, i)
        assert path == "/usr/local/bin/nodesleuth"
        assert args[:2] == ["check", "--npd"] and args[-4:] == ["--root", "/host", "--systemd-pid", "1"]
        assert 0 < timeout <= 60


def test_podman_argv_follows_the_manifest():
    ds = C.load_daemonset()
    argv = C.podman_argv(ds, "recorder", name="t", host_paths={"store": "/tmp/s"})
    assert argv[:3] == ["podman", "--runtime", "/usr/sbin/runc"]
    for flag in ("--privileged", "--pid=host", "--network=host", "-d"):
        assert flag in argv
    assert "-v" in argv and "/:/host:ro,rslave" in argv and "/tmp/s:/var/lib/nodesleuth:rprivate" in argv
    lim = C.container_spec(ds, "recorder")["resources"]["limits"]
    assert argv[argv.index("--cpus") + 1] == f"{C.parse_cpu(lim['cpu']):g}"
    assert argv[argv.index("--memory") + 1] == str(C.parse_memory(lim["memory"]))
    i = argv.index(C.image_name())
    assert argv[i + 1:] == C.container_spec(ds, "recorder")["args"]
    assert sum(a == "--ulimit" for a in argv) == 2
    assert C.parse_memory("128Mi") == 128 << 20 and C.parse_memory("1G") == 10 ** 9
    assert C.parse_cpu("200m") == 0.2 and C.parse_cpu(2) == 2.0
    assert C.parse_duration("30s") == 30 and C.parse_duration("1m30s") == 90
    assert C.with_listen_port(["x", "--listen", "0.0.0.0:9846"], 1234) == ["x", "--listen", "0.0.0.0:1234"]


# --- the image, and the containers run as the manifests say ---------------------------------------------

def _need_podman() -> None:
    if os.geteuid() != 0:
        missing("needs root (podman with host namespaces)")
    why = C.podman_available()
    if why:
        missing(why)


@pytest.fixture(scope="module")
def image():
    """The image of this checkout: built by deploy/image/build.sh when missing or stale."""
    _need_podman()
    before = C.leftovers()
    t0 = time.monotonic()
    p = C.build_image("--if-missing")
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"\nbuild.sh --if-missing: {time.monotonic() - t0:.1f} s: {p.stdout.strip()}")
    assert C.image_exists()
    yield C.image_name()
    after = C.leftovers()
    assert after == {"containers": [], "conmon": [], "mounts": [m for m in after["mounts"] if m in before["mounts"]],
                     "cgroups": []}, f"left behind: {after}"


@pytest.fixture
def pod(image):
    with C.Pod() as p:
        yield p
    assert not p.names
    left = C.leftovers()
    assert not left["containers"] and not left["conmon"] and not left["cgroups"], left


@pytest.fixture
def store_dir():
    """The recorder's store on the host: a fresh directory instead of the node's /var/lib/nodesleuth
    (named with our PID: those of a killed run are removed by the next)."""
    for old in os.listdir("/var/tmp"):
        m = re.fullmatch(r"nodesleuth-image-store\.(\d+)\..*", old)
        if m and not C._pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join("/var/tmp", old), ignore_errors=True)
    d = tempfile.mkdtemp(prefix=f"nodesleuth-image-store.{os.getpid()}.", dir="/var/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exporter_args(ds: dict, record_property=None) -> tuple[list[str] | None, int]:
    """The manifest's args and port; if the port is taken on this host, --listen moves to a free one
    (with hostNetwork that is the only way) and the test says so."""
    args = C.container_spec(ds, "exporter")["args"]
    port = C.listen_port(args)
    if _port_free(port):
        return None, port
    new = _free_port()
    msg = f"port {port} of the manifest is taken on this host: the exporter listens on {new} (--listen rewritten)"
    print(msg)
    if record_property:
        record_property("exporter_port", msg)
    return C.with_listen_port(args, new), new


def _scrape(port: int, timeout: float = 10) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return r.read().decode()


def _wait_metrics(port: int, until: float, alive=lambda: True, samples: int = 3) -> str:
    """/metrics once the exporter has `samples` samples (nodesleuth_samples_total)."""
    last = ""
    while time.monotonic() < until:
        if not alive():
            break
        try:
            last = _scrape(port)
            m = re.search(r"^nodesleuth_samples_total (\S+)$", last, re.M)
            if m and float(m.group(1)) >= samples:
                return last
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"no metrics on 127.0.0.1:{port} in time; last: {last[:300]!r}")


def _families(text: str) -> dict[str, list[tuple[dict, float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@pytest.mark.slow
@pytest.mark.image
def test_image_builds_and_is_labelled(image):
    insp = json.loads(subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True,
                                     check=True).stdout)[0]
    cfg = insp["Config"]
    assert cfg["Entrypoint"] == ["/usr/local/bin/nodesleuth"]
    assert cfg["Labels"]["org.opencontainers.image.version"] == C.package_version()
    size = insp["Size"]
    print(f"\n{image}: {size / 1e6:.0f} MB")
    assert size < 600e6, "the image grew past 600 MB"
    # only Debian's packages and the wheel: nodesleuth is the only thing under /usr/local
    with C.Pod() as p:
        r = p.run("exporter", entrypoint=["/bin/sh"], args=["-c",
                  "ls /usr/local/lib/python3*/dist-packages; for t in perf ethtool nsenter setpriv ip ps systemctl; "
                  "do command -v $t; done; test -z \"$(find /var/lib/apt/lists /var/cache/apt -type f ! -name lock; find /usr/share/man /usr/share/doc -type f ! -name copyright)\" && echo clean"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert [x for x in lines if not x.startswith("/")][:2] == ["nodesleuth", f"nodesleuth-{C.package_version()}.dist-info"]
    for tool in ("perf", "ethtool", "nsenter", "setpriv", "ip", "ps", "systemctl"):
        assert any(x.endswith("/" + tool) for x in lines), (tool, lines)
    assert lines[-1] == "clean"


@pytest.mark.slow
@pytest.mark.image
def test_version_in_the_image(pod):
    r = pod.run("exporter", args=["--version"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"nodesleuth, version {C.package_version()}"


@pytest.mark.slow
@pytest.mark.image
def test_exporter_container_answers_on_the_host_network(pod, record_property):
    ds = pod.ds
    args, port = _exporter_args(ds, record_property)
    name = pod.start("exporter", args=args)
    text = _wait_metrics(port, time.monotonic() + 90, alive=lambda: pod.running(name))
    fams = _families(text)
    for fam in ("nodesleuth_cpu_busy_ratio", "nodesleuth_node_busy_ratio", "nodesleuth_cgroups_dying",
                "nodesleuth_memory_percpu_bytes", "nodesleuth_memory_slab_bytes", "nodesleuth_node_info",
                "nodesleuth_sysctl_info", "nodesleuth_incidents_total"):
        assert fam in fams, (fam, sorted(fams))
    online = set()
    with open("/sys/devices/system/cpu/online") as f:
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            online |= set(range(int(lo), int(hi or lo) + 1))
    assert {int(lb["cpu"]) for lb, _ in fams["nodesleuth_cpu_busy_ratio"]} == online
    info = fams["nodesleuth_node_info"][0][0]
    assert info["kernel"] == os.uname().release  # the host's kernel, read through /host
    sysctl = {lb["sysctl"]: lb["value"] for lb, _ in fams["nodesleuth_sysctl_info"]}
    with open("/proc/sys/kernel/pid_max") as f:
        assert sysctl.get("kernel.pid_max") == f.read().strip()
    code = pod.stop(name)
    assert code in (0, 143), (code, pod.logs(name)[-3000:])  # SIGTERM, as the kubelet stops it


@pytest.mark.slow
@pytest.mark.image
def test_recorder_container_writes_a_store_the_host_reads(pod, store_dir):
    name = pod.start("recorder", host_paths={"store": store_dir})
    time.sleep(15)
    assert pod.running(name), pod.logs(name)
    code = pod.stop(name)
    logs = pod.logs(name)
    assert code == 0, logs
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "dump", "--store", store_dir, "--from", "10m ago",
                        "--to", "now", "--format", "csv"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = [ln.split(",") for ln in p.stdout.splitlines()]
    head, rows = rows[0], rows[1:]
    assert head[:3] == ["time", "iso", "cpu"]
    seconds = {r[0] for r in rows if r[2] == "all"}
    assert len(seconds) >= 5, p.stdout[:500]
    assert {r[2] for r in rows} >= {"all", "0"}


@pytest.mark.slow
@pytest.mark.image
def test_recorder_container_profiles(pod, store_dir, busy_loop):
    """--profile in the container: perf (the image's, Debian trixie's 6.12) runs and its samples, with
    named frames, reach the store. A busy loop on the host makes the CPU time to sample (idle CPUs give
    none: on a quiet machine, the CI of 2026-12-05, 25 s of recording held 8 samples)."""
    busy_loop(cpu=1)
    name = pod.start("recorder", host_paths={"store": store_dir})
    time.sleep(25)
    code = pod.stop(name)
    logs = pod.logs(name)
    assert code == 0, logs
    m = re.search(r"profile: (\d+) chunks stored, (\d+) perf restarts", logs)
    assert m is None or (int(m.group(1)) > 0 and m.group(2) == "0"), logs
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "top-functions", "--store", store_dir, "--from",
                        "10m ago", "--to", "now", "--json", "-n", "50"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr + logs
    rows = json.loads(p.stdout)
    assert sum(r["self"] for r in rows) >= 49 * 10, rows[:3]  # >= 10 CPU-seconds of samples at 49 Hz
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "top-functions", "--store", store_dir, "--from",
                        "10m ago", "--to", "now", "--json", "-n", "50", "--comm", "ns-busyloop"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert sum(r["self"] for r in json.loads(p.stdout)) >= 49 * 10  # the loop's own: the host's pids, seen from the pod
    assert any(r["function"] and not r["function"].startswith("[") for r in rows), rows[:5]


@pytest.mark.slow
@pytest.mark.image
def test_npd_plugin_in_the_image(pod):
    """As NPD's custom plugin monitor runs it: the rule's path and args, killed at its timeout; the
    status is the exit code (0 OK, 1 problem, 2 unknown) and the message is stdout."""
    npd = C.load_npd_plugin()
    path, args, timeout = C.npd_plugin_rule(npd, 0)
    t0 = time.monotonic()
    r = pod.run("exporter", entrypoint=["/usr/bin/timeout", "-s", "KILL", f"{timeout:g}", path], args=args,
                timeout=timeout + 60)
    took = time.monotonic() - t0
    assert r.returncode in (0, 1, 2), (r.returncode, r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].strip(), r.stdout
    assert len(lines[0]) <= npd["pluginConfig"]["max_output_length"], lines[0]
    print(f"\nNPD plugin in the image: exit {r.returncode} in {took:.1f} s: {lines[0]}")


# --- the exporter in the container against the exporter on the host --------------------------------------

@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_check_in_the_container_proves_the_hosts_zombie_creator(pod, tmp_path):
    """The incident's question asked from the pod, as the NPD plugin asks it: a process on the host
    keeps making memcgs that stay dying (a page of cache each); `check` in the container, with the
    manifest's settings and --root /host, reads the host live (root kind "host"), counts them, traces
    the churn with perf and proves that process as their creator, and measures what one memcg costs
    by making and removing memcgs under /host/sys/fs/cgroup."""
    import threading

    from conftest import memcg, zombie_finding
    from nodesleuth.lab import zombies as zl
    from nodesleuth.node.cgroupfs import make_zombies

    parent = os.path.join(memcg().mount, f"nodesleuth-image-churn-{os.getpid()}")
    data = str(tmp_path / "pins")
    made, stop = [0], threading.Event()

    def churn():
        while not stop.is_set():
            made[0] += make_zombies(40, parent, data, prefix="ecs-agent-")
            time.sleep(0.05)

    th = threading.Thread(target=churn)
    th.start()
    try:
        time.sleep(1.0)
        r = pod.run("exporter", entrypoint=["/usr/local/bin/nodesleuth"],
                    args=["check", "--json", "--seconds", "6", "--zombie-warn", "100", "--root", "/host",
                          "--systemd-pid", "1", "--probe", "--state-dir", "/tmp"], timeout=300)
    finally:
        stop.set()
        th.join()
        zl.clear(parent, data)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    doc = json.loads(r.stdout)
    assert doc["root"]["kind"] == "host", doc["root"]
    f = zombie_finding(doc)
    assert f is not None, doc["findings"]
    assert f["data"]["growth"] >= 40, f["data"]
    assert doc["churn"] is not None, doc["notes"]
    top = doc["churn"]["creators"][0]
    assert top["pattern"].endswith("/ecs-agent-*-*"), doc["churn"]["creators"]
    assert any(e.startswith("proven creator: ") for e in f["evidence"]), f["evidence"]
    cost = f["data"]["memcg_cost"]
    assert cost is not None and cost["possible_cpus"] >= os.cpu_count(), f["data"]
    assert 1000 <= cost["percpu_bytes_per_memcg"] / cost["possible_cpus"] <= 4000, cost


@pytest.fixture(scope="module")
def both_exporters(image):
    """Scrapes of the container's exporter (as the manifest says) and a host `nodesleuth exporter`,
    taken together: [(container text, host text)] x 8, one second apart. The manifest points both at
    PID 1's systemd; this VM's PID 1 is not systemd, so a real systemd in a PID namespace, with a
    crash-looping unit, stands for it (`--systemd-pid` its PID on both sides: the pod shares the
    host's PID namespace)."""
    from conftest import start_crasher
    from nodesleuth.lab.systemd import SystemdNamespace

    with C.Pod() as pod, SystemdNamespace() as ns:
        start_crasher(ns)
        ds = pod.ds
        args, port = _exporter_args(ds)
        args = args or C.container_spec(ds, "exporter")["args"]
        args = [str(ns.pid) if a == "1" and args[i - 1] == "--systemd-pid" else a for i, a in enumerate(args)]
        hport = _free_port()
        host = None
        try:
            # the container first (its own cgroups are made as it starts), then the host's exporter; the
            # cgroup trees before and after the host's first census tell whether their walks agree
            name = pod.start("exporter", args=args)
            watch = _CgroupWatch()  # before the container's first census (python takes > 1 s to start)
            until = time.monotonic() + 90
            _wait_metrics(port, until, alive=lambda: pod.running(name), samples=1)
            host = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", f"127.0.0.1:{hport}",
                                     "--systemd-pid", str(ns.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _wait_metrics(hport, until, alive=lambda: host.poll() is None, samples=5)
            _wait_metrics(port, until, alive=lambda: pod.running(name), samples=5)
            quiet = watch.stop()
            pairs = []
            # 8 scrapes over 32 s: each exporter reads all but /proc/stat at a full tick every FULL_EVERY (15 s)
            # on its own phase, so each serves at least two full ticks' values in the window
            for _ in range(8):
                pairs.append((_scrape(port), _scrape(hport)))
                time.sleep(4)
        finally:
            if host is not None:
                host.terminate()
                try:
                    host.wait(15)
                except subprocess.TimeoutExpired:
                    host.kill()
                    host.wait()
    return {"pairs": [(_families(a), _families(b)) for a, b in pairs], "quiet": quiet, "spread": watch.spread}


class _CgroupWatch:
    """Counts the v1 cgroup directories over and over from now until stop(): stop() is True when the
    count never moved, i.e. the exporters' live-cgroup walks in that time saw the same tree. (Other jobs
    on this machine make and remove hundreds of cgroups within a second.)"""

    def __init__(self):
        import threading

        self.first = self._count()
        self.moved = False
        self.spread = 0  # the most the v1 directory count of any hierarchy moved from the first
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _count() -> tuple:
        dirs = []
        for h in sorted(os.listdir("/sys/fs/cgroup")):
            p = os.path.join("/sys/fs/cgroup", h)
            if os.path.isdir(p) and not os.path.islink(p):
                dirs.append((h, sum(len(d) for _, d, _ in os.walk(p))))
        return tuple(dirs)

    def _run(self):
        first = dict(self.first)
        while not self.done.wait(0.01):
            now = self._count()
            if now != self.first:
                self.moved = True
                self.spread = max([self.spread] + [abs(n - first.get(h, n)) for h, n in now])

    def stop(self) -> bool:
        self.done.set()
        self.thread.join()
        return not self.moved and self._count() == self.first


# hot_core_seconds has a sample per CPU once hot: which CPUs were is a matter of timing
TIMING = {"nodesleuth_hot_core_seconds", "nodesleuth_hot_core_seconds_total"}


def _labelsets(fams: dict) -> dict[str, set]:
    return {n: {tuple(sorted(lb.items())) for lb, _ in s} for n, s in fams.items() if n not in TIMING}


def _values(pairs, name: str, key) -> list[tuple[dict, dict]]:
    out = []
    for a, b in pairs:
        out.append(({key(lb): v for lb, v in a.get(name, [])}, {key(lb): v for lb, v in b.get(name, [])}))
    return out


def _compare_names_labels(pairs):
    a, b = pairs[-1]
    assert set(a) - TIMING == set(b) - TIMING, f"only in the container: {sorted(set(a) - set(b))}; only on the host: {sorted(set(b) - set(a))}"
    la, lb = _labelsets(a), _labelsets(b)
    diff = {n: (sorted(la[n] - lb[n])[:5], sorted(lb[n] - la[n])[:5]) for n in la if la[n] != lb.get(n)}
    assert not diff, f"label sets differ (container-only, host-only): {diff}"


def _compare_cpus(pairs):
    busy = _values(pairs, "nodesleuth_cpu_busy_ratio", lambda lb: lb["cpu"])
    assert set(busy[0][0]) == set(busy[0][1]) and busy[0][0], busy[0]
    for cpu in busy[0][0]:
        a = sum(x[0][cpu] for x in busy) / len(busy)
        b = sum(x[1][cpu] for x in busy) / len(busy)
        assert abs(a - b) <= 0.3, f"CPU {cpu}: busy {a:.2f} in the container, {b:.2f} on the host"
    node = _values(pairs, "nodesleuth_node_busy_ratio", lambda lb: "")
    a = sum(x[0][""] for x in node) / len(node)
    b = sum(x[1][""] for x in node) / len(node)
    assert abs(a - b) <= 0.3, (a, b)


def _compare_dying(both):
    """Both read the same kernel counters, but each on its own 1 s phase, and the live cgroups (dying =
    tracked - live) from a directory walk at its first sample, redone every 60 s. Other jobs on a shared
    machine make and remove cgroups all the while: the tree was watched while the two exporters started
    (its largest change is `spread`), and the counts must agree within that churn (exactly, give or take
    5, on a quiet machine such as CI)."""
    pairs = both["pairs"]
    tol = 5 + both["spread"]
    for fam in ("nodesleuth_cgroups_tracked", "nodesleuth_cgroups_dying"):
        vals = _values(pairs, fam, lambda lb: (lb["controller"], lb["hierarchy"]))
        # the hierarchies: the same on both sides at some scrape (other jobs mount and unmount some)
        assert any(set(a) == set(b) and a for a, b in vals), [(sorted(set(a) ^ set(b))) for a, b in vals]
        for k in set.intersection(*(set(a) & set(b) for a, b in vals)):
            seen = [(a[k], b[k]) for a, b in vals]
            best = min(abs(x - y) for x, y in seen)  # the scrape pair closest in phase
            assert best <= max(tol, 0.05 * max(y for _, y in seen)), (
                f"{fam} {k}: container vs host per scrape {seen}; the tree moved by up to {both['spread']}")


def _compare_units(pairs):
    """The crasher restarts every 200 ms and each exporter asks systemd at its full tick (every 15 s,
    fleet/exporter.FULL_EVERY) on its own phase: the counts the two served over the 8 scrapes (32 s) must
    overlap (the same systemd's NRestarts, seen at different moments) and both must have grown."""
    a, b = pairs[-1]
    assert b.get("nodesleuth_unit_restarts_total"), "the host exporter read no units from the namespace's systemd"
    ra = {lb["unit"]: v for lb, v in a.get("nodesleuth_unit_restarts_total", [])}
    rb = {lb["unit"]: v for lb, v in b["nodesleuth_unit_restarts_total"]}
    assert set(ra) == set(rb), (sorted(set(ra) ^ set(rb)))
    seen = {u: ([dict((lb["unit"], v) for lb, v in x.get("nodesleuth_unit_restarts_total", [])).get(u) for x, _ in pairs],
                [dict((lb["unit"], v) for lb, v in y.get("nodesleuth_unit_restarts_total", [])).get(u) for _, y in pairs])
            for u in rb}
    for u, (cv, hv) in seen.items():
        cv, hv = [x for x in cv if x is not None], [x for x in hv if x is not None]
        assert cv and hv and min(cv) <= max(hv) + 2 and min(hv) <= max(cv) + 2, f"{u}: container {cv}, host {hv}"
    # grown: the first scrapes may come before an exporter's first units read (None then)
    c, h = ([x for x in side if x is not None] for side in seen["ecs.service"])
    assert (c and c[-1] > c[0]) or (h and h[-1] > h[0]), seen["ecs.service"]


def _compare_nics(pairs):
    a, b = pairs[-1]
    rb = {(lb["device"], lb["counter"]): v for lb, v in b.get("nodesleuth_nic_driver_resets_total", [])}
    assert rb, "the host exporter read no reset/timeout counter of any NIC (ethtool -S: every driver has some)"
    ra = {(lb["device"], lb["counter"]): v for lb, v in a.get("nodesleuth_nic_driver_resets_total", [])}
    assert set(ra) == set(rb), (ra, rb)
    for k in rb:
        assert abs(ra[k] - rb[k]) <= max(1, 0.01 * rb[k]), (k, ra[k], rb[k])


COMPARE = {"names_labels": _compare_names_labels, "cpus": _compare_cpus, "dying_memcgs": _compare_dying,
           "unit_restarts": _compare_units, "nic_driver_counters": _compare_nics}


@pytest.mark.slow
@pytest.mark.image
@pytest.mark.parametrize("part", [
    "names_labels",
    "cpus",
    "dying_memcgs",
    "unit_restarts",
    "nic_driver_counters",
])
def test_container_exporter_matches_host_exporter(both_exporters, part):
    COMPARE[part](both_exporters if part == "dying_memcgs" else both_exporters["pairs"])
