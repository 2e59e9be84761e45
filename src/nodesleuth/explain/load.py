"""Read what explain needs out of a store: ticks (with a margin, so episodes are never cut by the
query range), the cgroup churn trace, and the profile of any window on demand."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

from ..detect.incidents import GAP, HOT_BUSY, Episode, Incident, find_incidents, select
from ..model.records import CgEvent
from ..store import churn as churn_store, rollup, tier
from ..store.catalog import PROFILE
from ..store.rollup import PERIOD
from ..store.store import StoreReader

MARGIN = 300.0  # s read either side of the asked range; widened while an episode touches its edge
# A range longer than SPARSE_OVER (15 min) is read where the per-minute rollups (store/rollup.py) say something
# may have happened: a minute whose busiest second on some CPU came near HOT_BUSY, a minute with NIC
# events, a minute without a rollup (not written yet, or lost), and the range's first and last NEAR
# seconds; each with NEAR seconds either side (a NIC event looks back NIC_LOOKBACK (60 s) at the cores, the
# victim 60 s before an episode). Every second of every hot-core episode lies in such a minute, so
# the incidents found are those of reading every tick: a day of 96 CPUs decodes the busy hours, not
# 86,400 ticks.
SPARSE_OVER = 900.0
NEAR = 65.0
HOT_FLOOR = HOT_BUSY - 5.0  # the rollup's busy max is rounded to a whole percent: stay generous


@dataclass
class Recording:
    ticks: list
    churn: list[CgEvent]
    reader: StoreReader | None = None
    cost: str | None = None  # measured cost of the walk on this kernel, when known
    tiers: tier.Plan | None = None  # which retention tier covered which part of what was read
    _cache: dict = field(default_factory=dict)
    _classes: dict = field(default_factory=dict, repr=False)  # stack -> frame classes (profile/samples.py)
    _found: tuple | None = field(default=None, repr=False)  # (the ticks list, find_incidents of it)

    @property
    def start(self) -> float:
        return self.ticks[0].time if self.ticks else 0.0

    @property
    def end(self) -> float:
        return self.ticks[-1].time if self.ticks else 0.0

    def found(self) -> tuple[list[Incident], list[Episode]]:
        """find_incidents of these ticks, run once per ticks list: choosing, naming the nearest and
        widening the range all ask for them, and a day of ticks takes seconds to walk."""
        if self._found is None or self._found[0] is not self.ticks:
            self._found = (self.ticks, find_incidents(self.ticks))
        return self._found[1]

    def samples(self, t0: float, t1: float):
        """Profile samples of [t0 - 60, t1] (None when the store has no profile)."""
        if self.reader is None or not self.reader.segments(PROFILE):
            return None
        key = (round(t0 - 60, 3), round(t1, 3))
        if key not in self._cache:
            from ..profile.load import load

            s = self._cache[key] = load(self.reader, key[0], key[1] + 0.001)
            s.known = self._classes  # each stack's frame classes, worked out once for every range read
        return self._cache[key]

    def lost(self, t0: float, t1: float, cpu: int) -> int:
        """Samples perf lost on `cpu` (or on an unknown CPU) in [t0, t1] (profile/load.py lost_samples)."""
        if self.reader is None:
            return 0
        from ..profile.load import lost_samples

        return lost_samples(self.reader, t0, t1, {cpu})


def one_shot() -> None:
    """For a command that reads a recording once and exits: the cycle collector off. A day of
    96 CPUs decodes into ~1 M small containers, none in a cycle; the collector's repeated passes
    over them cost more CPU than the decoding itself (benchmarks/results/summary.md, issue 17)."""
    gc.disable()


def windows(reader: StoreReader, t0: float | None, t1: float | None) -> list[tuple[float, float]] | None:
    """The parts of [t0, t1] worth decoding tick by tick, from the rollups; None: read it all."""
    span = tier.span(reader)
    if span is None:
        return None
    a = span[0] if t0 is None else max(t0, span[0])
    b = span[1] if t1 is None else min(t1, span[1])
    if b - a <= SPARSE_OVER:
        return None
    minutes = {float(m.t): m for m in rollup.minutes(reader, a, b)}  # an unreadable minute: read its ticks
    if not minutes:
        return None
    wins = [(a, a + NEAR), (b - NEAR, b)]
    slot = a - a % PERIOD
    while slot <= b:
        r = minutes.get(slot)
        if r is None or r.ev or max(r.bmax or [100], default=100) >= HOT_FLOOR:
            wins.append((slot - NEAR, slot + PERIOD + NEAR))
        slot += PERIOD
    wins.sort()
    out: list[list[float]] = []
    for w0, w1 in wins:
        w0, w1 = max(a, w0), min(b, w1)
        if out and w0 <= out[-1][1] + GAP:
            out[-1][1] = max(out[-1][1], w1)
        else:
            out.append([w0, w1])
    return [(w0, w1) for w0, w1 in out]


def _ticks(reader: StoreReader, t0: float | None, t1: float | None) -> list:
    """Ticks of [t0, t1] from the finest retention tier that covers each part (store/tier.py)."""
    wins = windows(reader, t0, t1)
    if wins is None:
        return list(tier.ticks(reader, t0, t1, lazy=True))
    out: list = []
    for w0, w1 in wins:
        for tk in tier.ticks(reader, w0, w1, lazy=True):
            if not out or tk.time > out[-1].time:  # windows are apart, but never twice the same tick
                out.append(tk)
    return out


def opened(store: StoreReader | str) -> StoreReader:
    """An open reader as is (a web request reads the store through one), a path opened."""
    return store if isinstance(store, StoreReader) else StoreReader(store)


def recording(store: StoreReader | str, t0: float | None, t1: float | None) -> tuple[Recording, list]:
    """Ticks of [t0 - margin, t1 + margin], widened until no episode touches an edge that is not
    the recording's own, so the episodes found do not depend on the range asked. The incidents
    found on the last ticks read are kept in the Recording (Recording.found)."""
    reader = opened(store)
    margin = MARGIN
    found = None
    while True:
        lo = None if t0 is None else t0 - margin
        hi = None if t1 is None else t1 + margin
        ticks = _ticks(reader, lo, hi)
        if not ticks or (lo is None and hi is None):
            break
        found = find_incidents(ticks)
        eps = found[1]
        cut_lo = lo is not None and any(e.start - ticks[0].time < GAP + ticks[0].interval for e in eps)
        cut_hi = hi is not None and any(ticks[-1].time - e.end < GAP for e in eps)
        span = tier.span(reader)
        # read from before the recording's start (or past its end): nothing further to widen to
        at_start = span is None or lo is None or lo <= span[0] or ticks[0].time - span[0] < GAP + 1
        at_end = span is None or hi is None or hi >= span[1] or span[1] - ticks[-1].time < GAP
        if not ((cut_lo and not at_start) or (cut_hi and not at_end)):
            break
        margin *= 4
        reader.problems.clear()
    c0 = None if not ticks else ticks[0].time - 600
    c1 = None if not ticks else ticks[-1].time + 5
    churn: list[CgEvent] = churn_store.events(reader, c0, c1)
    rec = Recording(ticks, churn, reader, tiers=tier.plan(reader, lo, hi))
    if found is not None:
        rec._found = (ticks, found)
    return rec, reader.problems


def extent(store: StoreReader | str, t0: float, t1: float) -> tuple[float, float]:
    """What explain reads for [t0, t1]: the span of the ticks `recording` reads (its margin, widened
    until no episode is cut, within the store), with the range itself. `nodesleuth cut` copies this
    much, so the cut explains the range as the source does (the victim's minute, the loops before,
    an episode that began before t0 or outlasted t1). A second more either side: a tick is stamped
    on its whole second, its frame in the store a moment later."""
    rec, _ = recording(store, t0, t1)
    return (min(t0, rec.start - 1), max(t1, rec.end + 1)) if rec.ticks else (t0, t1)


def nearest(store: StoreReader | str, t: float) -> tuple[Recording, list]:
    """A recording around `t` wide enough to hold the incident nearest to it: ranges widened 8x from
    ±15 min until one holds an incident no further from t than the range reaches (then none outside
    can be nearer), or the whole recording is read. A month-long store is read where it must be,
    not whole, to name the nearest incident to a second no incident covers. Each range's problems
    are its own (the reader's are cleared before it), as they were with a reader per range."""
    reader = opened(store)
    span = tier.span(reader)
    if span is None:
        reader.problems.clear()
        return recording(reader, None, None)
    r = 900.0
    while True:
        lo, hi = t - r, t + r
        whole = lo <= span[0] and hi >= span[1]
        reader.problems.clear()
        rec, problems = recording(reader, None if whole else lo, None if whole else hi)
        found, _ = rec.found()
        near = min((i.distance(t) for i in found), default=None)
        if whole or (near is not None and near <= r):
            return rec, problems
        r *= 8


def incidents(rec: Recording, t0: float | None = None, t1: float | None = None) -> list[Incident]:
    found, _ = rec.found()
    return select(found, t0, t1)


def choose(rec: Recording, at: float | None, t0: float | None, t1: float | None) -> tuple[list[Incident], list[str]]:
    """The incidents to explain and what to tell the user about the choice. With `at`: the one
    covering it, or none, naming the nearest with its distance; never silently another one."""
    from ..detect.incidents import at as covering
    from ..model.timeparse import iso

    found, _ = rec.found()
    said = [f"read from {rec.tiers.say()}"] if rec.tiers is not None and rec.tiers.coarse else []
    if at is None:
        return select(found, t0, t1), said
    inc, near = covering(found, at)
    if inc is not None:
        return [inc], said
    if near is None:
        return [], said + [f"no incident covers {iso(at)}; the recording has no incidents"]
    d = near.distance(at)
    side = "before" if near.end < at else "after"
    return [], said + [f"no incident covers {iso(at)}; the nearest is {near.kind} at {iso(near.time)}, "
                       f"{d:.0f} s {side} it (ask --at {iso(near.time)})"]
