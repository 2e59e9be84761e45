"""`nodesleuth check`: sample the node for a few seconds and say whether it has the problem class now."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field

from ..collect import posture, probe_state
from ..collect.cgroups import UNMOUNTED
from ..collect.churn import ChurnTracer
from ..collect.kmsg import boot_wall_time
from ..collect.sampler import CHECK, Sampler
from ..detect import registry
from ..detect.findings import Finding, ordered
from ..detect.incidents import correlate
from ..detect.window import Window
from ..model.errors import InputError
from ..model.memcg_ids import node_rule
from ..model.mpstat import unchanged, utilisation
from ..model.records import ChurnSummary, KernelEvent, Tick, ZombiePosture
from ..model.thresholds import ZOMBIE_CRIT, ZOMBIE_WARN
from ..node import journal
from ..node.root import Root
from ..node.systemd import read_units

SCHEMA = "nodesleuth.check/v1"


@dataclass
class CheckOptions:
    root: str = "/"
    seconds: float = 5.0
    kmsg: str | None = None  # a kernel-log file (any dmesg/journalctl form) instead of ROOT/dev/kmsg
    boot_time: float | None = None  # boot of the host that wrote `kmsg`, for uptime-only forms
    lookback: float = 3600.0  # kernel-log events older than this are ignored
    trace: bool = True  # trace cgroup churn with perf while sampling (live host, root only)
    ns_pid: int | None = None  # inspect the systemd running as PID 1 of this PID namespace
    threads: bool = True
    zombie_warn: int = ZOMBIE_WARN
    zombie_crit: int = ZOMBIE_CRIT
    rules: str | None = None
    probe: bool | None = None  # True: run the probes now and keep their results (probe_state); else read them
    state_dir: str = probe_state.STATE_DIR  # where the probes' results of this boot are kept
    npd: bool = False  # node-problem-detector's call: never probes


@dataclass
class CheckResult:
    findings: list[Finding]
    cpus: dict  # per-CPU mpstat columns averaged over the window
    census: dict
    ticks: list[Tick] = field(default_factory=list)
    churn: ChurnSummary | None = None
    started: float = 0.0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    units: list | None = None  # systemd units at the end of the window
    unread: dict[str, str] = field(default_factory=dict)  # section -> "path: reason" it could not be read
    cpu_window: str = "interval"  # "since-boot" when /proc/stat did not move (a recorded tree)
    root: dict = field(default_factory=dict)  # the root read and its kind (node/root.py): live | host | tree
    posture: ZombiePosture | None = None  # does this kernel keep removed memcgs dying (collect/posture.py)
    kernel_log: dict | None = None  # the kernel-log reader's account (collect/sampler.py kmsg_account)
    probes: dict | None = None  # where the cost and posture figures came from (probe_state.Stored.to_dict)

    @property
    def exit_code(self) -> int:
        """node-problem-detector custom plugin protocol: 0 OK, 1 problem, 2 unknown (a section could not
        be read, so "no problem found" would claim more than was seen)."""
        if any(f.problem for f in self.findings):
            return 1
        return 2 if self.unread else 0

    @property
    def status(self) -> str:
        return {0: "ok", 1: "problem", 2: "unknown"}[self.exit_code]


@dataclass
class _Sampled:
    """What the window's sampling saw, before any rule is applied."""
    started: float
    old_events: list[KernelEvent]
    stat0: object
    stat1: object
    census0: object
    nics0: list | None
    units0: list | None
    units1: list | None
    ticks: list[Tick]
    tail: list[KernelEvent]
    seconds: float
    kernel_log: dict | None


def _sleep_until(t: float) -> None:
    d = t - time.time()
    if d > 0:
        time.sleep(d)


def _kmsg_boot(root: Root, opt: CheckOptions) -> float | str | None:
    """Boot time for a kernel log's uptime stamps: given, or the root's own (its /dev/kmsg, or a recorded
    tree's btime); a --kmsg file on a live host came from elsewhere, so there it is unknown."""
    if opt.boot_time is not None:
        return opt.boot_time
    if not opt.kmsg:
        return "root"
    if root.live:
        return None
    try:
        return boot_wall_time(root)
    except InputError:
        return None


