"""Loading long ranges fast (load_fast): whole hours and minutes from the pre-aggregated records
(profile/agg.py), only the partial minutes at the edges from raw samples, so an hour's flame graph
does not decode every sample."""

from __future__ import annotations

import math

import numpy as np

from ..store.catalog import PROFILE, agg
from ..store.store import StoreReader
from .arrays import distinct, intern
from .codec import Decoded, _names
from .load import load
from .parse import idle_stacks
from .samples import Samples


def load_fast(reader: StoreReader, t0: float | None, t1: float | None, cpus: set[int] | None = None,
              on_segment=None) -> Samples:
    """Stacks of [t0, t1) for flame graphs and top functions: whole hours and minutes from the
    pre-aggregated records (profile/agg.py), only the partial minutes at the edges from raw samples.
    Rows carry counts (Samples.count) and no meaningful time; stores without aggregates read raw."""
    from .agg import LEVELS, pid_of

    since = _levels_since(reader, LEVELS, cpus is None)
    levels = tuple(lv for lv in LEVELS if since[lv] < math.inf)
    if not levels:  # a store without aggregates (stores written before the 10 s level lack only it)
        return load(reader, t0, t1, on_segment)
    if t0 is None or t1 is None:
        span = reader.span(PROFILE)
        if span is None:
            return load(reader, t0, t1, on_segment)
    lo = span[0] if t0 is None else t0
    hi = span[1] + 60 if t1 is None else t1
    pieces = _pieces(lo, hi, levels, since)
    if all(lv == 0 for lv, _, _ in pieces):
        return load(reader, t0, t1, on_segment)  # under a minute: the raw samples are all there is
    rows = _Rows()
    for lv, a, b in pieces:
        if lv == 0:
            rows.add_raw(reader, a, b, cpus, on_segment)
    for lv, a, b in pieces:
        if lv != 0:
            rows.add_agg(reader, lv, a, b, cpus, on_segment)
    problems = list(reader.problems)
    cpu, pid, comm, stack, count = (np.concatenate(c) if c else np.zeros(0, np.int64) for c in rows.cols)
    pid, known = pid_of(pid)
    idle = idle_stacks(rows.stacks)
    return Samples(np.zeros(len(cpu)), cpu, pid, pid, comm, stack, rows.comms, rows.stacks, idle, problems, None,
                   known, ",".join(rows.events), count)


def _levels_since(reader: StoreReader, levels, all_cpus: bool) -> dict:
    """From when each aggregate level can serve whole windows (inf: it has no records)."""
    # from its first record on, or from its second where raw samples may be older than that record (a
    # store written before the level existed: the first record began mid-window); earlier windows come
    # from finer levels or raw samples
    raw_from = _first(reader, PROFILE)
    since = {}
    for lv in levels:
        first = _first(reader, agg(lv, all_cpus))
        since[lv] = first if raw_from >= first else first + lv
    return since


def _pieces(lo: float, hi: float, levels: tuple, since: dict) -> list[tuple[int, float, float]]:
    """[lo, hi) cut into (level or 0 for raw, from, to): coarsest windows inside, finer ones and raw at the edges."""
    pieces: list[tuple[int, float, float]] = []

    def cover(a: float, b: float, levels) -> None:
        if b <= a:
            return
        if not levels:
            pieces.append((0, a, b))
            return
        lv = levels[-1]
        a2, b2 = math.ceil(max(a, since[lv]) / lv) * lv, math.floor(b / lv) * lv
        if b2 <= a2:
            cover(a, b, levels[:-1])
            return
        pieces.append((lv, a2, b2))
        cover(a, a2, levels[:-1])
        cover(b2, b, levels[:-1])

    cover(lo, hi, levels)
    return pieces


