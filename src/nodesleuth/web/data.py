"""What the web view's API returns. The server aggregates: the browser never downloads raw samples.

Long ranges come from the per-minute rollups (a day = 1,440 records), short ranges from the 1 Hz
ticks; either way columns are folded to at most `cols` by taking the max, so a 3 s hot core in a
day still shows as a hot cell."""

from __future__ import annotations

import math
import os
import threading

import numpy as np

from ..detect.incidents import pods_seen
from ..model.kube import pod_name
from ..profile import heatmap as pheat
from ..profile.folded import folded_frames
from ..profile.load import load
from ..profile.samples import Filter
from ..profile.top import top_functions
from ..store import rollup, tier as tiers
from ..store.catalog import PROFILE, ROLLUP
from ..store.store import StoreReader
from .panels import panels
from ..model.records import SECTIONS
from ..model.thresholds import THRESHOLDS

TICKS_MAX_SPAN = 2 * 3600.0


def summary(reader: StoreReader) -> dict:
    span = tiers.span(reader) or reader.span(ROLLUP)  # over every retention tier
    ncpu = 0
    for m in rollup.minutes(reader, span[1] - 60 if span else None):
        ncpu = len(m.busy)
    if not ncpu and span:
        for t in tiers.ticks(reader, span[1] - 5, None, carry=False):
            ncpu = len([c for c in t.cpu if c >= 0])
    pspan = reader.span(PROFILE)
    return {"start": span[0] if span else None, "end": span[1] if span else None, "cpus": ncpu,
            "rules": THRESHOLDS,
            "profile": pspan is not None, "profile_start": pspan[0] if pspan else None,
            "profile_end": pspan[1] if pspan else None}


def _drawn() -> dict[str, str]:
    return {f: f"panel:{p.name}" for p in panels() for f in p.fields}


# Where each field of a second (model.Tick) shows in the timeline's data (or why not): a new field
# must be drawn by a panel (web/panels/) or listed here with the reason (tests/test_model.py fails otherwise).
FROM_TICK = {"cpu": "values", "events": "events", "time": "from", "interval": "step", **_drawn()}
NOT_FROM_TICK = {
    "cpu_raw": "jiffies: drawn as the busy/sys values of `cpu`",
    "procs": "per cell on hover (/api/cell)",
    "nics": "their trouble shows as kernel events and incidents; counters are in dump and /metrics",
    "units": "shown by explain's chain (creator -> unit), not as a series",
    "nic_irqs": "in dump and the recording; the starvation chart shows NET_RX/NET_TX per second",
    **{name: cls.WEB for name, cls in SECTIONS.items() if cls.WEB.startswith("not shown: ")},
}


def timeline(reader: StoreReader, t0: float, t1: float, cols: int = 600, metric: str = "busy") -> dict:
    span = max(1.0, t1 - t0)
    use_rollup = span > TICKS_MAX_SPAN and reader.segments(ROLLUP)
    step = span / cols
    events = []
    pans = panels()
    points: dict[str, list] = {p.name: [] for p in pans}
    grid = None
    if use_rollup:
        key = {"busy": "bmax", "mean": "busy", "sys": "sys"}.get(metric, "bmax")
        folded = tuple(f for p in pans if not p.from_minute for f in p.fields if f in SECTIONS)
        for r in rollup.minutes(reader, t0, t1):
            vals = getattr(r, key)
            if grid is None:
                grid = np.full((len(vals), cols), -1, dtype=np.int16)
            c = int((r.t - t0) / step)
            if 0 <= c < cols:
                grid[:, c] = np.maximum(grid[:, c], vals)
                # a minute spans several columns when zoomed in: fill them
                for cc in range(c + 1, min(cols, int((r.t + 60 - t0) / step))):
                    grid[:, cc] = np.maximum(grid[:, cc], vals)
            events += [{"t": e[0], "reason": e[1], "kind": e[2], "ifname": e[3]} for e in r.ev if t0 <= e[0] <= t1]
            tk = tiers.minute_sections(r, folded) if folded else None
            for p in pans:  # a panel without its own minute form draws the minute's folded sections as a tick
                pt = p.from_minute(r) if p.from_minute else p.from_tick(tk) if tk is not None else None
                if pt:
                    points[p.name].append(pt)
        resolution = 60
    else:
        plan = tiers.plan(reader, t0, t1)
        for tk in tiers.ticks(reader, t0, t1, carry=False, using=plan):
            cpus = sorted(c for c in tk.cpu if c >= 0)
            if not cpus:
                continue
            if grid is None:
                grid = np.full((max(cpus) + 1, cols), -1, dtype=np.int16)
            c = int((tk.time - max(0.5, tk.interval - 0.5) - t0) / step)  # a 10 s window fills its columns
            bmax = tk.bmax if metric == "busy" and isinstance(tk, tiers.CoarseTick) else None
            vals = np.array([round(tk.cpu[x].sys if metric == "sys" else bmax.get(x, tk.cpu[x].busy) if bmax
                                   else tk.cpu[x].busy) for x in cpus])
            for cc in range(max(0, c), min(cols, int((tk.time + 0.5 - t0) / step) + 1)):
                grid[cpus, cc] = np.maximum(grid[cpus, cc], vals)
            events += [{"t": e.time, "reason": e.reason, "kind": e.kind, "ifname": e.ifname, "message": e.message}
                       for e in tk.events]
            for p in pans:
                pt = p.from_tick(tk)
                if pt:
                    points[p.name].append(pt)
        resolution = 60 if "1min" in plan.tiers else 10 if "10s" in plan.tiers else 1
    # which retention tier the page shows (store/tier.py), in words for its range label
    tier_doc = ({"tier": "1 min rollups", "tiers": [{"tier": "1min", "from": t0, "to": t1}], "tier_note": ""}
                if use_rollup else {"tier": {"1s": "1 s ticks", "10s": "10 s aggregates", "1min": "1 min rollups"}
                                    .get(plan.tiers[0] if len(plan.tiers) == 1 else "", "+".join(plan.tiers) + " tiers"),
                                    **plan.to_dict(), "tier_note": plan.say() if plan.coarse else ""})
    return {"from": t0, "to": t1, "cols": cols, "step": step, "resolution": resolution, "metric": metric, **tier_doc,
            "values": grid.tolist() if grid is not None else [], "events": events,
            "panels": {p.name: p.doc((_thin_max if p.thin == "max" else _thin)(points[p.name], 800)) for p in pans},
            "problems": [str(p) for p in reader.problems]}


