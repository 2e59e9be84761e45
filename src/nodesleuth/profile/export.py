"""Exports: folded text, speedscope JSON (one profile per CPU), and an SVG flame graph."""

from __future__ import annotations

import html
import zlib
from collections import Counter

import numpy as np

from .query import Filter, Samples


def speedscope(s: Samples, f: Filter, name: str = "nodesleuth") -> dict:
    """Sampled profiles, one per CPU, weights in samples; activeProfileIndex = the busiest CPU."""
    m = s.select(f)
    frames: dict[str, int] = {}
    profiles = []
    busiest, best = 0, -1
    for cpu in sorted(set(s.cpu[m].tolist())):
        mc = m & (s.cpu == cpu)
        order = np.argsort(s.t[mc], kind="stable")
        samples, weights = [], []
        for sid, cid in zip(s.stack[mc][order].tolist(), s.comm[mc][order].tolist()):
            st = (s.comms[cid],) + s.stacks[sid]
            samples.append([frames.setdefault(fr, len(frames)) for fr in st])
            weights.append(1)
        if len(samples) > best:
            busiest, best = len(profiles), len(samples)
        profiles.append({"type": "sampled", "name": f"CPU {cpu}", "unit": "none",
                         "startValue": 0, "endValue": len(samples), "samples": samples, "weights": weights})
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": [{"name": k} for k in frames]}, "profiles": profiles, "name": name,
            "activeProfileIndex": busiest, "exporter": "nodesleuth@0.1.0"}


def _tree(fc: Counter) -> dict:
    root = {"n": "all", "v": 0, "c": {}}
    for stack, count in fc.items():
        root["v"] += count
        node = root
        for fr in stack.split(";"):
            ch = node["c"].get(fr)
            if ch is None:
                ch = node["c"][fr] = {"n": fr, "v": 0, "c": {}}
            ch["v"] += count
            node = ch
    return root


def _color(name: str, delta: float | None = None) -> str:
    if delta is not None:  # differential: red = more in the incident, blue = less
        r = min(1.0, abs(delta))
        v = int(255 - 180 * r)
        return f"rgb(255,{v},{v})" if delta > 0 else f"rgb({v},{v},255)"
    h = zlib.crc32(name.encode()) % 1000 / 1000
    if name.endswith("_[k]"):
        return f"rgb({200 + int(55 * h)},{100 + int(60 * h)},{50})"
    return f"rgb({230 + int(25 * h)},{120 + int(100 * h)},{40 + int(40 * h)})"


def svg(fc: Counter, title: str = "Flame Graph", width: int = 1200, frame_h: int = 16,
        baseline: Counter | None = None, minwidth: float = 0.1) -> str:
    """A FlameGraph-style SVG: widths are samples, hover titles give counts and percentages.
    With `baseline`, colours show the normalised change (difffolded -n semantics)."""
    tree = _tree(fc)
    total = tree["v"] or 1
    base_tree = None
    if baseline is not None:
        tb = sum(baseline.values()) or 1
        base_tree = _tree(Counter({k: v * total / tb for k, v in baseline.items()}))

    def depth(n):
        return 1 + max((depth(c) for c in n["c"].values()), default=0)

    d = depth(tree)
    height = (d + 2) * frame_h + 40
    scale = (width - 20) / total
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Verdana" font-size="12">',
           '<style>rect:hover{stroke:black;stroke-width:0.5}</style>',
           '<rect width="100%" height="100%" fill="#f8f8f8"/>',
           f'<text x="{width // 2}" y="20" text-anchor="middle" font-size="16">{html.escape(title)}</text>']

    def walk(node, x, level, bnode):
        w = node["v"] * scale
        if w < minwidth:
            return
        y = height - (level + 2) * frame_h
        delta = None
        if bnode is not None or base_tree is not None:
            bv = bnode["v"] if bnode else 0.0
            delta = (node["v"] - bv) / max(node["v"], bv, 1)
        pct = 100 * node["v"] / total
        label = node["n"]
        tip = f"{label} ({node['v']} samples, {pct:.2f}%)"
        if delta is not None:
            tip += f" change {delta:+.0%}"
        out.append(f'<g><title>{html.escape(tip)}</title><rect x="{10 + x:.2f}" y="{y}" width="{w:.2f}" '
                   f'height="{frame_h - 1}" fill="{_color(label, delta)}" rx="2"/>')
        if w > 30:
            chars = int(w / 7)
            txt = label if len(label) <= chars else label[:max(0, chars - 2)] + ".."
            out.append(f'<text x="{12 + x:.2f}" y="{y + frame_h - 4}">{html.escape(txt)}</text>')
        out.append("</g>")
        cx = x
        for name in sorted(node["c"]):
            ch = node["c"][name]
            walk(ch, cx, level + 1, bnode["c"].get(name) if bnode else None)
            cx += ch["v"] * scale

    walk(tree, 0.0, 0, base_tree)
    out.append("</svg>")
    return "\n".join(out)