class _Rows:
    """load_fast's counted rows (cpu, pid, comm, stack, count) with one stack table, comm table and event list."""

    def __init__(self):
        self.table = _StackTable()
        self.stacks = self.table.stacks
        self.comm_ix: dict[str, int] = {}
        self.comms: list[str] = []
        self.cols: list[list[np.ndarray]] = [[] for _ in range(5)]
        self.events: list[str] = []

    def _append(self, *cols: np.ndarray) -> None:
        """One batch's or record's rows, in global comm and stack ids."""
        for i, c in enumerate(cols):
            self.cols[i].append(c.astype(np.int64))

    def add_raw(self, reader: StoreReader, a: float, b: float, cpus: set[int] | None, on_segment) -> None:
        """An edge: its raw samples, counted per (cpu, pid, comm, stack) batch by batch."""
        from .agg import pid_column

        table, comm_ix, comms, events = self.table, self.comm_ix, self.comms, self.events
        for d in _raw_batches(reader, a, b, on_segment):
            m = (d.t >= a) & (d.t < b)
            if cpus is not None:
                m &= np.isin(d.cpu, list(cpus))
            if not m.any():
                continue
            cpu, pid, comm, stack, count = _count_rows(d.cpu[m], pid_column(d.pid[m], d.tid[m]), d.comm[m],
                                                       d.stack[m])
            cmap = np.array([intern(comm_ix, comms, c) for c in d.comms] or [0], dtype=np.int64)
            used = distinct(stack)
            smap = np.zeros(len(d.stack_frames), dtype=np.int64)
            smap[used] = [table.of(d.stack_names(i)) for i in used.tolist()]
            self._append(cpu, pid, cmap[comm], smap[stack], count)
            events += [e for e in (d.event or "").split(",") if e and e not in events]

    def add_agg(self, reader: StoreReader, lv: int, a: float, b: float, cpus: set[int] | None, on_segment) -> None:
        """Whole windows of level `lv`: the pre-aggregated records' rows, stacks matched by hash."""
        from ..store.aggregates import AggRecord

        table, comm_ix, comms, events = self.table, self.comm_ix, self.comms, self.events
        for t, payload in reader.read(agg(lv, cpus is None), a, b, on_segment):
            if not (a <= t < b):
                continue
            rec = AggRecord(payload)
            cpu, pid, comm, stack, count = rec.rows(cpus)
            if not len(count):
                continue
            cmap = np.array([intern(comm_ix, comms, c) for c in rec.comms], dtype=np.int64)
            used = distinct(stack)
            if rec.hashes is not None:  # by their hashes: the record's frame tables stay unparsed
                smap = np.zeros(len(rec.hashes), dtype=np.int64)
                smap[used] = table.hashed(rec, used)
            else:
                smap = np.zeros(len(rec.stack_frames), dtype=np.int64)
                smap[used] = [table.of(_frames_of(rec, i)) for i in used.tolist()]
            self._append(cpu, pid, cmap[comm], smap[stack], count)
            if rec.event and rec.event not in events:
                events.append(rec.event)


def _first(reader: StoreReader, name: str) -> float:
    """The time of a stream's first record (inf: none), from its first segment's frame headers."""
    from ..store.segment import SegmentReader

    for p in reader.segments(name):
        t = SegmentReader(p).first_time()
        if t is not None:
            return t
    return math.inf


def _raw_batches(reader: StoreReader, a: float, b: float, on_segment=None):
    """Decoded raw batches that may hold samples of [a, b) (as load reads them)."""
    for _, p in reader.read(PROFILE, a - 30.0, b, on_segment):
        yield Decoded(p)


def _count_rows(*cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """Identical rows of small non-negative-able integer columns summed: (unique columns..., count)."""
    cs = [c.astype(np.int64) for c in cols]
    lo = [int(c.min()) for c in cs]
    dims = [int(c.max()) - l + 1 for c, l in zip(cs, lo)]
    if math.prod(dims) >= 2 ** 62:  # cannot pack: sort the rows
        from .agg import reduce_rows

        out, counts = reduce_rows(cs, np.ones(len(cs[0]), dtype=np.int64))
        return (*out, counts)
    key = np.ravel_multi_index([c - l for c, l in zip(cs, lo)], dims)
    u, counts = np.unique(key, return_counts=True)
    return (*[x + l for x, l in zip(np.unravel_index(u, dims), lo)], counts)


class _StackTable:
    """Global stack ids for load_fast, by name tuple and by stack hash (profile/agg.py stack_hash)."""

    def __init__(self):
        self.stacks: list[tuple[str, ...]] = []
        self.ix: dict[tuple[str, ...], int] = {}
        self.by_hash: dict[int, int] = {}
        self._sorted = (np.zeros(0, np.uint64), np.zeros(0, np.int64))  # by_hash as sorted arrays
        self._stale = False

    def of(self, names: tuple[str, ...]) -> int:
        i = self.ix.get(names)
        if i is None:
            from .agg import stack_hash

            i = self.ix[names] = len(self.stacks)
            self.stacks.append(names)
            self.by_hash[stack_hash(names)] = i
            self._stale = True
        return i

    def hashed(self, rec, used: np.ndarray) -> np.ndarray:
        """Global ids of a record's stacks `used`, looked up by hash in one sorted search; only stacks
        not seen before are named (their frame tables parsed)."""
        if self._stale:
            hs = np.fromiter(self.by_hash.keys(), dtype=np.uint64, count=len(self.by_hash))
            ix = np.fromiter(self.by_hash.values(), dtype=np.int64, count=len(self.by_hash))
            o = np.argsort(hs)
            self._sorted, self._stale = (hs[o], ix[o]), False
        hs, ix = self._sorted
        h = rec.hashes[used].astype(np.uint64)
        pos = np.minimum(np.searchsorted(hs, h), max(len(hs) - 1, 0))
        hit = (hs[pos] == h) if len(hs) else np.zeros(len(h), dtype=bool)
        out = np.zeros(len(h), dtype=np.int64)
        out[hit] = ix[pos[hit]]
        miss = np.flatnonzero(~hit)
        for j in miss.tolist():
            out[j] = self.of(_frames_of(rec, int(used[j])))
        if len(miss):
            self._stale = True
        return out


def _frames_of(rec, i: int) -> tuple[str, ...]:
    return _names(rec.frames, rec.stack_frames[i])
