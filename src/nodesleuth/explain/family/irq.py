"""Family irq: the core's hard-interrupt time (mpstat %irq); the cause is one line >= half of them."""

from __future__ import annotations

from ...detect.proof import verdict
from ...model.thresholds import PROVE, PROVEN
from .common import Context, Hypothesis, excess, irq_lines, pct
from .registry import family


@family("irq", rank=40)
def irq(ctx: Context) -> Hypothesis:
    rec, ep = ctx.rec, ctx.ep
    rule = (f"hard-interrupt time (mpstat %irq) >= {pct(PROVE)} of the core's excess busy time; the cause is the "
            "line that is >= half of the interrupts the CPU served")
    share = min(1.0, (ep.irq_mean / 100) / excess(ep))
    lines = irq_lines(rec, ep)
    vd = verdict(share)
    cause = None
    total = sum(r for _, _, r in lines)
    if vd == PROVEN and lines and lines[0][2] >= 0.5 * total:
        cause = f"interrupt line {lines[0][0]} ({lines[0][1]}) on CPU {ep.cpu}"
    ev = ["interrupt lines it served: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in lines[:3])] if lines else []
    return Hypothesis("irq", share, vd, f"hard interrupts {ep.irq_mean:.0f}% of CPU {ep.cpu}"
                      + (f", mostly {lines[0][1]}" if lines else ""), cause, rule, ev, {"irq_lines": lines[:3]})
