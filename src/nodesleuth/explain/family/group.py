"""Family group: many processes of one command, or short-lived ones started by one parent,
that together saturate a core while each alone takes a sliver of it (an exec storm: a shell starting
a 3 ms program over and over; a fork storm: a loop forking copies of itself). The group competes with
single processes for the leading explanation (family `group`), with its numbers: processes started
per second, how long they lived, its share of the core, and who starts them (parent command, cgroup,
unit or pod). docs/groups.md says what is measured and what a 1 s scan cannot see.

Share, with a profile: the samples on the core of the group's processes (the parent, the processes of
the commands it was caught starting, and any process of those commands that lived under HELD seconds
of the episode's ticks) over the core's excess busy time; the verdict is the share's (detect/proof.py);
how it ranks beside a proven mechanism is registry.py's rule.
A group needs GROUP_MIN processes with samples on the core, or the parent's being caught starting them.

Without a profile: the parent's exited children's CPU (cutime + cstime, collect/procs.py), which the
kernel ties to its children, and the part of it collect/procs.py placed on this core (an estimate:
on the CPUs whose busy time no process read explains), with the parent's own: the share single
processes get from /proc too. Its lower bound is said beside it: the amount minus all the busy time
on the other CPUs that no measured process explains (only that room could have held it elsewhere).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ...detect.incidents import _window, pods_seen
from ...detect.proof import verdict
from ...model.kube import from_cgroup, pod_name
from ...model.thresholds import CONTRIBUTING, GROUP_MIN, NOT_PROVEN, PROVE, PROVEN, UNKNOWN
from .common import Context, Hypothesis, pct
from .registry import family

EXITED = " (exited children)"  # collect/procs.py's label for a parent's exited children's CPU
HELD = 3  # a process in this many of the episode's ticks is long-lived: a member of no group
BEFORE = 60.0  # s before the episode its fork rate is compared with
RIVAL = 0.5  # a rival group with this share of the chosen one's CPU makes the chosen one contributing at most
REUSE_GAP = 0.5  # s between two samples of one pid that make them two processes (the pid reused)


def _spawns(ticks) -> tuple[dict, int, float]:
    """Rows of the Spawns sections merged by (parent, command); forks; seconds with the counter."""
    rows: dict = {}
    forks, secs = 0, 0.0
    for t in ticks:
        sp = getattr(t, "spawns", None)
        if sp is None:
            continue
        forks += sp.forks
        secs += t.interval
        for r in sp.rows:
            m = rows.setdefault((r["ppid"], r["comm"]), {**r, "new": 0, "brief": 0, "lasting": 0})
            if m["pcomm"] == "?" and r["pcomm"] != "?":  # a second whose read of the parent failed
                m["pcomm"], m["cgroup"] = r["pcomm"], r.get("cgroup")
            if r.get("child_cgroup"):
                m.setdefault("child_cgroups", Counter())[r["child_cgroup"]] += 1
            for f in ("new", "brief", "lasting"):
                m[f] += r.get(f, 0)
    return rows, forks, secs


def _parents(rows: dict) -> dict:
    """ppid -> {"pcomm", "cgroup", "children": Counter of commands caught started}."""
    out: dict = {}
    for (ppid, comm), r in rows.items():
        if not r["new"] and not r["brief"]:
            continue
        p = out.setdefault(ppid, {"pcomm": r["pcomm"], "cgroup": r.get("cgroup"), "children": Counter(),
                                  "brief": 0, "caught": 0, "child_cgroups": Counter()})
        p["children"][comm] += r["new"] + r["brief"]
        p["child_cgroups"].update(r.get("child_cgroups") or {})
        p["brief"] += r["brief"]
        p["caught"] += r["brief"] + r["lasting"]
    return out


def _held(ticks) -> set[int]:
    """Processes measured (not estimated) in at least HELD of these ticks: long-lived."""
    n: Counter = Counter()
    for t in ticks:
        n.update({p.pid for p in t.procs if not p.comm.endswith(EXITED)})
    return {pid for pid, k in n.items() if k >= HELD}


def _exited(ticks, cpu: int) -> dict:
    """ppid -> [comm, % of `cpu` per second, % of a CPU per second on all CPUs] of exited children."""
    out: dict = {}
    n = max(1, len(ticks))
    for t in ticks:
        for p in t.procs:
            if p.comm.endswith(EXITED):
                s = out.setdefault(p.pid, [p.comm[:-len(EXITED)], 0.0, 0.0])
                s[2] += p.pct / n
                if p.cpu == cpu:
                    s[1] += p.pct / n
    return out


def _room(ticks, cpu: int) -> float:
    """% of a CPU per second, summed over the other CPUs: busy time no measured process explains."""
    tot = 0.0
    n = max(1, len(ticks))
    for t in ticks:
        seen: dict = {}
        for p in t.procs:
            if not p.estimate:
                seen[p.cpu] = seen.get(p.cpu, 0.0) + p.pct
        for c, u in t.cpu.items():
            if c >= 0 and c != cpu:
                tot += max(0.0, u.busy - seen.get(c, 0.0)) / n
    return tot


def _unit(cgroup: str | None) -> str | None:
    leaf = (cgroup or "").rstrip("/").rsplit("/", 1)[-1]
    return leaf if leaf.endswith((".service", ".scope")) else None


def _lifetimes(rec, ep, pids: list[int]) -> tuple[float, float, int] | None:
    """(median seconds from a member's first to its last sample on any CPU, the share of members with one
    sample, members) over the episode: how long they lived at least (a 3 ms process at 49 Hz has one)."""
    s = rec.samples(ep.start, ep.end)
    if s is None or not len(s) or not pids:
        return None
    import numpy as np

    m = (s.t >= ep.start) & (s.t <= ep.end) & np.isin(s.pid, pids)
    if not m.any():
        return None
    pid, t = s.pid[m], s.t[m]
    order = np.lexsort((t, pid))
    pid, t = pid[order], t[order]
    # a new process where the pid changes, or where one pid's samples are REUSE_GAP apart: a storm reuses
    # pids within seconds, and one pid's samples would span several processes (a lower bound stays one)
    cut = (pid[1:] != pid[:-1]) | (t[1:] - t[:-1] > REUSE_GAP)
    first = np.r_[True, cut]
    last = np.r_[cut, True]
    span = t[last] - t[first]
    n = int(first.sum())
    return float(np.median(span)), float((span == 0).sum()) / n, n


def _children_pod(rec, p: dict | None, pod: dict | None) -> dict | None:
    """The pod the parent's children run in when it is not the parent's own (a runtime's shim starts a pod's
    exec probes from containerd's cgroup): from the cgroup most of the caught children were in, named from
    the recording's pod listings (kubelet's logs) by uid."""
    if not p or not p.get("child_cgroups"):
        return None
    ref = from_cgroup(p["child_cgroups"].most_common(1)[0][0])
    if ref is None or (pod and pod.get("uid") == ref.uid):
        return None
    d = ref.to_dict()
    for t in reversed(rec.ticks):
        known = t.kube.by_uid().get(ref.uid) if getattr(t, "kube", None) is not None else None
        if known:
            return {**d, "namespace": known.get("namespace", ""), "pod": known.get("pod", "")}
    return d


def _where(cgroup: str | None, pod: dict | None) -> str:
    """Where the parent runs, as said after its name: its pod, else its systemd unit, else its cgroup."""
    if pod:
        return f" in pod {pod_name(pod)}"
    if _unit(cgroup):
        return f" in {_unit(cgroup)}"
    return f" in cgroup {cgroup}" if cgroup and cgroup != "/" else ""


@dataclass
class _Pick:
    """The group a source of evidence picked: its parent (None: a group by command), commands, members on the
    profile, its share of the core and of the excess, and how the share was measured."""

    ppid: int | None
    comms: list
    members: list  # [(pid, samples on the core, of them in the kernel)]; empty without a profile
    cpu_share: float
    share: float
    kernel: float | None
    rest: float
    source: str
    low: float | None = None  # % of the core at least (the /proc estimate's lower bound)
    rival: tuple | None = None  # (share of the core, who) of the largest other parent's group, beyond this one's


def _from_profile(prof, parents: dict, held: set, exited: dict, excess: float, cpu: int) -> _Pick | None:
    """The group with the most samples on the core: a parent with the commands it was caught starting, or
    >= GROUP_MIN short-lived processes of one command."""
    by_comm: dict = {}
    for pid, (comm, c, k, mc) in prof.by_pid.items():
        by_comm.setdefault(comm, []).append((pid, c, k))
    options = []
    for ppid, p in parents.items():
        comms = set(p["children"]) | {p["pcomm"]}
        members = [(pid, c, k) for comm in comms for pid, c, k in by_comm.get(comm, [])
                   if pid == ppid or pid not in held]
        if members:
            options.append((sum(c for _, c, _ in members), ppid, sorted(p["children"]), members))
    for comm, ms in by_comm.items():
        members = [(pid, c, k) for pid, c, k in ms if pid not in held]
        if len(members) >= GROUP_MIN:
            options.append((sum(c for _, c, _ in members), None, [comm], members))
    options = [o for o in options if o[1] is not None or len(o[3]) >= GROUP_MIN]
    if not options:
        return None
    samples, ppid, comms, members = max(options, key=lambda o: (o[0], o[1] is not None))
    mine = {pid for pid, _, _ in members}
    # the largest other parent's group, counting only its processes not in this one (groups by parent share
    # their parents' command: every shell's group holds every sh)
    others = [(sum(c for pid, c, _ in o[3] if pid not in mine), o) for o in options if o[1] is not None and o[1] != ppid]
    top = max(others, key=lambda x: x[0], default=None)
    rival = None if not top or not top[0] else (
        top[0] / max(1, prof.n), f"{', '.join(top[1][2][:3])} processes started by {parents[top[1][1]]['pcomm']} "
                                 f"(pid {top[1][1]})")
    if ppid is None:  # a group by command: its parent, when the listings caught one starting it
        ppid = next((pp for pp, p in sorted(parents.items(), key=lambda kv: -sum(kv[1]["children"].values()))
                     if comms[0] in p["children"]), None)
    if ppid is None and exited:
        # else the parent whose exited children's CPU (cutime/cstime) on this core covers at least half of
        # the group's share: the kernel added its children's time to it as they exited
        pp, (_, here, _) = max(exited.items(), key=lambda kv: kv[1][1])
        if here / 100 >= 0.5 * samples / max(1, prof.n):
            ppid = pp
    cpu_share = samples / max(1, prof.n)
    share = samples / (prof.n + prof.lost)  # perf's lost samples could be anyone's: a lower bound
    vouched = None
    if prof.lost and ppid in exited:
        # an exec storm floods perf's ring with its comm/mmap records, so perf loses samples (18k of 19k
        # here): the parent's exited children's CPU on this core (cutime/cstime, /proc, no sampling)
        # vouches for the kept samples' share, up to it
        vouched = min(cpu_share, exited[ppid][1] / 100)
        share = max(share, vouched)
    source = (f"{len(members)} processes with samples on CPU {cpu} in the profile ({samples} of {prof.n} samples)"
              + (f"; perf lost {prof.lost} samples of the core: the parent's exited children's CPU there "
                 f"(cutime/cstime) vouches for {pct(vouched)} of it" if vouched is not None else ""))
    return _Pick(ppid, comms, members, cpu_share, min(1.0, share / excess),
                 sum(k for _, _, k in members) / max(1, samples),
                 (samples - max(c for _, c, _ in members)) / max(1, prof.n), source, rival=rival)


def _from_proc(ticks, cpu: int, parents: dict, exited: dict, excess: float) -> _Pick | None:
    """Without a profile: the parent whose exited children's CPU /proc placed on this core is the largest,
    with its own, and the lower bound of what ran here."""
    if not exited:
        return None
    ppid, (pcomm, here, everywhere) = max(exited.items(), key=lambda kv: kv[1][1])
    own = sum(p.pct for t in ticks for p in t.procs if p.pid == ppid and p.cpu == cpu
              and not p.comm.endswith(EXITED)) / max(1, len(ticks))
    room = _room(ticks, cpu)
    low = max(0.0, everywhere - room) + own
    comms = sorted(parents.get(ppid, {}).get("children", {}))  # none: no listing caught one alive
    if ppid not in parents and here < 1:
        return None
    source = (f"/proc, no profile: {pcomm} (pid {ppid})'s exited children took {everywhere:.0f}% of a CPU per "
              f"second (cutime/cstime: the kernel ties that time to its children), {here:.0f}% placed on CPU "
              f"{cpu} (an estimate: on the CPUs whose busy time no process read explains); the other CPUs "
              f"had {room:.0f}% unexplained, so at least {low:.0f}% ran here (its own {own:.0f}% included)")
    return _Pick(ppid, comms, [], (here + own) / 100, min(1.0, ((here + own) / 100) / excess), None,
                 (here / 100) if own < here else own / 100, source, low)


def _evidence(pick: _Pick, p: dict | None, who: str | None, cgroup: str | None, prof, cpu: int, exited: dict,
              pcomm: str | None, fps: float | None, before: float | None) -> list[str]:
    """What the group's numbers were read from: the profile or /proc, the fork counter, the listings."""
    ppid, members = pick.ppid, pick.members
    ev = [pick.source]
    if fps is not None:
        ev.append(f"/proc/stat processes: {fps:.0f} started/s node-wide over the episode"
                  + (f", {before:.0f}/s in the minute before" if before is not None else ""))
    if p:
        ev.append(f"listings of /proc caught {who} starting " + ", ".join(f"{c} x{n}" for c, n in
                                                                          p["children"].most_common(4))
                  + (f"; its cgroup {cgroup}" if cgroup else ""))
    if members:
        ev.append(f"the group's processes: {len(members)} on the profile, the most-sampled at "
                  f"{pct(max(c for _, c, _ in members) / max(1, prof.n))} of CPU {cpu}")
    if ppid is not None and ppid in exited:
        ev.append(f"{pcomm} (pid {ppid})'s exited children: {exited[ppid][2]:.0f}% of a CPU per second by its "
                  f"cutime/cstime ({exited[ppid][1]:.0f}% placed on CPU {cpu})")
    ev.append("a 1 s scan of /proc cannot see a process that starts and exits between two scans: the counter "
              "says how many started, cutime/cstime and the profile what they cost (docs/groups.md)")
    return ev


