"""The causal chain of an incident, link by link, each with a measured share and a verdict.

event -> saturated core -> processes on it -> what the core executed -> resource walked (memory
cgroups) -> who made the zombies -> the restart loop that makes them -> remediation.

A link is `proven` when its share explains at least PROVE (50%) of the link above it, `contributing`
when it explains at least CONTRIBUTE (10%), `not_proven` below that (with the numbers), and
`unknown` when the recording holds no data for it (never guessed). The event itself, and the
measurements that are not hypotheses (the profile of the core), are `observed`. A root cause is
named only when every link from the core to the unit is proven; otherwise the report names what
did saturate the core as the leading explanation and lists the rejected hypotheses with their
numbers. Data come only from the recording: 1 Hz ticks, the perf profile, the cgroup churn trace.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..detect import proof
from . import dose
from .family.registry import hypotheses
from ..detect.incidents import (NIC_LOOKBACK, Episode, Incident, _window, describe_event_cpu, episodes,
                                event_cpu, victim, pods_seen)
from ..detect.proof import verdict
from ..model.thresholds import (CONTRIBUTE, CONTRIBUTING, HOT_BUSY, HOT_SECONDS, MIN_ZOMBIES, NOT_PROVEN, OBSERVED,
                                OTHERS_MAX, PROVE, PROVEN, UNKNOWN, ZOMBIE_AGE)
from ..model.churn import creators, dying_through
from ..model.kube import KUBELET_READER, is_kubelet, pod_name, pod_owner
from ..model import frames
from ..model.records import Creator, softnet_on, softnet_text, sockets_in, tcp_in
from ..profile.parse import UNNAMED
from ..model.actions import Action, owner_commands, profile_cpu, protected, unit_status
from ..model.timeparse import iso
from ..model.memcg_ids import ID_MAX
from ..model.thresholds import MEMCG_IDS_WARN

MIN_SAMPLES = 20  # profile samples on the core needed to measure shares from the profile
CONFIDENCE = {OBSERVED: "high", PROVEN: "high", CONTRIBUTING: "medium", NOT_PROVEN: "low", UNKNOWN: "none"}


@dataclass
class Link:
    name: str
    verdict: str
    summary: str
    share: float | None = None  # what this link explains of the link above it, 0..1
    rule: str = ""  # how the verdict follows from the share
    evidence: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    @property
    def confidence(self) -> str:
        return CONFIDENCE[self.verdict]

    def to_dict(self) -> dict:
        return {"name": self.name, "verdict": self.verdict, "confidence": self.confidence,
                "status": "unknown" if self.verdict == UNKNOWN else "found",  # explain/v1's field, kept for its readers
                "share": None if self.share is None else round(self.share, 4), "rule": self.rule,
                "summary": self.summary, "evidence": self.evidence, "data": self.data}


@dataclass
class Explained:
    kind: str  # nic_reset | hot_core
    time: float
    start: float
    end: float
    title: str
    links: list[Link]
    root_cause: str = ""  # named only when a chain is proven end to end (a unit, a process, an interrupt line)
    leading: str = ""  # what explains the core best, when no root cause is proven
    rejected: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    family: str = ""  # the family of the leading explanation (explain/family/)
    hypotheses: list = field(default_factory=list)  # family/common.Hypothesis, most explaining first
    notes: list[str] = field(default_factory=list)
    dose: dict | None = None  # dose-response over the recording (explain/dose.py), where it allows one
    pod_cause: dict | None = None  # a pod's restarting container as the root cause: its verdict and share (_pod_verdict)

    def link(self, name: str) -> Link | None:
        return next((lk for lk in self.links if lk.name == name), None)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "time": self.time, "iso": iso(self.time), "start": self.start, "end": self.end,
                "title": self.title, "root_cause": self.root_cause, "leading": self.leading,
                "family": self.family, "chain_proven": bool(self.root_cause), "rejected": self.rejected,
                "hypotheses": [h.to_dict() for h in self.hypotheses], "notes": self.notes,
                "actions": [a.to_dict() for a in self.actions], "links": [lk.to_dict() for lk in self.links],
                "dose_response": self.dose, "pod_cause": self.pod_cause}


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def build(rec, inc: Incident) -> Explained:
    links: list[Link] = [_event(rec, inc)]
    ep = inc.episode
    links.append(_core(rec, inc))
    links.append(_impact(rec, inc))
    if ep is None:
        for name in ("processes", "functions", "resource", "creator", "unit_loop"):
            links.append(Link(name, UNKNOWN, "no saturated core to follow"))
        ex = Explained(inc.kind, inc.time, inc.start, inc.end, links[0].summary, links)
        ex.leading = "no CPU starvation in the recording explains this event"
        ex.rejected = [f"saturated core: {links[1].summary}"]
        links.append(_remedy(ex, None))
        return ex
    prof = _profile(rec, ep)
    links.append(_processes(rec, ep, prof))
    links.append(_functions(ep, prof))
    links.append(_resource(rec, inc, ep, prof))
    creator, lasting_by = _creator(rec, inc)
    links.append(creator)
    links.append(_unit(rec, inc, creator, lasting_by))
    ex = Explained(inc.kind, inc.time, inc.start, inc.end, "", links)
    chain = [ex.link(n) for n in ("saturated_core", "processes", "resource", "creator", "unit_loop")]
    core_ok = chain[0].verdict in (PROVEN, OBSERVED)
    hs, ex.notes = hypotheses(rec, inc, ep, prof, {lk.name: lk for lk in links},
                                       (ex.link("saturated_core").data or {}).get("victim", {}))
    ex.hypotheses = hs
    ex.dose = dose.response(rec, ep.cpu, inc.end)
    walk = next((h for h in hs if h.family == "memcg_walk"), None)
    if (core_ok and all(lk.verdict == PROVEN for lk in chain[1:]) and walk is not None and walk.verdict == PROVEN
            and walk.data.get("over") == "zombies" and _through_ok(chain[3])):
        ex.root_cause, ex.family = chain[-1].data["unit"] or pod_cause(chain[-1].data), "memcg_walk"
    else:  # a walk over live memcgs names its cause itself: who made them (family/memcg_walk.live_maker)
        best = next((h for h in hs if h.verdict == PROVEN
                     and (h.family != "memcg_walk" or h.data.get("over") == "live")), None)
        if core_ok and best is not None and best.cause:
            ex.root_cause, ex.family = best.cause, best.family
    ex.leading = _leading(ex, ep, prof)
    ex.rejected = [f"{LABEL[lk.name]}: {lk.summary}" for lk in links if lk.verdict == NOT_PROVEN] + [
        f"{h.family}: {h.summary} ({pct(h.share)} of the excess)" for h in hs
        if h.verdict == NOT_PROVEN and h.share and h.family != "memcg_walk" and h.family != ex.family]
    ex.pod_cause = _pod_verdict(ex, chain, walk, core_ok, ep.cpu)
    if ex.pod_cause and ex.pod_cause["verdict"] != PROVEN:
        (ex.notes if ex.pod_cause["verdict"] == CONTRIBUTING else ex.rejected).append(ex.pod_cause["summary"])
    ex.title = links[0].summary + f" <- CPU {ep.cpu} saturated ({ep.busy_mean:.0f}% for {ep.seconds:.0f} s)" + (
        f" <- root cause: {ex.root_cause}" if ex.root_cause else f" <- leading: {ex.leading}")
    links.append(_remedy(ex, ep))
    return ex


LABEL = {"event": "Event", "saturated_core": "Saturated core", "impact": "Impact on TCP",
         "processes": "Processes on it",
         "functions": "What the core ran", "resource": "Resource walked", "creator": "Who makes zombies",
         "unit_loop": "Restart loop", "remediation": "Remediation"}


# --- 1. the event --------------------------------------------------------------------------------

def _event(rec, inc: Incident) -> Link:
    if inc.kind == "nic_reset":
        evs = inc.nic.events
        reasons = sorted({e.reset_reason for e in evs if e.reset_reason})
        kinds = Counter(e.kind for e in evs)
        cpus = []
        for e in evs:  # the CPU each reporting queue's interrupts were served on, and its load then
            ec = event_cpu(rec.ticks, e, inc.nic.device)
            if ec is not None and ec not in cpus:
                cpus.append(ec)
        return Link("event", OBSERVED,
                    f"NIC {inc.nic.device}: " + ", ".join(f"{n} {k}" for k, n in kinds.items())
                    + (f" (reason {', '.join(reasons)})" if reasons else "")
                    + (f"; served on CPU {', '.join(str(c['cpu']) for c in cpus)}" if cpus else ""), None,
                    "kernel-log lines; the CPU from the driver's line or the queue's interrupt counts",
                    [f"{iso(e.time)} seq {e.seq}: {e.message}" for e in evs[:8]]
                    + [describe_event_cpu(inc.nic.device, c) for c in cpus],
                    {"device": inc.nic.device, "reasons": reasons, "events": len(evs),
                     "kinds": dict(kinds), "first": inc.nic.start, "last": inc.nic.end, "cpus": cpus})
    ep = inc.episode
    return Link("event", OBSERVED, f"CPU {ep.cpu} >= {HOT_BUSY:.0f}% busy for {ep.seconds:.0f} s",
                None, f">= {HOT_BUSY:.0f}% for >= {HOT_SECONDS:.0f} s while the unsaturated others averaged < {OTHERS_MAX:.0f}%",
                [f"{iso(ep.start)} .. {iso(ep.end)}"], {"cpu": ep.cpu, "start": ep.start, "end": ep.end})


# --- 2. the saturated core, and the victim --------------------------------------------------------

def _core(rec, inc: Incident) -> Link:
    ep = inc.episode
    rule = (f"a CPU >= {HOT_BUSY:.0f}% busy for >= {HOT_SECONDS:.0f} s while the unsaturated others averaged "
            f"< {OTHERS_MAX:.0f}%, within {NIC_LOOKBACK:.0f} s before the event; proven when the NIC's "
            f"work is shown waiting on that CPU (ksoftirqd wait or the NIC's interrupts >= {pct(PROVE)})")
    if ep is None:
        t = inc.time
        window = _window(rec.ticks, t - NIC_LOOKBACK, t + 2)
        if not window:
            return Link("saturated_core", UNKNOWN, f"no CPU samples in the {NIC_LOOKBACK:.0f} s before", None, rule)
        busy_node = episodes(window, others_max=101.0)  # runs that fail only the "others quiet" condition
        if busy_node:
            b = busy_node[0]
            return Link("saturated_core", NOT_PROVEN,
                        f"CPU {b.cpu} was >= {HOT_BUSY:.0f}% for {b.seconds:.0f} s but the other CPUs averaged "
                        f"{b.others_mean:.0f}% (>= {OTHERS_MAX:.0f}%): a busy node, not one starved core", 0.0, rule,
                        [f"{iso(b.start)} .. {iso(b.end)}: CPU {b.cpu} {b.busy_mean:.0f}%, others {b.others_mean:.0f}%"],
                        {"busy_node": b.to_dict()})
        peak = max((max((u.busy for c, u in tk.cpu.items() if c >= 0), default=0.0) for tk in window), default=0.0)
        return Link("saturated_core", NOT_PROVEN, f"no CPU was >= {HOT_BUSY:.0f}% for {HOT_SECONDS:.0f} s in the "
                    f"{NIC_LOOKBACK:.0f} s before; the busiest CPU peaked at {peak:.0f}%", 0.0, rule)
    ev = [f"CPU {ep.cpu}: {ep.busy_mean:.0f}% busy (min {ep.busy_min:.0f}%) for {ep.seconds:.0f} s, "
          f"{iso(ep.start)} .. {iso(ep.end)}",
          f"split: user {ep.usr_mean:.0f}%, sys {ep.sys_mean:.0f}%, softirq {ep.soft_mean:.0f}%, irq {ep.irq_mean:.0f}%",
          f"the other CPUs averaged {ep.others_mean:.0f}% (node {ep.node_mean:.0f}%): CPU {ep.cpu} was "
          f"{ep.excess:.0f} points above them"]
    queue = None
    if inc.nic is not None:
        q = next((e.fields.get("queue") for e in inc.nic.events if e.fields.get("queue")), None)
        queue = int(q) if q is not None and str(q).isdigit() else None
    v = victim(rec.ticks, ep.cpu, ep.start, ep.end, queue=queue)
    if "ksoftirqd_wait_s" in v:
        ev.append(f"ksoftirqd/{ep.cpu} waited {v['ksoftirqd_wait_s']:.1f} s of the {v['seconds']:.0f} s "
                  f"({pct(v['ksoftirqd_wait_share'])}) for CPU {ep.cpu}")
    if "net_rx_per_s" in v:
        r = v["net_rx_per_s"]
        ev.append(f"NET_RX softirqs on CPU {ep.cpu}: {r['before'] if r['before'] is not None else '?'}/s in the "
                  f"minute before, {r['during'] if r['during'] is not None else '?'}/s during")
    if "psi_cpu_some_share" in v:
        ev.append(f"CPU pressure (some): tasks waited {pct(v['psi_cpu_some_share'])} of the time")
    if "nic_irq_share" in v:
        ev.append(f"CPU {ep.cpu} served {pct(v['nic_irq_share'])} of the interrupts of the NIC's "
                  + (f"queue {v['queue']} (the one the driver reported)" if "queue" in v else "queues"))
    sn = softnet_on(rec.ticks, ep.cpu, ep.start, ep.end)  # the receive work the starved CPU left undone
    if sn:
        ev.append(softnet_text(sn))
    data = {**ep.to_dict(), "victim": v, "softnet": sn or None}
    summary = (f"CPU {ep.cpu} at {ep.busy_mean:.0f}% for {ep.seconds:.0f} s (sys {ep.sys_mean:.0f}%, "
               f"softirq {ep.soft_mean:.0f}%; others {ep.others_mean:.0f}%)")
    if sn.get("time_squeeze") or sn.get("dropped"):
        summary += (f"; network receive work left undone there: {sn.get('time_squeeze', 0)} squeezes, "
                    f"{sn.get('dropped', 0)} backlog drops")
    if inc.kind != "nic_reset":
        return Link("saturated_core", OBSERVED, summary, ep.busy_mean / 100, rule.split(", within")[0], ev, data)
    lead = inc.time - ep.end
    ev.insert(1, f"it ended {lead:.0f} s before the first NIC line" if lead >= 1 else
              f"it had lasted {inc.time - ep.start:.0f} s when the first NIC line was logged")
    share = max(v.get("ksoftirqd_wait_share", 0.0), v.get("nic_irq_share", 0.0)) if (
        "ksoftirqd_wait_share" in v or "nic_irq_share" in v) else None
    if share is None:
        return Link("saturated_core", CONTRIBUTING, summary + "; no measure of the NIC's work waiting on it "
                    "(timing only)", None, rule, ev, data)
    vd = PROVEN if share >= PROVE else CONTRIBUTING
    return Link("saturated_core", vd, summary + f"; the NIC's work waited there ({pct(share)})", share, rule, ev, data)


# --- 2b. what it did to the connections ------------------------------------------------------------

IMPACT_AFTER = 5.0  # s after a NIC event its impact is counted over
IMPACT_RISE = 3.0  # proven when retransmits per second are this many times the minute before's
IMPACT_MIN = 10  # and at least this many


def _impact(rec, inc: Incident) -> Link:
    """The TCP counters of every network namespace read (collect/tcp.py) right after the event (or over
    the hot episode), against the minute before, and the connections the triggered socket view found
    retransmitting then, by process: observed numbers; proven only by the stated rule."""
    ep = inc.episode
    if inc.kind == "nic_reset":
        t0, t1, what = inc.time, inc.time + IMPACT_AFTER, f"in the {IMPACT_AFTER:.0f} s after the NIC event"
    else:
        t0, t1, what = ep.start, ep.end, f"in the {ep.seconds:.0f} s CPU {ep.cpu} was hot"
    rule = (f"the kernel's TCP counters, summed over every network namespace read, {what}, against the minute "
            f"before (per second); proven when retransmitted segments are >= {IMPACT_RISE:g}x the minute "
            f"before's rate and >= {IMPACT_MIN}; otherwise observed. By process: the connections the socket view "
            "(inet_diag, run on a counter spike) found retransmitting, with their owner from /proc/*/fd")
    after, before = tcp_in(rec.ticks, t0, t1), tcp_in(rec.ticks, t0 - 60.0, t0)
    if not after:
        return Link("impact", UNKNOWN, "no TCP counters recorded around it (a recording made before they were, or "
                    "/proc/net/snmp could not be read)", None, rule)
    d = after["d"]
    n, m = d.get("Tcp_RetransSegs", 0), d.get("TcpExt_TCPTimeouts", 0)
    k, j = d.get("Tcp_EstabResets", 0), d.get("TcpExt_TCPAbortOnTimeout", 0)
    drops = sum(d.get(x, 0) for x in ("TcpExt_ListenDrops", "TcpExt_TCPRcvQDrop", "TcpExt_TCPBacklogDrop"))
    conns = sockets_in(rec.ticks, t0 - 1.0, t1 + 1.0)
    procs: dict = {}
    for c in conns:
        key = (c.get("pid"), c.get("comm"))
        p = procs.setdefault(key, {"pid": key[0], "comm": key[1], "retrans": 0, "lifetime": False, "conns": set(),
                                   "in_rto": 0, "cgroup_id": c.get("cgroup_id")})
        p["retrans"] += c["retrans_delta"] if c.get("retrans_delta") is not None else c["retrans_total"]
        p["lifetime"] |= c.get("retrans_delta") is None
        p["conns"].add(c["cookie"])
        p["in_rto"] += 1 if c.get("retransmits") else 0
    ranked = sorted(procs.values(), key=lambda p: -p["retrans"])
    by = "; ".join(f"{p['comm'] or 'owner not found'}" + (f" (pid {p['pid']})" if p["pid"] else "")
                   + f" {p['retrans']} retransmits{' (lifetime totals)' if p['lifetime'] else ''} on "
                   f"{len(p['conns'])} connection{'s' if len(p['conns']) != 1 else ''}"
                   + (f", {p['in_rto']} in RTO backoff" if p["in_rto"] else "") for p in ranked[:4])
    summary = (f"{what}: {n} retransmitted segments, {m} RTO timeouts, {k} connections reset ({j} killed by "
               f"retries)" + (f", {drops} segments dropped at listeners/sockets" if drops else "")
               + (f"; by process: {by}" if by else "; no socket view ran (no counter spike to trigger it)"))
    ev = [f"{after['seconds']:.0f} s of TCP counters: " + ", ".join(f"{key} {v}" for key, v in d.items() if v)]
    nets = sorted(after["by_ns"].items(), key=lambda kv: -kv[1]["d"].get("Tcp_RetransSegs", 0))
    for ns, x in nets[:4]:
        if x["d"].get("Tcp_RetransSegs") or x["d"].get("Tcp_EstabResets") or x["d"].get("TcpExt_TCPTimeouts"):
            ev.append(("the host's network namespace" if ns == 0 else
                       f"netns {ns} (pid {x['pid']} {x['comm']}" + (f", cgroup {x['cgroup']}" if x["cgroup"] else "")
                       + ")") + f": {x['d'].get('Tcp_RetransSegs', 0)} retransmits, "
                       f"{x['d'].get('TcpExt_TCPTimeouts', 0)} timeouts, {x['d'].get('Tcp_EstabResets', 0)} resets")
    for c in sorted(conns, key=lambda c: -(c.get("retrans_delta") or c["retrans_total"]))[:5]:
        ev.append(f"{iso(c['t'])} {c['src']} -> {c['dst']} {c['state']}: {c['retrans_total']} retransmits over its "
                  f"life" + (f" (+{c['retrans_delta']} since the last scan)" if c.get("retrans_delta") is not None
                             else "") + f", rto {c['rto_ms']:g} ms, {c['retransmits']} consecutive RTOs, owner "
                  + (f"{c['comm']} (pid {c['pid']})" if c.get("pid") else "not found") + f", cgroup id {c['cgroup_id']}")
    rate = n / max(after["seconds"], 1e-3)
    base = before["d"].get("Tcp_RetransSegs", 0) / before["seconds"] if before and before["seconds"] >= 10 else None
    data = {"window": [t0, t1], "counters": d, "seconds": after["seconds"], "retrans_per_s": round(rate, 2),
            "before_retrans_per_s": None if base is None else round(base, 2),
            "by_process": [{**{x: y for x, y in p.items() if x != "conns"}, "connections": len(p["conns"])}
                           for p in ranked[:10]],
            "by_netns": [{"ns": ns, "pid": x["pid"], "comm": x["comm"], "cgroup": x["cgroup"], **x["d"]}
                         for ns, x in nets[:10]]}
    if base is None:
        ev.append("no minute of counters before it to compare with")
        return Link("impact", OBSERVED, summary, None, rule, ev, data)
    ev.append(f"retransmits {rate:.1f}/s then vs {base:.1f}/s in the minute before")
    share = max(0.0, (rate - base) / rate) if rate else None  # the part of the retransmits above the baseline
    if n >= IMPACT_MIN and rate >= IMPACT_RISE * base:
        return Link("impact", PROVEN, summary, share, rule, ev, data)
    if rate <= base:
        summary += f" (no more than the minute before: {base:.1f}/s)"
    return Link("impact", OBSERVED, summary, share, rule, ev, data)


# --- 3/4. processes and functions ----------------------------------------------------------------

@dataclass
class CoreProfile:
    n: int  # samples on the core in the episode, idle included
    event: str
    by_pid: dict  # pid -> (comm, samples, kernel samples, memcg samples)
    memcg: int
    softirq: int
    user: int
    kernel_other: int
    idle: int
    top: list
    unnamed: int = 0  # samples not counted as memcg with frames perf script had not named (UNNAMED)
    lost: int = 0  # samples of the core in the episode perf lost (ring buffer full)
    reclaim: int = 0  # samples in page reclaim (memcg walks included), whoever ran it
    lock: int = 0  # samples spinning on a kernel lock
    kernel_of: dict = field(default_factory=dict)  # pid -> kernel samples not memcg/softirq/reclaim/lock


def _profile(rec, ep: Episode) -> CoreProfile | None:
    s = rec.samples(ep.start, ep.end)
    if s is None or not len(s):
        return None
    import numpy as np

    m = (s.t >= ep.start) & (s.t <= ep.end) & (s.cpu == ep.cpu)
    n = int(m.sum())
    if n < MIN_SAMPLES:
        return None
    from ..profile.samples import Filter
    from ..profile.top import top_functions

    sub = s.masked(m)
    by_pid: dict[int, list] = {}
    memcg = soft = user = other = idle = unnamed = reclaim = lock = 0
    kernel_of: dict[int, int] = {}
    names: dict[int, Counter] = defaultdict(Counter)
    ids, counts = np.unique(np.stack([sub.pid, sub.stack, sub.comm]), axis=1, return_counts=True)
    classes = s.classes(ids[1]) if len(counts) else []  # each stack's frame classes, as the profile classified them
    for (pid, sid, cid), c, cls in zip(ids.T.tolist(), counts.tolist(), np.asarray(classes).tolist()):
        st = s.stacks[sid]
        if pid == 0 and s.idle[sid]:
            idle += c
            continue
        leaf_k = bool(cls & frames.KERNEL_LEAF)
        is_memcg = bool(cls & frames.IS_MEMCG)
        slot = by_pid.setdefault(pid, [s.comms[cid], 0, 0, 0])
        names[pid][s.comms[cid]] += c
        slot[1] += c
        if leaf_k:
            slot[2] += c
        if not is_memcg and any(f.startswith(UNNAMED) for f in st):
            unnamed += c  # perf script had not named all of it: it may have been memcg code
        is_reclaim = bool(cls & frames.IS_RECLAIM)
        is_lock = bool(cls & frames.IS_LOCK)
        reclaim += c if is_reclaim else 0
        lock += c if is_lock else 0
        if is_memcg:
            memcg += c
            slot[3] += c
        elif cls & frames.IS_SOFTIRQ:
            soft += c
        elif leaf_k:
            other += c
            if not is_reclaim and not is_lock:
                kernel_of[pid] = kernel_of.get(pid, 0) + c
        else:
            user += c
    for pid, slot in by_pid.items():  # a process is named by the comm most of its samples carry (its threads
        slot[0] = names[pid].most_common(1)[0][0]  # may name themselves; a sample may predate its exec)
    top = top_functions(sub, Filter(cpus={ep.cpu}), kernel_only=False, n=8)
    return CoreProfile(n, getattr(s, "event", ""), by_pid, memcg, soft, user, other, idle, top, unnamed,
                       rec.lost(ep.start, ep.end, ep.cpu), reclaim, lock, kernel_of)


def _processes(rec, ep: Episode, prof: CoreProfile | None) -> Link:
    rule = f"proven when the processes named account for >= {pct(PROVE)} of the core's busy time"
    busy = ep.busy_mean / 100
    rows = []
    if prof is not None:
        for pid, (comm, c, k, mc) in sorted(prof.by_pid.items(), key=lambda kv: -kv[1][1])[:6]:
            rows.append({"pid": pid, "comm": comm, "cpu_share": c / prof.n, "share": (c / prof.n) / busy if busy else 0,
                         "kernel": k / c, "memcg": mc / c, "source": "profile", "samples": c})
        src = f"from the profile ({prof.n} samples on CPU {ep.cpu}, each a 1/F s slice)"
    else:
        for p in ep.top[:6]:
            rows.append({"pid": p.pid, "comm": p.comm, "cpu_share": p.pct / 100, "share": p.share, "kernel": None,
                         "memcg": None, "source": "proc-estimate" if p.estimate else "proc", "samples": None})
        src = ("from /proc per-thread CPU time and the CPU each thread last ran on"
               + (" (estimate: some threads ran on several CPUs, their time was split)"
                  if any(p.estimate for p in ep.top) else ""))
    if not rows:
        return Link("processes", UNKNOWN, f"no per-process data on CPU {ep.cpu}", None, rule)
    pods = pods_seen(x for x in rec.ticks if ep.start - 1 <= x.time <= ep.end + 1)
    for r in rows:
        if r["pid"] in pods:
            r["pod"] = pods[r["pid"]]
    share = min(1.0, sum(r["share"] for r in rows))
    ev = [src]
    for r in rows:
        kern = "" if r["kernel"] is None else f", {pct(r['kernel'])} of it in the kernel" + (
            f" ({pct(r['memcg'])} in memcg code)" if r["memcg"] else "")
        ev.append(f"{_who(r)}: {100 * r['cpu_share']:.0f}% of CPU {ep.cpu}, "
                  f"{pct(r['share'])} of its busy time{kern}" + (f"; {KUBELET_READER}" if is_kubelet(r["comm"]) else ""))
    summary = ", ".join(f"{_who(r)} {pct(r['share'])}" for r in rows[:3]) + " of the busy time"
    return Link("processes", verdict(share), summary, share, rule, ev,
                {"top": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
                 "source": rows[0]["source"]})


def _who(r: dict) -> str:
    """`comm (pid N)`, with namespace/pod/container for a process in a pod."""
    return f"{r['comm']} (pid {r['pid']})" + (f" in pod {pod_name(r['pod'])}" if r.get("pod") else "")


def _functions(ep: Episode, prof: CoreProfile | None) -> Link:
    if prof is None:
        return Link("functions", UNKNOWN, f"no profile of CPU {ep.cpu} in the episode (record with --profile; "
                    f">= {MIN_SAMPLES} samples needed)")
    n = prof.n
    parts = {"user space": prof.user, "memory-cgroup code": prof.memcg, "softirq/irq": prof.softirq,
             "other kernel": prof.kernel_other, "idle": prof.idle}
    ev = [f"{k}: {pct(v / n)} of CPU {ep.cpu}'s samples" for k, v in parts.items()]
    if prof.event and "clock" not in prof.event:
        ev.append(f"note: the profile's event is {prof.event}, not a clock: shares are of samples, not of time")
    if prof.unnamed:
        ev.append(f"note: {pct(prof.unnamed / n)} of CPU {ep.cpu}'s samples have frames perf script had not named "
                  f"when they were stored ({UNNAMED}): the shares above are lower bounds")
    if prof.lost:
        ev.append(f"note: perf lost {prof.lost} samples of CPU {ep.cpu} in the episode besides the {n} kept (its "
                  "ring buffer was full); a full ring keeps short stacks, so deep ones are undercounted")
    ev += [f"{r['function']}{' [k]' if r['kernel'] else ''}: self {r['self_pct']:.0f}%, total {r['total_pct']:.0f}%"
           for r in prof.top[:6]]
    big = max(((k, v) for k, v in parts.items() if k != "idle"), key=lambda kv: kv[1])
    return Link("functions", OBSERVED, f"CPU {ep.cpu} ran {big[0]} {pct(big[1] / n)} of the time"
                + (f"; hottest {prof.top[0]['function']}" if prof.top else ""), None, "measured by the profile", ev,
                {"samples": n, "event": prof.event, "unnamed": round(prof.unnamed / n, 4), "lost": prof.lost, **{k.replace(" ", "_").replace("/", "_"): round(v / n, 4)
                                                        for k, v in parts.items()}, "top": prof.top})


# --- 5. the resource ----------------------------------------------------------------------------

def _tick_at(rec, t: float):
    """The last tick at or just after t (the state at the incident)."""
    best = None
    for x in rec.ticks:
        if x.time <= t + 1:
            best = x
        else:
            break
    return best


def _census(rec, t: float):
    tk = _tick_at(rec, t)
    return tk.census if tk else None


def _resource(rec, inc: Incident, ep: Episode, prof: CoreProfile | None) -> Link:
    rule = (f"share = the core's time in memory-cgroup code / its busy time above the other CPUs "
            f"({ep.excess:.0f} points); proven >= {pct(PROVE)}, contributing >= {pct(CONTRIBUTE)}")
    c = _census(rec, inc.time)
    dying = c.memory_dying() if c else None
    mem = c.controller("memory") if c else None
    first = rec.ticks[0].census.memory_dying() if rec.ticks else None
    growth = dying - first if dying is not None and first is not None else None
    hours = max(1e-9, (inc.time - rec.ticks[0].time) / 3600) if rec.ticks else None
    ev = []
    ids_note = None
    if dying is not None:
        ev.append(f"memory cgroups at the incident: {dying} dying" + (
            f" ({mem.tracked} tracked vs {mem.live} live)" if mem and mem.live is not None else ""))
        if growth is not None and hours:
            ev.append(f"dying memcgs {growth:+d} since the recording began" + (
                f" ({growth / hours:+.0f}/h)" if hours >= 1 / 6 else f" ({60 * hours:.1f} min ago)"))
        live = c.memory_live()
        if live is not None and (live + dying) / ID_MAX >= MEMCG_IDS_WARN:
            held = (f"{live + dying} of {ID_MAX} at most" if live + dying <= ID_MAX else
                    f"{live + dying} memcgs exceed the {ID_MAX} IDs, so not every dying one holds an ID here (a 4.8+ "
                    f"kernel): between {live} and {ID_MAX} held")
            ev.append(f"memory cgroup IDs: {live} live + {dying} dying: {held} (a dying memcg holds one before 4.8, "
                      f"since 4.8 only with pages in swap: model/memcg_ids.py); with all {ID_MAX} held a memcg mkdir "
                      f"fails with ENOSPC and pods cannot start (`nodesleuth check`'s memcg_ids finding on the node)")
            ids_note = live + dying
        t = _tick_at(rec, inc.time)
        if t and t.meminfo.get("Percpu") is not None:
            ev.append(f"Percpu {t.meminfo['Percpu'] >> 20} MiB, Slab {t.meminfo.get('Slab', 0) >> 20} MiB")
    data = {"dying": dying, "tracked": mem.tracked if mem else None, "live": c.memory_live() if c else None,
            "growth": growth, "memcg_ids_upper": ids_note,
            # on cgroup v2 the parent the zombies were removed from (remedy reclaims there: memory.reclaim)
            "v2_parent": c.dying_subtrees[0].path if c and c.v2 is not None and mem is None and c.dying_subtrees
            else None}
    cost = getattr(rec, "cost", None)
    if cost:
        ev.append(f"measured on this kernel: {cost}")
    if prof is None:
        return Link("resource", UNKNOWN, f"cannot tell whether CPU {ep.cpu} walked memory cgroups: no profile of it"
                    + (f" ({dying} memcgs dying)" if dying else ""), None, rule, ev, data)
    # samples perf lost and frames it had not named may have been memcg code: the share is a range,
    # and the verdict is its lower end's (never stronger than what was seen)
    total = prof.n + prof.lost
    memcg_time = prof.memcg / total  # fraction of the core's time
    excess = ep.excess / 100
    share = min(1.0, memcg_time / excess) if excess > 0 else 0.0
    upper = min(1.0, (prof.memcg + prof.unnamed + prof.lost) / total / excess) if excess > 0 else 0.0
    walkers = sorted(((pid, comm, mc) for pid, (comm, _, _, mc) in prof.by_pid.items() if mc),
                     key=lambda x: -x[2])
    ev.insert(0, f"memory-cgroup code took {pct(memcg_time)} of CPU {ep.cpu}'s time = {pct(share)} of its excess "
                 f"busy time ({ep.excess:.0f} points)")
    gaps = ([f"{pct(prof.unnamed / total)} of them have frames perf script had not named ({UNNAMED})"]
            if prof.unnamed else []) + ([f"perf lost {prof.lost} of CPU {ep.cpu}'s samples (its ring buffer was "
                                         "full: deep stacks such as reclaim's are lost first)"] if prof.lost else [])
    if gaps:
        ev.insert(1, "; ".join(gaps) + f": the share is between {pct(share)} and {pct(upper)}")
    for pid, comm, mc in walkers[:3]:
        ev.append(f"{comm} (pid {pid}) was in memcg code for {mc} of the core's {prof.n} samples")
    data.update({"memcg_time": round(memcg_time, 4), "excess": round(excess, 4), "share_upper": round(upper, 4),
                 "walkers": [{"pid": p, "comm": cm, "samples": n} for p, cm, n in walkers[:5]]})
    vd = verdict(share)
    if vd != NOT_PROVEN and not dying:
        ev.append("but no memory cgroups are dying: the walk is over live ones")
    who = f" by {walkers[0][1]}" if walkers else ""
    summary = (f"memory-cgroup code{who}: {pct(memcg_time)} of CPU {ep.cpu}, {pct(share)} of its excess busy time"
               + (f"; {dying} memcgs dying" if dying is not None else ""))
    return Link("resource", vd, summary, share, rule, ev, data)


# --- 6/7. who makes the zombies, and the unit ------------------------------------------------------

def _creator(rec, inc: Incident) -> tuple[Link, dict]:
    rule = (f"a creator's zombies are the cgroups it made that were still dying >= {ZOMBIE_AGE:.0f} s after "
            f"removal; share = its zombies / the growth of dying memcgs over the trace; proven >= {pct(PROVE)} "
            f"and >= {MIN_ZOMBIES} zombies, with the growth >= {pct(PROVE)} of them (detect/proof.py)")
    if not rec.churn:
        loop = _loopers(rec, rec.start, inc.end)
        why = "no cgroup churn trace in the recording (record with --trace-churn)"
        if loop:
            why += f"; crash-looping {loop[0][0].id} is a suspect only"
        return Link("creator", UNKNOWN, why, None, rule), {}
    trace = [e for e in rec.churn if e.time <= inc.end + ZOMBIE_AGE * 4]
    trace_end = rec.end
    cs = creators(trace, trace_end, ZOMBIE_AGE)
    if not cs:
        return Link("creator", NOT_PROVEN, "the churn trace saw no cgroup being created", 0.0, rule), {}
    t_first = min(e.time for e in trace)
    d0 = _census(rec, t_first)
    d1 = _census(rec, min(trace_end, inc.end + ZOMBIE_AGE * 4))
    growth = None
    if d0 is not None and d1 is not None and d0.memory_dying() is not None and d1.memory_dying() is not None:
        growth = d1.memory_dying() - d0.memory_dying()
    top = cs[0]
    _name_pods(rec, cs)
    vd, share = proof.creator(top.still_dying, growth, d1.memory_dying() if d1 else None)
    ev = []
    for c in cs[:4]:
        life = (f"; lifetime of freed ones: median {statistics.median(c.lifetimes):.2f} s, max {max(c.lifetimes):.2f} s"
                if c.lifetimes else "")
        ev.append(f"{c.comm} made {c.mkdir} cgroups like {c.pattern}"
                  + (f" (containers of pod {pod_owner(c.pod)})" if c.pod else "") + f" from {len(c.pids)} processes "
                  f"({iso(c.first)} .. {iso(c.last)}); removed {c.rmdir}: {c.still_dying} stayed dying "
                  f">= {ZOMBIE_AGE:.0f} s, {c.freed} freed sooner, {c.young} too recent to tell{life}")
    if growth is not None:
        ev.append(f"dying memory cgroups grew {growth:+d} over the trace")
    if top.still_dying < MIN_ZOMBIES:
        # a handful of cgroups freed late (page cache still charged, a busy node) is not a zombie maker:
        # below MIN_ZOMBIES its share of a tiny growth says nothing, whatever the ratio
        summary = (f"{top.comm}'s cgroups ({top.mkdir} made) do not stay dying"
                   + (f" (only {top.still_dying}, under {MIN_ZOMBIES})" if top.still_dying else "") + ": "
                   + (f"all freed within {max(top.lifetimes):.2f} s" if top.lifetimes and top.freed == top.rmdir
                      else f"{top.still_dying} stayed dying, {top.freed} freed within {ZOMBIE_AGE:.0f} s, "
                           f"{top.young} too recent"))
    else:
        summary = ((f"the containers of pod {pod_name(top.pod)} ({top.comm}, {top.pattern})" if top.pod
                    else f"{top.comm} ({top.pattern})") + f": {top.still_dying} lasting zombies"
                   + (f" = {pct(share)} of the dying growth" if share is not None else "")
                   + ("" if vd != CONTRIBUTING or growth is None or growth >= PROVE * top.still_dying else
                      f", but the dying count grew only {growth:+d}"))
    ep = inc.episode
    through = None  # its zombies dying through all of the hot episode: what a walk then visited of them
    if ep is not None and t_first <= ep.start and trace_end >= ep.end:
        through = dying_through(trace, top, ep.start, ep.end)
        ev.append(f"{through} of {top.comm}'s cgroups ({top.pattern}) were dying through all of CPU {ep.cpu}'s hot "
                  f"episode ({iso(ep.start)} .. {iso(ep.end)}): removed before it, not freed until after it"
                  + ("" if through >= MIN_ZOMBIES else f"; under {MIN_ZOMBIES}, its zombies are not what a walk "
                     "then visited (freed before or during it)"))
    data = {"comm": top.comm, "pattern": top.pattern, "made": top.mkdir, "removed": top.rmdir,
            "lasting": top.still_dying, "dying_through_episode": through, "freed_fast": top.freed, "young": top.young, "processes": len(top.pids),
            "unit_by_path": top.unit, "dying_growth": growth, "pod": top.pod,
            "median_lifetime": round(statistics.median(top.lifetimes), 3) if top.lifetimes else None}
    return Link("creator", vd, summary, share, rule, ev, data), {"creator": top}


def _kube(rec, t0: float | None = None, t1: float | None = None) -> list:
    """The recording's Kube snapshots (pods and restart counts) between t0 and t1 (all when None)."""
    return [x.kube for x in rec.ticks if getattr(x, "kube", None) is not None
            and (t0 is None or x.time >= t0) and (t1 is None or x.time <= t1)]


