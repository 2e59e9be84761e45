"""A heatmap's document (the subsecond heatmap of one CPU, or all): from the write-time per-minute
aggregates where the store has them, else from the samples of the last range loaded, which the flame
graphs of its selections reuse (ProfileCache)."""

from __future__ import annotations

import math
import os
import threading

from ..profile import heatmap as pheat
from ..profile.load import load
from ..profile.samples import Filter
from ..store.catalog import PROFILE
from ..store.store import StoreReader

RAW_HEAT_MAX = 3600.0  # s of raw samples a heatmap reads when the store has no heatmap aggregates


class ProfileCache:
    """The last loaded profile range, so a heatmap and the flame graphs of its sub-ranges reuse it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.key = None
        self.samples = None

    def get(self, reader: StoreReader, t0: float, t1: float):
        with self.lock:
            if self.key and self.key[0] <= t0 and t1 <= self.key[1] and self.key[2] == _mtime(reader):
                return self.samples
            s = load(reader, t0, t1)
            self.key, self.samples = (t0, t1, _mtime(reader)), s
            return s

    def peek(self, reader: StoreReader, t0: float, t1: float):
        """The cached samples if they cover [t0, t1] (a flame graph of a heatmap's selection), else None."""
        with self.lock:
            if self.key and self.key[0] <= t0 and t1 <= self.key[1] and self.key[2] == _mtime(reader):
                return self.samples
            return None


def _mtime(reader: StoreReader) -> float:
    segs = reader.segments(PROFILE)
    return os.path.getmtime(segs[-1]) if segs else 0.0


def heatmap(samples, t0: float, t1: float, cpu: int | None, rows: int = 50) -> dict:
    f = Filter(cpus={cpu} if cpu is not None else None)
    h = pheat.heatmap(samples, f, rows=rows, start=math.floor(t0), end=math.ceil(t1))
    return {"start": h.start, "rows": h.rows, "columns": h.columns, "values": h.values, "maxvalue": h.maxvalue,
            "hot_cpus": h.hot_cpus, "cpu": cpu, "step": 1}


HEAT_COLS = 3600  # columns of a subsecond heatmap: an hour stays one column per second


def heatmap_fast(reader: StoreReader, t0: float, t1: float, cpu: int | None, rows: int = 50,
                 cols: int = HEAT_COLS) -> dict | None:
    """The heatmap from the write-time per-minute aggregates (profile/agg.py); None: read samples.
    Ranges longer than `cols` seconds get columns of step = ceil(seconds / cols) seconds each (a day:
    24 s): a cell sums its seconds' cells at that 20 ms row, a column's hot CPUs are those hot in any
    of its seconds (query._heatmap)."""
    f = Filter(cpus={cpu} if cpu is not None else None)
    a, b = math.floor(t0), math.ceil(t1)
    step = max(1, math.ceil((b - a) / max(1, cols)))
    h = pheat.heatmap_fast(reader, f, rows=rows, start=a, end=b, step=step)
    if h is None:
        return None
    return {"start": h.start, "rows": h.rows, "columns": h.columns, "values": h.values, "maxvalue": h.maxvalue,
            "hot_cpus": h.hot_cpus, "cpu": cpu, "step": h.step}



def heatmap_doc(reader: StoreReader, cache: ProfileCache, t0: float, t1: float, cpu: int | None, rows: int = 50,
                cols: int = HEAT_COLS) -> dict | None:
    """The heatmap of [t0, t1] from the aggregates, else from the (cached) samples; None: no
    aggregates and longer than RAW_HEAT_MAX, which raw samples would take too long to draw."""
    doc = heatmap_fast(reader, t0, t1, cpu, rows, cols)
    if doc is None:
        if t1 - t0 > RAW_HEAT_MAX:
            return None
        doc = heatmap(cache.get(reader, math.floor(t0), math.ceil(t1)), t0, t1, cpu, rows)
    return doc