def _sampler(root: Root, opt: CheckOptions, unread: dict[str, str]) -> Sampler:
    kmsg_src: bool | str = opt.kmsg or True
    if not opt.kmsg and not os.access(root.join("/dev/kmsg"), os.R_OK):
        kmsg_src = False
        unread["kernel log"] = f"{root.join('/dev/kmsg')}: cannot read (run as root, or pass --kmsg FILE)"
    # a check is short: NIC driver counters (ethtool) are read every tick so the window's delta is exact
    return Sampler.preset(root, dataclasses.replace(CHECK, threads=opt.threads), kmsg=kmsg_src,
                          ns_pid=opt.ns_pid, rules_path=opt.rules, kmsg_boot=_kmsg_boot(root, opt))


def _launch_tracer(root: Root, opt: CheckOptions, notes: list[str]) -> ChurnTracer | None:
    """perf started, not yet tracing: its start-up (0.15-0.35 s here) runs while the sampler is built, and
    _tracing() enables it just before the window."""
    if not (opt.trace and root.live):
        return None
    why = ChurnTracer.unavailable()
    tracer = ChurnTracer() if why is None else None
    if tracer is not None and not tracer.launch():
        why = tracer.error
        tracer.cancel()
        tracer = None
    if why:  # never silent: without the trace, who makes the zombies stays unknown
        notes.append(f"cgroup churn not traced: {why}")
    return tracer


def _tracing(tracer: ChurnTracer | None, notes: list[str]) -> ChurnTracer | None:
    """The launched tracer once it traces, or None (said in a note) when it could not."""
    if tracer is not None and not tracer.ready():
        notes.append(f"cgroup churn not traced: {tracer.error}")
        tracer.cancel()
        return None
    return tracer


def _sample(sampler: Sampler, root: Root, opt: CheckOptions, notes: list[str]) -> _Sampled:
    """One tick a second for the window, the census walked at both ends, units read before and after."""
    try:
        started = time.time()
        old_events = sampler.prime()
        stat0 = sampler.cpustat.stat  # the last /proc/stat read: check averages its window from the first to the last
        census0 = sampler.primed.get("census")
        nics0 = sampler.primed.get("nics")
        units0 = read_units(root, opt.ns_pid)
        if units0 is None:
            notes.append("systemd is not PID 1 here: unit health not checked (use --systemd-pid PID)")
        ticks: list[Tick] = []
        n = max(1, int(round(opt.seconds)))
        for i in range(n):
            _sleep_until(started + i + 1)
            ticks.append(sampler.tick(force_walk=(i == n - 1)))
        stat1 = sampler.cpustat.stat
        tail = sampler.kmsg_rest()  # what a flood's bound left in the ring or the file, read whole now
        units1 = read_units(root, opt.ns_pid) if units0 is not None else None
        seconds = time.time() - started
        kernel_log = sampler.kmsg_account()
    finally:
        sampler.close()
    return _Sampled(started, list(old_events), stat0, stat1, census0, nics0, units0, units1, ticks, tail, seconds,
                    kernel_log)


def _kernel_log_notes(sampler: Sampler, kernel_log: dict | None, opt: CheckOptions, notes: list[str]) -> None:
    if kernel_log and kernel_log["dropped"]:
        gaps = kernel_log["gaps"]
        notes.append(f"kernel log {kernel_log['source']}: {kernel_log['dropped']} record(s) dropped, overwritten by "
                     f"the kernel before they could be read (a flood; seq " + ", ".join(
                         f"{a}-{b}" if a != b else str(a) for a, b in gaps[:5]) + (
                         f" and {kernel_log['gaps_total'] - 5} more ranges" if kernel_log["gaps_total"] > 5 else "")
                     + f"); {kernel_log['read']} read: the events of those lines are unknown")
    if opt.kmsg and sampler.kmsg:
        r = sampler.kmsg
        notes.append(f"kernel log {opt.kmsg} read as {r.description}" + (
            "" if r.has_wall_time else ": its times are uptime offsets and no boot time is known (the file is "
            "not this host's: give --boot-time), so findings show uptime only and --lookback cannot apply"))
        notes += [n for n in r.time_notes if n not in notes]


