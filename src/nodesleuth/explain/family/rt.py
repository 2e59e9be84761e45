"""Family rt: processes of a real-time class (SCHED_FIFO/RR/DEADLINE) on the core; one >= PROVE is the cause."""

from __future__ import annotations

from collections import Counter

from ...detect.proof import verdict
from ...model.thresholds import NOT_PROVEN, PROVE, PROVEN, UNKNOWN
from .common import Context, Hypothesis, excess, hog_rows, pct, ticks
from .registry import family

RT = ("fifo", "rr", "deadline")


@family("rt", rank=50)
def rt(ctx: Context) -> Hypothesis:
    rec, ep, victim = ctx.rec, ctx.ep, ctx.victim
    rule = (f"processes of a real-time class (SCHED_FIFO/RR/DEADLINE) take >= {pct(PROVE)} of the core's excess busy "
            "time; one such process is the cause (ksoftirqd's wait on the core is the victim's measure)")
    rows = [r for r in hog_rows(rec, ep) if r.get("policy") in RT]
    secs = max(1e-9, sum(t.interval for t in ticks(rec, ep)))
    if not hog_rows(rec, ep):
        return Hypothesis("rt", None, UNKNOWN, "scheduling classes of the core's processes not recorded", None, rule)
    by = Counter()
    for r in rows:
        by[(r["pid"], r["comm"], r["policy"], r["rt_priority"])] += r["pct"]
    n = max(1, len({t.time for t in ticks(rec, ep)}))
    if not by:
        return Hypothesis("rt", 0.0, NOT_PROVEN, f"no real-time process held CPU {ep.cpu}", None, rule)
    (pid, comm, pol, prio), tot = by.most_common(1)[0]
    share = min(1.0, (tot / n / 100) / excess(ep))
    vd = verdict(share)
    wait = victim.get("ksoftirqd_wait_share")
    ev = [f"{comm} (pid {pid}) SCHED_{pol.upper()} priority {prio}: {tot / n:.0f}% of CPU {ep.cpu}"]
    if wait is not None:
        ev.append(f"ksoftirqd/{ep.cpu} waited {pct(wait)} of the episode for its CPU")
    cause = f"{comm} (pid {pid}), SCHED_{pol.upper()} priority {prio}" if vd == PROVEN else None
    return Hypothesis("rt", share, vd, f"real-time {comm} (pid {pid}, SCHED_{pol.upper()} {prio}) "
                      f"{tot / n:.0f}% of CPU {ep.cpu}" + (f", ksoftirqd waited {pct(wait)}" if wait else ""),
                      cause, rule, ev, {"pid": pid, "comm": comm, "policy": pol, "rt_priority": prio,
                                        "ksoftirqd_wait_share": wait, "seconds": round(secs, 1)})
