"""The incident model, in one place: what a hot-core episode is, which kernel-log events are NIC
trouble, how the lines of one reset are grouped, and how episodes and NIC events become incidents.

`check`, `explain`, `remedy`, the exporter, the rollups and the web view all use these, so they
cannot disagree on what an incident is.

Rule (the incident's signature; thresholds in model/thresholds.py): one CPU >= HOT_BUSY % busy for >= HOT_SECONDS while the other
CPUs averaged < OTHERS_MAX % over the same seconds. A whole busy node is load, not starvation.
"The other CPUs" of a second are those not themselves >= HOT_BUSY (all of them when every one is):
two cores saturated at once by two causes are two incidents, not a busy node (on 4 CPUs, a second
hot core alone would lift the others' mean to >= 33%; the corpus's `two_causes`).
Episodes are a property of the recording: they are found over all ticks given (callers pass the
whole recording or a margin wide enough that no episode is cut, see `explain.load`), never over
the query range alone.
"""

from __future__ import annotations

from collections import defaultdict
import re
from dataclasses import dataclass, field, replace

from ..model.kube import pod_name
from ..model.rules import is_nic
from ..model.thresholds import HOT_BUSY, HOT_SECONDS, OTHERS_MAX

JITTER = 0.25  # 2.8 s of 1 s ticks is three ticks
GAP = 1.5  # a missing sample breaks a run
NIC_MERGE = 5.0  # lines of one reset come within this many seconds, per interface
NIC_LOOKBACK = 60.0  # a saturated core up to this long before a NIC event can have starved it
@dataclass(frozen=True)
class ProcShare:
    """A process on a hot core: its mean % of that CPU and its share of the core's busy time."""

    pid: int
    comm: str
    pct: float  # mean % of the CPU over the episode
    share: float  # pct / the CPU's mean busy %
    estimate: bool = False  # most of its share scaled or spread by the per-CPU fit (threads migrated)
    pod: dict | None = None  # its Kubernetes pod and container (model/kube.py PodRef.to_dict), when in one

    @property
    def label(self) -> str:
        """`comm (pid N)`, with namespace/pod/container when it runs in a pod."""
        return f"{self.comm} (pid {self.pid})" + (f" in pod {pod_name(self.pod)}" if self.pod else "")


@dataclass
class Episode:
    cpu: int
    start: float  # wall time the first hot interval began
    end: float  # wall time the last hot interval ended
    seconds: float
    busy_mean: float
    busy_min: float
    usr_mean: float
    sys_mean: float
    soft_mean: float
    irq_mean: float
    others_mean: float
    node_mean: float
    top: list[ProcShare] = field(default_factory=list)

    @property
    def excess(self) -> float:
        """Busy % above what the other CPUs averaged: the part that needs explaining."""
        return max(0.0, self.busy_mean - self.others_mean)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "start": self.start, "end": self.end, "seconds": round(self.seconds, 2),
                "busy": round(self.busy_mean, 1), "busy_min": round(self.busy_min, 1),
                "usr": round(self.usr_mean, 1), "sys": round(self.sys_mean, 1), "softirq": round(self.soft_mean, 1),
                "irq": round(self.irq_mean, 1), "others_busy": round(self.others_mean, 1),
                "node_busy": round(self.node_mean, 1), "excess": round(self.excess, 1),
                "top": [{"pid": p.pid, "comm": p.comm, "pct": round(p.pct, 1), "share": round(p.share, 3),
                         "estimate": p.estimate, **({"pod": p.pod} if p.pod else {})} for p in self.top]}


@dataclass
class _Second:
    time: float
    interval: float
    busy: float
    usr: float
    sys: float
    soft: float
    irq: float
    others: float
    node: float
    procs: list  # ProcUse on this CPU


