"""Interactive SVG flame graph in the conventions of Brendan Gregg's flamegraph.pl: title on top,
"Reset Zoom" left and "Search" right, a details line at the bottom, click a frame to zoom into it,
Ctrl-F or the Search button to highlight frames by regex (with the matched share), frames drawn
bottom-up, kernel frames (`_[k]`) in the orange "kernel" palette. The script is embedded so the
file works on its own in a browser.

Height is bounded: stacks deeper than `max_depth` are cut there (the samples stay counted at the
cut frame) and a note under the title says how many samples were cut, so one runaway recursion can
no longer make a 2,000 px tall picture.

With a baseline (difffolded -n semantics: baseline normalised to this profile's total), frames are
coloured by change: red = more than the baseline, solid red = new (absent from the baseline),
blue = less; frames that vanished since the baseline are drawn hatched blue at their baseline width,
to the right of their siblings, and counted in a note.
"""

from __future__ import annotations

import html
import zlib
from collections import Counter

_SCRIPT = r"""
var svg = document.documentElement, details, searching = null, matchedtxt, unzoombtn, total;
function init() {
  details = document.getElementById("details").firstChild;
  matchedtxt = document.getElementById("matched");
  unzoombtn = document.getElementById("unzoom");
  total = +document.getElementById("frames").getAttribute("data-total");
  svg.addEventListener("click", function (e) {
    var g = e.target.closest ? e.target.closest("g.f") : null;
    if (g) zoom(g); else if (e.target.id === "unzoom" || e.target.parentNode.id === "unzoom") unzoom();
    else if (e.target.id === "search" || e.target.parentNode.id === "search") search_prompt();
  });
  svg.addEventListener("mouseover", function (e) {
    var g = e.target.closest ? e.target.closest("g.f") : null;
    if (g) details.nodeValue = "Function: " + g.getAttribute("data-tip");
  });
  svg.addEventListener("mouseout", function () { details.nodeValue = " "; });
  window.addEventListener("keydown", function (e) {
    if (e.keyCode === 114 || (e.ctrlKey && e.keyCode === 70)) { e.preventDefault(); search_prompt(); }
  });
}
function attr(g, n) { return +g.getAttribute(n); }
function zoom(node) {
  var x0 = attr(node, "data-x"), w0 = attr(node, "data-w"), lvl0 = attr(node, "data-l");
  var W = attr(svg, "data-width"), pad = 10, scale = (W - 2 * pad) / w0;
  unzoombtn.classList.remove("hide");
  document.querySelectorAll("g.f").forEach(function (g) {
    var x = attr(g, "data-x"), w = attr(g, "data-w"), l = attr(g, "data-l");
    var r = g.querySelector("rect"), t = g.querySelector("text");
    var inside = x >= x0 - 1e-9 && x + w <= x0 + w0 + 1e-9 && l >= lvl0;
    var below = l < lvl0 && x <= x0 + 1e-9 && x + w >= x0 + w0 - 1e-9;
    if (!inside && !below) { g.classList.add("hide"); return; }
    g.classList.remove("hide");
    var nx = inside ? pad + (x - x0) * scale : pad, nw = inside ? w * scale : W - 2 * pad;
    r.setAttribute("x", nx); r.setAttribute("width", nw);
    if (t) { t.setAttribute("x", nx + 3); label(t, nw, g.getAttribute("data-name")); }
    g.classList.toggle("parent", below);
  });
}
function unzoom() {
  unzoombtn.classList.add("hide");
  document.querySelectorAll("g.f").forEach(function (g) {
    g.classList.remove("hide", "parent");
    var r = g.querySelector("rect"), t = g.querySelector("text");
    r.setAttribute("x", g.getAttribute("data-ox")); r.setAttribute("width", g.getAttribute("data-ow"));
    if (t) { t.setAttribute("x", attr(g, "data-ox") + 3); label(t, attr(g, "data-ow"), g.getAttribute("data-name")); }
  });
}
function label(t, w, name) {
  var n = Math.floor(w / 7);
  t.textContent = n < 3 ? "" : (name.length <= n ? name : name.slice(0, n - 2) + "..");
}
function search_prompt() {
  if (searching) { reset_search(); return; }
  var term = prompt("Enter a search term (regexp allowed, eg: ^ext4_)", "");
  if (term) search(term);
}
function reset_search() {
  document.querySelectorAll("g.f rect").forEach(function (r) { r.setAttribute("fill", r.getAttribute("data-fill")); });
  matchedtxt.classList.add("hide"); searching = null;
  document.getElementById("search").firstChild.nodeValue = "Search";
}
function search(term) {
  var re = new RegExp(term), spans = [];
  document.querySelectorAll("g.f").forEach(function (g) {
    var r = g.querySelector("rect");
    if (re.test(g.getAttribute("data-name"))) {
      r.setAttribute("fill", "rgb(230,0,230)");
      spans.push([attr(g, "data-x"), attr(g, "data-x") + attr(g, "data-w"), attr(g, "data-v")]);
    } else r.setAttribute("fill", r.getAttribute("data-fill"));
  });
  spans.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
  var sum = 0, end = -1;  // matched samples, nested matches counted once
  spans.forEach(function (s) { if (s[0] >= end - 1e-9) { sum += s[2]; end = s[1]; } });
  searching = term;
  matchedtxt.firstChild.nodeValue = "Matched: " + (100 * sum / total).toFixed(1) + "%";
  matchedtxt.classList.remove("hide");
  document.getElementById("search").firstChild.nodeValue = "Reset Search";
  svg.setAttribute("data-matched", sum);
}
window.addEventListener("load", init);
"""