def _probes(root: Root, opt: CheckOptions, dying: bool, notes: list[str]):
    """(stored, posture): what one memcg costs and whether this kernel keeps removed memcgs dying, measured at most
    once per boot and kernel (collect/probe_state.py), after the window so the probes' own cgroups are never in its
    counts or its churn trace; `--npd` never probes."""
    stored, why = None, None
    if opt.probe and not opt.npd:
        stored, why = probe_state.measure(root, opt.state_dir)
    if stored is None:
        got, note = probe_state.load(root, opt.state_dir) if root.live else (None, None)
        stored = got
        why = "; ".join(x for x in (why, note) if x) or None
    post = posture.read(root)
    if stored is not None:
        post.probe, post.problem = stored.posture, stored.posture_problem
        notes.append(f"memcg cost and zombie posture from {stored.source()}")
        if why:  # measured, but the state could not be written: the next check will not find it
            notes.append(why)
        if stored.cost_problem and dying:
            notes.append(f"Percpu per memcg not measured: {stored.cost_problem}")
        if stored.posture_problem and dying:
            notes.append(f"zombie posture not measured: {stored.posture_problem}")
    else:
        post.problem = why or "probe not run (a recorded tree)"
        if why and (dying or opt.probe):
            notes.append(why + ("" if opt.probe or not root.live else " (run `nodesleuth check --probe` or the "
                                "exporter to measure once)"))
    return stored, post


def _cpus(stat0, stat1, notes: list[str]) -> tuple[str, dict]:
    """(cpu_window, per-CPU mpstat columns) over the window, or since boot when /proc/stat did not move."""
    cpu_window = "interval"
    avg = {}
    if stat0 is not None and stat1 is not None:
        if unchanged(stat0, stat1):  # a recorded tree: report since boot, as `mpstat -P ALL` with no interval
            cpu_window = "since-boot"
            notes.append("/proc/stat did not change during the check (a recorded tree?): per-CPU figures are "
                         "averages since boot, as `mpstat -P ALL` prints with no interval")
            avg = utilisation(None, stat1)
        else:
            avg = utilisation(stat0, stat1)
    return cpu_window, {("all" if c < 0 else str(c)): u.to_dict() for c, u in sorted(avg.items())}


def _census(last: Tick) -> dict:
    c = last.census
    return {"v1": [x.to_dict() for x in c.v1],
            "unknown": [k for k, _ in c.problems],  # sections that could not be counted (see notes)
            "v2": None if c.v2 is None else {**c.v2.to_dict(), "subsys": {k: {"live": a, "dying": b}
                                                                           for k, (a, b) in c.v2.subsys.items()}},
            "percpu_bytes": last.meminfo.get("Percpu"), "slab_bytes": last.meminfo.get("Slab")}


