"""Questions asked of a stored profile: flame graphs of any range and filter, FlameScope-style
subsecond heatmaps per CPU or for all CPUs (with the hot cores marked), differential stacks,
and the hottest kernel functions of one CPU."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..model.errors import InputError
from ..store.segment import Problem
from ..model.thresholds import HOT_BUSY
from ..store.catalog import HEAT, HEAT_ALL, PROFILE, PROFILE_LOST, agg
from ..store.store import StoreReader
from .arrays import distinct, intern
from .codec import SPAN, Decoded, _names, decode_lost
from .parse import SUFFIXES, idle_stacks, is_clock

LOST_AFTER = 5.0  # s: perf notes a loss once its ring has room again, stamped then


def lost_samples(reader: StoreReader, t0: float, t1: float, cpus: set[int] | None = None) -> int:
    """Samples perf lost (its ring buffer full) on `cpus` (None: any) or an unknown CPU in [t0, t1],
    counting notes up to LOST_AFTER s after t1 (an upper bound). A damaged record is a store problem."""
    if not reader.segments(PROFILE_LOST):
        return 0
    where = f"{reader.dir}/{PROFILE_LOST}"
    n = 0
    for _, payload in reader.read(PROFILE_LOST, t0 - 60, t1 + LOST_AFTER):
        try:
            rows = decode_lost(payload, where)
        except InputError as e:
            reader.problems.append(Problem(where, 0, str(e)))
            continue
        n += sum(k for t, c, k in rows if t0 <= t <= t1 + LOST_AFTER and (cpus is None or c in cpus or c == -1))
    return n


@dataclass
class Filter:
    cpus: set[int] | None = None
    pids: set[int] | None = None
    comms: set[str] | None = None
    cgroup_pids: set[int] | None = None  # pids that were in a cgroup (resolved by the caller)
    keep_idle: bool = False


@dataclass
class Samples:
    """Samples of a time range as global columns with one stack table."""

    t: np.ndarray
    cpu: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    comm: np.ndarray  # index into comms
    stack: np.ndarray  # index into stacks
    comms: list[str]
    stacks: list[tuple[str, ...]]
    idle: np.ndarray  # per stack id: bool
    problems: list = field(default_factory=list)
    period: np.ndarray | None = None  # perf's period per sample (0: not printed)
    pid_known: np.ndarray | None = None  # False where perf printed only a tid (pid then holds the tid)
    event: str = ""  # the sampled event(s), `,`-joined
    count: np.ndarray | None = None  # samples each row stands for (pre-aggregated rows); None: one each

    def __len__(self) -> int:
        return len(self.t)

    def masked(self, m: np.ndarray) -> "Samples":
        """The samples where m is true, sharing the stack and comm tables."""
        return Samples(self.t[m], self.cpu[m], self.pid[m], self.tid[m], self.comm[m], self.stack[m], self.comms,
                       self.stacks, self.idle, self.problems, None if self.period is None else self.period[m],
                       None if self.pid_known is None else self.pid_known[m], self.event,
                       None if self.count is None else self.count[m])

    def total(self, m: np.ndarray) -> int:
        return int(m.sum()) if self.count is None else int(self.count[m].sum())

    @property
    def clock(self) -> bool:
        """Samples are slices of time (a clock event), so per-CPU busy shares can be read from them."""
        return not self.event or all(is_clock(e) for e in self.event.split(",") if e)

    def select(self, f: Filter) -> np.ndarray:
        m = np.ones(len(self.t), dtype=bool)
        if f.cpus is not None:
            m &= np.isin(self.cpu, list(f.cpus))
        pids = f.pids if f.cgroup_pids is None else (f.cgroup_pids if f.pids is None else f.pids & f.cgroup_pids)
        if pids is not None:
            m &= np.isin(self.pid, list(pids))
        if f.comms is not None:
            ids = [i for i, c in enumerate(self.comms) if c in f.comms]
            m &= np.isin(self.comm, ids)
        if not f.keep_idle:
            m &= ~self.idle[self.stack] | (self.pid != 0)
        return m


def load(reader: StoreReader, t0: float | None, t1: float | None, on_segment=None) -> Samples:
    """Read batches overlapping [t0, t1] (a batch covers up to its rotation period)."""
    slack = 3 * SPAN  # a batch is stamped with its first sample and covers at most SPAN (codec.encode_pieces)
    payloads = reader.read(PROFILE, None if t0 is None else t0 - slack, t1, on_segment)
    s = assemble((Decoded(p) for _, p in payloads), t0, t1)
    s.problems = list(reader.problems)
    return s


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
        from .agg import AggRecord

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


def assemble(decoded, t0: float | None = None, t1: float | None = None) -> Samples:
    """Decoded batches -> one Samples with global stack and comm tables."""
    parts = []
    stack_ix: dict[tuple[str, ...], int] = {}
    comm_ix: dict[str, int] = {}
    stacks: list[tuple[str, ...]] = []
    comms: list[str] = []
    events: list[str] = []
    for d in decoded:
        m = np.ones(len(d.t), dtype=bool)
        if t0 is not None:
            m &= d.t >= t0
        if t1 is not None:
            m &= d.t < t1
        if not m.any():
            continue
        for e in (d.event or "").split(","):
            if e and e not in events:
                events.append(e)
        # intern only the stacks the selected samples use (a 1 s query touches few of a batch's)
        used = distinct(d.stack[m])
        smap = np.zeros(len(d.stack_frames), dtype=np.int64)
        smap[used] = [intern(stack_ix, stacks, d.stack_names(i)) for i in used.tolist()]
        cmap = np.array([intern(comm_ix, comms, c) for c in d.comms], dtype=np.int64)
        parts.append((d.t[m], d.cpu[m], d.pid[m], d.tid[m], cmap[d.comm[m]] if len(cmap) else d.comm[m],
                      smap[d.stack[m]] if len(smap) else d.stack[m], d.period[m]))
    if parts:
        cols = [np.concatenate([p[i] for p in parts]) for i in range(7)]
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
    else:
        cols = [np.zeros(0, dtype=np.float64)] + [np.zeros(0, dtype=np.int64)] * 5 + [np.zeros(0, np.uint64)]
    known = cols[2] >= 0
    pid = np.where(known, cols[2], cols[3])
    idle = idle_stacks(stacks)
    return Samples(cols[0], cols[1], pid, cols[3], cols[4], cols[5], comms, stacks, idle, [], cols[6], known,
                   ",".join(events))


GO_METHOD = re.compile(r"\.\(.*\)\.")
ARGS = re.compile(r"\((?!anonymous namespace\)).*")


def tidy(name: str, java: bool = False) -> str:
    """stackcollapse-perf.pl's tidy_generic and tidy_java: drop C++/Java argument lists (everything
    from the first `(` that is not `(anonymous namespace)`, unless it looks like a Go method), quotes,
    and for java processes the `L` of `Lpkg/Class`. Annotation suffixes are kept."""
    base, suf = (name[:-4], name[-4:]) if name[-4:] in SUFFIXES else (name, "")
    if not GO_METHOD.search(base):
        base = ARGS.sub("", base)
    base = base.replace('"', "").replace("'", "")
    if java and base[:1] == "L" and "/" in base:
        base = base[1:]
    return base + suf


def _root(comm: str, pid: int, tid: int, known: bool, name: str) -> str:
    """The process frame as stackcollapse-perf.pl names it: comm, comm-PID or comm-PID/TID; `?` where
    perf printed one number (or a tid of 0, which Perl reads as false)."""
    if name == "comm":
        r = comm
    else:
        p = str(pid) if known and tid != 0 else "?"
        t = tid if not known or tid != 0 else pid
        r = f"{comm}-{p}" if name == "pid" else f"{comm}-{p}/{t}"
    return r.replace(" ", "_").replace(";", ":")


def folded(s: Samples, f: Filter, name: str = "comm", annotate: str = "kernel", tidy_names: bool = True,
           weight: str = "samples") -> Counter:
    """Brendan Gregg folded stacks: `root;...;leaf` -> count (see folded_frames)."""
    out: Counter = Counter()
    for k, v in folded_frames(s, f, name, annotate, tidy_names, weight).items():
        out[";".join(k)] += v
    return out


def folded_frames(s: Samples, f: Filter, name: str = "comm", annotate: str = "kernel", tidy_names: bool = True,
                  weight: str = "samples") -> Counter:
    """Folded stacks as frame tuples `(root, ..., leaf)` -> count (the flame graph builds its tree from
    them without joining and splitting strings), as stackcollapse-perf.pl folds them
    (tests compare with its outputs recorded on this machine, tests/data/perf-script/stackcollapse-outputs.md).

    name: the process frame (comm | pid | tid = its --pid/--tid); annotate: which suffixes to show
    (kernel = --kernel `_[k]`, jit = `_[j]`, all = --all, none = its default); tidy_names: its tidy rules
    (off = raw symbol names); weight: samples, or period (sums perf's period as it does)."""
    m = s.select(f)
    comm, stack = s.comm[m].astype(np.int64), s.stack[m].astype(np.int64)
    w = None if s.count is None else s.count[m].astype(np.int64)
    if weight == "period" and s.period is not None:
        w = s.period[m].astype(np.int64)
        w[w == 0] = 1
    if name == "comm":
        keys = np.stack([comm, stack])
    else:
        known = s.pid_known[m] if s.pid_known is not None else np.ones(len(comm), dtype=bool)
        keys = np.stack([comm, stack, s.pid[m].astype(np.int64), known.astype(np.int64), s.tid[m].astype(np.int64)])
    out: Counter = Counter()
    if not keys.shape[1]:
        return out
    uniq, counts = _sum_keys(keys, w)
    shown: dict[tuple[str, bool], str] = {}
    stacks: dict[tuple[int, bool], tuple[str, ...]] = {}  # a stack's shown frames, per java-ness
    for col, c in zip(uniq.T.tolist(), counts.tolist()):
        cm = s.comms[col[0]]
        java = cm.startswith("java")
        frames = stacks.get((col[1], java))
        if frames is None:
            out_fr = []
            for fr in s.stacks[col[1]]:
                v = shown.get((fr, java))
                if v is None:
                    v = shown[(fr, java)] = _show(fr, java, annotate, tidy_names)
                out_fr.append(v)
            frames = stacks[(col[1], java)] = tuple(out_fr)
        root = () if not cm else (_root(cm, col[2], col[4], bool(col[3]), name) if name != "comm"
                                  else cm.replace(" ", "_").replace(";", ":"),)
        out[root + frames] += int(c)
    return out


def _sum_keys(keys: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct columns of `keys` and their summed weights; packs the rows into one int64 key (a 1-D
    sort, far cheaper than np.unique(axis=1) on the millions of rows of an hour's edges)."""
    lo = keys.min(axis=1)
    dims = (keys.max(axis=1) - lo + 1).tolist()
    if math.prod(dims) < 2 ** 62:
        key = np.ravel_multi_index(keys - lo[:, None], dims)
        u, inv = np.unique(key, return_inverse=True)
        uniq = np.stack(np.unravel_index(u, dims)) + lo[:, None]
    else:
        uniq, inv = np.unique(keys, axis=1, return_inverse=True)
    return uniq, np.bincount(inv.ravel(), weights=w, minlength=uniq.shape[1])


def _show(fr: str, java: bool, annotate: str, tidy_names: bool) -> str:
    v = tidy(fr, java) if tidy_names else fr
    if v.endswith("_[k]") and annotate not in ("kernel", "all"):
        v = v[:-4]
    elif v.endswith("_[j]") and annotate not in ("jit", "all"):
        v = v[:-4]
    return v


def folded_text(fc: Counter) -> str:
    """Sorted by byte value, as Perl's `sort { $a cmp $b }`."""
    return "".join(f"{k} {fc[k]}\n" for k in sorted(fc, key=lambda k: k.encode()))


@dataclass
class Heatmap:
    """FlameScope's layout: columns are seconds from `start`, rows are subsecond offsets.

    values[col][row] counts non-idle samples (rows ordered top = end of the second, as FlameScope);
    hot_cpus[col] lists the CPUs whose samples in that second were >= HOT_BUSY % non-idle, so one pinned
    core among many is named even where the summed cells cannot show it.
    """

    start: float
    rows: int
    columns: list[int]
    values: list[list[int]]
    maxvalue: int
    hot_cpus: list[list[int]]
    cpus: list[int] | None
    hot_note: str | None = None  # why hot_cpus is empty when it cannot be known
    found: bool = True  # the range held samples (heatmap_fast: else the caller says so)
    step: int = 1  # seconds per column (long ranges: see _heatmap)


def heatmap(s: Samples, f: Filter, rows: int = 50, start: float | None = None, end: float | None = None,
            hot: float = HOT_BUSY / 100, hz: float | None = None) -> Heatmap:
    if start is None:
        start = math.floor(float(s.t.min())) if len(s) else 0.0
    if end is None:
        end = math.ceil(float(s.t.max())) if len(s) else start + 1
    ncols = max(1, int(math.ceil(end - start)))
    vals = np.zeros((ncols, rows), dtype=np.int64)
    f_all = Filter(f.cpus, f.pids, f.comms, f.cgroup_pids, keep_idle=True)
    m_all = s.select(f_all) & (s.t >= start) & (s.t < start + ncols)
    work = m_all & (~s.idle[s.stack] | (s.pid != 0))
    t = s.t[work] - start
    col = t.astype(np.int64)
    row = rows - np.floor(rows * (t % 1.0)).astype(np.int64) - 1
    np.add.at(vals, (col, row), 1)
    # per-CPU busy fraction per second: samples that are work / all samples of that CPU
    tc = (s.t[m_all] - start).astype(np.int64)
    cc = s.cpu[m_all].astype(np.int64)
    wk = work[m_all]
    note = _hot_note(s.clock, s.event, len(tc) and (cc < 0).any())
    tot = busy = None
    if len(tc) and note is None:
        ncpu = int(cc.max()) + 1
        tot = np.zeros((ncols, ncpu), dtype=np.int64)
        busy = np.zeros((ncols, ncpu), dtype=np.int64)
        np.add.at(tot, (tc, cc), 1)
        np.add.at(busy, (tc[wk], cc[wk]), 1)
    return _heatmap(start, rows, vals, tot, busy, hot, hz, f, note)


def _hot_note(clock: bool, event: str, no_cpu: bool) -> str | None:
    if not clock:
        return (f"hot-CPU marks unavailable: the profile samples {event}, not a clock event (cpu-clock); "
                "its sample counts do not measure time")
    if no_cpu:
        return "hot-CPU marks unavailable: the profile has no CPU column"
    return None


def _heatmap(start, rows, vals, tot, busy, hot, hz, f, note, step: int = 1) -> Heatmap:
    """The heatmap from its per-second cells and per (second, CPU) all/work sample counts (None: no
    marks). step > 1: a column covers `step` seconds (the last one may hold fewer): its cells are the
    sums of its seconds' cells at the same row, its hot CPUs those hot in any of its seconds."""
    ncols = vals.shape[0]
    hotm = None
    if tot is not None:
        expected = hz or max(1.0, float(np.median(tot[tot > 0])) if (tot > 0).any() else 1.0)
        frac = busy / np.maximum(tot, 1)
        full = tot >= 0.5 * expected  # enough samples in that second to judge
        hotm = (frac >= hot) & full
    if step > 1:
        out = -(-ncols // step)
        pad = out * step - ncols
        vals = np.concatenate([vals, np.zeros((pad, rows), vals.dtype)]).reshape(out, step, rows).sum(axis=1)
        if hotm is not None:
            hotm = np.concatenate([hotm, np.zeros((pad, hotm.shape[1]), bool)]).reshape(out, step, -1).any(axis=1)
        ncols = out
    if hotm is None:
        hot_cpus: list[list[int]] = [[] for _ in range(ncols)]
    else:  # nonzero is row-major: CPUs come out grouped by column, in order
        cols_i, cpus_i = np.nonzero(hotm)
        bounds = np.searchsorted(cols_i, np.arange(ncols + 1)).tolist()
        cl = cpus_i.tolist()
        hot_cpus = [cl[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return Heatmap(start, rows, list(range(ncols)), vals.tolist(), int(vals.max()) if vals.size else 0, hot_cpus,
                   sorted(f.cpus) if f.cpus is not None else None, note, step=step)


def heatmap_fast(reader: StoreReader, f: Filter, rows: int = 50, start: float | None = None,
                 end: float | None = None, hot: float = HOT_BUSY / 100, hz: float | None = None,
                 on_segment=None, step: int = 1) -> Heatmap | None:
    """heatmap() of the stored range [start, end) from the per-minute heatmap aggregates (profile/agg.py):
    the same cells and marks, from ~one record a minute instead of every sample. None where they cannot
    answer exactly, and the caller reads the samples: no aggregates, rows other than FlameScope's 50,
    a start that is not a whole second, or a pid, comm or cgroup filter (cells are per CPU only).
    An empty range gives a heatmap with no columns of samples (Heatmap.values all 0) and `found` False.
    step: seconds per column (_heatmap), for views of long ranges."""
    from .agg import HEAT_ROWS, HeatRecord

    if (rows != HEAT_ROWS or f.pids is not None or f.comms is not None or f.cgroup_pids is not None
            or (start is not None and start != math.floor(start)) or not reader.segments(HEAT)):
        return None
    recs = []
    name = HEAT_ALL if f.cpus is None and reader.segments(HEAT_ALL) else HEAT  # all CPUs: the summed grid
    for t, p in reader.read(name, None if start is None else math.floor(start / 60) * 60, end, on_segment):
        r = HeatRecord(p)
        if (start is None or r.tmax >= start) and (end is None or r.tmin < end):
            recs.append(r)
    if not recs and (start is None or end is None):
        return Heatmap(start or 0.0, rows, [], [], 0, [], sorted(f.cpus) if f.cpus is not None else None,
                       found=False, step=step)
    if start is None:
        start = float(math.floor(min(r.tmin for r in recs)))
    if end is None:
        end = float(math.ceil(max(r.tmax for r in recs)))
    ncols = max(1, int(math.ceil(end - start)))
    # a minute of margin on both sides, so that each record adds its 60 columns into one slice
    vals = np.zeros((ncols + 120) * rows, dtype=np.int64)
    ncpu = 1 + max((c for r in recs for c in r.tcpus if f.cpus is None or c in f.cpus), default=-1)
    # per (second, CPU) all / work samples, filled record by record (each record's seconds and CPUs are
    # distinct, so a fancy-indexed += adds each once)
    tot = np.zeros((ncols, max(ncpu, 1)), dtype=np.int64)
    busy = np.zeros_like(tot)
    events: list[str] = []
    found = no_cpu = False
    sec = np.arange(60)
    for r in recs:
        base = int(r.t0 - start) + 60
        if 0 <= base <= ncols + 60:
            vals[base * rows:(base + 60) * rows] += r.grid(f.cpus)
        js = [j for j, c in enumerate(r.tcpus) if f.cpus is None or c in f.cpus]
        if not js:
            continue
        col = int(r.t0 - start) + sec
        m = (col >= 0) & (col < ncols)
        rt = r.tot[m][:, js]
        if not rt.any():
            continue
        found = True
        events += [e for e in r.event.split(",") if e and e not in events]
        cc = np.array([r.tcpus[j] for j in js])
        no_cpu |= bool((rt[:, cc < 0] > 0).any())
        pos = cc >= 0
        ix = np.ix_(col[m], cc[pos])
        tot[ix] += rt[:, pos]
        busy[ix] += r.busy[m][:, js][:, pos]
    event = ",".join(events)
    clock = not event or all(is_clock(e) for e in event.split(",") if e)
    note = _hot_note(clock, event, no_cpu)
    marks = found and note is None
    h = _heatmap(start, rows, vals[60 * rows:(60 + ncols) * rows].reshape(ncols, rows), tot if marks else None,
                 busy if marks else None, hot, hz, f, note, step)
    h.found = found
    return h


def top_functions(s: Samples, f: Filter, kernel_only: bool = True, n: int = 20) -> list[dict]:
    """Functions by self (leaf) and total (anywhere in the stack) samples, as % of selected samples."""
    m = s.select(f)
    if s.count is None:
        ids, counts = np.unique(s.stack[m], return_counts=True)
    else:
        per = np.bincount(s.stack[m], weights=s.count[m], minlength=len(s.stacks))
        ids = np.flatnonzero(per)
        counts = per[ids].astype(np.int64)
    total = s.total(m)
    self_c: Counter = Counter()
    incl: Counter = Counter()
    for sid, c in zip(ids.tolist(), counts.tolist()):
        st = s.stacks[sid]
        if st:
            self_c[st[-1]] += c
        for fr in dict.fromkeys(st):
            incl[fr] += c
    names = [k for k in incl if (k.endswith("_[k]") or not kernel_only)]
    # ties by name: the same order whatever order the stacks were read in (aggregates or raw samples)
    rows = sorted(names, key=lambda k: (-self_c.get(k, 0), -incl[k], k))[:n]
    return [{"function": k[:-4] if k[-4:] in ("_[k]", "_[j]") else k, "kernel": k.endswith("_[k]"),
             "self": self_c.get(k, 0), "total": incl[k],
             "self_pct": round(100 * self_c.get(k, 0) / max(1, total), 2),
             "total_pct": round(100 * incl[k] / max(1, total), 2)} for k in rows]


def diff(incident: Counter, baseline: Counter) -> list[tuple[str, float, int]]:
    """difffolded.pl -n: baseline scaled to the incident's total; rows `stack base_scaled incident`."""
    ti, tb = sum(incident.values()), sum(baseline.values())
    scale = ti / tb if tb else 0.0
    keys = sorted(set(incident) | set(baseline))
    return [(k, round(baseline.get(k, 0) * scale, 2), incident.get(k, 0)) for k in keys]
