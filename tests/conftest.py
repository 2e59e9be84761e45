"""Shared helpers: run the real CLI, make real load, write real kernel-log lines."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

ART = os.path.join(os.path.dirname(__file__), "artifacts")
# fixtures/ (fixture trees, a web store, perf captures) sits beside tests/ and benchmarks/, not in the wheel
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def nodesleuth(*args: str, timeout: float = 120, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodesleuth", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec_fn)


def free_port() -> int:
    """A TCP port nothing listens on now (tests never assume a fixed one is free)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_json(*args: str, timeout: float = 120) -> tuple[int, dict]:
    p = nodesleuth("check", "--json", *args, timeout=timeout)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


BUSY = r"""
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: never outlive the test-suite
ctypes.CDLL(None).prctl(15, sys.argv[2].encode(), 0, 0, 0)  # PR_SET_NAME
os.sched_setaffinity(0, {int(sys.argv[1])})
# it owns its CPU beside another job's loop there: with autogroups nice works only inside a session, and a
# nice-19 loop of another session took half the CPU (the decoy's 46%); a session of its own at autogroup
# nice -20, and nice -20 where autogroups are off (root only: else as is; negative nice counts as user time)
os.setsid()
try:
    with open("/proc/self/autogroup", "w") as f:
        f.write("-20")
except OSError:
    pass
try:
    os.setpriority(os.PRIO_PROCESS, 0, -20)
except OSError:
    pass
def nodesleuth_busy_loop():
    x = 0
    while True:
        x += 1
nodesleuth_busy_loop()
"""


def cpu_ticks(stat: str) -> int:
    """utime + stime (clock ticks, as /proc/stat counts) of a /proc/PID/stat or /proc/PID/task/TID/stat
    file: a test's own measure of what a process or thread ran, beside the product's."""
    with open(stat) as f:
        fields = f.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def owning_cpu(cpu: int | None):
    """A preexec_fn: the child pinned to `cpu` (None: unpinned), owning it as BUSY's loop does (its own
    session at autogroup nice -20, nice -20; root only: else as is). A recorder beside loops that own
    every CPU needs it too: at the default autogroup weight it got 1 tick in 2.3 s (CI)."""

    def pre() -> None:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        os.setsid()
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write("-20")
            os.setpriority(os.PRIO_PROCESS, 0, -20)
        except OSError:
            pass
    return pre


@pytest.fixture
def busy_loop():
    """A busy loop pinned to a CPU with a distinctive comm; killed when the test ends."""
    procs = []

    def start(cpu: int = 1, comm: str = "ns-busyloop") -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", BUSY, str(cpu), comm])
        procs.append(p)
        time.sleep(0.5)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def wait_ticks(store: str, p: subprocess.Popen, n: int = 1, timeout: float = 60.0) -> int:
    """Until the recorder `p` has stored `n` ticks in `store` (it exited, or `timeout`): a loaded host
    takes seconds to start it, and what a test does before its first tick is not recorded. Returns
    how many ticks were stored."""
    from nodesleuth.model.errors import InputError
    from nodesleuth.store.store import StoreReader

    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline and p.poll() is None:
        try:
            got = len(list(StoreReader(store).read("ticks")))
        except InputError:
            pass  # the directory is there, its description and streams not yet
        if got >= n:
            break
        time.sleep(0.2)
    return got


@contextlib.contextmanager
def recording(store: str, duration: str, *extra: str):
    """`nodesleuth record` for a bounded time, entered once its first tick is stored; killed at once if
    the test fails before it ends."""
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--duration", duration,
                          "--quiet", *extra], stderr=subprocess.PIPE)
    try:
        wait_ticks(store, p)
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def kmsg_write(line: str, level: int = 4) -> None:
    with open("/dev/kmsg", "w") as f:
        f.write(f"<{level}>{line}\n")


