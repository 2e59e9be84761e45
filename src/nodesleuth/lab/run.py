"""`nodesleuth lab run` / `lab clean`: the incident made by the kernel, on this machine.

No stand-in hog. What costs a core here is measured first (`cost_curve`): on 6.x kernels memory.stat
reads no longer walk every memcg, but memcg *reclaim* still does (shrink_node -> mem_cgroup_iter
visits every child, dying ones included). So the lab builds the incident on that path:

1. a real systemd (PID 1 of a new PID namespace) crash-loops an ECS-agent-like `ecs.service` that
   leaves `per_start` dying memcgs per start under nodesleuth-lab/docker (cgroup v1 or v2 memory),
   each pinned by a page of state on a tmpfs (as agent logs in /run are; no swap = not reclaimable);
2. a training job's data loader in nodesleuth-lab/kubepods/job, pinned to CPU N, reads data at a
   steady rate; the parent's memory limit makes every page it caches go through direct reclaim,
   which walks all the zombies: CPU N fills with kernel time in memcg reclaim. Its data is a sparse
   file in the workdir, which must be on a disk filesystem: tmpfs reads holes as the zero page and
   charges nothing, so nothing would be reclaimed (checked: the job must be charged the pages).
   On 6.x direct reclaim walks memcgs partially (it stops once it has reclaimed enough) but resumes
   where the last walk stopped, so with only the job's pages reclaimable each walk still crosses
   every dying sibling; measured on 6.12 with cgroup v2 and MGLRU on as booted (tests/vm/README.md);
3. a poller pinned to CPU N (`napi-poll`, the work a NIC driver needs) is measured: its run delay
   from /proc/PID/schedstat. Only if it waited past the lab's threshold (half of ENA's 5 s window)
   is an ENA reset line written to /dev/kmsg, labelled SIMULATED in the lab's output and state,
   preceded in the log by a line saying so. On a preemptible kernel it usually is not: the lab says
   that, and the incident is the hot core itself;
4. `nodesleuth record --profile --trace-churn` records all of it.

The lab fails with one line when its unit cannot run (any exit status but the one the agent
chooses, 1), when zombies do not accumulate, or when the kernel's cost does not grow with them.
`lab clean` kills what run started (by pid, from its state file), removes its cgroups and files,
drops caches and waits for the memory cgroup count to return to the measured baseline, or says by
how much it did not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

from ..collect.cpu import read_stat
from ..model.errors import InputError
from ..model.mpstat import utilisation
from ..model.systemd import parse_properties
from ..node.cgroupfs import Memcg, drop_caches, remove_cgroup_tree
from ..node.children import run as run_child, spawn
from ..node.root import Root, fstype
from .actors import ecs_agent
from .netvictim import NetLab, NetLabError, describe as net_describe, verdict as net_verdict
from .systemd import SystemdNamespace

DEFAULT_DIR = "/var/lib/nodesleuth-lab"
LAB_CG = "nodesleuth-lab"
AGENT_STATUS = 1  # the status ecs_agent exits with; anything else means the unit did not run it
ENA_WINDOW = 5.0  # s: ENA resets a Tx queue whose NAPI has not run for 5 s (TX_TIMEOUT = 5 * HZ)
VICTIM_SHARE = 0.5  # the lab's rule: the poller waited more than half of that window
NET_STREAMS, NET_MBIT = 4, 50.0  # the network victims: TCP streams between two netns, paced per stream
NET_BASELINE = 10.0  # s the streams run before the hot core starts (the "before" they are compared with)
CURVE = (0, 1000, 10000, 30000)
CURVE_RATE = 100.0  # MB/s the data loader reads at while the cost curve is measured (the cost is per MB read)
HEADROOM = 1.3  # the auto rate asks this many cores' worth of reclaim at the zombies made: the core saturates
#                 even where the curve's cheapest window was cheaper than the run turns out to be
MAX_RATE = 4000.0  # MB/s: past this the loader's own copying, not the walk, would be what fills the core
BARE_SHARE = 0.5  # at the chosen rate, the loader with no zombies must cost less than this share of the core
SATURATED_BUSY, SATURATED_SHARE = 95.0, 0.8  # the lab's promise: CPU N >= 95% busy for >= 80% of the run
MIN_GROWTH = 5.0  # the cost at the last curve point must be this many times the cost at the first
WINDOWS = 3  # the cost at each point is the cheapest of this many windows
TOLERANCE = 10  # memcgs other jobs may have made meanwhile; more than this and clean exits 1
ENA_LINES = [  # amzn-drivers ena_netdev.c 2.11 formats (see tests/data/kernel-log corpus)
    (4, "ena 0000:00:05.0 ens5: TX q 3 is paused for too long (threshold 5000000). Time since last napi "
        "{napi_usec} usec. napi scheduled: 1"),
    (4, "ena 0000:00:05.0 ens5: napi handler hasn't been called for a long time but is scheduled"),
    (6, "ena 0000:00:05.0: Trigger reset is on"),
    (6, "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]


class LabError(RuntimeError):
    """The lab could not make the incident: one line saying why."""


@dataclass
class LabState:
    workdir: str
    cpu: int
    baseline_tracked: int
    started: float
    pids: dict = field(default_factory=dict)  # role -> pid
    new_cgroups: list = field(default_factory=list)
    store: str = ""
    ended: float | None = None
    curve: list = field(default_factory=list)
    resets: list = field(default_factory=list)  # times SIMULATED ENA lines were written
    victim: list = field(default_factory=list)  # per second: victim wait ms, CPU busy %, sys %
    zombies: int = 0
    rate: float = 0.0  # MB/s the data loader read at
    rate_from: str = ""  # how that rate was chosen
    saturated: dict = field(default_factory=dict)  # seconds >= SATURATED_BUSY, of how many, the loader's share
    simulated: str = "ENA lines, when written, are SIMULATED by the lab (there is no ENA device)"
    tmpfs: str = ""
    net: dict = field(default_factory=dict)  # what the hot core did to the network victims (lab/netvictim.py)
    netns: list = field(default_factory=list)  # their network namespaces, for clean

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


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)



def _python() -> str:
    """An interpreter the namespace's systemd can exec: not under /tmp (it has a private /tmp)."""
    for cand in (sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3") or "",
                 "/usr/bin/python3"):
        real = os.path.realpath(cand) if cand else ""
        if real and os.access(real, os.X_OK) and not real.startswith(("/tmp/", "/var/tmp/")):
            return real
    raise LabError("no python3 outside /tmp for the namespace's systemd to run")