@family("group", rank=90)  # after the single-process families: a tie goes to them
def group(ctx: Context) -> Hypothesis | None:
    rec, ep, prof = ctx.rec, ctx.ep, ctx.prof
    rule = (f"processes of one command, or started by one parent, each short-lived or many (>= {GROUP_MIN} on the "
            f"core, or caught being started), take >= {pct(PROVE)} of the core's excess busy time together: from the "
            "profile's samples; without one, the parent's exited children's CPU (cutime/cstime) that /proc's "
            "reading placed on the core, with its lower bound (what no other CPU had room for) beside it")
    ticks = _window(rec.ticks, ep.start, ep.end)
    excess = max(1e-9, ep.excess / 100)
    rows, forks, fsecs = _spawns(_window(rec.ticks, ep.start - 1, ep.end + 1))
    _, fb, bsecs = _spawns(_window(rec.ticks, ep.start - BEFORE, ep.start - 2))
    parents = _parents(rows)
    exited = _exited(ticks, ep.cpu)
    pick = (_from_profile(prof, parents, _held(ticks), exited, excess, ep.cpu) if prof is not None
            else _from_proc(ticks, ep.cpu, parents, exited, excess))
    if pick is None:
        return None
    pods = pods_seen(_window(rec.ticks, ep.start - 1, ep.end + 1))
    return _hypothesis(rec, ep, prof, rule, pick, parents, exited, pods, (forks, fsecs, fb, bsecs))