class HotCoreTracker:
    """Streams ticks and closes episodes as they end: the single implementation of the rule, used
    in batch by `episodes()` and live by the exporter."""

    def __init__(self, busy_min: float = HOT_BUSY, min_seconds: float = HOT_SECONDS,
                 others_max: float = OTHERS_MAX):
        self.busy_min = busy_min
        self.min_seconds = min_seconds
        self.others_max = others_max
        self.runs: dict[int, list[_Second]] = defaultdict(list)
        # per CPU of a current run: [its seconds, the others' busy % summed], added second by second in the
        # run's order (so the same doubles as summing the run): the exporter asks every second, and a run
        # an hour long would otherwise be summed whole 3,600 times an hour
        self._sums: dict[int, list[float]] = {}
        self.last_t: float | None = None

    def run_seconds(self, cpu: int) -> float:
        """How long this CPU has been >= busy_min without a break (0 if not now)."""
        s = self._sums.get(cpu)
        return s[0] if s is not None else 0

    def run_others(self, cpu: int) -> float | None:
        """Mean busy % of the other CPUs over this CPU's current run (None when it is not hot)."""
        run, s = self.runs.get(cpu), self._sums.get(cpu)
        return s[1] / len(run) if run and s is not None else None

    def gauges(self, t) -> dict[int, tuple[float, float | None]]:
        """Per CPU of the tick just fed: (seconds hot so far, the others' mean busy % over them), what
        the exporter publishes so an alert applies the whole rule (model/metrics.py)."""
        cpus, _ = t.cpu_busy()
        return {c: (self.run_seconds(c), self.run_others(c)) for c in cpus}

    def feed(self, t) -> list[Episode]:
        # busy once per CPU (a day of 96 CPUs is 8.3 M of them); the CPU's columns, the node and
        # the processes only on a second with a hot CPU (a decoded tick builds them when read)
        cpus, busy = t.cpu_busy()
        if not cpus:
            return []
        out: list[Episode] = []
        if self.last_t is not None and t.time - t.interval - self.last_t > GAP:
            out += self.close()
        self.last_t = t.time
        total = node = by_cpu = cool = None
        for c, b in zip(cpus, busy):
            if b >= self.busy_min:
                if by_cpu is None:
                    total = sum(busy)
                    a = t.cpu_of(-1)
                    node = a.busy if a is not None else total / len(cpus)
                    by_cpu = {}
                    for p in t.procs:
                        by_cpu.setdefault(p.cpu, []).append(p)
                    cool = [x for x in busy if x < self.busy_min]  # the CPUs not saturated themselves
                u = t.cpu_of(c)
                others = sum(cool) / len(cool) if cool else (total - b) / max(1, len(cpus) - 1)
                self.runs[c].append(_Second(t.time, t.interval, b, u.usr + u.nice, u.sys, u.soft, u.irq,
                                            others, node, by_cpu.get(c, [])))
                sums = self._sums.setdefault(c, [0, 0])
                sums[0] += t.interval
                sums[1] += others
            elif c in self.runs:
                out += self._close(c)
        return out

    def close(self) -> list[Episode]:
        out: list[Episode] = []
        for c in list(self.runs):
            out += self._close(c)
        return out

    def _close(self, cpu: int) -> list[Episode]:
        run = self.runs.pop(cpu, [])
        self._sums.pop(cpu, None)
        secs = sum(s.interval for s in run)
        if not run or secs < self.min_seconds - JITTER:
            return []
        e = _episode(cpu, run, secs)
        return [e] if e.others_mean < self.others_max else []


def _episode(cpu: int, run: list[_Second], secs: float) -> Episode:
    n = len(run)
    mean = lambda xs: sum(xs) / n  # noqa: E731
    busy = mean([s.busy for s in run])
    procs: dict[tuple[int, str], list] = {}
    for s in run:
        for p in s.procs:
            slot = procs.setdefault((p.pid, p.comm), [0.0, 0.0])
            slot[0] += p.pct
            if getattr(p, "estimate", False):
                slot[1] += p.pct
    # an estimate when most of its share came from seconds the per-CPU fit moved or scaled it (one
    # second of a pinned loop scaled because another job's thread migrated there does not make it one)
    top = sorted((ProcShare(pid, comm, v / n, (v / n) / busy if busy else 0.0, est > v / 2)
                  for (pid, comm), (v, est) in procs.items()), key=lambda p: -p.pct)[:8]
    return Episode(cpu, run[0].time - run[0].interval, run[-1].time, secs, busy, min(s.busy for s in run),
                   mean([s.usr for s in run]), mean([s.sys for s in run]), mean([s.soft for s in run]),
                   mean([s.irq for s in run]), mean([s.others for s in run]), mean([s.node for s in run]), top)


