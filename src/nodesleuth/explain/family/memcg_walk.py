"""Family memcg_walk: memory-cgroup code on the core (the chain's resource link), whatever the memcgs'
state (issue 40 part 2): over zombies when they are the bulk (the chain's creator and unit name its root
cause, explain/chain.py), else over live memcgs, whose root cause is who made the live cgroups the live
count grew by (`live_maker`)."""

from __future__ import annotations

from ...detect.proof import creator as creator_verdict
from ...model.churn import creators
from ...model.kube import pod_name
from ...model.thresholds import CONTRIBUTING, MIN_ZOMBIES, PROVE, PROVEN, WALK_DYING_SHARE
from .common import Context, Hypothesis, pct, ticks, zombie_walk
from .registry import family


@family("memcg_walk", rank=10)
def memcg_walk(ctx: Context) -> Hypothesis:
    rec, inc, links, ep = ctx.rec, ctx.inc, ctx.links, ctx.ep
    res = links["resource"]
    dying, live = (res.data or {}).get("dying"), (res.data or {}).get("live")
    # the memcgs the walk crossed: counted at the episode's end (the resource link counts at the incident's
    # start, which an episode another job began before the walker predates)
    end = next((t.census for t in reversed(ticks(rec, ep)) if t.census is not None
                and t.census.memory_live() is not None), None)
    if end is not None and end.memory_dying() is not None:
        dying, live = end.memory_dying(), end.memory_live()
    walk, why = zombie_walk(dying, live)
    over = "zombies" if walk else "live" if live is not None else "unknown"
    rule = (res.rule + f"; the walk is over zombies when at least {pct(WALK_DYING_SHARE)} of the memory cgroups are "
            f"dying (and >= {MIN_ZOMBIES}), else over live ones; its root cause: over zombies, the proven creator "
            "and its restart loop; over live ones, the process whose cgroups (still live) are >= "
            f"{pct(PROVE)} of the live count's growth over the churn trace, with >= {MIN_ZOMBIES} of them "
            "(detect/proof.creator), named by path pattern, unit and pod")
    vd, ev, cause = res.verdict, [], None
    data = {"dying": dying, "live": live, "over": over, "creator": links["creator"].verdict,
            "unit": links["unit_loop"].verdict}
    if vd in (PROVEN, CONTRIBUTING):
        ev.append(f"{why}: a walk over " + {"zombies": "zombies", "live": "live memory cgroups"}.get(
            over, "memory cgroups whose state is unknown"))
    summary = res.summary
    if over == "live":
        summary += f", {live} live"
        mk = live_maker(rec, inc)
        data["live_maker"] = mk
        if mk is not None:
            ev += mk.pop("evidence")
            if vd == PROVEN and mk["verdict"] == PROVEN:
                cause = mk["cause"]
    return Hypothesis("memcg_walk", res.share, vd, summary, cause, rule, ev, data)


def live_maker(rec, inc) -> dict | None:
    """Who made the live memory cgroups: from the churn trace up to the incident, per creator the cgroups it
    made and had not removed, against the growth of the live memory-cgroup count over the trace (the census's
    directory walks, `record --live-every`). None without a trace or a live count."""
    trace = [e for e in getattr(rec, "churn", None) or [] if e.time <= inc.end]
    if not trace:
        return None
    t0 = min(e.time for e in trace)
    tks = [t for t in rec.ticks if t.census is not None and t.census.memory_live() is not None]
    before = [t for t in tks if t.time <= t0] or tks[:1]
    after = [t for t in tks if t.time <= inc.end + 1]
    if not before or not after:
        return None
    c0, c1 = before[-1].census, after[-1].census
    mem = c1.controller("memory")
    hier = mem.hierarchy if mem is not None else 0  # the tracepoints' root id: 0 is cgroup2
    growth = c1.memory_live() - c0.memory_live()
    cs = [c for c in creators(trace, trace[-1].time, 0.0) if c.hierarchy == hier]
    if not cs:
        return None
    top = max(cs, key=lambda c: (c.mkdir - c.rmdir, c.mkdir))
    kept = top.mkdir - top.rmdir
    vd, share = creator_verdict(kept, growth, c1.memory_live())
    who = (f"{top.comm} made {kept} live memory cgroups like {top.pattern}"
           + (f" (unit {top.unit})" if top.unit else "") + (f" (pod {pod_name(top.pod)})" if top.pod else ""))
    ev = [f"live memory cgroups {c0.memory_live()} -> {c1.memory_live()} ({growth:+d}) over the churn trace",
          f"{who} ({top.mkdir} made, {top.rmdir} removed, from {len(top.pids)} processes)"
          + (f" = {pct(share)} of the live growth" if share is not None else "")]
    return {"verdict": vd, "share": None if share is None else round(share, 4), "comm": top.comm,
            "pattern": top.pattern, "unit": top.unit, "pod": top.pod, "made": top.mkdir, "removed": top.rmdir,
            "kept": kept, "live_growth": growth, "cause": who, "evidence": ev}
