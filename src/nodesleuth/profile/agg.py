"""Write-time pre-aggregation of the profile: per-minute and per-hour counts of (cpu, pid, comm, stack),
so a flame graph or top-functions of an hour or a day reads a few records instead of millions of
samples. Raw batches stay in the `profile` stream for subsecond views and heatmaps.

Each aggregator counts exactly the samples it was given, and each record is self-contained (its own
comm and stack tables), so restarts mid-window (two partial records for one hour) and retention
(dropping any record) keep every sum right. Payload: u32 header length | JSON
{level, t0, t1, n, comms, frames, stacks, event, cpus: [[cpu, start, end]...]} | columns sorted by
cpu: cpu i16, pid i32 (pid_column), comm u32, stack u32, count u32. Per level two streams:
`profile_agg10` / `profile_agg60` ... (rows per CPU) and `profile_agg10all` ... (summed over CPUs, cpu = ALL_CPUS), each record
stamped with its window's start.

The subsecond heatmap has its own per-minute stream, `profile_heat60` (HEAT): per CPU the cells of
its work samples (second of the minute * 50 + FlameScope row, u16, one entry per sample, sorted), and
per second and CPU the counts of all and of work samples (for the hot-CPU marks); `profile_heat60all`
(HEAT_ALL) holds the same minutes with the cells summed over CPUs, a dense grid, for all-CPU views. A heatmap of an
hour or a day for any CPUs reads these instead of the samples; it is exact for FlameScope's 50 rows
and whole-second columns with a CPU filter only; pid, comm and cgroup filters and other row counts
read the raw samples (heatmap.heatmap_fast says which). Payload: u32 header length | JSON {level, t0,
rows, event, tmin, tmax, n, cpus: [[cpu, start, end]...], tcpus: [cpu...], tdtype} | cells u16[n] |
totals [60 x len(tcpus)] | work [60 x len(tcpus)].
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import orjson

from ..model.errors import InputError
from ..store.catalog import AGG_LEVELS, HEAT, HEAT_ALL, agg
from .arrays import distinct, intern
from .codec import stored_times
from .parse import Batch, is_idle

# ten seconds (the raw samples an unaligned range decodes at its edges: < 10 s each, not < 60 s), a minute,
# ten minutes (an unaligned hour reads <= 33 records), an hour
LEVELS = AGG_LEVELS
ALL_CPUS = -32768  # rows summed over every CPU
HEAT_ROWS = 50  # FlameScope's rows per second (20 ms)



COLS = (("cpu", "<i2"), ("pid", "<i4"), ("comm", "<u4"), ("stack", "<u4"), ("count", "<u4"))


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
    """Feed it the batches as they are stored; it appends one record per level and window."""

    # the stack and comm tables are compacted to what the open windows use once they hold this many
    # more than twice what the last compaction kept: bounded by the stacks of the open windows (the
    # longest is an hour), not by every stack of the run (at a fixed 200,000 they grew for hours on a
    # node with process churn: ~15 new stacks a second, ~700 bytes each, in the soak of issue 38)
    COMPACT_MIN = 5_000
    # levels from this index on are built from the records of the level below (held as bytes, merged
    # when their window closes), not from rows of interned stacks: the ten-minute and hour windows
    # held every stack of their window in the tables (an hour of a churning node's stacks: ~50,000,
    # tens of MB), where now only the first two levels' windows (a minute) hold stacks
    MERGED_FROM = 2

    def __init__(self, append, levels=LEVELS):
        self.append = append
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
        self.held: dict[int, tuple[int, list[bytes]]] = {}  # merged level -> (window, lower level's records)

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
        self._write(lvl, w, cols, counts, self.encode, min(p[2] for p in parts), max(p[3] for p in parts))

    def _write(self, lvl: int, w: int, cols, counts, encode, tmin: float, tmax: float) -> None:
        """A closed window's two records (all CPUs summed, and per CPU) with `encode`, then on to the next level."""
        roll, rcounts = reduce_rows([np.full(len(counts), ALL_CPUS, dtype=np.int64)] + list(cols[1:]), counts)
        self.append(agg(lvl, True), float(w * lvl), encode(lvl, w * lvl, roll, rcounts))
        payload = encode(lvl, w * lvl, cols, counts)
        self.append(agg(lvl), float(w * lvl), payload)
        self._up(lvl, w, cols, counts, tmin, tmax, payload)

    def _up(self, lvl: int, w: int, cols, counts, tmin: float, tmax: float, payload: bytes) -> None:
        """A closed window of `lvl` into the next level's: as rows, or as its record (merged levels)."""
        i = self.levels.index(lvl)
        if i + 1 < len(self.levels):
            nxt = self.levels[i + 1]
            if i + 1 >= self.MERGED_FROM:
                self._hold(nxt, int(w * lvl // nxt), payload)
            else:
                self._feed(nxt, int(w * lvl // nxt), cols, counts, tmin, tmax)

    def _hold(self, lvl: int, w: int, payload: bytes) -> None:
        self._window(self.held, lvl, w, self._close_merged).append(payload)

    def _close_merged(self, lvl: int) -> None:
        """A merged level's window: the rows of the lower level's records, their stacks mapped by hash."""
        w, payloads = self.held.pop(lvl)
        comm_ix: dict[str, int] = {}
        comms: list[str] = []
        stack_ix: dict[int, int] = {}
        hashes: list[int] = []
        stacks: list[list[int]] = []  # frame ids into frames
        frame_ix: dict[str, int] = {}
        frames: list[str] = []
        parts: list[list[np.ndarray]] = []
        for p in payloads:
            r = AggRecord(p)
            cpu, pid, cm, st, n = r.rows(None)
            cmap = np.array([intern(comm_ix, comms, c) for c in r.comms] or [0], dtype=np.int64)
            names, sf = r.frames, r.stack_frames
            smap = np.empty(max(len(sf), 1), dtype=np.int64)
            for j, h in enumerate(r.hashes.tolist()):
                x = stack_ix.get(h)
                if x is None:
                    x = stack_ix[h] = len(hashes)
                    hashes.append(h)
                    stacks.append([intern(frame_ix, frames, names[f]) for f in sf[j]])
                smap[j] = x
            parts.append([cpu.astype(np.int64), pid.astype(np.int64), cmap[cm.astype(np.int64)],
                          smap[st.astype(np.int64)], n.astype(np.int64)])
        cols, counts = reduce_rows([np.concatenate([p[i] for p in parts]) for i in range(4)],
                                   np.concatenate([p[4] for p in parts]))
        tables = (comms, frames, stacks, hashes)
        self._write(lvl, w, cols, counts, lambda *a: self._encode_with(*a, tables), 0.0, 0.0)

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
        self.append(HEAT, float(w * 60), encode_heat(w * 60, t, cpu, work, self.event))
        self.append(HEAT_ALL, float(w * 60), encode_heat(w * 60, t, cpu, work, self.event, summed=True))

    def _frame_table(self, sids: list[int]) -> tuple[list[str], list[list[int]]]:
        """The record's frame table (frames in order of first use) and its stacks as indices into it:
        the same as interning frame by frame, in bulk (a record of 10,000 stacks is 200,000 frames)."""
        parts = [self.stack_fids[s] for s in sids]
        if not parts:
            return [], []
        lens = np.array([len(p) for p in parts], dtype=np.int64)
        flat = np.concatenate(parts) if lens.sum() else np.zeros(0, dtype=np.int64)
        if not len(flat):
            return [], [[] for _ in parts]
        order = np.argsort(flat, kind="stable")
        sf = flat[order]
        new = np.concatenate(([True], sf[1:] != sf[:-1]))
        run = np.cumsum(new) - 1  # each sorted element's unique index
        first = order[new]  # first use of each unique frame (stable sort: the earliest)
        rank = np.empty(len(first), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(first))
        local = np.empty(len(flat), dtype=np.int64)
        local[order] = rank[run]
        names = self.frame_names
        frames = [names[g] for g in sf[new][np.argsort(first, kind="stable")].tolist()]
        loc = local.tolist()
        out, at = [], 0
        for n in lens.tolist():
            out.append(loc[at:at + n])
            at += n
        return frames, out

    def encode(self, lvl: int, t0: float, cols, counts) -> bytes:
        cpu, pid, comm, stack = cols
        ucomm, comm_l = np.unique(comm, return_inverse=True)
        ustack, stack_l = np.unique(stack, return_inverse=True)
        frames, stacks = self._frame_table(ustack.tolist())
        hashes = [self.stack_hashes[s] for s in ustack.tolist()]
        return self._pack(lvl, t0, cols, counts, comm_l, stack_l, [self.comms[c] for c in ucomm.tolist()],
                          frames, stacks, hashes)

    def _encode_with(self, lvl: int, t0: float, cols, counts, tables) -> bytes:
        """encode() with tables of its own: (comms, frames, stacks as frame ids, stack hashes)."""
        comms, all_frames, all_stacks, all_hashes = tables
        cpu, pid, comm, stack = cols
        ucomm, comm_l = np.unique(comm, return_inverse=True)
        ustack, stack_l = np.unique(stack, return_inverse=True)
        ix: dict[int, int] = {}
        frames: list[str] = []
        stacks = []
        for s in ustack.tolist():
            loc = []
            for f in all_stacks[s]:
                x = ix.get(f)
                if x is None:
                    x = ix[f] = len(frames)
                    frames.append(all_frames[f])
                loc.append(x)
            stacks.append(loc)
        return self._pack(lvl, t0, cols, counts, comm_l, stack_l, [comms[c] for c in ucomm.tolist()], frames,
                          stacks, [all_hashes[s] for s in ustack.tolist()])

    def _pack(self, lvl: int, t0: float, cols, counts, comm_l, stack_l, comm_names, frames, stacks, hashes) -> bytes:
        cpu, pid = cols[0], cols[1]
        cpus, starts = np.unique(cpu, return_index=True)
        ends = np.append(starts[1:], len(cpu))
        head = orjson.dumps({"level": lvl, "t0": t0, "t1": t0 + lvl, "n": len(counts),
                             "comms": comm_names, "frames": list(frames),
                             "stacks": stacks, "event": self.event,
                             "cpus": [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]})
        arrs = [cpu.astype("<i2"), pid.astype("<i4"), comm_l.astype("<u4"), stack_l.astype("<u4"),
                counts.astype("<u4")]
        hashes = np.array(hashes, dtype="<u8")
        tail = orjson.dumps({"level": lvl, "t0": t0, "t1": t0 + lvl, "n": len(counts), "nstacks": len(hashes),
                             "comms": comm_names, "event": self.event,
                             "cpus": [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]})
        return (struct.pack("<I", len(head)) + head + b"".join(a.tobytes() for a in arrs) + hashes.tobytes()
                + tail + struct.pack("<I", len(tail)))


def encode_heat(t0: int, t: np.ndarray, cpu: np.ndarray, work: np.ndarray, event: str, summed: bool = False) -> bytes:
    """One minute of heatmap cells (module doc); t are decoded sample times within [t0, t0 + 60).
    summed: the cells of all CPUs as one dense grid (u32[60 * 50], header `dense`) instead of per CPU."""
    sec = np.floor(t).astype(np.int64)
    row = HEAT_ROWS - np.floor(HEAT_ROWS * (t - np.floor(t))).astype(np.int64) - 1  # heatmap.heatmap's rows
    rel = sec - t0
    cell = rel * HEAT_ROWS + row
    order = np.lexsort((cell[work], cpu[work]))
    wc, cells = cpu[work][order], cell[work][order]
    cpus, starts = np.unique(wc, return_index=True)
    ends = np.append(starts[1:], len(wc))
    tcpus, ti = np.unique(cpu, return_inverse=True)
    tot = np.zeros((60, len(tcpus)), dtype=np.int64)
    busy = np.zeros((60, len(tcpus)), dtype=np.int64)
    np.add.at(tot, (rel, ti), 1)
    np.add.at(busy, (rel[work], ti[work]), 1)
    tdt = "<u2" if tot.max(initial=0) < 65536 else "<u4"
    if summed:
        body = np.bincount(cells, minlength=60 * HEAT_ROWS).astype("<u4").tobytes()
        n, ranges = 60 * HEAT_ROWS, []
    else:
        body = cells.astype("<u2").tobytes()
        n, ranges = len(cells), [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]
    head = orjson.dumps({"level": 60, "t0": float(t0), "rows": HEAT_ROWS, "event": event,
                         "tmin": float(t.min()), "tmax": float(t.max()), "n": n, "dense": summed,
                         "cpus": ranges, "tcpus": tcpus.tolist(), "tdtype": tdt})
    return struct.pack("<I", len(head)) + head + body + tot.astype(tdt).tobytes() + busy.astype(tdt).tobytes()


class HeatRecord:
    """One decoded minute of heatmap cells."""

    def __init__(self, payload: bytes, where: str = "profile heatmap aggregate"):
        try:
            (hl,) = struct.unpack_from("<I", payload)
            h = orjson.loads(payload[4:4 + hl])
            off = 4 + hl
            self.dense = bool(h.get("dense"))
            self.cells = np.frombuffer(payload, dtype="<u4" if self.dense else "<u2", count=h["n"], offset=off)
            off += self.cells.nbytes
            k = 60 * len(h["tcpus"])
            self.tot = np.frombuffer(payload, dtype=h["tdtype"], count=k, offset=off).reshape(60, -1)
            off += self.tot.nbytes
            self.busy = np.frombuffer(payload, dtype=h["tdtype"], count=k, offset=off).reshape(60, -1)
        except (struct.error, ValueError, KeyError) as e:
            raise InputError(where, f"undecodable profile heatmap aggregate: {e}") from None
        self.t0, self.rows, self.event = h["t0"], h["rows"], h.get("event", "")
        self.tmin, self.tmax = h["tmin"], h["tmax"]
        self.cpu_ranges = {c: (s, e) for c, s, e in h["cpus"]}
        self.tcpus = h["tcpus"]

    def grid(self, cpus: set[int] | None) -> np.ndarray:
        """Work samples per cell (second of the minute * rows + row) of these CPUs (None: all)."""
        if self.dense:
            if cpus is not None:
                raise ValueError("a summed heatmap record has no per-CPU cells")
            return self.cells
        return np.bincount(self.cells_of(cpus), minlength=60 * self.rows)

    def cells_of(self, cpus: set[int] | None) -> np.ndarray:
        if cpus is None:
            return self.cells
        sel = [self.cpu_ranges[c] for c in sorted(cpus) if c in self.cpu_ranges]
        return np.concatenate([self.cells[s:e] for s, e in sel]) if sel else self.cells[:0]


def stack_hash(frames: tuple[str, ...]) -> int:
    """A stack's 64-bit name, the same in every record: a reader merging many records maps their stacks
    by it without decoding their frame tables (two distinct stacks of a store share one with
    probability ~ n^2 / 2^65: 1e-9 for 200,000 stacks)."""
    return int.from_bytes(hashlib.blake2b("\0".join(frames).encode(), digest_size=8).digest(), "little")


class AggRecord:
    """One decoded aggregate record; `rows(cpus)` slices the rows of some CPUs without a scan.

    Records since the ten-minute level also end with the stacks' hashes (stack_hash) and a small
    trailer {level, t0, t1, n, nstacks, comms, event, cpus} | u32 its length, so a reader gets the rows
    and stack hashes without parsing the frame tables (`frames`, `stack_frames`, parsed on first use);
    readers of the first version read the leading header and columns and ignore the rest."""

    def __init__(self, payload: bytes, where: str = "profile aggregate"):
        self.where = where
        self.payload = payload
        self.hashes = None
        self._head = None
        try:
            (hl,) = struct.unpack_from("<I", payload)
            h = self._trailer(payload, hl)
            if h is None:
                h = self._head = orjson.loads(payload[4:4 + hl])
            n, off = h["n"], 4 + hl
            self.cols = []
            for _, dt in COLS:
                a = np.frombuffer(payload, dtype=dt, count=n, offset=off)
                off += a.nbytes
                self.cols.append(a)
            if "nstacks" in h:
                self.hashes = np.frombuffer(payload, dtype="<u8", count=h["nstacks"], offset=off)
        except (struct.error, ValueError, KeyError) as e:
            raise InputError(where, f"undecodable profile aggregate: {e}") from None
        self.level, self.t0, self.t1 = h["level"], h["t0"], h["t1"]
        self.comms = h["comms"]
        self.event = h.get("event", "")
        self.cpu_ranges = {c: (s, e) for c, s, e in h["cpus"]}

    @staticmethod
    def _trailer(payload: bytes, hl: int) -> dict | None:
        if len(payload) < 8 + hl:
            return None
        (tl,) = struct.unpack_from("<I", payload, len(payload) - 4)
        start = len(payload) - 4 - tl
        if tl < 2 or start < 4 + hl or payload[start:start + 1] != b"{":
            return None
        try:
            h = orjson.loads(payload[start:len(payload) - 4])
        except ValueError:
            return None
        if not isinstance(h, dict) or 4 + hl + h.get("n", -1) * 18 + h.get("nstacks", -1) * 8 != start:
            return None
        return h

    def _header(self) -> dict:
        if self._head is None:
            (hl,) = struct.unpack_from("<I", self.payload)
            try:
                self._head = orjson.loads(self.payload[4:4 + hl])
            except ValueError as e:
                raise InputError(self.where, f"undecodable profile aggregate: {e}") from None
        return self._head

    @property
    def frames(self) -> list[str]:
        return self._header()["frames"]

    @property
    def stack_frames(self) -> list[list[int]]:
        return self._header()["stacks"]

    def rows(self, cpus: set[int] | None):
        """The rows of these CPUs (None: all rows)."""
        if cpus is None:
            return self.cols
        sel = [self.cpu_ranges[c] for c in sorted(cpus) if c in self.cpu_ranges]
        if not sel:
            return [c[:0] for c in self.cols]
        idx = np.concatenate([np.arange(s, e) for s, e in sel])
        return [c[idx] for c in self.cols]