def episodes(ticks, **kw) -> list[Episode]:
    """Every hot-core episode in these ticks, longest first."""
    tr = HotCoreTracker(**kw)
    out: list[Episode] = []
    for t in ticks:
        out += tr.feed(t)
    out += tr.close()
    pods = pods_seen(ticks)
    for e in out:
        e.top = [replace(p, pod=pods.get(p.pid)) if p.pid in pods else p for p in e.top]
    return sorted(out, key=lambda e: (-e.seconds, e.cpu, e.start))


def pods_seen(ticks) -> dict[int, dict]:
    """pid -> its pod, for the processes the hogs collector looked at closer (those on hot cores)."""
    out: dict[int, dict] = {}
    for t in ticks:
        for r in (t.hogs.rows if getattr(t, "hogs", None) else ()):
            if r.get("pod"):
                out[r["pid"]] = r["pod"]
    return out


# --- NIC events ---------------------------------------------------------------------------------

def device(e) -> str:
    """One device label for an event: the interface name, else the bus address."""
    return e.ifname or e.fields.get("bus", "") or "?"


@dataclass
class NicGroup:
    """The kernel-log lines of one NIC reset/timeout on one interface."""

    device: str
    events: list

    @property
    def start(self) -> float:
        return self.events[0].time

    @property
    def end(self) -> float:
        return self.events[-1].time


class NicGrouper:
    """Groups NIC events per device: a line within NIC_MERGE s of its group's first line joins it.
    dev_* lines name only the PCI address; a group with the same bus address is the same device."""

    def __init__(self, merge: float = NIC_MERGE, keep: bool = True):
        self.merge = merge
        self.keep = keep  # False (a live exporter): forget groups once no line can join them
        self.groups: list[NicGroup] = []
        self.bus_if: dict[str, str] = {}

    def add(self, e) -> bool:
        """True when the event opens a new group (a new incident)."""
        bus = e.fields.get("bus", "")
        if e.ifname and bus:
            self.bus_if[bus] = e.ifname
        dev = e.ifname or self.bus_if.get(bus, bus) or "?"
        for g in reversed(self.groups):
            if e.time - g.start > self.merge:
                break
            if g.device == dev or dev == "?" or g.device == "?" or g.device == bus:
                if g.device in (bus, "?") and dev not in (bus, "?"):
                    g.device = dev
                g.events.append(e)
                return False
        if not self.keep:
            self.groups = [g for g in self.groups if e.time - g.start <= self.merge]
        self.groups.append(NicGroup(dev, [e]))
        return True


def group_nic_events(events, rules_path: str | None = None) -> list[NicGroup]:
    g = NicGrouper()
    for e in sorted((e for e in events if is_nic(e, rules_path)), key=lambda e: e.time):
        g.add(e)
    return g.groups


# --- incidents ----------------------------------------------------------------------------------

@dataclass
class Incident:
    """A NIC reset/timeout (with the hot-core episode that may have starved it), or a hot-core
    episode no NIC event explains."""

    kind: str  # nic_reset | hot_core
    time: float  # the first NIC line, or the episode's start
    start: float  # span the incident covers (`--at` inside it selects it)
    end: float
    nic: NicGroup | None = None
    episode: Episode | None = None

    def distance(self, t: float) -> float:
        """0 inside the span, else seconds to its nearest edge."""
        return 0.0 if self.start <= t <= self.end else min(abs(t - self.start), abs(t - self.end))


def may_have_starved(start: float, end: float, t: float, lookback: float = NIC_LOOKBACK) -> bool:
    """A core hot over [start, end] can explain something logged at t: hot within [t - lookback, t + 2]."""
    return start <= t + 2 and end >= t - lookback