def preflight(workdir: str) -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (cgroups, a PID namespace, perf, /dev/kmsg)")
    try:
        Memcg()
    except (RuntimeError, InputError) as e:
        raise LabError(f"{e}: the lab needs the memory controller (cgroup v1 or v2)") from None
    real = os.path.realpath(workdir)
    if real == "/tmp" or real.startswith(("/tmp/", "/var/tmp/")):
        raise LabError(f"--workdir {workdir}: the namespace's systemd has a private /tmp; use a path on disk")
    fs = fstype(real)
    if fs in ("tmpfs", "ramfs"):
        raise LabError(f"--workdir {workdir} is on {fs}: reads of the data loader's sparse file there are holes (the "
                       "zero page), charged to no cgroup, so nothing would be reclaimed; use a disk filesystem "
                       "(ext4, xfs)")
    with open("/proc/meminfo") as f:
        swap = next((int(ln.split()[1]) for ln in f if ln.startswith("SwapTotal:")), 0)
    if swap:
        raise LabError("swap is on: tmpfs-pinned zombies would be swapped out and freed; the lab needs swap off")


def _mount_tmpfs(path: str) -> None:
    os.makedirs(path, exist_ok=True)
    if not os.path.ismount(path):
        run_child(["mount", "-t", "tmpfs", "-o", "size=2g,mode=0700", "nodesleuth-lab", path], timeout=60, check=True)


def _make_zombies(parent: str, state: str, n: int, per: int = 1000) -> None:
    """n zombies under `parent` by running the agent itself (no systemd): the cost curve's population."""
    py = _python()
    while n > 0:
        k = min(per, n)
        p = run_child([py, ecs_agent.__file__, parent, state, str(k)], timeout=600)
        if p.returncode != AGENT_STATUS:
            raise LabError(f"zombie maker exited {p.returncode}: {p.stderr.strip()[-200:]}")
        n -= k


