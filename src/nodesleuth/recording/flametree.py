"""The flame graph as d3-flame-graph draws it ({name, value, children}), alone or against a baseline:
stacks capped in depth and frames too narrow to see pruned, so the page never receives a graph it
cannot draw."""

from __future__ import annotations

from ..profile.folded import folded_frames
from ..profile.samples import Filter
from ..profile.top import top_functions


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