def _hypothesis(rec, ep, prof, rule: str, pick: _Pick, parents: dict, exited: dict, pods: dict,
                counts: tuple) -> Hypothesis:
    """The group's hypothesis: who started it and where, its numbers (started per second, share, lifetimes,
    CPU each), the evidence and the verdict of its share."""
    forks, fsecs, fb, bsecs = counts
    ppid, comms, members, cpu_share = pick.ppid, pick.comms, pick.members, pick.cpu_share
    vd = verdict(pick.share)
    ticks = _window(rec.ticks, ep.start, ep.end)
    p = parents.get(ppid) if ppid is not None else None
    pcomm = p["pcomm"] if p else (exited.get(ppid, ["?"])[0] if ppid is not None else None)
    cgroup = p.get("cgroup") if p else None
    pod = pods.get(ppid) if ppid is not None else None
    if pod is None and cgroup and from_cgroup(cgroup) is not None:  # the parent's cgroup path says which pod
        pod = from_cgroup(cgroup).to_dict()
    secs = max(1e-9, sum(t.interval for t in ticks))
    fps = forks / fsecs if fsecs else None
    before = fb / bsecs if bsecs >= 10 else None
    started = (max(0.0, fps - before) if before is not None else fps) if fps is not None else None
    if started is None and members:  # no counter: the distinct processes the profile caught, a lower bound
        started = len(members) / secs
    each_ms = 1000 * cpu_share / started if started else None
    life = _lifetimes(rec, ep, [pid for pid, _, _ in members if pid != ppid]) if members else None
    caught = p["caught"] if p else 0
    brief = p["brief"] if p else 0
    # children caught before their exec still carry the parent's name (a shim's forks on their way to the probe
    # binary): with other commands beside it, the parent's own name is not a command the group runs
    shown = [c for c in comms if c != pcomm] or comms
    names = ", ".join(shown[:3])
    who = f"{pcomm} (pid {ppid})" if ppid is not None else None
    where = _where(cgroup, pod)
    cpod = _children_pod(rec, p, pod)
    if cpod:
        where += f", running in pod {pod_name(cpod)}"
    head = (f"{names} processes started by {who}{where}" if who and names else
            f"the exited children of {who}{where}" if who else f"{len(members)} {names} processes")
    nums = ([f"{started:.0f}/s started" + ("" if fps is None else " (node-wide counter" + (
        f", above the {before:.0f}/s of the minute before)" if before is not None else ")"))] if started else [])
    nums.append(f"{pct(cpu_share)} of CPU {ep.cpu}")
    if caught:
        nums.append(f"{brief} of {caught} caught alive were gone a listing later (lived under ~2 s)")
    if life is not None:
        nums.append(f"median lifetime >= {1000 * life[0]:.0f} ms on the profile ({pct(life[1])} sampled once)")
    if each_ms is not None:
        nums.append(f"~{each_ms:.1f} ms of CPU each")
    summary = f"group: {head}: " + ", ".join(nums)
    ev = _evidence(pick, p, who, cgroup, prof, ep.cpu, exited, pcomm, fps, before)
    if pick.rival is not None and pick.rival[0] >= RIVAL * cpu_share:
        # another parent's group, sharing no process, takes a comparable part of the core: the core is
        # saturated by several groups together, and naming one as the cause would be stronger than its numbers
        ev.append(f"another group takes {pct(pick.rival[0])} of CPU {ep.cpu} ({pick.rival[1]}), >= "
                  f"{pct(RIVAL)} of this one's {pct(cpu_share)}: no one group explains the core")
        if vd == PROVEN:
            vd = CONTRIBUTING
    cause = f"group: {head}" if vd == PROVEN else None
    data = {"commands": comms, "parent": None if ppid is None else {"pid": ppid, "comm": pcomm, "cgroup": cgroup,
                                                                     "unit": _unit(cgroup), "pod": pod},
            "children_pod": cpod,
            "processes": len(members) or None, "started_per_s": None if started is None else round(started, 1),
            "forks_per_s": None if fps is None else round(fps, 1),
            "forks_before_per_s": None if before is None else round(before, 1),
            "cpu_share": round(cpu_share, 4), "rest_share": round(pick.rest, 4),
            "kernel": None if pick.kernel is None else round(pick.kernel, 3),
            "cpu_ms_each": None if each_ms is None else round(each_ms, 2),
            "caught_alive": caught, "gone_next_listing": brief,
            "lifetime": "under ~2 s" if caught and brief * 2 >= caught else None,
            "lower_bound_pct": None if pick.low is None else round(pick.low, 1),
            "median_lifetime_ms_at_least": None if life is None else round(1000 * life[0], 1),
            "sampled_once_share": None if life is None else round(life[1], 3),
            "rival": None if pick.rival is None else {"cpu_share": round(pick.rival[0], 4), "group": pick.rival[1]},
            "source": "profile" if prof is not None else "proc-estimate"}
    return Hypothesis("group", pick.share, vd if vd != UNKNOWN else NOT_PROVEN, summary, cause, rule, ev, data)