def episode_before(eps: list[Episode], t: float, lookback: float = NIC_LOOKBACK) -> Episode | None:
    """The episode that may have starved something logged at t: hot within [t - lookback, t + 2];
    the one with the most hot seconds in that window wins, then the latest."""
    best, key = None, None
    for e in eps:
        if not may_have_starved(e.start, e.end, t, lookback):
            continue
        overlap = min(e.end, t + 2) - max(e.start, t - lookback)
        k = (overlap, e.end)
        if key is None or k > key:
            best, key = e, k
    return best


def find_incidents(ticks, rules_path: str | None = None) -> tuple[list[Incident], list[Episode]]:
    """All incidents of these ticks, in time order, and all episodes."""
    ticks = list(ticks)
    eps = episodes(ticks)
    out: list[Incident] = []
    claimed: set[int] = set()
    for g in group_nic_events((e for t in ticks for e in t.events), rules_path):
        ep = episode_before(eps, g.start)
        if ep is not None:
            claimed.add(id(ep))
        start = min(g.start, ep.start) if ep is not None else g.start
        out.append(Incident("nic_reset", g.start, start, g.end, g, ep))
    for ep in eps:
        if id(ep) not in claimed:
            out.append(Incident("hot_core", ep.start, ep.start, ep.end, None, ep))
    return sorted(out, key=lambda i: (i.time, i.kind)), eps


def select(incidents: list[Incident], t0: float | None, t1: float | None) -> list[Incident]:
    """Incidents whose span overlaps [t0, t1]."""
    return [i for i in incidents if (t0 is None or i.end >= t0) and (t1 is None or i.start <= t1)]


def at(incidents: list[Incident], t: float) -> tuple[Incident | None, Incident | None]:
    """(the incident covering t, or None; the nearest incident when none covers t)."""
    covering = [i for i in incidents if i.distance(t) == 0.0]
    if covering:
        return max(covering, key=lambda i: (i.kind == "nic_reset", i.end)), None
    near = min(incidents, key=lambda i: i.distance(t), default=None)
    return None, near


# --- the victim: what the NIC's work got on a CPU -------------------------------------------------

def _window(ticks, t0: float, t1: float) -> list:
    """Ticks whose interval ends in (t0, t1]."""
    return [t for t in ticks if t0 < t.time <= t1 + 0.5]


_QUEUE = re.compile(r"(?:[-.]|comp|queue)(\d+)$")


def irq_queue(name: str) -> int | None:
    """The queue number an IRQ line serves, from its name (eth0-Tx-Rx-5, virtio2-input.5,
    mlx5_comp5@pci:0000:00:05.0, ...)."""
    m = _QUEUE.search(name.split(":", 1)[-1].split("@", 1)[0])
    return int(m.group(1)) if m else None


def victim(ticks, cpu: int, t0: float, t1: float, before: float = 60.0, queue: int | None = None) -> dict:
    """What the work a NIC needs got on this CPU: ksoftirqd/N's wait, NET_RX per second before and
    during, CPU pressure, and the share of the NIC's interrupts this CPU served."""
    during, prior = _window(ticks, t0, t1), _window(ticks, t0 - before, t0)
    out: dict = {}
    secs = sum(t.interval for t in during)
    waits = [t.starve["ksoftirqd_wait_ms"].get(cpu) for t in during if t.starve]
    waits = [w for w in waits if w is not None]
    if waits and secs:
        out["ksoftirqd_wait_s"] = round(sum(waits) / 1000, 3)
        out["ksoftirqd_wait_share"] = round(min(1.0, sum(waits) / 1000 / secs), 3)
        out["seconds"] = round(secs, 2)
    psi = [t.starve.get("psi_cpu_some_ms") for t in during if t.starve and t.starve.get("psi_cpu_some_ms") is not None]
    if psi and secs:
        out["psi_cpu_some_share"] = round(min(1.0, sum(psi) / 1000 / secs), 3)

    def rate(ts, name):
        vals = [(t.softirqs[name][cpu], t.interval) for t in ts if t.softirqs and name in t.softirqs
                and cpu < len(t.softirqs[name])]
        s = sum(iv for _, iv in vals)
        return round(sum(v for v, _ in vals) / s, 1) if s else None

    for name in ("NET_RX", "NET_TX"):
        a, b = rate(prior, name), rate(during, name)
        if a is not None or b is not None:
            out[name.lower() + "_per_s"] = {"before": a, "during": b}
    irq_here = irq_all = 0
    for t in during + prior:
        for name, row in (t.nic_irqs or {}).items():
            if queue is not None and irq_queue(name) != queue:
                continue  # the share of the stalled queue's interrupts, when the driver named the queue
            irq_all += sum(row)
            irq_here += row[cpu] if cpu < len(row) else 0
    if irq_all:
        out["nic_irq_share"] = round(irq_here / irq_all, 3)
        if queue is not None:
            out["queue"] = queue
    return out