def _name_pods(rec, cs) -> None:
    """Names for creators under a pod, from the last snapshot that knew the pod's uid (in place)."""
    snaps = _kube(rec)
    for c in cs:
        if c.pod:
            known = next((s.by_uid()[c.pod["uid"]] for s in reversed(snaps) if c.pod["uid"] in s.by_uid()), None)
            if known:
                conts = known.get("containers") or {}
                top = max(conts.items(), key=lambda kv: kv[1], default=None)
                c.pod = {**c.pod, "namespace": known["namespace"], "pod": known["pod"],
                         **({"container": top[0], "restarts": top[1]} if top else {})}


def _pod_loop(rec, inc: Incident, creator: Link, c: Creator, rule: str) -> Link:
    """The restart loop of a pod's container: its restarts over the recording (kubelet's counts), proven
    when the creator (its containers' cgroups) is proven and the container restarted."""
    pod = c.pod
    snaps = _kube(rec, None, inc.end + ZOMBIE_AGE * 4)
    name = pod.get("container", "")
    counts = [p.get("containers", {}).get(name) for s in snaps for p in s.pods if p["uid"] == pod["uid"]]
    counts = [n for n in counts if n is not None]
    d = counts[-1] - counts[0] if len(counts) >= 2 else (counts[-1] if counts else 0)
    vd = PROVEN if creator.verdict == PROVEN and d > 0 else NOT_PROVEN
    who = pod_name(pod)
    ev = [f"tied to {c.comm} by cgroup path: the cgroups it made sit under pod {pod.get('namespace', '')}/"
          f"{pod.get('pod', '')} (uid {pod['uid']}, QoS {pod.get('qos', '?')})",
          f"kubelet's logs count {counts[-1] if counts else '?'} restarts of container {name or '?'}"
          + (f", {d:+d} over the recording" if len(counts) >= 2 else "")]
    summary = (f"container {who} restarted {d} times ({counts[-1] if counts else '?'} in all)"
               + ("" if vd == PROVEN else "; its cgroups are not shown to stay dying"))
    return Link("unit_loop", vd, summary, 1.0 if vd == PROVEN else 0.0, rule, ev,
                {"unit": None, "pod": pod, "owner": who, "restarts": d, "n_restarts": counts[-1] if counts else None,
                 "tied": True, "tied_by": "pod cgroup path"})


