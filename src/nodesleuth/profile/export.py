"""Exports: folded text, collapsed-with-CPU, speedscope JSON (one profile per CPU or per process); the
SVG flame graph is flamesvg.py, pprof is pprof.py."""

from __future__ import annotations

from collections import Counter

from .. import __version__

import numpy as np

from .samples import Filter, Samples


def speedscope(s: Samples, f: Filter, name: str = "nodesleuth", by: str = "cpu") -> dict:
    """Sampled profiles, one per CPU (by="cpu") or per process (by="process"), weights in samples;
    activeProfileIndex = the busiest."""
    m = s.select(f)
    frames: dict[str, int] = {}
    profiles = []
    busiest, best = 0, -1
    key = s.cpu if by == "cpu" else s.pid
    for cpu in sorted(set(key[m].tolist())):
        mc = m & (key == cpu)
        order = np.argsort(s.t[mc], kind="stable")
        samples, weights = [], []
        for sid, cid in zip(s.stack[mc][order].tolist(), s.comm[mc][order].tolist()):
            st = (s.comms[cid],) + s.stacks[sid]
            samples.append([frames.setdefault(fr, len(frames)) for fr in st])
            weights.append(1)
        if len(samples) > best:
            busiest, best = len(profiles), len(samples)
        label = f"CPU {cpu}" if by == "cpu" else f"{s.comms[int(s.comm[mc][0])]} [{cpu}]"
        profiles.append({"type": "sampled", "name": label, "unit": "none",
                         "startValue": 0, "endValue": len(samples), "samples": samples, "weights": weights})
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": k} for k in frames]}, "profiles": profiles, "name": name,
            "activeProfileIndex": busiest, "exporter": f"nodesleuth@{__version__}"}


def collapsed_cpu(s: Samples, f: Filter) -> Counter:
    """Folded stacks with the CPU as the root frame (`cpu_39;comm;...;leaf count`), so one flame
    graph splits by CPU and a hot core is its own tower."""
    m = s.select(f)
    out: Counter = Counter()
    for cpu, comm, st in zip(s.cpu[m].tolist(), s.comm[m].tolist(), s.stack[m].tolist()):
        out[";".join((f"cpu_{cpu}", s.comms[comm].replace(";", ":").replace(" ", "_")) + s.stacks[st])] += 1
    return out


# The interactive SVG (search, zoom, depth cap, diff colours) lives in flamesvg.py.
from .flamesvg import svg  # noqa: E402,F401


def render(fmt: str, s, f, fc, base, title: str, max_depth: int = 64, hz: float = 49.0) -> str | bytes:
    """One of `flame`'s output formats: text, or bytes for pprof (gzip protobuf)."""
    import json

    from .folded import diff, folded_text

    if fmt == "svg":
        return svg(fc, title, baseline=base, max_depth=max_depth)
    if fmt in ("speedscope", "speedscope-process"):
        return json.dumps(speedscope(s, f, by="cpu" if fmt == "speedscope" else "process"))
    if fmt == "collapsed-cpu":
        return folded_text(collapsed_cpu(s, f))
    if fmt == "pprof":
        from . import pprof

        return pprof.encode(s, f, hz)
    if base is not None:
        return "".join(f"{k} {b} {i}\n" for k, b, i in diff(fc, base))
    return folded_text(fc)
