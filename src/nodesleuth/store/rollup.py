"""Per-minute rollups written beside the 1 Hz ticks, so a day's timeline is 1,440 small records
instead of 86,400 ticks: per CPU the mean and the max of the per-second busy %, the mean sys %,
the minute's NIC events, and each section folded over the minute as its class says (Section.fold: the ones a
panel draws: the census's memory counts and Percpu/Slab at the minute's end...), by field name."""

from __future__ import annotations

import dataclasses
from typing import Iterator

import orjson

from ..model.records import SECTIONS, Census, RollupMinute, Tick
from ..model.section import kept, store_into
from ..model.rules import is_nic
from .catalog import ROLLUP
from .segment import Problem

PERIOD = 60.0
_FIELDS = {f.name for f in dataclasses.fields(RollupMinute)}


def encode(m: RollupMinute) -> bytes:
    return orjson.dumps(dataclasses.asdict(m))


def decode(payload: bytes) -> RollupMinute:
    """A stored minute by field name (a key this version does not know is ignored); ValueError,
    TypeError or KeyError for a record that is not one."""
    d = orjson.loads(payload)
    # what a minute written before these were sections kept by hand: Percpu and Slab; the census's v1 memory
    # controller (tracked, live, dying), else (v2) its dying memory cgroups alone
    old = {k: v for k, v in (("Percpu", d.get("percpu")), ("Slab", d.get("slab"))) if v is not None}
    mem, dying = d.get("mem"), d.get("dying")
    census = {"cg": {"f": Census.CG, "r": [["memory", 0, *mem[:2]]]}} if mem else None if dying is None else {
        "c2": {"subsys": {"memory": [None, dying]}}}
    d["x"] = {**({"meminfo": old} if old else {}), **({"census": census} if census else {}), **(d.get("x") or {})}
    return RollupMinute(**{k: v for k, v in d.items() if k in _FIELDS})


def minutes(reader, t0: float | None = None, t1: float | None = None) -> Iterator[RollupMinute]:
    """The stored minutes starting in [t0 - PERIOD, t1]; an undecodable one is a store problem and
    counts as a minute without a rollup (readers then read its ticks)."""
    for _, payload in reader.read(ROLLUP, None if t0 is None else t0 - PERIOD, t1):
        try:
            yield decode(payload)
        except (ValueError, TypeError, KeyError) as e:
            reader.problems.append(Problem(f"{reader.dir}/{ROLLUP}", 0, f"undecodable rollup record: {e}"))


class Window:
    """What the minute's rollup and the 10 s aggregate (store/tier.py) both keep of a window's ticks: how
    many, the last one, and each section's values for the window's close to fold or merge."""

    def __init__(self, period: float):
        self.period = period
        self._reset()

    def _reset(self) -> None:
        self.n = 0
        self.sections: dict[str, list] = {}
        self.seconds: dict[str, list[float]] = {}  # each kept value's interval (Section.merge_over)
        self.last: Tick | None = None

    def _keep(self, t: Tick) -> None:
        """Count the tick in and keep its sections (every second: appends, no copies)."""
        iv = t.interval
        for name, v in kept(t).items():
            self.sections.setdefault(name, []).append(v)
            self.seconds.setdefault(name, []).append(iv)
        self.n += 1
        self.last = t


class Rollup(Window):
    def __init__(self, period: float = PERIOD):
        self.start: float | None = None
        super().__init__(period)

    def _reset(self) -> None:
        super()._reset()
        self.events: list = []  # the minute's NIC events: [time, reason, kind, ifname] (RollupMinute.ev)
        self.busy_sum: list[float] = []
        self.busy_max: list[float] = []
        self.sys_sum: list[float] = []

    def add(self, t: Tick) -> RollupMinute | None:
        """Feed a tick; returns the finished minute when a minute closes (StoreWriter.write stores it)."""
        out = None
        slot = t.time - t.time % self.period
        if self.start is not None and slot != self.start and self.n:
            out = self.record()
        if self.start != slot:
            self.start = slot
            self._reset()
        rows = t.cpu_raw.busy_sys() if t.cpu_raw else []
        if len(self.busy_sum) != len(rows):
            self.busy_sum = [0.0] * len(rows)
            self.busy_max = [0.0] * len(rows)
            self.sys_sum = [0.0] * len(rows)
        bs, bm, ss = self.busy_sum, self.busy_max, self.sys_sum
        for i, (c, busy, sys_) in enumerate(rows):
            if busy is None:
                continue
            bs[i] += busy
            ss[i] += sys_
            if busy > bm[i]:
                bm[i] = busy
        self.events += [[round(e.time, 3), e.reason, e.kind, e.ifname] for e in t.events if is_nic(e)]
        self._keep(t)
        return out

    def record(self) -> RollupMinute:
        n = max(1, self.n)
        folded = {name: SECTIONS[name].fold(vals) for name, vals in self.sections.items()}
        x = store_into({}, {k: v for k, v in folded.items() if v is not None and not v.empty()}, keys=False).get("x")
        return RollupMinute(
            t=self.start, n=self.n, busy=[round(x / n) for x in self.busy_sum], bmax=[round(x) for x in self.busy_max],
            sys=[round(x / n) for x in self.sys_sum], ev=self.events, x=x)

    def flush(self) -> RollupMinute | None:
        return self.record() if self.n else None