def _tree(fc: Counter, max_depth: int) -> tuple[dict, int]:
    root = {"n": "all", "v": 0.0, "c": {}}
    cut = 0
    for stack, count in fc.items():
        frames = stack.split(";")
        if len(frames) > max_depth:
            cut += count
            frames = frames[:max_depth]
        root["v"] += count
        node = root
        for fr in frames:
            ch = node["c"].get(fr)
            if ch is None:
                ch = node["c"][fr] = {"n": fr, "v": 0.0, "c": {}}
            ch["v"] += count
            node = ch
    return root, cut


def _color(name: str) -> str:
    h = zlib.crc32(name.encode()) % 1000 / 1000
    if name.endswith("_[k]"):  # flamegraph.pl --colors=java/perl style: kernel frames orange
        return f"rgb({200 + int(55 * h)},{110 + int(50 * h)},0)"
    return f"rgb({205 + int(50 * h)},{int(230 * (1 - h) * 0.5) + 60},{int(55 * h)})"  # "hot" palette


def _diff_color(v: float, b: float) -> str:
    if b <= 0:
        return "rgb(220,0,0)"  # new since the baseline
    d = (v - b) / max(v, b)
    k = int(235 * (1 - min(1.0, abs(d))))
    if abs(d) < 0.02:
        return "rgb(225,225,225)"
    return f"rgb(255,{k},{k})" if d > 0 else f"rgb({k},{k},255)"


def _depth(n: dict) -> int:
    """Levels of a tree: the picture's height in frames."""
    return 1 + max((_depth(c) for c in n["c"].values()), default=0)


def _disp(node: dict, bnode: dict | None) -> float:
    """Width in samples: this range's, plus the vanished baseline subtrees drawn inside it."""
    return node["v"] + sum(g["v"] for g in _gone(node, bnode))


class _Frames:
    """The frames' <g> elements, laid out left to right and bottom-up: a frame's width is its samples."""

    def __init__(self, total: float, base_tree: dict | None, scale: float, height: int, frame_h: int,
                 minwidth: float):
        self.total, self.base_tree, self.scale = total, base_tree, scale
        self.height, self.frame_h, self.minwidth = height, frame_h, minwidth
        self.frames: list[str] = []

    def draw(self, node, x, level, w_samples, v_incident, v_base, gone=False):
        """One frame's element: box, label cut to fit, tooltip (its change against the baseline, or why hatched)."""
        w = w_samples * self.scale
        if w < self.minwidth:
            return
        frame_h = self.frame_h
        y = self.height - 40 - (level + 1) * frame_h
        name = node["n"]
        pct = 100 * v_incident / self.total
        if gone:
            tip = f"{name} (absent in this range; {v_base:.0f} samples in the baseline, scaled)"
            fill = "url(#gone)"
        else:
            tip = f"{name} ({v_incident:.0f} samples, {pct:.2f}%)"
            if self.base_tree is not None:
                tip += (" new since the baseline" if v_base <= 0 else
                        f" baseline {v_base:.0f} ({(v_incident - v_base) / max(v_incident, v_base):+.0%})")
                fill = _diff_color(v_incident, v_base)
            else:
                fill = _color(name)
        ox = 10 + x
        chars = int(w / 7)
        txt = "" if chars < 3 else (name if len(name) <= chars else name[:chars - 2] + "..")
        self.frames.append(
            f'<g class="f" data-name="{html.escape(name)}" data-tip="{html.escape(tip)}" data-x="{x:.3f}" '
            f'data-w="{w:.3f}" data-l="{level}" data-v="{v_incident:.0f}" data-ox="{ox:.2f}" data-ow="{w:.2f}"'
            + (' data-gone="1"' if gone else "")
            + f'><title>{html.escape(tip)}</title><rect x="{ox:.2f}" y="{y}" width="{w:.2f}" height="{frame_h - 1}" '
            f'fill="{fill}" data-fill="{fill}" rx="2"/><text x="{ox + 3:.2f}" y="{y + frame_h - 4}">'
            f'{html.escape(txt)}</text></g>')

    def walk(self, node, bnode, x, level):
        """A subtree of this range (children by name), then its children that vanished since the baseline."""
        self.draw(node, x, level, _disp(node, bnode), node["v"], bnode["v"] if bnode else 0.0)
        cx = x
        for name in sorted(node["c"]):
            ch = node["c"][name]
            bch = bnode["c"].get(name) if bnode else None
            self.walk(ch, bch, cx, level + 1)
            cx += _disp(ch, bch) * self.scale
        for g in _gone(node, bnode, deep=False):
            self.walk_gone(g, cx, level + 1)
            cx += g["v"] * self.scale

    def walk_gone(self, bnode, x, level):
        """A baseline subtree absent now, hatched at its baseline width."""
        self.draw(bnode, x, level, bnode["v"], 0.0, bnode["v"], gone=True)
        cx = x
        for name in sorted(bnode["c"]):
            self.walk_gone(bnode["c"][name], cx, level + 1)
            cx += bnode["c"][name]["v"] * self.scale