def finding(doc: dict, kind: str, **match) -> dict | None:
    for f in doc["findings"]:
        if f["kind"] == kind and all(f["data"].get(k) == v for k, v in match.items()):
            return f
    return None


def memcg():
    """The memory controller of this host, on whichever cgroup version it runs (node/cgroupfs.py):
    tests follow the hierarchy they find, never a hard-coded v1 path."""
    from nodesleuth.node.cgroupfs import Memcg

    return Memcg()


def zombie_finding(doc: dict) -> dict | None:
    """The zombie_cgroups finding of the memory controller on this host's hierarchy (v2 kernels before
    6.12 report every dying cgroup, controller "all")."""
    mc = memcg()
    if mc.version == 1:
        return finding(doc, "zombie_cgroups", controller="memory", version="v1")
    return finding(doc, "zombie_cgroups", controller="memory", version="v2") or finding(
        doc, "zombie_cgroups", controller="all", version="v2")


def kernel_dying_memcgs() -> tuple[int, int]:
    """(tracked, live) memory cgroups as the kernel counts them, read independently of nodesleuth's
    census: v1 /proc/cgroups num_cgroups and `find MOUNT -type d | wc -l`; v2 the root cgroup.stat."""
    mc = memcg()
    if mc.version == 1:
        tracked = mc.count()
        live = int(subprocess.run(f"find {mc.mount} -type d | wc -l", shell=True, capture_output=True,
                                  text=True).stdout)
        return tracked, live
    st = dict(line.split() for line in open(os.path.join(mc.mount, "cgroup.stat")) if line.strip())
    if "nr_subsys_memory" in st:
        live = int(st["nr_subsys_memory"])
        return live + int(st.get("nr_dying_subsys_memory", 0)), live
    live = int(st["nr_descendants"]) + 1
    return live + int(st["nr_dying_descendants"]), live


CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    """A component the test needs is not here (qemu, chromium, perf, Prometheus, podman...): a skip on
    a developer's machine, a failure under CI=true, where scripts/setup-tests.sh installs them all, so
    a green CI can never hide a feature that was not exercised."""
    if CI:
        pytest.fail(f"missing under CI: {what}", pytrace=False)
    pytest.skip(what)


class Busy(Exception):
    """Another job on the machine kept a test's stated condition from holding (e.g. the other CPUs
    quiet, as the hot-core rule needs): the attempt proves nothing either way."""


def retry_when_busy(attempts: int = 3, pause: float = 5.0):
    """Run the test again when an attempt raises Busy, up to `attempts` times; then fail with every
    attempt's reason. A busy machine never makes a test pass silently, nor skip."""
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def run(*a, **kw):
            reasons = []
            for _ in range(attempts):
                try:
                    return fn(*a, **kw)
                except Busy as e:
                    reasons.append(str(e))
                    time.sleep(pause)
            pytest.fail(f"the machine stayed too busy for this test's condition in {attempts} attempts: "
                        + "; ".join(reasons), pytrace=False)
        return run
    return deco


@pytest.fixture
def _root():
    """Root, or the test is not run: a skip on a developer's machine, a failure under CI=true (missing())."""
    if os.geteuid() != 0:
        missing("needs root for cgroups, /dev/kmsg and perf")


needs_root = pytest.mark.usefixtures("_root")


def crasher_unit(exit_code: int = 1) -> str:
    """An ECS-agent-like unit that cannot reach its cluster: fails at once, restarts every 200 ms."""
    return f"""[Unit]
Description=ECS-agent-like unit that cannot reach its cluster
StartLimitIntervalSec=0
[Service]
ExecStart=/bin/sh -c 'echo "Unable to register as a container instance with ECS"; exit {exit_code}'
Restart=on-failure
RestartSec=200ms
[Install]
WantedBy=multi-user.target
"""


def start_crasher(ns, exit_code: int = 1) -> None:
    """Install, enable and start the crasher in a SystemdNamespace; let it restart a few times."""
    ns.install_unit("ecs.service", crasher_unit(exit_code))
    ns.systemctl("enable", "ecs.service", check=False)
    ns.systemctl("start", "ecs.service", check=False)
    time.sleep(1.5)


