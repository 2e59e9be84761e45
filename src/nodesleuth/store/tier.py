"""Retention tiers: the 10 s aggregates the recorder writes beside its 1 Hz ticks, and reading a
range from the finest tier that still covers it.

A 10 s aggregate is a Tick (so dump, replay, explain and the web read it as they read a second),
its `interval` the window's seconds, and:
- `cpu_raw`: each CPU's jiffies summed over the window (CpuJiffies.merge), so its columns are exactly what
  `mpstat -P ALL 10` prints for it (the mean over the window, not a mean of percentages);
- per CPU the busiest second's busy % (`bmax`), sys % (`smax`) and how many seconds were at or over
  the hot-core threshold (`hot`): a 3 s hot core in a quiet 10 s window still shows;
- `procs`: each process's mean % of a CPU over the window (top 5 per CPU over 0.5 %, as a tick: Procs.merge_over);
- every kernel event of the window; NIC IRQs summed; the NIC counters, units, cgroup census and
  meminfo of its last second; every section (softirqs, ksoftirqd wait/run, softnet, tcp, ...)
  folded by its class's `merge(list)` (counters summed, states their last second's).

What is lost at 10 s: which second inside the window (an episode's start and end are known to the
window), per-second shapes (a CPU 100 % for 5 s reads 50 % busy, 100 % max, 5 hot seconds), and the
processes under 0.5 % of a CPU over the window. The hot-core rule (detect/incidents.py) reads a
CPU with two or more hot seconds in a window as its busiest second (so every run of >= 3 hot
seconds is found: one of its windows holds two of them) and any other CPU as its mean.

At the 1-minute tier (store/rollup.py's RollupMinute, kept for a year) a minute reads as a tick
with per CPU the mean busy and sys % and the busiest second; no processes, only the NIC events'
reasons, the census's memory counts, and the sections a panel draws folded over the minute
(Section.fold; minutes written before sections were folded have none).

`ticks(reader, t0, t1)` reads [t0, t1] from the 1 s ticks where they exist and from the coarser
tiers before them, in time order; `plan()` says which tier covers which part, for the line every
reader prints (a command-line reader on stderr, explain in its notes, the web in its answer).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterator

from ..model.mpstat import from_deltas
from ..model.records import SECTIONS, CpuUtil, Events, KernelEvent, Tick
from ..model.section import restore
from ..model.thresholds import HOT_BUSY
from ..model.timeparse import iso
from . import catalog, query, rollup
from .catalog import ROLLUP, TICKS, TICKS10

PERIOD = 10.0
HOT_IN_WINDOW = 2  # hot seconds that make a window's CPU read as its busiest second
LOST = {"10s": "seconds inside each 10 s window (an episode's edges are known to 10 s; busy is the window's mean, "
               "with its busiest second and hot seconds per CPU), processes under 0.5 % of a CPU",
        "1min": "seconds inside each minute, processes, kernel-log messages (NIC events keep their reason), "
                "NIC counters, units; busy and sys are the minute's means with its busiest second, the charts' "
                "series the minute's sums"}


class CoarseTick(Tick):
    """A Tick that stands for a window: `tier` ("10s" or "1min"), `n` seconds it sums, and per CPU
    `bmax` (busiest second's busy %), `smax` and `hot` (seconds >= HOT_BUSY; None at 1 min)."""

    tier: str = "10s"
    n: int = 0
    bmax: dict = None  # type: ignore[assignment]
    smax: dict = None  # type: ignore[assignment]
    hot: dict | None = None

    def cpu_busy(self) -> tuple[list[int], list[float]]:
        cpus, mean = super().cpu_busy()
        bmax, hot = self.bmax or {}, self.hot
        out = []
        for c, b in zip(cpus, mean):
            m = bmax.get(c)
            hot_here = (hot.get(c, 0) >= HOT_IN_WINDOW) if hot is not None else (m is not None and m >= HOT_BUSY)
            out.append(m if hot_here and m is not None else b)
        return cpus, out

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["tier"] = self.tier
        d["seconds"] = self.n
        d["busy_max"] = {str(c): v for c, v in sorted((self.bmax or {}).items())}
        if self.hot is not None:
            d["hot_seconds"] = {str(c): v for c, v in sorted(self.hot.items()) if v}
        return d


def _coarse(tk: Tick, tier: str, n: int, bmax: dict, smax: dict, hot: dict | None) -> CoarseTick:
    c = CoarseTick.__new__(CoarseTick)
    c.__dict__.update({f.name: getattr(tk, f.name) for f in dataclasses.fields(Tick)})
    c.tier, c.n, c.bmax, c.smax, c.hot = tier, n, bmax, smax, hot
    return c


class Aggregator(rollup.Window):
    """Feeds 1 Hz ticks; returns a window's aggregate (a Tick plus its `extra` record fields) when a
    window of `period` seconds (aligned to the wall clock) closes. The busiest seconds are kept as ticks come
    (plain arithmetic on the jiffies, as store/rollup.py does: this runs every second)."""

    def __init__(self, period: float = PERIOD):
        self.slot: float | None = None
        super().__init__(period)

    def _reset(self) -> None:
        super()._reset()
        self.interval = 0.0
        self.bmax: dict[int, float] = {}
        self.smax: dict[int, float] = {}
        self.hot: dict[int, int] = {}

    def add(self, t: Tick) -> tuple[Tick, dict] | None:
        slot = (t.time - 1e-6) - (t.time - 1e-6) % self.period  # a tick at 10:00:10 ends the 10:00:00 window
        out = None
        if self.slot is not None and slot != self.slot and self.n:
            out = self.aggregate()
        if slot != self.slot:
            self.slot = slot
            self._reset()
        self._take(t)
        return out

    def flush(self) -> tuple[Tick, dict] | None:
        out = self.aggregate() if self.n else None
        self._reset()
        return out

    def _take(self, t: Tick) -> None:
        self.interval += t.interval
        bmax, smax, hot = self.bmax, self.smax, self.hot
        for c, busy, sys_ in t.cpu_raw.busy_sys() if t.cpu_raw else ():  # shared with the minute's rollup
            if busy is None:
                busy, sys_ = (u := from_deltas(c, t.cpu_raw[c])).busy, u.sys
            if busy > bmax.get(c, -1.0):
                bmax[c] = busy
            if sys_ > smax.get(c, -1.0):
                smax[c] = sys_
            if busy >= HOT_BUSY:
                hot[c] = hot.get(c, 0) + 1
        self._keep(t)

    def aggregate(self) -> tuple[Tick, dict]:
        sections = {name: SECTIONS[name].merge_over(vals, self.seconds[name]) for name, vals in self.sections.items()}
        agg = Tick(time=self.last.time, interval=self.interval, cpu={}, **sections)
        cpus = sorted(self.bmax)
        extra = {"ag": {"n": self.n, "ci": cpus, "bmax": [round(self.bmax[c], 1) for c in cpus],
                        "smax": [round(self.smax[c], 1) for c in cpus], "hot": [self.hot.get(c, 0) for c in cpus]}}
        return agg, extra


def from_record(tk: Tick, rec_extra: dict | None) -> Tick:
    """The tick a 10 s record decodes to: a CoarseTick when it carries its aggregate fields."""
    ag = (rec_extra or {}).get("ag")
    if not ag:
        return tk
    cpus = ag.get("ci", [])
    return _coarse(tk, "10s", ag.get("n", 0), dict(zip(cpus, ag.get("bmax", []))),
                   dict(zip(cpus, ag.get("smax", []))), dict(zip(cpus, ag.get("hot", []))))


def from_minute(m) -> CoarseTick:
    """A stored minute (RollupMinute) as a tick: means, busiest seconds, NIC events, the census, and the
    sections folded over the minute (Section.fold: those a panel draws)."""
    cpu: dict[int, CpuUtil] = {}
    for c, (b, s) in enumerate(zip(m.busy, m.sys)):
        usr = max(0.0, float(b) - float(s))
        cpu[c] = CpuUtil(cpu=c, usr=usr, nice=0.0, sys=float(s), iowait=0.0, irq=0.0, soft=0.0, steal=0.0,
                         guest=0.0, gnice=0.0, idle=max(0.0, 100.0 - b))
    if cpu:
        n = len(cpu)
        mb = sum(m.busy) / n
        ms = sum(m.sys) / n
        cpu[-1] = CpuUtil(cpu=-1, usr=max(0.0, mb - ms), nice=0.0, sys=ms, iowait=0.0, irq=0.0, soft=0.0, steal=0.0,
                          guest=0.0, gnice=0.0, idle=max(0.0, 100.0 - mb))
    events = Events(KernelEvent(seq=0, time=e[0], usec=None, reason=e[1], kind=e[2], severity="", driver="",
                                ifname=e[3] if len(e) > 3 else "", message="", category="nic") for e in m.ev)
    tk = Tick(time=m.t + 60, interval=float(m.n), cpu=cpu, events=events,
              **restore({"x": m.x or {}}, "rollup record", keys=False))
    return _coarse(tk, "1min", m.n, {c: float(v) for c, v in enumerate(m.bmax)}, {}, None)


def minute_sections(m, names: tuple[str, ...]) -> Tick:
    """Only the named sections of a stored minute, as a tick (time, interval, those sections): what a chart
    of a day reads, without the per-CPU figures from_minute builds."""
    return Tick(time=m.t + 60, interval=float(m.n), cpu={}, **restore({"x": m.x or {}}, "rollup record", names, keys=False))


@dataclass
class Part:
    tier: str  # "1s", "10s", "1min"
    t0: float | None
    t1: float | None


@dataclass
class Plan:
    parts: list[Part] = field(default_factory=list)

    @property
    def tiers(self) -> list[str]:
        return [p.tier for p in self.parts]

    @property
    def coarse(self) -> bool:
        return any(p.tier != "1s" for p in self.parts)

    def say(self) -> str:
        """One line: which tier covers which part of the range, and what a coarse one loses."""
        if not self.parts:
            return "no recording in that range"

        def when(x, edge):
            return edge if x is None else iso(x)
        if not self.coarse:
            return "tier 1s (every second)"
        bits = [f"{p.tier} {when(p.t0, 'start')} -> {when(p.t1, 'end')}" for p in self.parts]
        lost = "; ".join(f"at {t}: lost {LOST[t]}" for t in dict.fromkeys(p.tier for p in self.parts) if t in LOST)
        return "tiers " + ", ".join(bits) + " (the 1 s ticks of the earlier part are past their retention); " + lost

    def to_dict(self) -> dict:
        return {"tiers": [{"tier": p.tier, "from": p.t0, "to": p.t1} for p in self.parts]}


def _firsts(reader, upto: int = 3) -> list:
    """Where the 1 s, 10 s and 1 min tiers begin (the first `upto` of them; the rest None)."""
    firsts = getattr(reader, "_tier_firsts", None) or [None, None, None]
    done = getattr(reader, "_tier_done", 0)
    for k in range(done, upto):  # once per reader
        st = (TICKS, TICKS10, ROLLUP)[k]
        firsts[k] = reader.first(st, indexed=True) if reader.has(st) else None
    try:
        reader._tier_firsts, reader._tier_done = firsts, max(done, upto)
    except AttributeError:
        pass
    return firsts[:upto] + [None] * (3 - upto)


def span(reader) -> tuple[float, float] | None:
    """First and last time of the recording over all tiers (the coarse ones reach further back)."""
    f1, f10, f60 = _firsts(reader)
    first = f1
    # a coarser tier counts where it reaches before the finer ones (written beside them, it starts up
    # to one of its periods earlier: its first window or minute began before the first second)
    for f, period in ((f10, PERIOD), (f60, 60.0)):
        if f is not None and (first is None or f + period <= first):
            first = f
    if first is None:
        return None
    for st in (TICKS, TICKS10, ROLLUP):
        if reader.has(st):
            s = reader.span(st)
            if s is not None:
                return first, s[1] + (60.0 if st is ROLLUP else 0.0)
    return None


def plan(reader, t0: float | None, t1: float | None) -> Plan:
    """Which tier covers which part of [t0, t1]: 1 s from where the ticks begin, the 10 s aggregates
    before that, the minutes before those."""
    f1 = _firsts(reader, 1)[0]
    if f1 is not None and t0 is not None and t0 >= f1:
        return Plan([Part("1s", t0, t1)])  # the 1 s ticks cover it all: the coarser tiers are not looked at
    firsts = _firsts(reader)
    f1, f10, f60 = firsts
    parts: list[Part] = []
    lo = t0
    for tier, begin, period in (("1min", f60, 60.0), ("10s", f10, PERIOD)):
        if begin is None:
            continue
        finer = [x for x in firsts[:2 if tier == "1min" else 1] if x is not None]
        end = min(finer) if finer else None  # where a finer tier takes over
        if end is not None and begin + period > end:
            continue  # written alongside the finer tier from its start: nothing only it covers
        if (end is not None and lo is not None and lo >= end) or (t1 is not None and begin > t1):
            continue
        if end is None:  # nothing finer is left: this tier covers the rest
            parts.append(Part(tier, lo, t1))
            return Plan(parts)
        a = lo if lo is not None else begin
        b = end if t1 is None else min(end, t1)
        if a < b:
            parts.append(Part(tier, lo, b))
            lo = b
    if f1 is not None and (t1 is None or f1 <= t1 or not parts):
        parts.append(Part("1s", lo, t1))
    return Plan(parts)


def ticks(reader, t0: float | None, t1: float | None, lazy: bool = False, carry: bool = True,
          on_segment=None, using: Plan | None = None) -> Iterator[Tick]:
    """The ticks of [t0, t1] from the plan's tiers, in time order (coarse ones are CoarseTicks)."""
    p = using or plan(reader, t0, t1)
    for part in p.parts:
        end = part.t1
        if part.tier == "1s":
            yield from query.ticks(reader, part.t0, end, on_segment=on_segment, carry=carry, lazy=lazy)
        elif part.tier == "10s":
            for tk, extra in query.ticks_with(reader, TICKS10, part.t0, end, carry=carry, on_segment=on_segment):
                if end is not None and part is not p.parts[-1] and tk.time >= end:
                    continue  # the finer tier's part holds this window's seconds
                yield from_record(tk, extra)
        else:
            for m in rollup.minutes(reader, part.t0, end):
                if (part.t0 is not None and m.t + 60 < part.t0) or (end is not None and part is not p.parts[-1]
                                                                    and m.t + 60 > end):
                    continue
                yield from_minute(m)


def at(reader, t: float) -> tuple[Tick | None, Plan]:
    """The record covering time `t` (the second ending at or after it; past the 1 s tier's retention,
    the 10 s window or minute that holds it), and the plan that found it."""
    p = plan(reader, t, t + 61.0)
    for tk in ticks(reader, t, t + 61.0, using=p):
        if tk.time >= t:
            if tk.time - tk.interval > t + 1e-6:
                break  # no record covers t (a gap in the recording)
            return tk, Plan([Part(_tier_of(tk), tk.time - tk.interval, tk.time)])
    return None, p


def _tier_of(tk: Tick) -> str:
    return tk.tier if isinstance(tk, CoarseTick) else "1s"


__all__ = ["at", "span", "Aggregator", "CoarseTick", "Plan", "plan", "ticks", "from_record", "from_minute", "catalog"]
