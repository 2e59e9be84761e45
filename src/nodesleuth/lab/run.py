"""`nodesleuth lab run` / `lab clean`: the whole incident, for real, on this machine.

run: a real systemd (PID 1 of a new PID namespace) crash-loops an ECS-agent-like unit that makes
a fresh memory cgroup per container try and leaves it dying; a kubelet-like poller reads
memory.stat/numa_stat of the tree on CPU N; a CPU hog on the same core saturates it in bursts; when
CPU N has been saturated for >= 3 s, real ENA-format reset lines go to /dev/kmsg. The recorder
(with perf profile and cgroup churn trace) records all of it. Zombie costs are measured as the
count grows. clean: kills what run started (by pid, from the state file), removes its cgroups and
files, drops caches, and checks the zombie count is back to the baseline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from ..collect.cpu import read_stat, utilisation
from ..collect.root import Root
from . import workloads
from .systemd import SystemdNamespace, _top_cgroups, remove_cgroup_tree
from .zombies import V1_MEMORY, drop_caches, memory_num_cgroups

DEFAULT_DIR = "/var/lib/nodesleuth-lab"
LAB_CG = "nodesleuth-lab"


@dataclass
class LabState:
    workdir: str
    cpu: int
    baseline_tracked: int
    started: float
    pids: dict = field(default_factory=dict)  # role -> pid
    new_cgroups: list = field(default_factory=list)  # top-level cgroups the namespace's systemd made
    store: str = ""
    ended: float | None = None
    curve: list = field(default_factory=list)
    resets: list = field(default_factory=list)  # times ENA lines were written

    def save(self) -> None:
        with open(os.path.join(self.workdir, "state.json"), "w") as f:
            json.dump(asdict(self), f, indent=2)

    @staticmethod
    def load(workdir: str) -> "LabState | None":
        try:
            with open(os.path.join(workdir, "state.json")) as f:
                return LabState(**json.load(f))
        except FileNotFoundError:
            return None


def live_memcgs() -> int:
    return sum(len(dn) for _, dn, _ in os.walk(V1_MEMORY)) + 1


def _median_read(path: str, n: int = 5) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        with open(path) as f:
            f.read()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def measure_costs() -> dict:
    """What zombies cost on this kernel right now."""
    from ..collect.meminfo import read_meminfo

    mi = read_meminfo(Root("/"))
    tracked = memory_num_cgroups()
    return {"time": time.time(), "tracked": tracked, "live": live_memcgs(),
            "zombies": tracked - live_memcgs(),
            "memory_stat_ms": round(1000 * _median_read(os.path.join(V1_MEMORY, "memory.stat")), 3),
            "numa_stat_ms": round(1000 * _median_read(os.path.join(V1_MEMORY, "memory.numa_stat")), 3),
            "percpu_bytes": mi.get("Percpu", 0), "slab_bytes": mi.get("Slab", 0)}


def _spawn(code: str, args: list[str], workdir: str, name: str) -> subprocess.Popen:
    path = os.path.join(workdir, f"{name}.py")
    with open(path, "w") as f:
        f.write(code)
    return subprocess.Popen([sys.executable, path, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def write_ena_reset(napi_usec: int) -> None:
    with open("/dev/kmsg", "w") as f:
        for level, line in workloads.ENA_LINES:
            f.write(f"<{level}>{line.format(napi_usec=napi_usec)}\n")
            f.flush()


def run(seconds: float = 60.0, workdir: str = DEFAULT_DIR, cpu: int = 1, per_start: int = 50,
        restart_sec: str = "1s", hog_burst: float = 6.0, hog_gap: float = 8.0, hog_delay: float = 6.0,
        poll_interval: float = 0.02, profile: bool = True, log=print) -> LabState:
    real = os.path.realpath(workdir)
    if real == "/tmp" or real.startswith(("/tmp/", "/var/tmp/")):
        raise RuntimeError(f"{workdir}: the namespace's systemd has a private /tmp; use a path on disk")
    if LabState.load(workdir) is not None:
        raise RuntimeError(f"{workdir}/state.json exists: run `nodesleuth lab clean --workdir {workdir}` first")
    os.makedirs(workdir, exist_ok=True)
    data = os.path.join(workdir, "data")
    st = LabState(workdir, cpu, memory_num_cgroups(), time.time(), store=os.path.join(workdir, "store"))
    st.save()
    ns = SystemdNamespace()
    procs: dict[str, subprocess.Popen] = {}
    try:
        ns.start()
        st.pids["systemd"] = ns.pid
        st.pids["unshare"] = ns.proc.pid
        agent = os.path.join(workdir, "ecs-agent.py")
        with open(agent, "w") as f:
            f.write(workloads.ECS_AGENT)
        ns.install_unit("ecs.service", workloads.ECS_UNIT.format(python=sys.executable, agent=agent, parent=LAB_CG,
                                                                 data=data, per_start=per_start,
                                                                 restart_sec=restart_sec))
        ns.systemctl("enable", "ecs.service", check=False)
        rec_cmd = [sys.executable, "-m", "nodesleuth", "record", "--store", st.store, "--quiet", "--systemd-pid",
                   str(ns.pid), "--trace-churn", "--profile-rotate", "5", "--live-every", "5"]
        if profile:
            rec_cmd.append("--profile")
        procs["recorder"] = subprocess.Popen(rec_cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True)
        st.pids["recorder"] = procs["recorder"].pid
        time.sleep(3)  # let the recorder and its perf start before the unit does
        ns.systemctl("start", "ecs.service", check=False)
        procs["kubelet"] = _spawn(workloads.KUBELET, [str(cpu), str(poll_interval)], workdir, "kubelet")
        procs["hog"] = _spawn(workloads.HOG, [str(cpu), str(hog_burst), str(hog_gap), str(hog_delay)], workdir, "hog")
        st.pids.update({k: p.pid for k, p in procs.items()})
        st.new_cgroups = sorted(_top_cgroups() - ns._before)
        st.save()
        log(f"lab: systemd pid {ns.pid}, ecs.service crash-looping, kubelet+hog on CPU {cpu}, "
            f"recording to {st.store}")
        root = Root("/")
        prev = read_stat(root)
        run_len = 0
        fired = False
        end = time.time() + seconds
        next_cost = time.time()
        while time.time() < end:
            time.sleep(1.0)
            cur = read_stat(root)
            u = utilisation(prev, cur).get(cpu)
            prev = cur
            busy = u.busy if u else 0.0
            run_len = run_len + 1 if busy >= 90 else 0
            if run_len >= 3 and not fired:
                write_ena_reset(int(5e6 + run_len * 532e3))  # past the 5 s watchdog, as in the incident
                st.resets.append(time.time())
                fired = True
                log(f"lab: CPU {cpu} saturated for {run_len} s -> ENA reset lines written to /dev/kmsg")
            elif run_len == 0:
                fired = False
            if time.time() >= next_cost:
                c = measure_costs()
                st.curve.append(c)
                next_cost = time.time() + 5
                log(f"lab: {c['zombies']} zombies, memory.stat {c['memory_stat_ms']} ms, numa_stat "
                    f"{c['numa_stat_ms']} ms, Percpu {c['percpu_bytes'] >> 10} KiB, Slab {c['slab_bytes'] >> 20} MiB")
            st.save()
    finally:
        for role in ("hog", "kubelet"):
            if role in procs:
                procs[role].kill()
                procs[role].wait()
        try:
            ns.systemctl("stop", "ecs.service", check=False)
        except Exception:
            pass
        if "recorder" in procs:
            procs["recorder"].send_signal(signal.SIGTERM)
            try:
                procs["recorder"].wait(timeout=120)
            except subprocess.TimeoutExpired:
                procs["recorder"].kill()
        ns.stop()
        st.ended = time.time()
        st.save()
    return st


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def clean(workdir: str = DEFAULT_DIR, log=print, keep_store: bool = False) -> dict:
    st = LabState.load(workdir)
    baseline = st.baseline_tracked if st else None
    killed = []
    if st:
        for role, pid in st.pids.items():
            if pid and _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(role)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(p) for p in st.pids.values() if p):
            time.sleep(0.1)
        for cg in st.new_cgroups:
            remove_cgroup_tree(cg)
    before = memory_num_cgroups()
    shutil.rmtree(os.path.join(workdir, "data"), ignore_errors=True)
    t = time.perf_counter()
    drop_caches()
    reclaim_s = time.perf_counter() - t
    remove_cgroup_tree(os.path.join(V1_MEMORY, LAB_CG))
    for _ in range(50):  # freeing is asynchronous (css release work)
        after = memory_num_cgroups()
        if baseline is None or after <= baseline + 20:
            break
        time.sleep(0.1)
    after = memory_num_cgroups()
    ok = baseline is None or after <= baseline + 20
    res = {"killed": killed, "tracked_before": before, "tracked_after": after, "baseline": baseline,
           "reclaim_seconds": round(reclaim_s, 3), "returned_to_baseline": ok}
    if not keep_store:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        os.unlink(os.path.join(workdir, "state.json"))
    log(f"lab clean: killed {killed or 'nothing'}; memory cgroups {before} -> {after} "
        f"(baseline {baseline}); reclaim took {reclaim_s:.2f} s; "
        + ("back to baseline" if ok else "NOT back to baseline"))
    return res
