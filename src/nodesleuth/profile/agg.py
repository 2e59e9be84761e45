"""Write-time pre-aggregation of the profile: per-minute and per-hour counts of (cpu, pid, comm, stack),
so a flame graph or top-functions of an hour or a day reads a few records instead of millions of
samples. Raw batches stay in the `profile` stream for subsecond views and heatmaps.

Each aggregator counts exactly the samples it was given, and each record is self-contained (its own
comm and stack tables), so restarts mid-window (two partial records for one hour) and retention
(dropping any record) keep every sum right. Per level two streams: `profile_agg10` /
`profile_agg60` ... (rows per CPU) and `profile_agg10all` ... (summed over CPUs, cpu = ALL_CPUS),
each record stamped with its window's start.

The subsecond heatmap has its own per-minute stream, `profile_heat60` (HEAT): per CPU the cells of
its work samples (second of the minute * 50 + FlameScope row, u16, one entry per sample, sorted), and
per second and CPU the counts of all and of work samples (for the hot-CPU marks); `profile_heat60all`
(HEAT_ALL) holds the same minutes with the cells summed over CPUs, a dense grid, for all-CPU views. A heatmap of an
hour or a day for any CPUs reads these instead of the samples; it is exact for FlameScope's 50 rows
and whole-second columns with a CPU filter only; pid, comm and cgroup filters and other row counts
read the raw samples (heatmap.heatmap_fast says which).

The Aggregator hands its records (AggRows, HeatMinute) to the store, which encodes them
(StoreWriter.write; the payloads: store/aggregates.py, whose AggRecord and HeatRecord read them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..store.aggregates import COLS
from ..store.catalog import AGG_LEVELS, HEAT, HEAT_ALL, agg
from .arrays import distinct, intern
from .codec import stored_times
from .parse import Batch, is_idle

# ten seconds (the raw samples an unaligned range decodes at its edges: < 10 s each, not < 60 s), a minute,
# ten minutes (an unaligned hour reads <= 33 records), an hour
LEVELS = AGG_LEVELS
ALL_CPUS = -32768  # rows summed over every CPU


@dataclass
class AggRows:
    """One window's aggregate record (profile_agg{level}[all]): (cpu, pid, comm, stack) -> count rows
    sorted by cpu, in their stored dtypes (store/aggregates.COLS), comm and stack as indices into the
    record's own tables. Compact (the merged levels hold an hour of them): numpy, not lists of ints."""
    level: int
    t0: int  # the window's start (level * its number)
    cpu: np.ndarray
    pid: np.ndarray  # pid_column
    comm: np.ndarray
    stack: np.ndarray
    count: np.ndarray
    comms: list[str]
    frames: list[str]
    frame_ids: np.ndarray  # the stacks' frames one after another, as indices into `frames`
    stack_ends: np.ndarray  # where each stack's frames end in frame_ids
    hashes: list[int]  # stack_hash of each stack
    event: str


@dataclass
class HeatMinute:
    """One minute's samples for the heatmap records (profile_heat60, profile_heat60all): decoded times
    within [t0, t0 + 60), their CPUs and whether each is work (not the idle task idling)."""
    t0: int
    t: np.ndarray
    cpu: np.ndarray
    work: np.ndarray
    event: str


def pid_column(pid: np.ndarray, tid: np.ndarray | None) -> np.ndarray:
    """The stored pid: the pid, or where perf printed only a tid (its default -a fields) -2 - tid, so
    the reader still has the number the raw path falls back to (the idle rule and pid filters use it);
    -1: neither printed (and records of the first version)."""
    pid = pid.astype(np.int64)
    if tid is None:
        return pid
    return np.where(pid >= 0, pid, -2 - tid.astype(np.int64))


def pid_of(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the pid the raw path uses: pid, else tid, else -1; whether perf printed the pid)."""
    return np.where(col >= 0, col, np.where(col <= -2, -2 - col, -1)), col >= 0


def reduce_rows(cols: list[np.ndarray], counts: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Sum counts of identical (cpu, pid, comm, stack) rows; rows come out sorted by cpu first."""
    if not len(counts):
        return cols, counts
    order = np.lexsort(cols[::-1])
    cols = [c[order] for c in cols]
    counts = counts[order]
    new = np.zeros(len(counts), dtype=bool)
    new[0] = True
    for c in cols:
        new[1:] |= c[1:] != c[:-1]
    idx = np.flatnonzero(new)
    return [c[idx] for c in cols], np.add.reduceat(counts, idx)


