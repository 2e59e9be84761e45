"""Family memcg_walk: memory-cgroup code on the core (the chain's resource link) while most memcgs are
dying; its root cause (creator and unit) is proven by the chain (explain/chain.py)."""

from __future__ import annotations

from ...model.thresholds import CONTRIBUTING, NOT_PROVEN, PROVEN, WALK_DYING_SHARE
from .common import Context, Hypothesis, pct, zombie_walk
from .registry import family


@family("memcg_walk", rank=10)
def memcg_walk(ctx: Context) -> Hypothesis:
    links, ep = ctx.links, ctx.ep
    res = links["resource"]
    dying, live = (res.data or {}).get("dying"), (res.data or {}).get("live")
    rule = (res.rule + f"; and at least {pct(WALK_DYING_SHARE)} of the memory cgroups dying (with fewer, the "
            "memory-cgroup code on the core is a walk over live ones: family reclaim)")
    vd, ev = res.verdict, []
    walk, why = zombie_walk(dying, live)
    if vd in (PROVEN, CONTRIBUTING) and not walk:
        vd = NOT_PROVEN  # the walk crosses live memcgs: what the reclaim hypothesis measures
        ev.append(f"{why}: the memory-cgroup code on CPU {ep.cpu} is not a walk over zombies")
    return Hypothesis("memcg_walk", res.share, vd, res.summary, None, rule, ev,
                      {"dying": dying, "live": live, "creator": links["creator"].verdict,
                       "unit": links["unit_loop"].verdict})