def _dataloader(cg: str, cpu: int, data: str, rate: float, seconds: float = 0, start_mb: int = 0
                ) -> subprocess.Popen:
    args = [sys.executable, "-m", "nodesleuth.lab.actors.dataloader", os.path.join(cg, "cgroup.procs"), str(cpu),
            data, str(rate), str(seconds), str(start_mb)]
    return spawn(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _times(pid: int) -> tuple[float, float]:
    """utime, stime of `pid` in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(rest[11]) / tck, int(rest[12]) / tck


def _cputime(pid: int) -> float:
    """utime + stime of `pid` (0 once it is gone)."""
    try:
        return sum(_times(pid))
    except (OSError, IndexError, ValueError):
        return 0.0


def _stime(pid: int) -> float:
    return _times(pid)[1]


def _rchar(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("rchar:"))


def _reading(p: subprocess.Popen, timeout: float = 120.0) -> None:
    """Wait until the data loader is reading its data (a slow VM takes seconds to start Python)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.poll() is not None:
            raise LabError(f"the data loader exited {p.returncode}: "
                           f"{p.stderr.read().decode(errors='replace').strip()[-200:]}")
        try:
            if _rchar(p.pid) >= 16 << 20:  # more than Python reads to start
                return
        except (OSError, StopIteration):
            pass
        time.sleep(0.1)
    raise LabError(f"the data loader read nothing in {timeout:.0f} s")


def _cached(mc: Memcg, job: str, data: str, p: subprocess.Popen, need: int = 8 << 20, wait: float = 60.0) -> None:
    """The reads really fill the page cache of the job (charged to it, so they go through reclaim).
    Holes of a sparse file on tmpfs (or an overlay over it) are read as the zero page and charge
    nothing: a data loader there never reclaims, and a curve measured there measures only copying."""
    deadline = time.time() + wait
    while time.time() < deadline:
        if mc.usage(job) >= need:
            return
        if p.poll() is not None:
            break
        time.sleep(0.2)
    raise LabError(f"{data}: reading it charged {mc.usage(job) >> 20} MB of page cache to the job (tmpfs holes "
                   "are not cached): put --workdir on a disk filesystem (ext4, xfs) so reads go through reclaim")


def _at_limit(mc: Memcg, parent: str, p: subprocess.Popen, wait: float = 60.0) -> None:
    limit = mc.limit(parent)
    deadline = time.time() + wait
    while limit and time.time() < deadline and p.poll() is None and mc.usage(parent) < limit - (4 << 20):
        time.sleep(0.2)


def _sparse(path: str) -> None:
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.truncate(200 << 30)  # reads of holes fill the page cache with no disk IO


def _limit(mc: Memcg, parent: str, exclude: str, headroom: int = 64 << 20) -> None:
    """Limit `parent` to what it uses (less the reader's cache) plus headroom: the reader reclaims."""
    mc.set_limit(parent, max(mc.usage(parent) - mc.usage(exclude), 0) + headroom)


def cost_curve(workdir: str, cpu: int, rate: float = 100.0, points=CURVE, log=print) -> list[dict]:
    """The cost of memcg reclaim on this kernel as dying memcgs grow: the reader's kernel CPU per MB."""
    mc = Memcg()
    parent, rjob = LAB_CG + "-cost", LAB_CG + "-cost/kubepods/job"
    state = os.path.join(workdir, "cost-run")
    data = os.path.join(workdir, "data.bin")
    _sparse(data)
    _mount_tmpfs(state)
    job = mc.make(rjob)
    mc.make(parent + "/docker", children=True)
    out, made = [], 0
    log(f"lab: kernel {os.uname().release}, cgroup v{mc.version}, MGLRU (lru_gen) {_lru_gen()}; no kernel "
        f"setting changed: the data loader's limit reclaim walks the dying memcgs (mem_cgroup_iter)")
    try:
        for n in points:
            mc.set_limit(parent, None)
            t = time.time()
            _make_zombies(parent, state, n - made)
            made = n
            build = time.time() - t
            _limit(mc, parent, rjob)
            secs = 6.0
            # each point reads a region no earlier point left in the cache
            p = _dataloader(job, cpu, data, rate, start_mb=(len(out) + 1) * (64 << 10))
            try:
                _reading(p)  # start-up (imports, page faults) is not the cost being measured
                _cached(mc, rjob, data, p)
                _at_limit(mc, parent, p)  # measure reclaim, not the fill below the limit
                # the cheapest of a few windows: other work on the machine (or, in a VM under software
                # emulation, other vCPUs sharing the emulator's thread) only ever adds to a window's cost
                per = []
                for _ in range(WINDOWS):
                    s0, r0 = _stime(p.pid), _rchar(p.pid)
                    time.sleep(secs / WINDOWS)
                    s1, r1 = _stime(p.pid), _rchar(p.pid)
                    mb = max(1.0, (r1 - r0) / (1 << 20))  # what it really read (a busy host slows it down)
                    per.append(1000 * (s1 - s0) / mb)
            finally:
                p.kill()
                p.wait(timeout=60)
            ms_per_mb = min(per)
            row = {"zombies": n, "reclaim_sys_ms_per_mb": round(ms_per_mb, 3),
                   "core_share_at_rate": round(min(1.0, ms_per_mb * rate / 1000), 3), "build_s": round(build, 1)}
            out.append(row)
            log(f"lab: cost of reclaim with {n:>6} dying memcgs: {ms_per_mb:7.2f} ms of kernel CPU per MB read "
                f"({100 * row['core_share_at_rate']:.0f}% of CPU {cpu} at {rate:.0f} MB/s)")
    finally:
        mc.set_limit(parent, None)
        _clear_tmpfs(state)
        remove_cgroup_tree(mc.path(parent))
    return out


def cost_at(curve: list[dict], zombies: int) -> float:
    """Kernel ms per MB read at `zombies`, linear between the curve's points; past the last point the last
    point's cost (the cost grows with zombies, so this errs toward a higher rate, i.e. toward saturating)."""
    pts = sorted((c["zombies"], c["reclaim_sys_ms_per_mb"]) for c in curve)
    if zombies <= pts[0][0]:
        return pts[0][1]
    for (z0, c0), (z1, c1) in zip(pts, pts[1:]):
        if zombies <= z1:
            return c0 + (c1 - c0) * (zombies - z0) / max(1, z1 - z0)
    return pts[-1][1]


def choose_rate(curve: list[dict], zombies: int, cpu: int) -> tuple[float, str]:
    """The data loader's rate that saturates CPU `cpu` once `zombies` are there, from the measured curve:
    HEADROOM cores' worth of reclaim at that cost. Refused (LabError) when the same rate with no zombies
    would already cost BARE_SHARE of the core: then the core's load would not be the zombies' doing."""
    ms = cost_at(curve, zombies)
    bare = cost_at(curve, 0)
    rate = HEADROOM * 1000.0 / max(ms, 0.001)
    if rate > MAX_RATE:
        raise LabError(f"cannot saturate CPU {cpu} with zombies here: reclaim costs only {ms:.2f} ms/MB at {zombies} "
                       f"zombies, so {rate:.0f} MB/s would be needed, past the {MAX_RATE:.0f} MB/s the lab reads at "
                       f"most; give --zombies more, or --rate to run unsaturated")
    if bare * rate / 1000.0 >= BARE_SHARE:
        raise LabError(f"cannot saturate CPU {cpu} with zombies here: reclaim costs {ms:.2f} ms/MB at {zombies} "
                       f"zombies, so {rate:.0f} MB/s is needed, but at that rate reading alone (no zombies: "
                       f"{bare:.2f} ms/MB) takes {100 * bare * rate / 1000:.0f}% of the core; give --zombies more, "
                       f"or --rate to run unsaturated")
    why = (f"chosen from the cost curve: {ms:.2f} ms of kernel CPU per MB at {zombies} zombies, so {rate:.0f} MB/s "
           f"asks {100 * ms * rate / 1000:.0f}% of CPU {cpu} (with no zombies it would ask "
           f"{100 * bare * rate / 1000:.0f}%)")
    return round(rate, 1), why


def saturation(victim: list[dict]) -> dict:
    """How much of the run CPU N was saturated: seconds >= SATURATED_BUSY busy of the seconds measured."""
    busy = [v["busy"] for v in victim if v.get("busy") is not None]
    hot = sum(1 for b in busy if b >= SATURATED_BUSY)
    return {"seconds": hot, "of": len(busy), "share": round(hot / len(busy), 3) if busy else 0.0,
            "busy_at_least": SATURATED_BUSY, "wanted_share": SATURATED_SHARE,
            "loader_share": round(sum(v.get("loader", 0.0) for v in victim) / max(1, len(victim)), 1)}


def _lru_gen(path: str = "/sys/kernel/mm/lru_gen/enabled") -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "absent"


def _clear_tmpfs(path: str) -> None:
    if os.path.isdir(path):
        for name in os.listdir(path):
            try:
                os.unlink(os.path.join(path, name))
            except OSError:
                pass
    drop_caches()
    time.sleep(1.0)
    drop_caches()
    if os.path.ismount(path):
        run_child(["umount", path], timeout=60)


def _unit(python: str, agent: str, state: str, per_start: int, restart_sec: str, control: str) -> str:
    return f"""[Unit]
Description=Amazon ECS Agent (nodesleuth lab: cannot reach its cluster)
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={python} {agent} {LAB_CG} {state} {per_start} {control}
Restart=on-failure
RestartSec={restart_sec}

[Install]
WantedBy=multi-user.target
"""


def _show(ns: SystemdNamespace, unit: str) -> dict:
    p = ns.systemctl("show", "-p", "NRestarts,ExecMainStatus,ExecMainCode,Result,SubState", unit, check=False)
    return parse_properties(p.stdout)


def write_simulated_reset(napi_usec: int) -> None:
    with open("/dev/kmsg", "w") as f:
        f.write("<6>nodesleuth-lab: the next ENA lines are SIMULATED by nodesleuth lab (no ENA device here)\n")
        f.flush()
        for level, line in ENA_LINES:
            f.write(f"<{level}>{line.format(napi_usec=napi_usec)}\n")
            f.flush()


def run(seconds: float = 30.0, workdir: str = DEFAULT_DIR, cpu: int = 1, per_start: int = 500,
        restart_sec: str = "200ms", zombies: int = 30000, rate: float | None = None, profile: bool = True,
        curve: bool = True, build_timeout: float = 60.0, points=CURVE, min_growth: float = MIN_GROWTH,
        net: bool = True, log=print) -> LabState:
    preflight(workdir)
    if LabState.load(workdir) is not None:
        raise LabError(f"{workdir}/state.json exists: run `nodesleuth lab clean --workdir {workdir}` first")
    os.makedirs(workdir, exist_ok=True)
    state_dir = os.path.join(workdir, "run")
    st = LabState(workdir, cpu, Memcg().count(), time.time(), store=os.path.join(workdir, "store"),
                  tmpfs=state_dir)
    st.save()
    if curve:
        _measure_curve(st, workdir, cpu, rate, points, min_growth, log)
    _choose_rate(st, rate, zombies, cpu)
    rate = st.rate
    mc = Memcg()
    parent, rjob = LAB_CG, LAB_CG + "/kubepods/job"
    job = mc.make(rjob)
    mc.make(parent + "/docker", children=True)
    _mount_tmpfs(state_dir)
    data = os.path.join(workdir, "data.bin")
    _sparse(data)
    agent = os.path.join(workdir, "ecs-agent.py")  # a copy on disk the namespace can read
    shutil.copyfile(ecs_agent.__file__, agent)
    ns = SystemdNamespace()
    procs: dict[str, subprocess.Popen] = {}
    netlab = streams = None
    try:
        ns.start()
        st.pids.update(systemd=ns.pid, unshare=ns.proc.pid)
        control = os.path.join(workdir, "agent.conf")
        _write(control, f"{per_start} 0")  # build the population fast
        ns.install_unit("ecs.service", _unit(_python(), agent, state_dir, per_start, restart_sec, control))
        ns.systemctl("enable", "ecs.service", check=False)
        _start_recording(st, ns, procs, profile)
        base = Memcg().count()
        ns.systemctl("start", "ecs.service", check=False)
        _check_unit(ns, base, per_start)
        log(f"lab: systemd pid {ns.pid}: ecs.service crash-looping, {per_start} zombies per start; recording "
            f"to {st.store}")
        _build_zombies(st, zombies, per_start, build_timeout)
        # from now on the agent behaves like the real one: tries to register for 2 s, fails, leaves a few
        # cgroups; on a 2-CPU machine a faster loop would itself keep the other CPU busy
        _write(control, f"{max(1, per_start // 25)} 2")
        if net:
            netlab, streams, snaps = _net_start(st, cpu, log)
        log(f"lab: {st.zombies} dying memcgs under /{LAB_CG}; the data loader starts on CPU {cpu}: data loader rate "
            f"{rate:.0f} MB/s, {st.rate_from}")
        _limit(mc, parent, rjob)
        if streams is not None:
            snaps.append(streams.snapshot())
        procs["dataloader"] = _dataloader(job, cpu, data, rate)
        st.pids["dataloader"] = procs["dataloader"].pid
        st.save()
        _watch(st, ns, mc, procs, seconds, log)
        if streams is not None:
            snaps.append(streams.snapshot())
            _net_report(st, streams, snaps, cpu, log)
    finally:
        _stop(st, ns, mc, parent, procs, netlab)
    _check_saturated(st, cpu, rate)
    return st


def _measure_curve(st: LabState, workdir: str, cpu: int, rate: float | None, points, min_growth: float, log) -> None:
    """The cost curve (reclaim CPU per MB against dying memcgs); LabError when it does not grow enough."""
    st.curve = cost_curve(workdir, cpu, rate or CURVE_RATE, points, log=log)
    st.save()
    c0, c1 = st.curve[0]["reclaim_sys_ms_per_mb"], st.curve[-1]["reclaim_sys_ms_per_mb"]
    if c1 < min_growth * max(c0, 0.05):
        raise LabError(f"on this kernel memcg reclaim does not scale with dying memcgs ({c0} ms/MB at "
                       f"{st.curve[0]['zombies']}, {c1} "
                       f"at {st.curve[-1]['zombies']}, under {min_growth:g}x): the incident cannot be made here")
    log(f"lab: the cost grew {c1 / max(c0, 0.05):.1f}x from 0 to {st.curve[-1]['zombies']} zombies "
        f"(the lab's rule: at least {min_growth:g}x)")


def _choose_rate(st: LabState, rate: float | None, zombies: int, cpu: int) -> None:
    """The data loader's rate: given, else chosen from the cost curve to saturate the core, else the default."""
    if rate is not None:
        st.rate, st.rate_from = rate, "given (--rate): the run is not held to saturating the core"
    elif st.curve:
        st.rate, st.rate_from = choose_rate(st.curve, zombies, cpu)
        for c in st.curve:  # the table's share is the share at the rate the run uses
            c["core_share_at_rate"] = round(min(1.0, c["reclaim_sys_ms_per_mb"] * st.rate / 1000), 3)
    else:
        st.rate, st.rate_from = CURVE_RATE, "no cost curve measured (--no-curve): not chosen to saturate, not held to it"
    st.save()


def _start_recording(st: LabState, ns: SystemdNamespace, procs: dict, profile: bool) -> None:
    """The recorder (watching the namespace's systemd) and the victim, into `procs`; LabError when the
    recorder exits at once."""
    workdir = st.workdir
    rec_cmd = [sys.executable, "-m", "nodesleuth", "record", "--store", st.store, "--quiet", "--systemd-pid",
               str(ns.pid), "--trace-churn", "--profile-rotate", "5", "--live-every", "5", "--units-every", "1",
               # 1 MB rings: the lab wants every sample of its incident, and a VM under software
               # emulation drains perf's rings slowly (128 KB lost a third of the hot core's samples)
               "--profile-buffer", "1024"]
    if profile:
        rec_cmd.append("--profile")
    # its warnings go to a file: a pipe nobody reads fills up (64 KiB) and blocks the recorder
    rec_log = open(os.path.join(workdir, "recorder.log"), "wb")
    procs["recorder"] = spawn(rec_cmd, signal.SIGTERM, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=rec_log)
    rec_log.close()
    procs["victim"] = spawn([sys.executable, "-m", "nodesleuth.lab.actors.victim", str(st.cpu),
                             os.path.join(workdir, "victim.json")], stdin=subprocess.DEVNULL)
    st.pids.update(recorder=procs["recorder"].pid, victim=procs["victim"].pid)
    st.save()
    time.sleep(3)  # the recorder and its perf first
    if procs["recorder"].poll() is not None:
        with open(os.path.join(workdir, "recorder.log"), errors="replace") as f:
            err = f.read().strip().splitlines()
        raise LabError(f"the recorder exited at once: {err[-1] if err else procs['recorder'].returncode}")


def _build_zombies(st: LabState, zombies: int, per_start: int, build_timeout: float) -> None:
    """Wait for the crash-looping unit to leave `zombies` dying memcgs; LabError when the count stops growing."""
    # a slow machine builds slowly: fail only when the count stops growing. Growth is a step of
    # half a start's zombies (at least 10): the count is the host's, and other jobs' few cgroups
    # coming and going must not keep a lab that makes none alive
    step = max(10, per_start // 2)
    last, grew_at = 0, time.time()
    while (made := Memcg().count() - st.baseline_tracked) < zombies:
        if made >= last + step:
            last, grew_at = made, time.time()
        elif time.time() - grew_at > build_timeout:
            raise LabError(f"the zombie count stopped growing at {made} for {build_timeout:.0f} s, short of "
                           f"{zombies}")
        time.sleep(1.0)
    st.zombies = Memcg().count() - st.baseline_tracked


def _stop(st: LabState, ns: SystemdNamespace, mc: Memcg, parent: str, procs: dict, netlab) -> None:
    """The run's end, whatever ended it: actors killed, the unit stopped, the recorder let store its last
    chunks, the namespace gone, the limit lifted."""
    if netlab is not None:
        netlab.close()
    for role in ("dataloader", "victim"):
        if role in procs:
            procs[role].kill()
            procs[role].wait()
    try:
        ns.systemctl("stop", "ecs.service", check=False)
    except Exception:  # noqa: BLE001 - the namespace may already be gone
        pass
    if "recorder" in procs:
        procs["recorder"].send_signal(signal.SIGTERM)
        try:
            procs["recorder"].wait(timeout=420)  # it stores its last profile chunks (minutes under emulation)
        except subprocess.TimeoutExpired:
            procs["recorder"].kill()
    ns.stop()
    mc.set_limit(parent, None) if os.path.isdir(mc.path(parent)) else None
    st.ended = time.time()
    st.save()


def _check_saturated(st: LabState, cpu: int, rate: float) -> None:
    """LabError when a rate chosen to saturate the core did not (the recording is kept)."""
    sat = st.saturated
    if st.rate_from.startswith("chosen") and sat and sat["share"] < SATURATED_SHARE:
        raise LabError(f"CPU {cpu} was not saturated: >= {SATURATED_BUSY:.0f}% busy for {sat['seconds']} of "
                       f"{sat['of']} s ({100 * sat['share']:.0f}%, the lab promises {100 * SATURATED_SHARE:.0f}%) at "
                       f"{rate:.0f} MB/s ({st.rate_from}); the recording is kept in {st.store}")


def _net_start(st: LabState, cpu: int, log):
    """The network victims (lab/netvictim.py): TCP streams between two network namespaces, their receive
    processing steered by RPS to the hot CPU and their NAPI in kernel threads pinned there (threaded
    NAPI, 5.12+; softirq only where the kernel has none), the processes on another. No kernel setting is changed: the
    hot core's effect at the defaults is what is measured. Returns (lab, streams, [snapshot]) or, when
    they cannot run here, (None, None, []) with a line saying why: the incident itself does not need them."""
    other = next((c for c in sorted(os.sched_getaffinity(0)) if c != cpu), -1)
    lab = NetLab(workdir=os.path.join(st.workdir, "net"))
    os.makedirs(lab.dir, exist_ok=True)
    try:
        lab.setup()
        st.netns = [lab.snd, lab.rcv]
        st.save()
        lab.rps(cpu)
        try:  # their NAPI in a kernel thread on the hot CPU too: a task there, which a hot core can hold off
            napi = f"; their NAPI threads (pids {', '.join(map(str, lab.threaded_napi(cpu)))}) pinned there"
        except (NetLabError, OSError) as e:
            napi = f"; NAPI in softirq only ({e})"
        streams = lab.streams(NET_STREAMS, NET_MBIT, cpu=other)
    except (NetLabError, OSError) as e:
        lab.close()
        log(f"lab: no network victims ({e}); the incident goes on without them")
        return None, None, []
    st.pids.update(net_sender=streams.send.pid, net_sink=streams.sink.pid)
    st.save()
    log(f"lab: {NET_STREAMS} TCP streams {lab.a} -> {lab.b} ({NET_MBIT:g} Mbit/s each) between netns {lab.snd} and "
        f"{lab.rcv}; their receive processing on CPU {cpu} (RPS{napi}), the processes on CPU {other}; "
        f"{NET_BASELINE:.0f} s before the hot core starts")
    time.sleep(2)
    snaps = [streams.snapshot()]
    time.sleep(NET_BASELINE)
    return lab, streams, snaps


def _net_report(st: LabState, streams, snaps: list, cpu: int, log) -> None:
    """Before (streams alone) and during (the data loader's reclaim on the same CPU), with the numbers."""
    before, during = streams.report(snaps[0], snaps[1], cpu), streams.report(snaps[1], snaps[2], cpu)
    st.net = {"before": before, "during": during, "verdict": net_verdict(before, during)}
    st.save()
    log(f"lab: network victims before the hot core: {net_describe(before)}")
    log(f"lab: network victims during the hot core: {net_describe(during)}")
    log(f"lab: {st.net['verdict']}")


def _check_unit(ns: SystemdNamespace, base: int, per_start: int, wait: float = 180.0) -> None:
    """The unit really runs the agent: it exits with the agent's status and zombies appear. A wrong
    status fails at once; a first start may take minutes on a slow VM (20 s was too short there)."""
    deadline = time.time() + wait
    while time.time() < deadline:
        time.sleep(0.5)
        s = _show(ns, "ecs.service")
        status = int(s.get("ExecMainStatus") or 0)
        if status not in (0, AGENT_STATUS):
            raise LabError(f"ecs.service could not run the agent: exit status {status}"
                           + (" (203/EXEC: the namespace cannot exec it)" if status == 203 else "")
                           + f", result {s.get('Result')}")
        if int(s.get("NRestarts") or 0) >= 1 and Memcg().count() - base >= per_start // 2:
            return
    raise LabError(f"ecs.service made no zombies in {wait:.0f} s (NRestarts={_show(ns, 'ecs.service').get('NRestarts')}, "
                   f"memory cgroups {base} -> {Memcg().count()})")


def _watch(st: LabState, ns: SystemdNamespace, mc: Memcg, procs: dict, seconds: float, log) -> None:
    """Keep the limit just above the zombies' own charge; measure the core and the victim each second."""
    root = Root("/")
    prev = read_stat(root)
    victim = procs["victim"].pid
    w_prev = _read_wait(victim)
    loader = procs["dataloader"].pid
    l_prev = _cputime(loader)
    window: list[float] = []
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(1.0)
        _limit(mc, LAB_CG, LAB_CG + "/kubepods/job")
        cur = read_stat(root)
        u = utilisation(prev, cur).get(st.cpu)
        prev = cur
        w = _read_wait(victim)
        waited = (w - w_prev) / 1e9
        w_prev = w
        lc = _cputime(loader)
        own, l_prev = 100.0 * (lc - l_prev), lc
        window = (window + [waited])[-int(ENA_WINDOW):]
        st.victim.append({"t": time.time(), "busy": round(u.busy, 1) if u else None,
                          "sys": round(u.sys, 1) if u else None, "victim_wait_s": round(waited, 4),
                          "loader": round(own, 1)})
        if len(window) == int(ENA_WINDOW) and sum(window) >= VICTIM_SHARE * ENA_WINDOW and not st.resets:
            write_simulated_reset(int(sum(window) * 1e6))
            st.resets.append(time.time())
            log(f"lab: napi-poll waited {sum(window):.1f} s of the last {ENA_WINDOW:.0f} s on CPU {st.cpu}: "
                "SIMULATED ENA reset lines written to /dev/kmsg")
        st.save()
    busy = [v["busy"] for v in st.victim if v["busy"] is not None]
    waits = [v["victim_wait_s"] for v in st.victim]
    sat = st.saturated = saturation(st.victim)
    st.save()
    log(f"lab: CPU {st.cpu} {min(busy, default=0):.0f}-{max(busy, default=0):.0f}% busy "
        f"(sys {sum(v['sys'] or 0 for v in st.victim) / max(1, len(st.victim)):.0f}% on average) for {len(busy)} s; "
        f">= {SATURATED_BUSY:.0f}% for {sat['seconds']} of them ({100 * sat['share']:.0f}%); the data loader itself "
        f"{sat['loader_share']:.0f}% of the core on average")
    if not st.resets:
        log(f"lab: napi-poll on CPU {st.cpu} waited at most {max(waits, default=0) * 1000:.0f} ms per second: under "
            f"the lab's rule ({VICTIM_SHARE * ENA_WINDOW:.1f} s in {ENA_WINDOW:.0f} s) this kernel kept serving it, "
            "so no ENA line was simulated; the incident is the saturated core itself")


def _read_wait(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def clean(workdir: str = DEFAULT_DIR, log=print, keep_store: bool = False, wait: float = 30.0) -> dict:
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
    for name in (st.netns if st else []):  # the network victims' namespaces (and the veths in them)
        if os.path.exists(os.path.join("/run/netns", name)):
            run_child(["ip", "netns", "del", name], timeout=30)
    before = Memcg().count()
    t = time.perf_counter()
    for d in (os.path.join(workdir, "run"), os.path.join(workdir, "cost-run")):
        _clear_tmpfs(d)
    reclaim_s = time.perf_counter() - t
    mc = Memcg()
    for cg in (LAB_CG, LAB_CG + "-cost"):
        if os.path.isdir(mc.path(cg)):
            mc.set_limit(cg, None)
        remove_cgroup_tree(mc.path(cg))
    deadline = time.time() + wait
    after = Memcg().count()
    while baseline is not None and after > baseline and time.time() < deadline:  # freeing is asynchronous
        time.sleep(0.5)
        drop_caches()
        after = Memcg().count()
    # other jobs on the host may hold a few memcgs of their own meanwhile: up to TOLERANCE is still "back"
    ok = baseline is None or after <= baseline + TOLERANCE
    res = {"killed": killed, "tracked_before": before, "tracked_after": after, "baseline": baseline,
           "reclaim_seconds": round(reclaim_s, 3), "returned_to_baseline": ok,
           "over_baseline": None if baseline is None else after - baseline}
    if not keep_store:
        shutil.rmtree(workdir, ignore_errors=True)
    elif os.path.isdir(workdir):  # the recording and its recorder's warnings stay; state, data, agent go
        for name in set(os.listdir(workdir)) - {"store", "recorder.log"}:
            path = os.path.join(workdir, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) and not os.path.islink(path) else \
                os.unlink(path)
    log(f"lab clean: killed {killed or 'nothing'}; memory cgroups {before} -> {after} (baseline {baseline}); "
        f"reclaim took {reclaim_s:.2f} s; " + (
            "back to baseline" + (f" (+{after - baseline}, within {TOLERANCE})" if baseline and after > baseline else "")
            if ok else f"NOT back to baseline: {after - baseline} more than before the run"))
    return res