def _thin_max(points: list, n: int) -> list:
    """Thin to n points keeping each bucket's largest values, so a 1 s wait spike survives a day view."""
    if len(points) <= n:
        return points
    k = math.ceil(len(points) / n)
    out = []
    for i in range(0, len(points), k):
        b = points[i:i + k]
        m = dict(b[0])
        for p in b[1:]:
            for key, v in p.items():
                if key != "t" and not key.endswith("_cpu") and v is not None and (m.get(key) is None or v > m[key]):
                    m[key] = v
                    for which in (k for k in p if k.endswith("_cpu")):  # the CPU that had the max goes with it
                        m[which] = p[which]
        out.append(m)
    return out


def cell(reader: StoreReader, cpu: int, t: float, resolution: int) -> dict:
    """What one heatmap cell stands for: that CPU's mpstat columns in that second and who ran there
    (1 s ticks), or the minute's mean and max busy (rollups)."""
    if resolution > 10:
        for r in rollup.minutes(reader, t, t + 1):
            if r.t <= t < r.t + 60 and cpu < len(r.busy):
                return {"cpu": cpu, "t": r.t, "span": 60, "busy_mean": r.busy[cpu], "busy_max": r.bmax[cpu],
                        "sys": r.sys[cpu]}
        return {"cpu": cpu, "t": t, "span": 60, "missing": True}
    best, _ = tiers.at(reader, t)  # the second covering t, or the 10 s window past the 1 s tier
    if best is None or cpu not in best.cpu:
        return {"cpu": cpu, "t": t, "span": 1, "missing": True}
    u = best.cpu[cpu]
    who = sorted((p for p in best.procs if p.cpu == cpu), key=lambda p: -p.pct)[:3]
    pods = pods_seen([best])  # the pods of the processes that took a large share of a CPU (hogs rows)
    doc = {"cpu": cpu, "t": best.time - best.interval, "span": best.interval, "busy": round(u.busy, 1),
           "usr": u.usr, "sys": u.sys, "soft": u.soft, "irq": u.irq, "iowait": u.iowait,
           "procs": [{"comm": p.comm, "pid": p.pid, "pct": round(p.pct, 1), "estimate": p.estimate,
                      **({"pod": pod_name(pods[p.pid])} if p.pid in pods else {})} for p in who]}
    if isinstance(best, tiers.CoarseTick):
        doc.update({"tier": best.tier, "busy_max": best.bmax.get(cpu), "hot_seconds": (best.hot or {}).get(cpu)})
    return doc


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


def flame_filter(cpu: int | None, pid: int | None, comm: str | None, cgroup: str | None) -> Filter:
    """The flame graph's filter; a cgroup is resolved to the processes in it now (as the CLI's --cgroup)."""
    pids = None
    if cgroup:
        from ..node.cgroupfs import pids_in_cgroup
        from ..node.root import Root

        pids = pids_in_cgroup(Root("/"), cgroup)
    return Filter(cpus={cpu} if cpu is not None else None, pids={pid} if pid is not None else None,
                     comms={comm} if comm else None, cgroup_pids=pids)


