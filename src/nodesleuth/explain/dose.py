"""Dose-response over a recording: does the hot core's memory-cgroup work grow with the dying memcgs,
and does the cost of one root memory.stat read (the read kubelet makes, collect/stat_read.py)?

Per WINDOW seconds of the recording (up to SPAN s before the incident's end): the dying memcg count (the census, averaged over the
window), the core's share of its profile samples in memory-cgroup code (idle samples included: a
share of its time), and the timed stats read in the window. Spearman's rank correlation of the dying
count with each, with n and the two-sided p-value (model/stats.py). Shown only where the recording allows it:
at least MIN_WINDOWS windows, and a dying count that moved by at least MIN_SPREAD across them (a flat
count has nothing to correlate with). A dose-response is evidence, not a verdict: it does not change
any link's verdict.
"""

from __future__ import annotations

import math

from ..model.frames import IS_MEMCG
from ..model.stats import spearman

WINDOW = 10.0
SPAN = 900.0  # s before the incident's end looked at (bounds the profile read on a big node)
MIN_WINDOWS = 6
MIN_SPREAD = 100  # dying memcgs between the fewest and the most of the windows
MIN_SAMPLES = 20  # profile samples of the core for a window's share to count


def _rho(xs: list[float], ys: list[float]) -> dict | None:
    pts = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pts) < MIN_WINDOWS or len({p[1] for p in pts}) < 2 or len({p[0] for p in pts}) < 2:
        return None
    rho, p = spearman([p[0] for p in pts], [p[1] for p in pts])
    if math.isnan(rho):
        return None
    strength = ("strong" if abs(rho) >= 0.7 else "moderate" if abs(rho) >= 0.4 else "weak") + (
        "" if p < 0.05 else ", not significant")
    return {"rho": round(rho, 3), "p": float(f"{p:.3g}"), "n": len(pts), "strength": strength}


def response(rec, cpu: int, end: float | None = None) -> dict | None:
    """The dose-response of CPU `cpu` over the recording `rec` (explain.load.Recording) up to `end` (at
    most SPAN s of it), or None when the recording does not allow one."""
    ticks = [t for t in rec.ticks if end is None or end - SPAN <= t.time <= end + 1]
    if len(ticks) < MIN_WINDOWS * WINDOW:
        return None
    t0, t1 = ticks[0].time - ticks[0].interval, ticks[-1].time
    n = int((t1 - t0) // WINDOW)
    rows = [{"t": t0 + i * WINDOW, "dying": [], "stat_us": None, "memcg": 0, "samples": 0} for i in range(n)]
    for tk in ticks:
        i = int((tk.time - t0 - 1e-6) // WINDOW)
        if not 0 <= i < n:
            continue
        d = tk.census.memory_dying() if tk.census is not None else None
        if d is not None:
            rows[i]["dying"].append(d)
        sr = getattr(tk, "stat_read", None)
        if sr is not None:
            rows[i]["stat_us"] = sr.wall_us
    dying = [sum(r["dying"]) / len(r["dying"]) if r["dying"] else None for r in rows]
    seen = [d for d in dying if d is not None]
    if len(seen) < MIN_WINDOWS or max(seen) - min(seen) < MIN_SPREAD:
        return None
    s = rec.samples(t0 + 60, t1)  # Recording.samples reads from 60 s before its start
    if s is not None and len(s):
        import numpy as np

        m = (s.cpu == cpu) & (s.t >= t0) & (s.t < t0 + n * WINDOW)
        idx = ((s.t[m] - t0) // WINDOW).astype(int)
        mc = (s.classes(s.stack[m]) & IS_MEMCG).astype(bool)  # each stack's classes, as the profile classified them
        tot = np.bincount(idx, minlength=n)
        hit = np.bincount(idx, weights=mc.astype(float), minlength=n)
        for i in range(n):
            rows[i]["samples"], rows[i]["memcg"] = int(tot[i]), int(hit[i])
    share = [r["memcg"] / r["samples"] if r["samples"] >= MIN_SAMPLES else None for r in rows]
    stat = [r["stat_us"] for r in rows]
    out = {"cpu": cpu, "window_s": WINDOW, "windows": n,
           "dying": {"min": min(seen), "max": max(seen)},
           "memcg_share": _rho(dying, share), "stat_read": _rho(dying, stat),
           "rows": [[round(r["t"], 1), None if d is None else round(d), None if sh is None else round(sh, 3),
                     st] for r, d, sh, st in zip(rows, dying, share, stat)]}
    if out["memcg_share"] is None and out["stat_read"] is None:
        return None
    shares = [x for x in share if x is not None]
    stats = [x for x in stat if x is not None]
    out["memcg_share_range"] = [round(min(shares), 3), round(max(shares), 3)] if shares else None
    out["stat_read_us_range"] = [round(min(stats), 1), round(max(stats), 1)] if stats else None
    return out


def text(d: dict) -> list[str]:
    """The dose-response as lines of a report."""
    out = [f"dose-response over the recording ({d['windows']} windows of {d['window_s']:.0f} s, dying memcgs "
           f"{d['dying']['min']:.0f} -> {d['dying']['max']:.0f}):"]
    for key, what, rng, unit in (("memcg_share", f"CPU {d['cpu']}'s time in memory-cgroup code",
                                  d.get("memcg_share_range"), "share"),
                                 ("stat_read", "one read of the root memory.stat", d.get("stat_read_us_range"), "us")):
        r = d.get(key)
        span = ""
        if rng:
            span = (f" ({100 * rng[0]:.0f}% -> {100 * rng[1]:.0f}%)" if unit == "share"
                    else f" ({rng[0]:.0f} -> {rng[1]:.0f} us)")
        if r is None:
            out.append(f"  {what}{span}: not enough data to correlate")
        else:
            out.append(f"  {what}{span}: Spearman rho {r['rho']:+.2f} with the dying count (n {r['n']}, "
                       f"p {r['p']:.2g}: {r['strength']})")
    return out