class Aggregator:
    """Feed it the batches as they are stored; it hands one record per level and window to `write`
    (stream, record): StoreWriter.write, which encodes it."""

    # the stack and comm tables are compacted to what the open windows use once they hold this many
    # more than twice what the last compaction kept: bounded by the stacks of the open windows (the
    # longest is an hour), not by every stack of the run (at a fixed 200,000 they grew for hours on a
    # node with process churn: ~15 new stacks a second, ~700 bytes each, in the soak of issue 38)
    COMPACT_MIN = 5_000
    # levels from this index on are built from the records of the level below (held, merged when
    # their window closes), not from rows of interned stacks: the ten-minute and hour windows
    # held every stack of their window in the tables (an hour of a churning node's stacks: ~50,000,
    # tens of MB), where now only the first two levels' windows (a minute) hold stacks
    MERGED_FROM = 2

    def __init__(self, write, levels=LEVELS):
        self.write = write
        self.levels = tuple(sorted(levels))
        self.comms: list[str] = []
        self.comm_ix: dict[str, int] = {}
        self.stacks: list[tuple[str, ...]] = []
        self.stack_ix: dict[tuple[str, ...], int] = {}
        # per interned stack, worked out once (a batch's stacks are mostly ones seen before):
        self.stack_idle: list[bool] = []  # the idle task idling (parse.is_idle)
        self.stack_hashes: list[int] = []  # its 64-bit name in aggregate records
        self.stack_fids: list[np.ndarray] = []  # its frames as ids into frame_names
        self.frame_ix: dict[str, int] = {}
        self.frame_names: list[str] = []
        self.event = ""
        self.open: dict[int, tuple[int, list]] = {}  # level -> (window number, [(cols, counts, tmin, tmax)])
        self.heat: tuple[int, list] | None = None  # (minute number, [(t, cpu, work)])
        self.kept = 0  # stacks the open windows used at the last compaction
        self.held: dict[int, tuple[int, list[AggRows]]] = {}  # merged level -> (window, lower level's records)

    def _stack(self, st: tuple[str, ...]) -> int:
        i = self.stack_ix.get(st)
        if i is None:
            i = self.stack_ix[st] = len(self.stacks)
            self.stacks.append(st)
            self.stack_idle.append(is_idle(0, st))
            self.stack_hashes.append(stack_hash(st))
            fx = self.frame_ix
            self.stack_fids.append(np.array([intern(fx, self.frame_names, f) for f in st], dtype=np.int64))
        return i

    def _compact(self) -> None:
        """Keep only the comms and stacks the open windows still use (bounds memory on long runs)."""
        parts = [p for _, ps in self.open.values() for p in ps]
        maps = []
        for col, table in ((2, self.comms), (3, self.stacks)):
            used = distinct(np.concatenate([p[0][col] for p in parts])) if parts else np.zeros(0, np.int64)
            m = np.full(len(table), -1, dtype=np.int64)
            m[used] = np.arange(len(used))
            maps.append((m, used.tolist()))
        for lvl, (w, ps) in self.open.items():
            self.open[lvl] = (w, [([c, p_, maps[0][0][cm], maps[1][0][st]], n, a, b)
                                  for (c, p_, cm, st), n, a, b in ps])
        self.comms = [self.comms[i] for i in maps[0][1]]
        keep = maps[1][1]
        self.stacks = [self.stacks[i] for i in keep]
        self.stack_idle = [self.stack_idle[i] for i in keep]
        self.stack_hashes = [self.stack_hashes[i] for i in keep]
        self.stack_fids = [self.stack_fids[i] for i in keep]
        self.kept = len(keep)
        if len(self.frame_names) > 4 * (self.COMPACT_MIN + 2 * self.kept):  # frames no kept stack uses: start over
            self.frame_ix, self.frame_names = {}, []
            self.stack_fids = [np.array([intern(self.frame_ix, self.frame_names, f) for f in st], dtype=np.int64)
                               for st in self.stacks]
        self.comm_ix = {c: i for i, c in enumerate(self.comms)}
        self.stack_ix = {s: i for i, s in enumerate(self.stacks)}

    def add(self, b: Batch, offset: float = 0.0) -> None:
        if not len(b):
            return
        # the times a reader will decode (codec.stored_times), so both paths bin a sample alike
        t = stored_times(np.asarray(b.times, dtype=np.float64) + offset)[2]
        self.add_arrays(t, np.asarray(b.cpus), np.asarray(b.pids), np.asarray(b.comm_ids),
                        np.asarray(b.stack_ids), b.comms, b.stacks, b.event, np.asarray(b.tids))

    def add_arrays(self, t, cpu, pid, comm_ids, stack_ids, comms, stacks, event="", tid=None) -> None:
        """Columns of samples (wall-clock times), comm and stack ids into the given tables."""
        if len(self.stacks) > self.COMPACT_MIN + self.kept + self.kept // 2:
            self._compact()
        self.event = self.event or event
        # work = not the idle task idling (samples.Samples.select; pid falls back to the tid as there)
        eff = pid if tid is None else np.where(pid >= 0, pid, tid)
        sids = [self._stack(s) for s in stacks]
        smap = np.array(sids, dtype=np.int64)
        flags = self.stack_idle
        idle = np.array([flags[i] for i in sids] or [False], dtype=bool)
        self._heat(t, cpu.astype(np.int64), ~idle[stack_ids.astype(np.int64)] | (eff != 0))
        cmap = np.array([intern(self.comm_ix, self.comms, c) for c in comms], dtype=np.int64)
        cols = [cpu.astype(np.int64), pid_column(pid, tid), cmap[comm_ids.astype(np.int64)],
                smap[stack_ids.astype(np.int64)]]
        lvl = self.levels[0]
        win = np.floor(t / lvl).astype(np.int64)
        for w in distinct(win).tolist():
            m = win == w
            part = reduce_rows([c[m] for c in cols], np.ones(int(m.sum()), dtype=np.int64))
            self._feed(lvl, w, part[0], part[1], float(t[m].min()), float(t[m].max()))

    @staticmethod
    def _window(table: dict, lvl: int, w: int, close) -> list:
        """The parts of `lvl`'s open window `w` in `table` (open or held): a window of another number is
        closed first (close(lvl)), then a new one opened."""
        cur = table.get(lvl)
        if cur is not None and cur[0] != w:
            close(lvl)
            cur = None
        if cur is None:
            cur = table[lvl] = (w, [])
        return cur[1]

    def _feed(self, lvl: int, w: int, cols, counts, tmin: float, tmax: float) -> None:
        ps = self._window(self.open, lvl, w, self._close)
        ps.append((cols, counts, tmin, tmax))
        if len(ps) >= 8:  # fold the parts as they come: an hour is 60 minutes of rows
            merged = reduce_rows([np.concatenate([p[0][i] for p in ps]) for i in range(4)],
                                 np.concatenate([p[1] for p in ps]))
            ps[:] = [(merged[0], merged[1], min(p[2] for p in ps), max(p[3] for p in ps))]

    def _close(self, lvl: int) -> None:
        w, parts = self.open.pop(lvl)
        cols = [np.concatenate([p[0][i] for p in parts]) for i in range(4)]
        cols, counts = reduce_rows(cols, np.concatenate([p[1] for p in parts]))
        self._write(lvl, w, cols, counts, self.record, min(p[2] for p in parts), max(p[3] for p in parts))

    def _write(self, lvl: int, w: int, cols, counts, record, tmin: float, tmax: float) -> None:
        """A closed window's two records (all CPUs summed, and per CPU) made by `record`, then on to the next level."""
        roll, rcounts = reduce_rows([np.full(len(counts), ALL_CPUS, dtype=np.int64)] + list(cols[1:]), counts)
        self.write(agg(lvl, True), record(lvl, w * lvl, roll, rcounts))
        rec = record(lvl, w * lvl, cols, counts)
        self.write(agg(lvl), rec)
        self._up(lvl, w, cols, counts, tmin, tmax, rec)

    def _up(self, lvl: int, w: int, cols, counts, tmin: float, tmax: float, rec: AggRows) -> None:
        """A closed window of `lvl` into the next level's: as rows, or as its record (merged levels)."""
        i = self.levels.index(lvl)
        if i + 1 < len(self.levels):
            nxt = self.levels[i + 1]
            if i + 1 >= self.MERGED_FROM:
                self._hold(nxt, int(w * lvl // nxt), rec)
            else:
                self._feed(nxt, int(w * lvl // nxt), cols, counts, tmin, tmax)

    def _hold(self, lvl: int, w: int, rec: AggRows) -> None:
        self._window(self.held, lvl, w, self._close_merged).append(rec)

    def _close_merged(self, lvl: int) -> None:
        """A merged level's window: the rows of the lower level's records, their stacks mapped by hash."""
        w, recs = self.held.pop(lvl)
        comm_ix: dict[str, int] = {}
        comms: list[str] = []
        stack_ix: dict[int, int] = {}
        hashes: list[int] = []
        stacks: list[np.ndarray] = []  # frame ids into frames
        frame_ix: dict[str, int] = {}
        frames: list[str] = []
        parts: list[list[np.ndarray]] = []
        for r in recs:
            cmap = np.array([intern(comm_ix, comms, c) for c in r.comms] or [0], dtype=np.int64)
            names, ids, ends = r.frames, r.frame_ids, r.stack_ends.tolist()
            smap = np.empty(max(len(ends), 1), dtype=np.int64)
            for j, h in enumerate(r.hashes):
                x = stack_ix.get(h)
                if x is None:
                    x = stack_ix[h] = len(hashes)
                    hashes.append(h)
                    own = ids[ends[j - 1] if j else 0:ends[j]].tolist()
                    stacks.append(np.array([intern(frame_ix, frames, names[f]) for f in own], dtype=np.int64))
                smap[j] = x
            parts.append([r.cpu.astype(np.int64), r.pid.astype(np.int64), cmap[r.comm], smap[r.stack],
                          r.count.astype(np.int64)])
        cols, counts = reduce_rows([np.concatenate([p[i] for p in parts]) for i in range(4)],
                                   np.concatenate([p[4] for p in parts]))
        tables = (comms, frames, stacks, hashes)
        self._write(lvl, w, cols, counts, lambda *a: self.record(*a, tables), 0.0, 0.0)

    def flush(self) -> None:
        """At stop: write the open windows (partial records; sums stay right, see the module doc)."""
        for lvl in self.levels:
            if lvl in self.open:
                self._close(lvl)
            elif lvl in self.held:
                self._close_merged(lvl)
        if self.heat is not None:
            self._heat_close()

    def _heat(self, t: np.ndarray, cpu: np.ndarray, work: np.ndarray) -> None:
        win = np.floor(t / 60).astype(np.int64)
        for w in distinct(win).tolist():
            m = win == w
            if self.heat is not None and self.heat[0] != w:
                self._heat_close()
            if self.heat is None:
                self.heat = (w, [])
            self.heat[1].append((t[m], cpu[m], work[m]))

    def _heat_close(self) -> None:
        w, parts = self.heat
        self.heat = None
        t = np.concatenate([p[0] for p in parts])
        cpu = np.concatenate([p[1] for p in parts])
        work = np.concatenate([p[2] for p in parts])
        minute = HeatMinute(w * 60, t, cpu, work, self.event)
        self.write(HEAT, minute)
        self.write(HEAT_ALL, minute)

    @staticmethod
    def _frame_table(parts: list[np.ndarray], names: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The record's frame table (frames in order of first use), its stacks' frames (`parts`: ids into
        `names`) as indices into it and where each stack's end (AggRows): the same as interning frame by
        frame, in bulk (a record of 10,000 stacks is 200,000 frames)."""
        ends = np.cumsum([len(p) for p in parts], dtype=np.int64)
        flat = np.concatenate(parts) if len(ends) and ends[-1] else np.zeros(0, dtype=np.int64)
        if not len(flat):
            return [], flat.astype("<u4"), ends
        order = np.argsort(flat, kind="stable")
        sf = flat[order]
        new = np.concatenate(([True], sf[1:] != sf[:-1]))
        run = np.cumsum(new) - 1  # each sorted element's unique index
        first = order[new]  # first use of each unique frame (stable sort: the earliest)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        local = np.empty(len(flat), dtype=np.int64)
        local[order] = rank[run]
        frames = [names[g] for g in sf[new][np.argsort(first, kind="stable")].tolist()]
        return frames, local.astype("<u4"), ends

    def record(self, lvl: int, t0: int, cols, counts, tables=None) -> AggRows:
        """The window's rows with the record's own comm and frame tables (the store encodes it). tables:
        a merged level's (comms, frames, stacks as frame ids, stack hashes), else the aggregator's."""
        comms, names, fids, hashes = tables or (self.comms, self.frame_names, self.stack_fids, self.stack_hashes)
        cpu, pid, comm, stack = cols
        ucomm, comm_l = np.unique(comm, return_inverse=True)
        ustack, stack_l = np.unique(stack, return_inverse=True)
        sids = ustack.tolist()
        return AggRows(lvl, t0, *(c.astype(dt) for c, (_, dt) in zip((cpu, pid, comm_l, stack_l, counts), COLS)),
                       [comms[c] for c in ucomm.tolist()], *self._frame_table([fids[s] for s in sids], names),
                       [hashes[s] for s in sids], self.event)


def stack_hash(frames: tuple[str, ...]) -> int:
    """A stack's 64-bit name, the same in every record: a reader merging many records maps their stacks
    by it without decoding their frame tables (two distinct stacks of a store share one with
    probability ~ n^2 / 2^65: 1e-9 for 200,000 stacks)."""
    return int.from_bytes(hashlib.blake2b("\0".join(frames).encode(), digest_size=8).digest(), "little")