def run_check(opt: CheckOptions) -> CheckResult:
    root = Root(opt.root)
    notes: list[str] = []
    unread: dict[str, str] = {}
    tracer = _launch_tracer(root, opt, notes)
    try:
        sampler = _sampler(root, opt, unread)
        tracer = _tracing(tracer, notes)
        s = _sample(sampler, root, opt, notes)
    except BaseException:
        if tracer is not None:
            tracer.cancel()
        raise
    if tracer is not None:
        tracer.interrupt()  # the window is over; perf writes its data while the rest below is read
    _kernel_log_notes(sampler, s.kernel_log, opt, notes)
    unread.update(sampler.problems)
    if UNMOUNTED in unread:  # counted as unknown (live: null), said once, and not what the check is about
        notes.append(f"{UNMOUNTED}: {unread.pop(UNMOUNTED)}")
    for section, why in unread.items():
        notes.append(f"could not read {section}: {why}; {section} not checked")

    events = s.old_events + [e for t in s.ticks for e in t.events] + s.tail
    now = time.time() if root.live else max([e.time for e in events if e.time is not None], default=time.time())
    last = s.ticks[-1]
    later: list[str] = []
    stored, post = _probes(root, opt, _memcgs_dying(last), later)
    cost = stored.cost if stored else None
    age = None
    if opt.ns_pid is None:  # MainPID is a PID of the inspected namespace: only ours can be looked up
        from ..collect.units import process_age

        age = lambda pid: process_age(root, pid)  # noqa: E731
    log_lines, why = journal.failure_lines(root, now - opt.lookback)
    if why and root.live:
        later.append(f"cgroup mkdir failures in the journal not looked for: {why}")
    # perf has had the probes' and the journal's time to finish
    churn = tracer.stop(s.seconds, root) if tracer else None
    if tracer and churn is None and tracer.error:
        notes.append(f"cgroup churn trace failed: {tracer.error}")
    if tracer and tracer.note:
        notes.append(f"cgroup churn trace: {tracer.note}")
    notes += later
    osrelease, meminfo_text = (_read_or_none(root, f) for f in ("/proc/sys/kernel/osrelease", "/proc/meminfo"))
    _, swap = node_rule(osrelease, meminfo_text)  # an unreadable one is said once, by its section above
    window = Window(ticks=s.ticks, seconds=s.seconds, census0=s.census0, nics0=s.nics0, units0=s.units0,
                    units1=s.units1, events=events, since=now - opt.lookback, churn=churn, memcg_cost=cost,
                    zombie_warn=opt.zombie_warn, zombie_crit=opt.zombie_crit, process_age=age, release=osrelease,
                    swap_total_kib=swap, log_lines=log_lines, rules=opt.rules)
    found: list[Finding] = registry.run(window)
    correlate(found)
    for f in found:  # where the per-memcg cost came from, beside the figure
        if f.kind == "zombie_cgroups":
            f.data["cost_source"] = stored.source() if stored is not None else "not measured on this boot"
            f.evidence.append(f"per-memcg cost: {'from ' + stored.source() if stored is not None and cost else 'not measured on this boot'}")
    cpu_window, cpus = _cpus(s.stat0, s.stat1, notes)
    return CheckResult(ordered(found), cpus, _census(last), s.ticks, churn, s.started, s.seconds, notes, s.units1,
                       unread, cpu_window, {"path": root.path, "kind": root.kind, "description": root.describe()},
                       post, s.kernel_log, None if stored is None else stored.to_dict())


def _memcgs_dying(t: Tick) -> bool:
    c = t.census
    mem = c.controller("memory")
    return (c.v2 is not None and c.v2.memory_dying() > 0) or (mem is not None and (mem.dying or 0) > 0)


def to_json(res: CheckResult, root: str) -> dict:
    """The stable machine-readable schema (SCHEMA); fields are only ever added."""
    return {"schema": SCHEMA, "host": Root(root).hostname(),
            "time": res.started, "seconds": round(res.seconds, 3), "status": res.status,
            "exit_code": res.exit_code, "findings": [f.to_dict() for f in res.findings], "cpus": res.cpus,
            "cpu_window": res.cpu_window, "cgroups": res.census, "notes": res.notes, "root": res.root,
            "posture": None if res.posture is None else {**res.posture.to_dict(),
                                                           "says": posture.describe(res.posture)},
            "unread": [{"section": k, "problem": v} for k, v in res.unread.items()],
            "kernel_log": res.kernel_log, "probes": res.probes,
            "churn": None if res.churn is None else {
                "seconds": round(res.churn.seconds, 2), "events": res.churn.events,
                "released": res.churn.released, "still_dying": res.churn.still_dying,
                "creators": [{"comm": c.comm, "pattern": c.pattern, "hierarchy": c.hierarchy, "mkdir": c.mkdir,
                              "rmdir": c.rmdir, "unit": c.unit, "pids": sorted(c.pids)[:20],
                              **({"pod": c.pod} if c.pod else {})}
                             for c in res.churn.creators[:20]]}}


def _read_or_none(root, path: str) -> str | None:
    """A file the memcg-ID rule only refines (the kernel release, SwapTotal): unreadable means unknown."""
    try:
        return root.read_opt(path)
    except InputError:
        return None
