"""What else can saturate a core, each measured on the recording: one hypothesis per family, with the
share of the core's excess busy time it explains, a verdict, and a root cause only when its own rule
holds end to end. explain/chain.py names the best proven one as the leading explanation and lists the
others, with their numbers, as rejected.

| family | share measured as | root cause when |
|---|---|---|
| memcg_walk | memory-cgroup code on the core (the chain's resource link), whatever the memcgs' state: a walk over zombies when >= WALK_DYING_SHARE (half) of them are dying and >= MIN_ZOMBIES, else over live ones (both counts measured) | over zombies: their creator and unit proven (chain.py); over live ones: who made the live cgroups the live count grew by (path pattern, unit, pod; detect/proof.creator on the churn trace) |
| reclaim | page-reclaim code on the core, unless the memcgs it walks are mostly dying (then the time is the zombie walk's) | never: the pressure's source is not in the data |
| softirq | the core's %soft (mpstat) | one softirq is >= half of them, and what raised it is seen: the NIC's line >= half of the NIC's interrupts on the core, or RPS (softnet received_rps), or a device line >= half of the core's device interrupts (system vectors LOC/RES/CAL... excluded) |
| irq | the core's %irq | one interrupt line is >= half of the CPU's interrupts |
| rt | SCHED_FIFO/RR processes' share of the core | one process >= PROVE (it and its class are the cause) |
| lock | kernel lock spinning on the core | never: the lock's holder is not in the data |
| user | one process in user space | one process >= PROVE of the excess, >= half of it in user space |
| kernel | one process in kernel code none of the above | one process >= PROVE, >= half of it in the kernel |
| group | the processes of one command or one parent together, each short-lived or many (explain/groups.py) | the group >= PROVE |

Shares are of the core's busy time above what the other CPUs averaged (the part that needs
explaining), capped at 1; a hypothesis without the data it needs is `unknown`, never guessed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..detect.incidents import _window
from ..detect.proof import creator as creator_verdict, verdict
from ..model.churn import creators
from ..model.kube import pod_name
from ..model.thresholds import (CONTRIBUTE, CONTRIBUTING, MIN_ZOMBIES, NOT_PROVEN, PROVE, PROVEN, UNKNOWN, WALK_DYING_SHARE,
                                ZOMBIE_WARN)

RT = ("fifo", "rr", "deadline")


@dataclass
class Hypothesis:
    family: str
    share: float | None  # of the core's excess busy time, 0..1
    verdict: str
    summary: str  # the sentence a leading explanation is made of
    cause: str | None = None  # named only when the family's own rule holds end to end
    rule: str = ""
    evidence: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"family": self.family, "share": None if self.share is None else round(self.share, 4),
                "verdict": self.verdict, "summary": self.summary, "cause": self.cause, "rule": self.rule,
                "evidence": self.evidence, "data": self.data}


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _excess(ep) -> float:
    return max(1e-9, ep.excess / 100)


def _ticks(rec, ep) -> list:
    return _window(rec.ticks, ep.start, ep.end)


def zombie_walk(dying: int | None, live: int | None) -> tuple[bool, str]:
    """Whether memory-cgroup code is a walk over zombies: at least WALK_DYING_SHARE of the memcgs dying
    (and >= MIN_ZOMBIES), so most of what a walk visits is dying; where the live count is unknown,
    >= ZOMBIE_WARN dying. With fewer, the walk (reclaim's, a stats read's) is over live memcgs."""
    d = dying or 0
    if live is None:
        return d >= ZOMBIE_WARN, f"{d} memory cgroups dying (live count unknown; a walk over zombies needs >= {ZOMBIE_WARN})"
    share = d / max(1, d + live)
    ok = d >= MIN_ZOMBIES and share >= WALK_DYING_SHARE
    return ok, (f"{d} of {d + live} memory cgroups dying ({pct(share)}; a walk over zombies needs >= "
                f"{pct(WALK_DYING_SHARE)} and >= {MIN_ZOMBIES})")


def _memcg(rec, inc, links: dict, ep, prof) -> Hypothesis:
    """The memcg walk, whatever the memcgs' state (issue 40 part 2): over zombies when they are the bulk
    (the chain's creator and unit name its root cause), else over live memcgs, whose root cause is who
    made the live cgroups the live count grew by (_live_maker)."""
    res = links["resource"]
    dying, live = (res.data or {}).get("dying"), (res.data or {}).get("live")
    # the memcgs the walk crossed: counted at the episode's end (the resource link counts at the incident's
    # start, which an episode another job began before the walker predates)
    end = next((t.census for t in reversed(_ticks(rec, ep)) if t.census is not None
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
        mk = _live_maker(rec, inc)
        data["live_maker"] = mk
        if mk is not None:
            ev += mk.pop("evidence")
            if vd == PROVEN and mk["verdict"] == PROVEN:
                cause = mk["cause"]
    return Hypothesis("memcg_walk", res.share, vd, summary, cause, rule, ev, data)


def _live_maker(rec, inc) -> dict | None:
    """Who made the live memory cgroups: from the churn trace up to the incident, per creator the cgroups it
    made and had not removed, against the growth of the live memory-cgroup count over the trace (the census's
    directory walks, `record --live-every`). None without a trace or a live count."""
    trace = [e for e in getattr(rec, "churn", None) or [] if e.time <= inc.end]
    if not trace:
        return None
    t0 = min(e.time for e in trace)
    ticks = [t for t in rec.ticks if t.census is not None and t.census.memory_live() is not None]
    before = [t for t in ticks if t.time <= t0] or ticks[:1]
    after = [t for t in ticks if t.time <= inc.end + 1]
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


def _reclaim(rec, ep, prof, dying: int | None, live: int | None = None) -> Hypothesis:
    rule = (f"page-reclaim code >= {pct(PROVE)} of the core's excess busy time while fewer than "
            f"{pct(WALK_DYING_SHARE)} of the memory cgroups are dying (with more, it is the memcg walk's); no root "
            "cause: what made the pressure is not in the data")
    pg = [t.vmstat.deltas for t in _ticks(rec, ep) if getattr(t, "vmstat", None) is not None]
    scan = {k: sum(d.get(k, 0) for d in pg) for k in ("pgscan_direct", "pgscan_kswapd", "allocstall")} if pg else None
    ev = [f"/proc/vmstat over the episode: {scan['pgscan_direct']} pages scanned by direct reclaim, "
          f"{scan['pgscan_kswapd']} by kswapd, {scan['allocstall']} allocation stalls (node-wide reclaim only: a "
          "cgroup's limit reclaim is counted in its own memory.stat)"] if scan else []
    if prof is None:
        return Hypothesis("reclaim", None, UNKNOWN, f"no profile of CPU {ep.cpu}: reclaim's share unknown",
                          None, rule, ev, {"vmstat": scan})
    share = min(1.0, prof.reclaim / (prof.n + prof.lost) / _excess(ep))
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


def _softirq_rates(rec, ep) -> Counter:
    rates: Counter = Counter()
    secs = 0.0
    for t in _ticks(rec, ep):
        if t.softirqs:
            secs += t.interval
            for name, row in t.softirqs.items():
                if ep.cpu < len(row):
                    rates[name] += row[ep.cpu]
    return Counter({k: v / secs for k, v in rates.items()}) if secs else Counter()


def _irq_lines(rec, ep) -> list:
    """The interrupt lines the core served in (or just around) the episode: [line, name, per_s], busiest first."""
    best: dict = {}
    for t in _window(rec.ticks, ep.start - 6, ep.end + 6):
        it = getattr(t, "irqtop", None)
        if it is None:
            continue
        for line, name, per_s in it.cpus.get(str(ep.cpu), []):
            if per_s > best.get(line, (None, 0))[1]:
                best[line] = (name, per_s)
    return sorted(([k, n, r] for k, (n, r) in best.items()), key=lambda x: -x[2])


def _nic_lines(rec, ep) -> list:
    """The NIC's interrupt lines (Tick.nic_irqs, counted every second) on the core over the episode:
    [line, name, per_s], busiest first."""
    counts: Counter = Counter()
    names: dict = {}
    secs = 0.0
    for t in _ticks(rec, ep):
        if t.nic_irqs is None:
            continue
        secs += t.interval
        for key, row in t.nic_irqs.items():
            line, _, name = key.partition(":")
            if ep.cpu < len(row):
                counts[line] += row[ep.cpu]
                names[line] = name or line
    if not secs:
        return []
    return sorted(([k, names[k], round(n / secs, 1)] for k, n in counts.items() if n), key=lambda x: -x[2])


def _device_lines(lines: list) -> list:
    """Device (numbered) lines only: the per-CPU system vectors (LOC, RES, CAL, TLB ...) are not a device's."""
    return [x for x in lines if str(x[0]).isdigit()]


def _dominant(lines: list):
    """The line that is at least half of these lines' interrupts, if one is."""
    total = sum(r for _, _, r in lines)
    return lines[0] if lines and total and lines[0][2] >= 0.5 * total else None


def _softnet(rec, ep) -> dict:
    """The core's softnet_stat over the episode, and the RPS IPIs it received from a minute before it on
    (a backlog kept busy needs few: one IPI wakes it, the packets keep coming)."""
    sq = [t.softnet.of(ep.cpu) for t in _ticks(rec, ep) if getattr(t, "softnet", None) is not None]
    if not sq:
        return {}
    out = {k: sum(x.get(k) or 0 for x in sq) for k in ("processed", "received_rps", "time_squeeze", "dropped")}
    out["received_rps_since_minute_before"] = sum(
        t.softnet.of(ep.cpu).get("received_rps") or 0 for t in _window(rec.ticks, ep.start - 60, ep.end)
        if getattr(t, "softnet", None) is not None)
    return out


def _softirq(rec, ep) -> Hypothesis:
    rule = (f"softirq time (mpstat %soft) >= {pct(PROVE)} of the core's excess busy time; the cause is named when "
            "one softirq is >= half of the core's softirqs and what raised it is seen: for NET_RX the NIC's interrupt "
            "line that is >= half of the NIC's interrupts on the core, else packets steered to the core by RPS "
            "(softnet_stat received_rps); for any softirq a device line that is >= half of the core's device "
            "interrupts (the per-CPU system vectors LOC, RES, CAL... are not a device's)")
    share = min(1.0, (ep.soft_mean / 100) / _excess(ep))
    rates = _softirq_rates(rec, ep)
    secs = max(1e-9, sum(t.interval for t in _ticks(rec, ep)))
    ev = [f"CPU {ep.cpu}: softirq {ep.soft_mean:.0f}% of its time, irq {ep.irq_mean:.0f}%"]
    top = rates.most_common(3)
    if top:
        ev.append("softirqs per second on it: " + ", ".join(f"{k} {v:.0f}" for k, v in top))
    lines = _irq_lines(rec, ep)
    nic = _nic_lines(rec, ep)
    dev = _device_lines(lines)
    if lines:
        ev.append("interrupt lines it served: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in lines[:4]))
    if nic:
        ev.append("the NIC's lines on it: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in nic[:3]))
    sn = _softnet(rec, ep)
    if sn:
        ev.append(f"softnet_stat on CPU {ep.cpu}: processed {sn['processed']} ({sn['processed'] / secs:.0f}/s), "
                  f"received_rps {sn['received_rps']}, time_squeeze {sn['time_squeeze']}, dropped {sn['dropped']}")
    vd = verdict(share)
    cause = None
    which = top[0][0] if top else "softirq"
    how = ""
    if vd == PROVEN and top and top[0][1] >= 0.5 * sum(rates.values()):
        line = _dominant(nic) if which in ("NET_RX", "NET_TX") else None
        if line is None and which == "NET_RX" and sn.get("received_rps_since_minute_before") and sn.get("processed"):
            how = (f": packets steered to it by RPS ({sn['processed'] / secs:.0f} packets/s processed there, "
                   f"{sn['received_rps_since_minute_before']} RPS IPIs received since a minute before), no NIC "
                   "interrupt line on it")
        else:
            line = line or _dominant(dev)
            if line is not None:
                how = f" from interrupt line {line[0]} ({line[1]})"
        if how:
            cause = f"{which} softirq on CPU {ep.cpu}{how}"
    shown = nic or dev or lines
    summary = (f"{which} softirq {ep.soft_mean:.0f}% of CPU {ep.cpu}" + (f", {top[0][1]:.0f}/s" if top else "")
               + (how if how else f"; interrupts from {shown[0][1]} (line {shown[0][0]})" if shown else ""))
    return Hypothesis("softirq", share, vd, summary, cause, rule, ev,
                      {"softirqs_per_s": {k: round(v) for k, v in top}, "irq_lines": (nic or dev or lines)[:3],
                       "softnet": sn})


def _irq(rec, ep) -> Hypothesis:
    rule = (f"hard-interrupt time (mpstat %irq) >= {pct(PROVE)} of the core's excess busy time; the cause is the "
            "line that is >= half of the interrupts the CPU served")
    share = min(1.0, (ep.irq_mean / 100) / _excess(ep))
    lines = _irq_lines(rec, ep)
    vd = verdict(share)
    cause = None
    total = sum(r for _, _, r in lines)
    if vd == PROVEN and lines and lines[0][2] >= 0.5 * total:
        cause = f"interrupt line {lines[0][0]} ({lines[0][1]}) on CPU {ep.cpu}"
    ev = ["interrupt lines it served: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in lines[:3])] if lines else []
    return Hypothesis("irq", share, vd, f"hard interrupts {ep.irq_mean:.0f}% of CPU {ep.cpu}"
                      + (f", mostly {lines[0][1]}" if lines else ""), cause, rule, ev, {"irq_lines": lines[:3]})


def _hog_rows(rec, ep) -> list[dict]:
    rows = []
    for t in _ticks(rec, ep):
        h = getattr(t, "hogs", None)
        if h is not None:
            rows += [r for r in h.rows if r["cpu"] == ep.cpu]
    return rows


def _rt(rec, ep, victim: dict) -> Hypothesis:
    rule = (f"processes of a real-time class (SCHED_FIFO/RR/DEADLINE) take >= {pct(PROVE)} of the core's excess busy "
            "time; one such process is the cause (ksoftirqd's wait on the core is the victim's measure)")
    rows = [r for r in _hog_rows(rec, ep) if r.get("policy") in RT]
    secs = max(1e-9, sum(t.interval for t in _ticks(rec, ep)))
    if not _hog_rows(rec, ep):
        return Hypothesis("rt", None, UNKNOWN, "scheduling classes of the core's processes not recorded", None, rule)
    by = Counter()
    for r in rows:
        by[(r["pid"], r["comm"], r["policy"], r["rt_priority"])] += r["pct"]
    n = max(1, len({t.time for t in _ticks(rec, ep)}))
    if not by:
        return Hypothesis("rt", 0.0, NOT_PROVEN, f"no real-time process held CPU {ep.cpu}", None, rule)
    (pid, comm, pol, prio), tot = by.most_common(1)[0]
    share = min(1.0, (tot / n / 100) / _excess(ep))
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


def _lock(ep, prof) -> Hypothesis:
    rule = (f"spinning on a kernel lock >= {pct(PROVE)} of the core's excess busy time; no root cause: the lock's "
            "holder is not in the data")
    if prof is None:
        return Hypothesis("lock", None, UNKNOWN, f"no profile of CPU {ep.cpu}", None, rule)
    share = min(1.0, prof.lock / (prof.n + prof.lost) / _excess(ep))
    spin = [r for r in prof.top if r.get("kernel") and any(k in r["function"] for k in ("spin", "osq_lock", "mutex",
                                                                                        "rwsem", "lock_slowpath"))]
    return Hypothesis("lock", share, verdict(share), f"kernel lock contention {pct(prof.lock / max(1, prof.n))} of CPU "
                      f"{ep.cpu}'s samples" + (f" ({spin[0]['function']})" if spin else ""), None, rule,
                      [f"{r['function']}: self {r['self_pct']:.0f}%" for r in spin[:3]], {"samples": prof.lock})


def _process(ep, prof, procs_link, kernel: bool) -> Hypothesis:
    fam = "kernel" if kernel else "user"
    rule = (f"one process takes >= {pct(PROVE)} of the core's excess busy time, >= half of it "
            + ("in kernel code that is not memcg, reclaim, softirq or lock spinning" if kernel else "in user space"))
    if prof is not None:
        tot = prof.n + prof.lost
        best = None
        for pid, (comm, c, k, mc) in prof.by_pid.items():
            own = prof.kernel_of.get(pid, 0) if kernel else c - k
            # ties go to the process with more samples, then the lower pid: never to the order samples
            # were read in (a cut of a store reads them in another order than the store: same verdict)
            if best is None or (own, c, -pid) > (best[3], best[2], -best[0]):
                best = (pid, comm, c, own)
        if best is None:
            return Hypothesis(fam, 0.0, NOT_PROVEN, f"no process on CPU {ep.cpu}", None, rule)
        pid, comm, c, own = best
        share = min(1.0, own / tot / _excess(ep))
        frac = own / max(1, c)
        vd = verdict(share) if frac >= 0.5 else NOT_PROVEN if share >= PROVE else verdict(share)
        where = "in the kernel" if kernel else "in user space"
        fn = next((r["function"] for r in prof.top if bool(r.get("kernel")) == kernel), None)
        summary = (f"{comm} (pid {pid}) {pct(c / max(1, prof.n))} of CPU {ep.cpu}, {pct(frac)} of it {where}"
                   + (f" (hottest {fn})" if fn else ""))
        cause = f"{comm} (pid {pid}), {where}" + (f": {fn}" if fn and kernel else "") if vd == PROVEN else None
        return Hypothesis(fam, share, vd, summary, cause, rule, [], {"pid": pid, "comm": comm, "fraction": round(frac, 3)})
    top = (procs_link.data or {}).get("top") if procs_link else None
    if not top:
        return Hypothesis(fam, None, UNKNOWN, f"no per-process data on CPU {ep.cpu}", None, rule)
    # no profile: /proc's per-process share, and the core's usr vs sys split for where it ran
    p = top[0]
    part = ep.sys_mean if kernel else ep.usr_mean
    frac = part / max(1e-9, ep.busy_mean)
    share = min(1.0, p["cpu_share"] * frac / _excess(ep))
    vd = verdict(share) if frac >= 0.5 else NOT_PROVEN
    where = "in the kernel" if kernel else "in user space"
    return Hypothesis(fam, share, vd, f"{p['comm']} (pid {p['pid']}) {pct(p['cpu_share'])} of CPU {ep.cpu}, the core "
                      f"{pct(frac)} {where} (/proc; no profile)", f"{p['comm']} (pid {p['pid']}), {where}"
                      if vd == PROVEN else None, rule, [], {"pid": p["pid"], "comm": p["comm"], "source": "proc"})


def _throttle(rec, ep) -> list[str]:
    """Throttling is evidence about a process, not a cause of a hot core (a quota caps a process below
    a core): said beside the hypotheses."""
    out = []
    seen = {}
    for r in _hog_rows(rec, ep):
        if r.get("nr_throttled"):
            k = (r["pid"], r["comm"], r.get("cgroup"))
            n, ms = seen.get(k, (0, 0.0))
            seen[k] = (n + r["nr_throttled"], ms + (r.get("throttled_ms") or 0.0))
    for (pid, comm, cg), (n, ms) in seen.items():
        out.append(f"{comm} (pid {pid}) was throttled {n} times ({ms:.0f} ms) by the CPU quota of {cg}")
    return out


def hypotheses(rec, inc, ep, prof, links: dict, victim: dict) -> tuple[list[Hypothesis], list[str]]:
    """Every family's hypothesis for this episode, most explaining first, and notes (throttling)."""
    res = links.get("resource")
    dying = (res.data or {}).get("dying") if res else None
    live = (res.data or {}).get("live") if res else None
    hs = [_memcg(rec, inc, links, ep, prof), _reclaim(rec, ep, prof, dying, live), _softirq(rec, ep), _irq(rec, ep),
          _rt(rec, ep, victim), _lock(ep, prof), _process(ep, prof, links.get("processes"), False),
          _process(ep, prof, links.get("processes"), True)]
    walk, rec_h = hs[0], hs[1]
    if (walk.data.get("over") == "live" and walk.verdict in (PROVEN, CONTRIBUTING) and rec_h.verdict == PROVEN
            and prof is not None and prof.reclaim >= PROVE * prof.memcg):
        # a charge over a limit reclaims, and reclaim walks the memcgs it reclaims from (shrink_node_memcgs): with
        # reclaim proven and at least half as many samples as the memcg code, that code is reclaim's
        walk.verdict, walk.cause = NOT_PROVEN, None
        walk.evidence.append(f"page reclaim is proven on CPU {ep.cpu} ({pct(rec_h.share)} of the excess): the memcg "
                             "code over live memcgs is reclaim's own walk and charging (family reclaim)")
    from .groups import hypothesis as group  # after the single-process families: a tie goes to them

    g = group(rec, ep, prof)
    if g is not None:
        hs.append(g)
    order = {PROVEN: 0, "contributing": 1, NOT_PROVEN: 2, UNKNOWN: 3}
    hs.sort(key=lambda h: (order.get(h.verdict, 4), -(h.share or 0.0)))
    if g is not None and (g.data.get("parent") or {}).get("pid") is not None:
        # /proc's "COMM (exited children)" entry of the group's parent is the group's own time: the group
        # names it (who started them, how many), so it goes before the single-process reading of it
        pp = g.data["parent"]["pid"]
        same = [i for i, h in enumerate(hs) if h.family in ("user", "kernel") and h.data.get("pid") == pp
                and str(h.data.get("comm", "")).endswith(" (exited children)")]
        if same and same[0] < hs.index(g) and order.get(g.verdict, 4) <= order.get(hs[same[0]].verdict, 4):
            hs.remove(g)
            hs.insert(same[0], g)
    if g is not None and g.verdict in (PROVEN, CONTRIBUTING):
        # a group competes with single processes (user, kernel), not with a mechanism (memcg walk, reclaim,
        # softirq, irq, rt, lock) that is proven or contributing and explains at least PROVE of what the group
        # does: the group's samples are then mostly its processes' time in that mechanism, which says why the
        # core is busy; the group only who was there
        mech = [i for i, h in enumerate(hs) if h.verdict in (PROVEN, CONTRIBUTING)
                and h.family not in ("user", "kernel", "group") and (h.share or 0.0) >= PROVE * (g.share or 0.0)]
        if mech:
            if g.verdict == PROVEN:
                g.verdict, g.cause = CONTRIBUTING, None
                g.evidence.append(f"{hs[mech[0]].family} ({hs[mech[0]].verdict}) is what the core did: the group "
                                  "is who did it (contributing at most)")
            if mech[-1] > hs.index(g):
                hs.remove(g)
                hs.insert(mech[-1], g)
    if g is not None and g.verdict == PROVEN and (g.data.get("rest_share") or 0.0) >= CONTRIBUTE:
        # a proven group whose other processes add >= CONTRIBUTE of the core beyond its busiest one (a
        # forking parent): the group, not that one process, explains the core
        one = next((i for i, h in enumerate(hs) if h.family in ("user", "kernel") and h.verdict == PROVEN), None)
        if one is not None and one < hs.index(g):
            hs.remove(g)
            hs.insert(one, g)
    return hs, _throttle(rec, ep)
