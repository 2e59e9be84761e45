"""What the web view's API returns. The server aggregates: the browser never downloads raw samples.

Long ranges come from the per-minute rollups (a day = 1,440 records), short ranges from the 1 Hz
ticks; either way columns are folded to at most `cols` by taking the max, so a 3 s hot core in a
day still shows as a hot cell."""

from __future__ import annotations

import math
import os
import threading

import numpy as np
import orjson

from ..profile import query as pq
from ..store import query as sq
from ..store.rollup import STREAM as ROLLUP
from ..store.store import TICKS, StoreReader

TICKS_MAX_SPAN = 2 * 3600.0


def summary(reader: StoreReader) -> dict:
    span = reader.span(TICKS) or reader.span(ROLLUP)
    ncpu = 0
    for _, p in reader.read(ROLLUP, span[1] - 120 if span else None):
        ncpu = len(orjson.loads(p)["busy"])
    if not ncpu and span:
        for t in sq.ticks(reader, span[1] - 5, None, carry=False):
            ncpu = len([c for c in t.cpu if c >= 0])
    pspan = reader.span("profile")
    return {"start": span[0] if span else None, "end": span[1] if span else None, "cpus": ncpu,
            "profile": pspan is not None, "profile_start": pspan[0] if pspan else None,
            "profile_end": pspan[1] if pspan else None}


def timeline(reader: StoreReader, t0: float, t1: float, cols: int = 600, metric: str = "busy") -> dict:
    span = max(1.0, t1 - t0)
    use_rollup = span > TICKS_MAX_SPAN and reader.segments(ROLLUP)
    step = span / cols
    events, census, mem = [], [], []
    grid = None
    if use_rollup:
        key = {"busy": "bmax", "mean": "busy", "sys": "sys"}.get(metric, "bmax")
        for t, p in reader.read(ROLLUP, t0 - 60, t1):
            r = orjson.loads(p)
            vals = r[key]
            if grid is None:
                grid = np.full((len(vals), cols), -1, dtype=np.int16)
            c = int((r["t"] - t0) / step)
            if 0 <= c < cols:
                grid[:, c] = np.maximum(grid[:, c], vals)
                # a minute spans several columns when zoomed in: fill them
                for cc in range(c + 1, min(cols, int((r["t"] + 60 - t0) / step))):
                    grid[:, cc] = np.maximum(grid[:, cc], vals)
            events += [{"t": e[0], "reason": e[1], "kind": e[2], "ifname": e[3]} for e in r["ev"] if t0 <= e[0] <= t1]
            if r.get("mem"):
                census.append({"t": r["t"], "tracked": r["mem"][0], "live": r["mem"][1], "dying": r["mem"][2]})
            mem.append({"t": r["t"], "percpu": r["percpu"], "slab": r["slab"]})
        resolution = 60
    else:
        for tk in sq.ticks(reader, t0, t1, carry=False):
            cpus = sorted(c for c in tk.cpu if c >= 0)
            if not cpus:
                continue
            if grid is None:
                grid = np.full((max(cpus) + 1, cols), -1, dtype=np.int16)
            c = int((tk.time - 0.5 - t0) / step)
            vals = np.array([round(tk.cpu[x].sys if metric == "sys" else tk.cpu[x].busy) for x in cpus])
            for cc in range(max(0, c), min(cols, int((tk.time + 0.5 - t0) / step) + 1)):
                grid[cpus, cc] = np.maximum(grid[cpus, cc], vals)
            events += [{"t": e.time, "reason": e.reason, "kind": e.kind, "ifname": e.ifname, "message": e.message}
                       for e in tk.events]
            m = tk.census.controller("memory")
            census.append({"t": tk.time, "tracked": m.tracked if m else None, "live": m.live if m else None,
                           "dying": tk.census.memory_dying()})
            mem.append({"t": tk.time, "percpu": tk.meminfo.get("Percpu"), "slab": tk.meminfo.get("Slab")})
        resolution = 1
    return {"from": t0, "to": t1, "cols": cols, "step": step, "resolution": resolution, "metric": metric,
            "values": grid.tolist() if grid is not None else [], "events": events,
            "census": _thin(census, 800), "memory": _thin(mem, 800), "problems": [str(p) for p in reader.problems]}


def _thin(points: list, n: int) -> list:
    if len(points) <= n:
        return points
    k = math.ceil(len(points) / n)
    return points[::k]


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
            s = pq.load(reader, t0, t1)
            self.key, self.samples = (t0, t1, _mtime(reader)), s
            return s


def _mtime(reader: StoreReader) -> float:
    segs = reader.segments("profile")
    return os.path.getmtime(segs[-1]) if segs else 0.0


def heatmap(samples, t0: float, t1: float, cpu: int | None, rows: int = 50) -> dict:
    f = pq.Filter(cpus={cpu} if cpu is not None else None)
    h = pq.heatmap(samples, f, rows=rows, start=math.floor(t0), end=math.ceil(t1))
    return {"start": h.start, "rows": h.rows, "columns": h.columns, "values": h.values, "maxvalue": h.maxvalue,
            "hot_cpus": h.hot_cpus, "cpu": cpu}


def _tree(fc, base=None) -> dict:
    """d3-flame-graph's shape {name, value, children}; with a baseline, `delta` per node for its
    differential colouring (baseline normalised to this range's total)."""
    root = {"name": "all", "value": 0, "children": {}}
    scale = 1.0
    if base:
        scale = sum(fc.values()) / max(1, sum(base.values()))

    def add(stack, v, key):
        node = root
        node[key] = node.get(key, 0) + v
        for fr in stack.split(";"):
            ch = node["children"].get(fr)
            if ch is None:
                ch = node["children"][fr] = {"name": fr, "value": 0, "children": {}}
            ch[key] = ch.get(key, 0) + v
            node = ch

    for st, v in fc.items():
        add(st, v, "value")
    if base:
        for st, v in base.items():
            add(st, v * scale, "base")

    def fin(n):
        n["children"] = [fin(c) for c in n["children"].values() if c.get("value", 0) > 0]
        if base:
            n["delta"] = round(n.get("value", 0) - n.pop("base", 0.0), 2)
        return n

    return fin(root)


def flame(samples, base_samples, f: pq.Filter) -> dict:
    fc = pq.folded(samples, f)
    base = pq.folded(base_samples, f) if base_samples is not None else None
    top = pq.top_functions(samples, f, kernel_only=False, n=10)
    return {"tree": _tree(fc, base), "samples": sum(fc.values()), "top": top, "diff": base is not None}


def subset(s, t0: float, t1: float):
    return s.masked((s.t >= t0) & (s.t < t1))
