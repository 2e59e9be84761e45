"""The causal chain of an incident, link by link, each with its evidence and a confidence.

A link with no evidence is reported as unknown; nothing is invented. Data come only from the
recording: 1 Hz ticks (CPU, processes, cgroup census, kernel-log events, units), the perf profile
and the cgroup churn trace when they were recorded.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field

from ..collect.churn import path_pattern, unit_of_path
from ..collect.sampler import Tick
from ..detect import hotcore
from ..detect.nic import NIC_KINDS
from ..timeparse import iso

MEMCG_FUNCS = re.compile(r"mem_cgroup|memcg|cgroup_rstat|css_next_descendant|lruvec|memory_stat|"
                         r"mem_cgroup_iter|shrink_node_memcgs|numa_stat")


@dataclass
class Link:
    name: str
    status: str  # found | unknown
    confidence: str  # high | medium | low | none
    summary: str
    evidence: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)


@dataclass
class Incident:
    kind: str  # nic_reset | hot_core
    time: float
    title: str
    links: list[Link]
    root_cause: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["iso"] = iso(self.time)
        return d


def unknown(name: str, why: str) -> Link:
    return Link(name, "unknown", "none", why)


@dataclass
class Recording:
    ticks: list[Tick]
    samples: object | None  # profile.query.Samples
    churn: list[list]  # [time, event, comm, pid, hierarchy, id, path]


def find_incidents(rec: Recording, merge: float = 5.0, cover: float = 30.0) -> list[tuple[str, float, object]]:
    """NIC events (the lines of one reset, within `merge` s of its first line, per interface) and
    hot-core episodes that no NIC incident within `cover` s already explains."""
    out = []
    evs = sorted((e for t in rec.ticks for e in t.events if e.kind in NIC_KINDS), key=lambda e: e.time)
    groups: list[list] = []
    for e in evs:
        g = next((g for g in groups if (g[0].ifname == e.ifname or not e.ifname or not g[0].ifname)
                  and e.time - g[0].time <= merge), None)
        if g is None:
            groups.append([e])
        else:
            g.append(e)
    for g in groups:
        out.append(("nic_reset", g[0].time, g))
    for ep in hotcore.episodes(rec.ticks):
        if not any(k == "nic_reset" and ep.start - 5 <= t <= ep.end + cover for k, t, _ in out):
            out.append(("hot_core", ep.start, ep))
    return sorted(out, key=lambda x: x[1])


def _episode_for(rec: Recording, t: float, before: float = 60.0) -> hotcore.Episode | None:
    ticks = [x for x in rec.ticks if t - before <= x.time <= t + 5]
    eps = [e for e in hotcore.episodes(ticks) if e.end >= t - 15 and e.start <= t + 2]
    return max(eps, key=lambda e: (e.seconds, e.end)) if eps else None


def _census_at(rec: Recording, t: float):
    best = None
    for x in rec.ticks:
        if x.time <= t + 1:
            best = x
    return best.census if best else None


def _units(rec: Recording, t0: float, t1: float):
    first = last = None
    for x in rec.ticks:
        if x.units is None or not (t0 - 60 <= x.time <= t1 + 5):
            continue
        if first is None:
            first = x.units
        last = x.units
    return first, last


def build(rec: Recording, kind: str, t: float, payload) -> Incident:
    links: list[Link] = []
    start = rec.ticks[0].time if rec.ticks else t
    # 1. the event
    if kind == "nic_reset":
        evs = payload
        reasons = sorted({e.reset_reason for e in evs if e.reset_reason})
        links.append(Link("event", "found", "high",
                          f"NIC {evs[0].ifname or evs[0].fields.get('bus', '?')}: "
                          + ", ".join(f"{n} {k}" for k, n in Counter(e.kind for e in evs).items())
                          + (f" (reason {', '.join(reasons)})" if reasons else ""),
                          [f"{iso(e.time)} seq {e.seq}: {e.message}" for e in evs[:6]],
                          {"ifname": evs[0].ifname, "reasons": reasons, "events": len(evs)}))
        ep = _episode_for(rec, t)
    else:
        ep = payload
        links.append(Link("event", "found", "high", f"CPU {ep.cpu} saturated for {ep.seconds:.0f} s",
                          [f"{iso(ep.start)} .. {iso(ep.end)}"], {"cpu": ep.cpu}))
    # 2. the saturated core
    if ep is None:
        links.append(unknown("saturated_core", "no core was >= 90% busy for >= 3 s in the 60 s before"))
        return Incident(kind, t, links[0].summary, links + _tail_unknown())
    lead = t - ep.end
    conf = "high" if kind == "hot_core" or -2 <= lead <= 15 else "medium"
    links.append(Link("saturated_core", "found", conf,
                      f"CPU {ep.cpu} at {ep.busy_mean:.0f}% for {ep.seconds:.0f} s"
                      + ((f", ending {lead:.0f} s before the event" if lead >= 1 else
                          f", saturated {t - ep.start:.0f} s when the event was logged")
                         if kind == "nic_reset" else ""),
                      [f"sys {ep.sys_mean:.0f}%, softirq {ep.soft_mean:.0f}%, irq {ep.irq_mean:.0f}%",
                       f"other CPUs averaged {ep.others_mean:.0f}%, the node {ep.node_mean:.0f}%"],
                      {"cpu": ep.cpu, "start": ep.start, "end": ep.end, "busy": round(ep.busy_mean, 1)}))
    # 3. processes on it
    if ep.top:
        links.append(Link("processes", "found", "high",
                          ", ".join(f"{c} (pid {p}) {v:.0f}%" for p, c, v in ep.top[:3]),
                          [f"{c} pid {p}: {v:.1f}% of CPU {ep.cpu} on average" for p, c, v in ep.top],
                          {"top": [{"pid": p, "comm": c, "pct": round(v, 1)} for p, c, v in ep.top]}))
    else:
        links.append(unknown("processes", f"no per-process samples on CPU {ep.cpu}"))
    # 4. hottest functions (profile)
    funcs_link, memcg_procs = _functions(rec, ep)
    links.append(funcs_link)
    # 5. the resource walked
    census = _census_at(rec, t)
    mem = census.controller("memory") if census else None
    dying = census.memory_dying() if census else None
    c0 = rec.ticks[0].census.memory_dying() if rec.ticks else None
    growth = (dying - c0) if dying is not None and c0 is not None else None
    span_h = max(1e-9, (t - start) / 3600)
    if memcg_procs and dying is not None:
        ev = [f"{who} spent {pct:.0f}% of its samples on CPU {ep.cpu} in memcg functions ({fn})"
              for who, pct, fn in memcg_procs]
        ev.append(f"memory cgroups at the incident: {mem.tracked if mem else '?'} tracked vs "
                  f"{mem.live if mem else '?'} live -> {dying} dying")
        if growth is not None:
            ev.append(f"dying memcgs grew {growth:+d} since the recording started ({growth / span_h:+.0f}/h)")
        links.append(Link("resource", "found", "high", f"memory cgroups: {dying} dying, walked by "
                          + ", ".join(w for w, _, _ in memcg_procs), ev,
                          {"tracked": mem.tracked if mem else None, "live": mem.live if mem else None,
                           "dying": dying, "growth": growth}))
    elif dying is not None and dying >= 1000:
        links.append(Link("resource", "found", "low", f"suspected memory cgroups: {dying} dying",
                          ["no profile shows the walk: record with --profile to prove it"],
                          {"dying": dying, "growth": growth}))
    else:
        links.append(unknown("resource", "no memcg walk in the profile and no zombie build-up"))
    # 6. who creates the churn, 7. the unit's restart loop
    first_u, last_u = _units(rec, start, t)
    links += _creator_and_unit(rec, start, t, first_u, last_u)
    # 8. remediation
    links.append(_remedy(links))
    cause = next((lk.data.get("unit") for lk in links if lk.name == "unit_loop" and lk.status == "found"), None)
    title = links[0].summary + (f" <- CPU {ep.cpu} saturated" if ep else "")
    if cause:
        title += f" <- crash-looping {cause}"
    return Incident(kind, t, title, links, cause or "")


def _tail_unknown() -> list[Link]:
    return [unknown(n, "no saturated core to follow") for n in
            ("processes", "functions", "resource", "creator", "unit_loop", "remediation")]


def _functions(rec: Recording, ep: hotcore.Episode) -> tuple[Link, list]:
    s = rec.samples
    if s is None or not len(s):
        return unknown("functions", "no profile recorded (record with --profile)"), []
    from ..profile.query import Filter, top_functions

    m = (s.t >= ep.start) & (s.t <= ep.end) & (s.cpu == ep.cpu)
    if not m.any():
        return unknown("functions", f"no profile samples on CPU {ep.cpu} in the episode"), []
    f = Filter(cpus={ep.cpu})
    top = top_functions(s.masked(m), f, kernel_only=False, n=8)
    ev = [f"{r['function']}{' [kernel]' if r['kernel'] else ''}: self {r['self_pct']:.0f}%, total {r['total_pct']:.0f}%"
          for r in top[:6]]
    memcg = []
    # what each process on the core does: its samples there over the minute up to the episode's end
    # (a poller using a tenth of a core leaves few samples in a 3 s episode)
    wide = (s.t >= ep.start - 60) & (s.t <= ep.end) & (s.cpu == ep.cpu)
    for pid in sorted(set(s.pid[wide].tolist()) - {0}):
        mp = wide & (s.pid == pid)
        n = int(mp.sum())
        comm = s.comms[Counter(s.comm[mp].tolist()).most_common(1)[0][0]]  # after exec+prctl renames
        hits = Counter()
        walking = 0
        for sid in s.stack[mp].tolist():
            fr = [x for x in s.stacks[sid] if x.endswith("_[k]") and MEMCG_FUNCS.search(x)]
            if fr:
                walking += 1
                hits[fr[-1][:-4]] += 1
        if walking >= 3 and walking / n >= 0.1:  # a process that spends a tenth of its time there
            memcg.append((f"{comm} (pid {pid})", 100 * walking / n, hits.most_common(1)[0][0]))
            ev.append(f"{comm} (pid {pid}): {100 * walking / n:.0f}% of its {n} samples in memcg code, "
                      f"mostly {hits.most_common(1)[0][0]}")
    return Link("functions", "found", "high", f"hottest on CPU {ep.cpu}: {top[0]['function']}" if top else "",
                ev, {"top": top}), memcg


def _creator_and_unit(rec: Recording, t0: float, t1: float, first_u, last_u) -> list[Link]:
    out = []
    rows = [r for r in rec.churn if t0 - 5 <= r[0] <= t1 + 5]
    creators: dict[tuple, dict] = {}
    rmdir_at, lifetimes = {}, []
    for tm, ev, comm, pid, hier, cg, path in rows:
        if ev == "mkdir":
            c = creators.setdefault((comm, path_pattern(path)), {"mkdir": 0, "pids": set(), "unit": unit_of_path(path),
                                                                  "first": tm, "last": tm})
            c["mkdir"] += 1
            c["pids"].add(pid)
            c["last"] = tm
        elif ev == "rmdir":
            rmdir_at[(hier, cg)] = tm
        elif ev == "release" and (hier, cg) in rmdir_at:
            lifetimes.append(tm - rmdir_at.pop((hier, cg)))
    grew = {}
    if last_u:
        b = {u.id: u for u in first_u or []}
        # a unit absent from the first snapshot (not yet loaded, or dead) made all its restarts since
        grew = {u.id: (u, u.n_restarts - b[u.id].n_restarts if u.id in b else u.n_restarts) for u in last_u}
    loopers = sorted(((u, d) for u, d in grew.values() if d > 0 or u.crash_looping), key=lambda x: -x[1])
    unit = None
    if creators:
        (comm, pat), c = max(creators.items(), key=lambda kv: kv[1]["mkdir"])
        ev = [f"{comm} made {c['mkdir']} cgroups like {pat} from {len(c['pids'])} processes "
              f"between {iso(c['first'])} and {iso(c['last'])}",
              f"{len(rmdir_at)} removed cgroups were still dying at the end of the trace; "
              + (f"{len(lifetimes)} were freed after {sum(lifetimes) / len(lifetimes):.1f} s on average"
                 if lifetimes else "none was freed")]
        unit = c["unit"]
        conf = "high" if unit else "medium"
        for u, d in loopers:
            ratio = len(c["pids"]) / d if d else 0
            if d and 0.6 <= ratio <= 1.6:
                ev.append(f"{u.id} restarted {d} times in the same window and {len(c['pids'])} distinct "
                          f"{comm} processes made the cgroups: one creator per restart")
                unit, conf = u.id, "high"
                break
        out.append(Link("creator", "found", conf, f"{comm} ({c['mkdir']} cgroups, {len(c['pids'])} processes)"
                        + (f" in {unit}" if unit else ""), ev,
                        {"comm": comm, "pattern": pat, "mkdir": c["mkdir"], "processes": len(c["pids"]),
                         "unit": unit, "still_dying": len(rmdir_at)}))
    elif loopers:
        u, d = loopers[0]
        unit = u.id
        out.append(Link("creator", "found", "low", f"suspected {u.id} (no churn trace)",
                        ["record with --trace-churn to see which process creates the cgroups"], {"unit": u.id}))
    else:
        out.append(unknown("creator", "no cgroup churn trace and no crash-looping unit in the recording"))
    looper = next(((u, d) for u, d in loopers if u.id == unit), loopers[0] if loopers else None)
    if looper:
        u, d = looper
        # a snapshot taken while the unit runs shows status 0: take the last failure seen
        fails = [x.exit_status for tk in rec.ticks if tk.units and t0 - 60 <= tk.time <= t1 + 5
                 for x in tk.units if x.id == u.id and x.exit_status]
        status = fails[-1] if fails else u.exit_status
        out.append(Link("unit_loop", "found", "high" if d > 0 else "medium",
                        f"{u.id} restarted {d} times ({u.n_restarts} in all), exit status {status}, "
                        f"enabled={u.enabled}",
                        [f"state {u.active}/{u.sub}, Restart={u.restart}, RestartSec={u.restart_usec / 1e6:g}s",
                         f"unit file {u.fragment}" if u.fragment else "unit file unknown"],
                        {"unit": u.id, "restarts": d, "n_restarts": u.n_restarts, "exit_status": status,
                         "enabled": u.enabled}))
    else:
        out.append(unknown("unit_loop", "no unit restarts recorded (record with --systemd-pid when systemd "
                                        "is not PID 1 of this namespace)"))
    return out


def _remedy(links: list[Link]) -> Link:
    by = {lk.name: lk for lk in links}
    cmds = []
    unit = by.get("unit_loop") and by["unit_loop"].data.get("unit")
    if unit:
        cmds += [f"systemctl disable --now {unit}", f"systemctl mask {unit}"]
    if by.get("resource") and by["resource"].status == "found":
        cmds += ["sync; echo 3 > /proc/sys/vm/drop_caches",
                 "# if the dying count does not fall: reboot (mapped or in-use cache keeps them pinned)"]
    ep = by.get("saturated_core")
    if ep and ep.status == "found" and not cmds:
        cmds.append(f"perf record -C {ep.data['cpu']} -g -- sleep 10   # see what runs there")
    if not cmds:
        return unknown("remediation", "nothing proven to fix")
    return Link("remediation", "found", by["unit_loop"].confidence if unit else "medium",
                "; ".join(c for c in cmds if not c.startswith("#")), cmds, {"commands": cmds})