def _through_ok(creator: Link) -> bool:
    """The creator's zombies were there for the walk: at least MIN_ZOMBIES of them dying through all of the
    hot episode (True when the trace does not cover the episode: then only its lasting count says it)."""
    n = (creator.data or {}).get("dying_through_episode")
    return n is None or n >= MIN_ZOMBIES


def pod_cause(loop: dict) -> str:
    """A pod's restarting container named as a cause: `pod ns/pod/container (N restarts)`, N kubelet's count."""
    n = loop.get("n_restarts")
    return f"pod {loop['owner']}" + (f" ({n} restarts)" if n is not None else "")


RANK = {PROVEN: 3, OBSERVED: 3, CONTRIBUTING: 2, NOT_PROVEN: 1, UNKNOWN: 0}


def _pod_verdict(ex: Explained, chain: list[Link], walk, core_ok: bool, cpu: int) -> dict | None:
    """When the zombies' creator is a pod's containers: whether that pod's restarting container is the
    root cause, as the weakest of the links it needs (its cgroups stay dying: creator; its restarts: the
    restart loop; their walk costs the core: the memcg_walk hypothesis; the core is saturated by the
    processes named), with the share of the core's excess busy time the walk explains. None otherwise."""
    loop = chain[-1]
    if not (loop.data or {}).get("pod"):
        return None
    cr = chain[3]
    need = [("saturated core", chain[0].verdict if core_ok else NOT_PROVEN), ("processes on it", chain[1].verdict),
            ("zombies stay dying", cr.verdict if _through_ok(cr) else NOT_PROVEN), ("restart loop", loop.verdict),
            ("walk cost on the core", walk.verdict if walk is not None else UNKNOWN)]
    vd = min((v for _, v in need), key=lambda v: RANK[v])
    vd = PROVEN if vd == OBSERVED else vd
    share = walk.share if walk is not None else None
    who = pod_cause(loop.data)
    weak = [f"{name} {v.replace('_', ' ')}" for name, v in need if RANK[v] < RANK[PROVEN]]
    lasting = (cr.data or {}).get("lasting")
    through = (cr.data or {}).get("dying_through_episode")
    summary = (f"{who} as the root cause: {vd.replace('_', ' ')}: its containers left "
               f"{lasting if lasting is not None else '?'} lasting zombies ({cr.verdict.replace('_', ' ')}"
               + (f", {pct(cr.share)} of the dying growth" if cr.share is not None else "") + ")"
               + (f", {through} of them dying through all of the hot episode" if through is not None else "")
               + "; their walk took "
               + (f"{pct(share)} of CPU {cpu}'s excess busy time" if share is not None
                  else "an unknown share of the core (no profile)")
               + (f"; short of proof: {', '.join(weak)}" if weak else ""))
    return {"cause": who, "owner": loop.data["owner"], "restarts": loop.data.get("n_restarts"),
            "restarts_in_recording": loop.data.get("restarts"), "verdict": vd,
            "share": None if share is None else round(share, 4), "zombies": lasting, "zombies_through_episode": through,
            "links": dict(need),
            "summary": summary}


