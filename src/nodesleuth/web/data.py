"""What the web view's API returns. The server aggregates: the browser never downloads raw samples.

Long ranges come from the per-minute rollups (a day = 1,440 records), short ranges from the 1 Hz
ticks; either way columns are folded to at most `cols` by taking the max, so a 3 s hot core in a
day still shows as a hot cell."""

from __future__ import annotations

import math

import numpy as np

from ..detect.incidents import pods_seen
from ..model.kube import pod_name
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
FROM_TICK = {"cpu": "values", "time": "from", "interval": "step", **_drawn(),
             **{name: cls.WEB[5:] for name, cls in SECTIONS.items() if cls.WEB.startswith("data:")}}
NOT_FROM_TICK = {
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
