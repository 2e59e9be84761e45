"""FlameScope-style subsecond heatmaps per CPU or for all CPUs, with the hot cores marked: from
the samples (heatmap) or from the per-minute heatmap aggregates (heatmap_fast)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model.thresholds import HOT_BUSY
from ..store.catalog import HEAT, HEAT_ALL
from ..store.store import StoreReader
from .parse import is_clock
from .samples import Filter, Samples


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
    from ..store.aggregates import HEAT_ROWS, HeatRecord

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