def _tree(fc, base=None, least: float = 0.0) -> tuple[dict, float]:
    """d3-flame-graph's shape {name, value, children} from folded frame tuples, children in name
    order; and the samples of pruned subtrees. With a baseline (normalised to this range's total,
    difffolded -n), each node gets `base` and a `status`: new (absent from the baseline), more, less,
    same, or gone: a subtree only the baseline has, added at its baseline width so what vanished is
    seen too (its `value` is then the scaled baseline, `gone_value`, not this range's).

    Built in one pass over the stacks in sorted order: a node is made when a stack first leaves its
    parent's last child, and closed (summed, judged, pruned) when no later stack passes through it.
    `least`: subtrees narrower than this are not kept; their parent keeps their width (its self time)."""
    scale = sum(fc.values()) / max(1, sum(base.values())) if base is not None else 1.0
    rows: dict[tuple, list] = {st: [v, 0] for st, v in fc.items()}
    for st, v in (base or {}).items():
        rows.setdefault(st, [0, 0])[1] += v
    root = {"name": "all", "value": 0, "children": []}
    # open nodes: [node, samples, baseline samples, pruned inside] so far (counts stay integers: a
    # node's scaled baseline is one product, whatever order its stacks are summed in)
    path = [[root, 0, 0, 0.0]]
    pruned = 0.0

    def close() -> None:
        node, v, b, gone = path.pop()
        if base is None:
            node["value"] = v
        else:
            kids = node["children"]
            b2 = node["base"] = round(b * scale, 2)
            node["samples"] = v
            if v <= 0:
                node["status"], node["value"] = "gone", b2
            else:
                node["value"] = v
                if b2 <= 0:
                    node["status"] = "new"
                else:
                    d = (v - b2) / max(v, b2)
                    node["status"] = "same" if abs(d) < 0.02 else "more" if d > 0 else "less"
                    node["change"] = round(d, 3)
            # a parent's width covers its children, vanished ones included
            node["value"] = max(node["value"], round(sum(k["value"] for k in kids), 2))
        up = path[-1] if path else None
        if up is None:
            return
        up[1] += v
        up[2] += b
        if least > 0 and node["value"] < least:
            up[0]["children"].pop()  # the parent's last child: this node
            up[3] += node["value"]
        else:
            up[3] += gone

    prev: tuple = ()
    for st in sorted(rows):
        v, b = rows[st]
        same, m = 0, min(len(st), len(prev))
        while same < m and st[same] == prev[same]:
            same += 1
        while len(path) > same + 1:
            close()
        for fr in st[same:]:
            n = {"name": fr, "value": 0, "children": []}
            path[-1][0]["children"].append(n)
            path.append([n, 0, 0, 0.0])
        path[-1][1] += v
        path[-1][2] += b
        prev = st
    while len(path) > 1:
        close()
    pruned = path[0][3]
    close()
    return root, pruned


MAX_DEPTH = 64  # frames drawn per stack: one runaway recursion must not make the page 2,000 px tall


def _cap(fc, depth: int):
    """Stacks (frame tuples) cut at `depth` frames (their samples stay, on the cut frame); and how many
    were cut."""
    out, cut = type(fc)(), 0
    for st, v in fc.items():
        if len(st) > depth:
            cut += v
            st = st[:depth]
        out[st] += v
    return out, cut


MIN_SHARE = 1 / 5000  # frames narrower than this share of the graph are not sent (< 0.3 px at 1,200 px)


def _prune(node: dict, least: float) -> float:
    """Drop subtrees narrower than `least` samples; a parent keeps its width, so its dropped children
    show as its own (self) time. Returns the samples of the dropped subtrees."""
    kids, gone = [], 0
    for k in node["children"]:
        if k["value"] < least:
            gone += k["value"]
        else:
            gone += _prune(k, least)
            kids.append(k)
    node["children"] = kids
    return gone


def flame(samples, base_samples, f: Filter, max_depth: int = MAX_DEPTH, min_share: float = MIN_SHARE) -> dict:
    """The d3 tree of the range; frames under `min_share` of the total are pruned (`pruned`: their
    samples, still counted in their parents' widths and in `samples`)."""
    fc, cut = _cap(folded_frames(samples, f), max_depth)
    base = _cap(folded_frames(base_samples, f), max_depth)[0] if base_samples is not None else None
    top = top_functions(samples, f, kernel_only=False, n=10)
    total = sum(fc.values())
    if base is None:  # the graph's width is its samples: prune while building
        tree, pruned = _tree(fc, None, min_share * total)
    else:  # a diff's width also covers what vanished: known once built
        tree, _ = _tree(fc, base)
        pruned = _prune(tree, min_share * tree["value"]) if min_share > 0 else 0
    doc = {"tree": tree, "samples": total, "top": top, "diff": base is not None,
           "depth_cap": max_depth, "cut": cut, "pruned": round(pruned, 2), "min_share": min_share}
    if base is not None:
        doc["base_samples"] = sum(base.values())
    return doc


def subset(s, t0: float, t1: float):
    return s.masked((s.t >= t0) & (s.t < t1))