def _loopers(rec, t0: float, t1: float) -> list:
    """Units that restarted between the first and the last unit snapshot around [t0, t1] (the
    recording's own snapshots if none falls in that window), each with its restarts over them. A unit
    is followed over every snapshot, not only the last: one stopped (or removed) before the last
    snapshot still restarted while it was seen."""
    snaps = [x for x in rec.ticks if x.units is not None]
    near = [x for x in snaps if t0 - 60 <= x.time <= t1 + 60] or snaps
    if not near:
        return []
    b = {u.id: u for u in near[0].units}
    last: dict = {}
    for x in near:
        for u in x.units:
            last[u.id] = u
    grew = [(u, u.n_restarts - b[u.id].n_restarts if u.id in b else u.n_restarts) for u in last.values()]
    return sorted(((u, d) for u, d in grew if d > 0 or u.crash_looping), key=lambda x: -x[1])


def _unit(rec, inc: Incident, creator: Link, found: dict) -> Link:
    lo, hi = proof.RESTARTS_TIE
    rule = (f"the unit is tied to the creator by cgroup path or by one creating process per restart "
            f"({lo}-{hi} per restart); proven when tied and the creator is proven")
    loopers = _loopers(rec, rec.start, inc.end)
    c: Creator | None = found.get("creator")
    if c is not None and c.pod:  # a container's restart loop: kubelet restarts it, the pod is the owner
        return _pod_loop(rec, inc, creator, c, rule)
    unit, how, d = None, "", 0
    if c is not None:
        hit = proof.tie(c.unit, len(c.pids), loopers)
        if hit is not None:
            unit, how, d = hit
    if unit is None and loopers:
        u, n = loopers[0]
        ev = _unit_evidence(rec, inc, u)
        why = ("is not tied to the zombies' creator" if c is not None else "no churn trace ties it to the zombies")
        return Link("unit_loop", NOT_PROVEN if c is not None else UNKNOWN,
                    f"{u.id} restarted {n} times but {why}", 0.0 if c is not None else None, rule, ev,
                    {"unit": u.id, "restarts": n, "tied": False, "protected": protected(u.id)})
    if unit is None:
        return Link("unit_loop", UNKNOWN, "no unit restarts recorded (record with --systemd-pid when systemd is not "
                    "PID 1 of this namespace)", None, rule)
    ev = [f"tied to {c.comm} by {how}"] + _unit_evidence(rec, inc, unit)
    status = _last_failure(rec, inc, unit)
    vd = PROVEN if creator.verdict == PROVEN and d > 0 else NOT_PROVEN
    share = 1.0 if vd == PROVEN else 0.0
    summary = (f"{unit.id} restarted {d} times ({unit.n_restarts} in all), {_status_text(status)}, "
               f"enabled={unit.enabled}" + ("" if vd == PROVEN else "; its cgroups are not shown to stay dying"))
    return Link("unit_loop", vd, summary, share, rule, ev,
                {"unit": unit.id, "restarts": d, "n_restarts": unit.n_restarts, "exit_status": status,
                 "enabled": unit.enabled, "tied": True, "tied_by": how, "protected": protected(unit.id)})


