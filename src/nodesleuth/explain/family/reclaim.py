"""Family reclaim: page-reclaim code on the core while the memcgs it walks are mostly live; never a root
cause (what made the pressure is not in the data)."""

from __future__ import annotations

from ...detect.proof import verdict
from ...model.thresholds import NOT_PROVEN, PROVE, PROVEN, UNKNOWN, WALK_DYING_SHARE
from .common import Context, Hypothesis, excess, pct, ticks, zombie_walk
from .registry import family


@family("reclaim", rank=20)
def reclaim(ctx: Context) -> Hypothesis:
    rec, ep, prof, dying, live = ctx.rec, ctx.ep, ctx.prof, ctx.dying, ctx.live
    rule = (f"page-reclaim code >= {pct(PROVE)} of the core's excess busy time while fewer than "
            f"{pct(WALK_DYING_SHARE)} of the memory cgroups are dying (with more, it is the memcg walk's); no root "
            "cause: what made the pressure is not in the data")
    pg = [t.vmstat.deltas for t in ticks(rec, ep) if getattr(t, "vmstat", None) is not None]
    scan = {k: sum(d.get(k, 0) for d in pg) for k in ("pgscan_direct", "pgscan_kswapd", "allocstall")} if pg else None
    ev = [f"/proc/vmstat over the episode: {scan['pgscan_direct']} pages scanned by direct reclaim, "
          f"{scan['pgscan_kswapd']} by kswapd, {scan['allocstall']} allocation stalls (node-wide reclaim only: a "
          "cgroup's limit reclaim is counted in its own memory.stat)"] if scan else []
    if prof is None:
        return Hypothesis("reclaim", None, UNKNOWN, f"no profile of CPU {ep.cpu}: reclaim's share unknown",
                          None, rule, ev, {"vmstat": scan})
    share = min(1.0, prof.reclaim / (prof.n + prof.lost) / excess(ep))
    vd = verdict(share)
    walk, why = zombie_walk(dying, live)
    if dying is not None and walk and vd == PROVEN:
        vd = NOT_PROVEN  # the same samples are the memcg walk's, with that many zombies
        ev.append(f"{why}: the reclaim time is the memcg walk's (family memcg_walk)")
    who = max(((p, v[0], v[1]) for p, v in prof.by_pid.items()), key=lambda x: x[2], default=None)
    summary = (f"page reclaim {pct(prof.reclaim / max(1, prof.n))} of CPU {ep.cpu}'s samples"
               + (f", mostly by {who[1]} (pid {who[0]})" if who else "")
               + (f"; {scan['pgscan_direct']} pages scanned directly node-wide" if scan and scan["pgscan_direct"] else "")
               + (f", {scan['pgscan_kswapd']} by kswapd" if scan and scan["pgscan_kswapd"] else ""))
    return Hypothesis("reclaim", share, vd, summary, None, rule, ev,
                      {"vmstat": scan, "samples": prof.reclaim, "dying": dying})