def _document(frames: list[str], title: str, notes: list[str], width: int, height: int, total: float,
              max_depth: int, cut: int) -> str:
    """The SVG file around the frames: styles, the script, title, notes, buttons and the details line."""
    out = ['<?xml version="1.0" standalone="no"?>',
           f'<svg version="1.1" width="{width}" height="{height}" data-width="{width}" onload="init()" '
           f'xmlns="http://www.w3.org/2000/svg" font-family="Verdana" font-size="12">',
           '<defs><pattern id="gone" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><rect width="6" height="6" fill="rgb(200,210,255)"/>'
           '<line x1="0" y1="0" x2="0" y2="6" stroke="rgb(60,60,200)" stroke-width="3"/></pattern></defs>',
           '<style>text{font-size:12px;fill:#000} g.f:hover rect{stroke:black;stroke-width:0.5;cursor:pointer}'
           ' .hide{display:none} .parent{opacity:0.5} #unzoom,#search{cursor:pointer} #title{font-size:17px}'
           ' #notes{font-size:11px;fill:#444}</style>',
           f'<script type="text/ecmascript"><![CDATA[{_SCRIPT}]]></script>',
           '<rect width="100%" height="100%" fill="rgb(238,238,238)"/>',
           f'<text id="title" x="{width // 2}" y="24" text-anchor="middle">{html.escape(title)}</text>',
           f'<text id="notes" x="{width // 2}" y="42" text-anchor="middle">{html.escape("; ".join(notes))}</text>',
           '<text id="unzoom" x="10" y="24" class="hide">Reset Zoom</text>',
           f'<text id="search" x="{width - 110}" y="24">Search</text>',
           f'<text id="matched" x="{width - 110}" y="{height - 15}" class="hide"> </text>',
           f'<text id="details" x="10" y="{height - 15}"> </text>',
           f'<g id="frames" data-total="{total:.0f}" data-depth-cap="{max_depth}" data-cut="{cut}">',
           *frames, "</g>", "</svg>"]
    return "\n".join(out)


def svg(fc: Counter, title: str = "Flame Graph", width: int = 1200, frame_h: int = 16,
        baseline: Counter | None = None, minwidth: float = 0.1, max_depth: int = 64) -> str:
    """The flame graph of folded stacks `fc` (against `baseline` when given) as one SVG file."""
    tree, cut = _tree(fc, max_depth)
    total = tree["v"] or 1
    base_tree, bcut = None, 0
    if baseline is not None:
        tb = sum(baseline.values()) or 1
        base_tree, bcut = _tree(Counter({k: v * total / tb for k, v in baseline.items()}), max_depth)
    d = max(_depth(tree), _depth(base_tree) if base_tree else 0)
    notes = []
    if cut:
        notes.append(f"{cut} samples ({100 * cut / total:.1f}%) had stacks deeper than {max_depth} frames: "
                     f"cut at frame {max_depth}")
    pad_top = 40 + 16 * 2
    height = pad_top + d * frame_h + 40
    span = total + (sum(c["v"] for c in _gone(tree, base_tree)) if base_tree else 0)
    scale = (width - 20) / max(span, 1)
    gone_total = span - total
    frames = _Frames(total, base_tree, scale, height, frame_h, minwidth)
    frames.walk(tree, base_tree, 0.0, 0)
    if base_tree is not None:
        notes.append("red: more than the baseline (solid red: new), blue: less, hatched: gone since the "
                     f"baseline ({gone_total:.0f} baseline samples, scaled, in stacks absent now)")
    return _document(frames.frames, title, notes, width, height, total, max_depth, cut)


def _gone(node: dict, bnode: dict | None, deep: bool = True) -> list[dict]:
    """Baseline children absent under `node` (the top of each vanished subtree); deep = whole tree."""
    if bnode is None:
        return []
    out = [bc for name, bc in sorted(bnode["c"].items()) if name not in node["c"]]
    if deep:
        for name, ch in node["c"].items():
            out += _gone(ch, bnode["c"].get(name))
    return out