def _last_failure(rec, inc, u) -> int | None:
    """The last non-zero exit status read up to the incident's end (a unit stopped afterwards, SIGTERM:
    15, is not how it failed); None when every read found it running (systemd then reports the running
    process's 0, which is not an exit status)."""
    fails = [x.exit_status for tk in rec.ticks if tk.units and tk.time <= inc.end
             for x in tk.units if x.id == u.id and x.exit_status]
    return fails[-1] if fails else (u.exit_status or None)


def _status_text(status: int | None) -> str:
    return f"exit status {status}" if status is not None else "exit status not seen (running at every read)"


def _unit_evidence(rec, inc, u) -> list[str]:
    return [f"state {u.active}/{u.sub}, Restart={u.restart}, RestartSec={u.restart_usec / 1e6:g}s, "
            f"last {_status_text(_last_failure(rec, inc, u))}, enabled={u.enabled}",
            f"unit file {u.fragment}" if u.fragment else "unit file unknown"]


# --- leading explanation and remediation -------------------------------------------------------------

def _leading(ex: Explained, ep: Episode, prof: CoreProfile | None) -> str:
    res, procs = ex.link("resource"), ex.link("processes")
    walk = next((h for h in ex.hypotheses if h.family == "memcg_walk"), None)
    if ex.root_cause and ex.family == "memcg_walk" and walk is not None and walk.data.get("over") == "live":
        return (f"{ex.root_cause} -> memcg code {pct(res.share)} of CPU {ep.cpu}'s excess busy time, walking "
                f"{walk.data['live']} live memory cgroups ({walk.data['dying']} dying)")
    if ex.root_cause and ex.family == "memcg_walk":
        cr = ex.link("creator").data
        return (f"{ex.root_cause} crash loop -> {cr['lasting']} lasting zombie memcgs ({cr['comm']}) -> memcg code "
                f"{pct(res.share)} of CPU {ep.cpu}'s excess busy time")
    best = next((h for h in ex.hypotheses if h.verdict == PROVEN), None)
    if best is None:
        best = next((h for h in ex.hypotheses if h.verdict == CONTRIBUTING), None)
    if best is not None:
        ex.family = ex.family or best.family
        if best.family == "memcg_walk" and best.data.get("over") == "live":
            mk = best.data.get("live_maker")
            made = f"{mk['verdict'].replace('_', ' ')}, {mk['cause']}" if mk else "unknown (no churn trace)"
            return (f"{res.summary}, a walk over {best.data['live']} live memory cgroups "
                    f"({res.verdict.replace('_', ' ')}; who made them: {made})")
        if best.family == "memcg_walk":
            return (f"{res.summary} ({res.verdict.replace('_', ' ')}; who makes the zombies: "
                    f"{ex.link('creator').verdict.replace('_', ' ')})")
        return f"{best.summary} ({best.family}, {pct(best.share)} of the excess, {best.verdict.replace('_', ' ')})"
    if procs.verdict != UNKNOWN and procs.data.get("top"):
        p = procs.data["top"][0]
        where = ""
        if p.get("kernel") is not None:
            where = ", user space" if p["kernel"] < 0.5 else f", {pct(p['kernel'])} in the kernel"
        return f"{_who(p)}, {pct(p['cpu_share'])} of CPU {ep.cpu}{where}"
    return f"CPU {ep.cpu} saturated (sys {ep.sys_mean:.0f}%), by what is unknown"