def event_cpu(ticks, e, device: str) -> dict | None:
    """The CPU that served the reporting queue's interrupts around a NIC event, and that CPU's busy and
    softirq share in the event's second: the driver's own `cpu` field where its line prints one; else the
    device's IRQ lines in the recorded per-CPU interrupt counts of the 10 s before (the line of the
    queue the driver named, by the queue number its name ends with: eth0-Tx-Rx-5, virtio0-output.5,
    mlx5_comp5@pci:...; every line of the device when it named none), the CPU that counted most."""
    t = e.time
    if t is None:
        return None
    bus = e.fields.get("bus", "")
    keys = [k for k in (device, e.ifname, bus) if k and k != "?"]
    q = e.fields.get("queue")
    q = int(q) if q is not None and str(q).isdigit() else None
    out: dict = {}
    if str(e.fields.get("cpu", "")).isdigit():
        out.update(cpu=int(e.fields["cpu"]), how="the driver's line names it")
    else:
        per_cpu: dict[int, int] = {}
        lines: set = set()
        for tk in _window(ticks, t - 10, t + 2):
            for name, row in (tk.nic_irqs or {}).items():
                if not any(k in name for k in keys):
                    continue
                if q is not None and irq_queue(name) != q:
                    continue
                lines.add(name)
                for c, n in enumerate(row):
                    if n:
                        per_cpu[c] = per_cpu.get(c, 0) + n
        if not per_cpu:
            return None
        c, n = max(per_cpu.items(), key=lambda kv: kv[1])
        total = sum(per_cpu.values())
        out.update(cpu=c, how=f"{n} of the {total} interrupts of {', '.join(sorted(lines)[:3])} in the 10 s before",
                   irq_share=round(n / total, 3), lines=sorted(lines)[:6])
    at = next((tk for tk in ticks if tk.time >= t - 0.5), None)
    u = at.cpu_of(out["cpu"]) if at is not None else None
    if u is not None:
        out.update(busy=round(u.busy, 1), softirq=round(u.soft, 1), second=at.time)
    if q is not None:
        out["queue"] = q
    return out


def describe_event_cpu(device: str, ec: dict) -> str:
    q = f"queue {ec['queue']} of {device}" if "queue" in ec else device
    load = (f": {ec['busy']:.0f}% busy, softirq {ec['softirq']:.0f}% in that second" if "busy" in ec else
            ": its load that second was not recorded")
    return f"{q} is served on CPU {ec['cpu']} ({ec['how']}){load}"


def correlate(found: list) -> None:
    """A NIC event during or within NIC_LOOKBACK s after a hot-core episode is the incident's signature (the rule
    `may_have_starved`, the same as explain's): raise the episode's finding to critical and say so on both."""
    hots = [f for f in found if f.kind == "hot_core"]
    nics = [f for f in found if f.kind == "nic_reset"]
    for h in hots:
        for n in nics:
            times = [e["time"] for e in n.data.get("events", []) if e["time"] is not None]
            hit = [t for t in times if may_have_starved(h.data["start"], h.data["end"], t)]
            if hit:
                h.severity = "critical"
                h.data["nic_events"] = len(hit)
                h.evidence.append(f"NIC {n.data['ifname']} logged {len(hit)} reset/timeout line(s) during or "
                                  f"within {NIC_LOOKBACK:.0f} s after this episode")
                n.evidence.append(f"CPU {h.data['cpu']} was saturated when it happened (see hot core finding)")