# --- the suite must not leak: processes it started, cgroups it made ------------------------------

LEAK_COMMS = ("perf", "unshare", "dataloader", "napi-poll", "ecs-agent", "ns-busyloop", "ns-recloop", "ns-spin",
              "decoy-loop", "ep-loop", "pin-0", "pin-1", "roamer", "rt-hog", "containerd", "containerd-shim")


def _leak_snapshot() -> tuple[set, set]:
    procs = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{d}/cmdline") as f:
                cmd = f.read().replace("\0", " ")
        except OSError:
            continue
        if comm in LEAK_COMMS or "nodesleuth.node.children" in cmd or "-m nodesleuth" in cmd:
            procs.add((int(d), comm))
    cgs = set()
    base = "/sys/fs/cgroup"
    # v1: the cgroups one level under each hierarchy's mount; pure v2: the cgroups under the root
    tops = [base] if os.path.exists(os.path.join(base, "cgroup.controllers")) else [
        os.path.join(base, h) for h in os.listdir(base)
        if os.path.isdir(os.path.join(base, h)) and not os.path.islink(os.path.join(base, h))]
    for p in tops:
        cgs |= {os.path.join(p, x) for x in os.listdir(p) if os.path.isdir(os.path.join(p, x))}
    # the files that pin a zombie probe's memcgs (node/cgroupfs.pin_dir): left, they keep them dying
    from nodesleuth.collect.posture import _kinds

    for base in _kinds().values():
        cgs |= {os.path.join(base, x) for x in os.listdir(base) if x.startswith("nodesleuth-posture-")}
    return procs, cgs


_LEAK_BEFORE: tuple[set, set] | None = None


_FDS_BEFORE = 0
FD_LEAK_MAX = 256  # the suite's own process: samplers keep /proc and /sys files open until closed


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def pytest_sessionstart(session):
    global _LEAK_BEFORE, _FDS_BEFORE
    _LEAK_BEFORE = _leak_snapshot()
    _FDS_BEFORE = _fds()


def pytest_sessionfinish(session, exitstatus):
    if _LEAK_BEFORE is None:
        return
    deadline = time.time() + 5
    while True:
        procs, cgs = _leak_snapshot()
        new_procs = {p for p in procs - _LEAK_BEFORE[0] if p[0] != os.getpid()}
        new_cgs = {c for c in cgs - _LEAK_BEFORE[1] if "nodesleuth" in c or c.endswith(("system.slice", "init.scope"))}
        if (not new_procs and not new_cgs) or time.time() > deadline:
            break
        time.sleep(0.2)
    if new_procs or new_cgs:
        print(f"\nLEAK: the test-suite left processes {sorted(new_procs)} and cgroups (or zombie-pinning "
              f"files) {sorted(new_cgs)}")
        session.exitstatus = 1
    # a sampler left open keeps ~150 files of its tree: five of them took this process past the 1,024 that
    # select() can watch and the profiler's thread died (CI of stop 44)
    if _fds() - _FDS_BEFORE > FD_LEAK_MAX:
        print(f"\nLEAK: the test-suite's process holds {_fds() - _FDS_BEFORE} more open files than at its start")
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    """Which kernel every VM test booted (tests/vm/vmrun.py records each boot): a VM test's verdict is
    about that kernel, so the run says which one it was."""
    vmrun = sys.modules.get("vmrun")
    if vmrun is None or not getattr(vmrun, "BOOTED", None):
        return
    terminalreporter.section("kernels booted by VM tests")
    for b in vmrun.BOOTED:
        terminalreporter.write_line(f"{b['test']}: {b['kernel']} (cgroup {b['hierarchy']}, {b['cpus']} vCPUs, "
                                    f"rc {b['rc']}, {b['wall_s']} s)")