def _remedy(ex: Explained, ep: Episode | None) -> Link:
    acts: list[Action] = []
    walk = next((h for h in ex.hypotheses if h.family == "memcg_walk"), None)
    live_walk = walk is not None and walk.data.get("over") == "live"
    if ex.root_cause and ex.family == "memcg_walk" and live_walk:
        mk = walk.data["live_maker"]
        who = f"pod {pod_owner(mk['pod'])}" if mk.get("pod") else mk.get("unit") or mk["comm"]
        cmds = ([unit_status(mk['unit'], "the unit whose cgroups the walk crosses")]
                if mk.get("unit") else []) + [
            f"find /sys/fs/cgroup -type d -path '*{mk['pattern'].split('*')[0]}*' | wc -l   # the live cgroups like "
            f"{mk['pattern']}", "# fewer live cgroups (or a reader that visits fewer) makes the walk cheaper"]
        acts.append(Action("investigate", who, f"{mk['cause']}: the memcg walk over them is proven to cost CPU "
                           f"{ep.cpu}", commands=cmds))
    elif ex.root_cause and ex.family == "memcg_walk":
        unit = ex.link("unit_loop").data
        if unit.get("pod"):  # its owner fixes or removes the workload: nodesleuth never deletes a pod
            pod = unit["pod"]
            acts.append(Action("investigate", unit["owner"], f"the containers of pod {unit['owner']} are proven to "
                               f"make the zombies that cost CPU {ep.cpu}",
                               commands=owner_commands(pod, pod.get("container") or "<container>")))
        else:
            acts.append(Action("disable_unit", unit["unit"], f"{unit['unit']} is proven to make the zombies that "
                               f"cost CPU {ep.cpu}", protected=unit.get("protected", False)))
    res = ex.link("resource")
    if (res is not None and res.verdict == PROVEN and res.data.get("dying") and ex.family in ("", "memcg_walk")
            and not live_walk):
        # cgroup v2: reclaim under the parent the zombies were removed from (memory.reclaim), else the node
        acts.append(Action("reclaim", res.data.get("v2_parent") or "",
                           f"{res.data['dying']} dying memcgs proven to cost CPU {ep.cpu}"))
    if ep is not None and not acts:
        cmds = [profile_cpu(ep.cpu, f"what runs on CPU {ep.cpu}"),
                f"nodesleuth flame --cpu {ep.cpu} --from {ep.start:.0f} --to {ep.end:.0f}"]
        best = next((h for h in ex.hypotheses if h.family == ex.family), None)
        pid = (best.data or {}).get("pid") if best else None
        if pid:
            cmds.insert(0, f"ps -o pid,comm,cls,rtprio,pcpu,cgroup -p {pid}   # the process named, its class and cgroup")
        parent = (best.data or {}).get("parent") if best and best.family == "group" else None
        if parent:  # a group (explain/family/group.py): who starts its processes, and where it runs
            if parent.get("unit"):
                cmds.insert(0, unit_status(parent['unit'], "the unit whose process starts them"))
            cmds.insert(0, f"ps -o pid,ppid,comm,args,cgroup -p {parent['pid']}; pstree -p {parent['pid']}   "
                           f"# who starts {', '.join(best.data.get('commands') or ['them'])}")
        for line in ((best.data or {}).get("irq_lines") or [])[:1] if best else []:
            if str(line[0]).isdigit():
                cmds.insert(0, f"cat /proc/irq/{line[0]}/smp_affinity_list   # where {line[1]}'s interrupts go")
        acts.append(Action("investigate", f"cpu {ep.cpu}", ex.leading, commands=cmds))
    ex.actions = acts
    cmds = [c for a in acts for c in a.command_lines()]
    if not acts:
        return Link("remediation", UNKNOWN, "nothing proven to fix")
    vd = PROVEN if any(a.kind in ("disable_unit", "reclaim") for a in acts) else OBSERVED
    return Link("remediation", vd, "; ".join(c for c in cmds if not c.lstrip().startswith("#")), None,
                "actions only for proven links", cmds, {"commands": cmds, "actions": [a.to_dict() for a in acts]})
