"""`nodesleuth fleet`'s answer as text and JSON: counts, groups, and the ranked differences with
their significance (fleet/drift.py computes them)."""

from __future__ import annotations

from ..fleet import drift


def to_json(n, na, nh, extra, grp, ranked, unreachable, notes) -> dict:
    return {"hosts": n, "affected": na, "healthy": nh, **extra,
            "groups": {k: {"affected": a, "total": t} for k, (a, t) in grp.items()},
            "ranked": [r.__dict__ for r in ranked], "alpha": drift.ALPHA,
            "unreachable": [{"url": u, "error": e} for u, e in unreachable], "notes": notes}


def text(n, na, nh, extra, grp, group_by, ranked, notes) -> str:
    out = [f"{n} hosts: {na} affected, {nh} healthy"]
    if extra:
        shown = extra["affected_hosts"][:10]
        more = len(extra["affected_hosts"]) - len(shown)
        out.append(f"affected by {extra['expression']}: {', '.join(shown)}" + (f" (+{more} more)" if more else ""))
    out.append(f"by {group_by}: " + ", ".join(f"{k} {a}/{t}" for k, (a, t) in grp.items()))
    out.append("differences that separate affected from healthy hosts (Fisher's exact test; q = "
               f"Benjamini-Hochberg false discovery rate, significant when q < {drift.ALPHA}):")
    for r in ranked:
        p = f"p={r.p_value:.2g}" if r.p_value > 0 else f"p<1e-300 (one-sided 1e{r.log10_p:.0f})"
        q = f"q={r.q_value:.2g}" if r.q_value > 0 else "q<1e-300"
        out.append(f"  {r.score:+.2f}  {r.feature}: on {r.affected_share:.0%} of affected hosts "
                   f"({r.affected_hosts}/{na}), {r.healthy_share:.0%} of healthy ones ({r.healthy_hosts}/{nh}); "
                   f"{p}, {q}{'' if r.significant else ', not significant'}")
    out += [f"note: {note}" for note in notes]
    return "\n".join(out) + "\n"
