"""Family lock: kernel lock spinning on the core; never a root cause (the lock's holder is not in the data)."""

from __future__ import annotations

from ...detect.proof import verdict
from ...model.thresholds import PROVE, UNKNOWN
from .common import Context, Hypothesis, excess, pct
from .registry import family


@family("lock", rank=60)
def lock(ctx: Context) -> Hypothesis:
    ep, prof = ctx.ep, ctx.prof
    rule = (f"spinning on a kernel lock >= {pct(PROVE)} of the core's excess busy time; no root cause: the lock's "
            "holder is not in the data")
    if prof is None:
        return Hypothesis("lock", None, UNKNOWN, f"no profile of CPU {ep.cpu}", None, rule)
    share = min(1.0, prof.lock / (prof.n + prof.lost) / excess(ep))
    spin = [r for r in prof.top if r.get("kernel") and any(k in r["function"] for k in ("spin", "osq_lock", "mutex",
                                                                                        "rwsem", "lock_slowpath"))]
    return Hypothesis("lock", share, verdict(share), f"kernel lock contention {pct(prof.lock / max(1, prof.n))} of CPU "
                      f"{ep.cpu}'s samples" + (f" ({spin[0]['function']})" if spin else ""), None, rule,
                      [f"{r['function']}: self {r['self_pct']:.0f}%" for r in spin[:3]], {"samples": prof.lock})
