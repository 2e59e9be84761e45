"""Soft lockups, hard lockups, RCU stalls and hung tasks from the kernel log: each a finding of its own.

A CPU stuck in the kernel for tens of seconds is the extreme form of the starvation nodesleuth hunts (and
a NIC on that CPU misses its NAPI polls), so these are problems in themselves, not context. The rules
file says which lines are lockups (class "lockup", family = the finding's kind), with each rule's severity, title
and remedy (rules/README.md); this file only groups them: a kind the rules add is a finding with nothing changed here.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ..model.actions import Action, remedy_text
from ..model.records import KernelEvent
from ..model.rules import Rule, load_rules, when
from .findings import SEVERITY_RANK, Finding
from .registry import detector
from .window import Window

NIC_REMEDY = ("the stuck CPU was running {driver} network driver code ({frames}): the NIC's interrupts and NAPI "
              "polling pinned it; spread its queues' IRQs (smp_affinity), enable RPS/threaded NAPI, and check the "
              "driver's reset lines and counters (nic_reset findings)")


def cpulist(text: str) -> list[int]:
    """A kernel CPU list ('9-11,48', '0', '2 5 7' or an RCU '{ 0-... 3-.N. }' stall list) as CPU numbers."""
    out: list[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        m = re.fullmatch(r"(\d+)-(\d+)", part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            out += range(lo, hi + 1) if hi - lo < 4096 else [lo, hi]
            continue
        m = re.match(r"(\d+)(?:-\S*)?$", part)  # '3-...' (RCU per-CPU flags) or a plain number
        if m:
            out.append(int(m.group(1)))
    return sorted(set(out))


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _fact(e: KernelEvent) -> dict:
    """What one lockup line (and the lines of its report the rule follows) says: CPU(s), task, duration."""
    f = e.fields
    d = {"seq": e.seq, "time": e.time, "clock": e.clock, "uptime_s": None if e.usec is None else e.usec / 1e6,
         "reason": e.reason, "message": e.message}
    kind = e.family or e.kind
    for k in ("cpu", "pid", "reporter"):
        if _int(f.get(k)) is not None:
            d[k] = _int(f[k])
    if f.get("comm") is not None:
        d["comm"] = f["comm"]
    if _int(f.get("seconds")) is not None:
        d["duration_s"] = _int(f["seconds"])
    elif _int(f.get("ms")) is not None:  # powerpc: the CPU's last heartbeat, in ms
        d["duration_s"] = round(_int(f["ms"]) / 1000, 3)
    if _int(f.get("jiffies")) is not None:
        d["duration_jiffies"] = _int(f["jiffies"])
    if f.get("flavor"):
        d["flavor"] = f["flavor"]
    cpus: list[int] = []
    if kind == "rcu_stall":
        if "cpu" in d:  # the 2.6.3x one-line self-detected stall names the CPU
            cpus.append(d["cpu"])
        inline = re.search(r"stalls on CPUs/tasks: \{([^}]*)\}(?: (\d+) jiffies)?", e.message)  # 4.x, expedited
        if inline:
            cpus += cpulist(inline.group(1))
            if inline.group(2) and "duration_jiffies" not in d:
                d["duration_jiffies"] = int(inline.group(2))
        if f.get("cpus"):  # the report's next lines: '\t85-....: (59999 ticks this GP) ...'
            cpus += [int(c) for c in f["cpus"].split(",")]
        if f.get("ticks") is not None:
            d["ticks_this_gp"] = int(f["ticks"])
        if f.get("kthread_starved_jiffies"):
            d["kthread_starved"] = {"kthread": f.get("kthread"), "jiffies": int(f["kthread_starved_jiffies"]),
                                    "last_cpu": _int(f.get("kthread_cpu"))}
        if f.get("csd"):
            d["csd_lock"] = True
    if f.get("other_cpus"):  # powerpc: 'CPU 30 detected hard LOCKUP on other CPUs 7-9,12'
        cpus += cpulist(f["other_cpus"])
    if f.get("pool_cpus"):  # workqueue pool of these CPUs (a per-CPU pool: one)
        cpus += cpulist(f["pool_cpus"])
    if cpus:
        d["stalled_cpus"] = sorted(set(cpus))
    if f.get("io_wait"):
        d["in_io_wait"] = True
    if f.get("lock"):
        d["blocked_on"] = {"lock": f["lock"], "owner": f"{f['owner_comm']}:{f['owner_pid']}"
                           if f.get("owner_comm") else None}
    if f.get("panic"):
        d["panic"] = f["panic"]
    for k in ("pc", "system_pct", "softirq_pct", "hardirq_pct", "top_irq"):
        if f.get(k) is not None:
            d[k] = f[k] if k == "pc" else int(f[k])
    if f.get("nic_driver"):
        d["nic"] = {"driver": f["nic_driver"], "frames": f.get("nic_frames", "").split(",") if f.get("nic_frames")
                    else [], "how": f.get("nic_how", ""), "device": f.get("nic_device") or None,
                    "ifname": f.get("nic_ifname") or None, "device_from": f.get("nic_device_from") or None,
                    "device_note": f.get("nic_device_note") or None}
    return d


def _what(kind: str, d: dict, name: str) -> str:
    who = f"{d['comm']}:{d['pid']}" if "comm" in d else ""
    cpus = d.get("stalled_cpus")
    on = f" on CPU{'s' if cpus and len(cpus) > 1 else ''} {', '.join(map(str, cpus))}" if cpus else ""
    nic = d.get("nic")
    tied = f", running {nic['driver']} driver code ({', '.join(nic['frames'][:3])})" if nic else ""
    if nic and (nic.get("ifname") or nic.get("device")):
        tied += f" of {nic.get('ifname') or nic.get('device')}"
    if kind == "soft_lockup":
        return f"CPU {d.get('cpu', '?')} stuck for {d.get('duration_s', '?')} s in {who or '?'}{tied}"
    if kind == "hard_lockup":
        if "cpu" in d:
            by = f" (reported by CPU {d['reporter']})" if "reporter" in d and d["reporter"] != d["cpu"] else ""
            dur = f", no heartbeat for {d['duration_s']} s" if "duration_s" in d else ""
            return f"CPU {d['cpu']} hard-locked{by}{dur}{tied}"
        return f"hard lockup{on}" + (f" (detected by CPU {d['reporter']})" if "reporter" in d else "") + tied
    if kind == "hung_task":
        io = " in I/O wait" if d.get("in_io_wait") else ""
        lock = d.get("blocked_on")
        on_lock = f" on a {lock['lock']}" + (f" held by {lock['owner']}" if lock.get("owner") else "") if lock else ""
        return f"task {who or '?'} blocked{io} for more than {d.get('duration_s', '?')} s{on_lock}"
    if kind == "workqueue_lockup":
        return f"workqueue pool{on} stuck for {d.get('duration_s', '?')} s"
    dur = f", t={d['duration_jiffies']} jiffies" if "duration_jiffies" in d else ""
    if kind == "rcu_stall":
        return f"{d.get('flavor', 'rcu')} stall{on}{dur}{tied}"
    # a kind only the rules name: its title and whatever the line's named groups said
    on = f" on CPU {d['cpu']}" if "cpu" in d else on
    dur = f" for {d['duration_s']} s" if "duration_s" in d else dur
    return f"{name}{on}{' in ' + who if who else ''}{dur}{tied}"


def findings(events: list[KernelEvent], since: float | None = None, rules: list[Rule] | None = None) -> list[Finding]:
    """One finding per lockup family of the rules (soft_lockup, hard_lockup, rcu_stall, hung_task, workqueue_lockup in
    the packaged file) with every line's facts: its severity the highest of its events' rules, its title and remedy
    those of the rules that matched (`rules`: the file the events were matched with; default the packaged one).
    Events without a wall time are kept whatever `since` is: their age cannot be judged."""
    by: dict[str, list[KernelEvent]] = defaultdict(list)
    for e in events:
        if e.category == "lockup" and (since is None or e.time is None or e.time >= since):
            by[e.family or e.kind].append(e)
    said = {r.reason: r for r in (load_rules() if rules is None else rules) if r.cls == "lockup"}
    out = []
    for kind, es in by.items():
        own = [said[e.reason] for e in es if e.reason in said]
        name = next((r.title for r in own if r.title), kind.replace("_", " "))
        sev = max((e.severity for e in es), key=lambda s: SEVERITY_RANK.get(s, 0))
        rem = list(dict.fromkeys(r.remedy for r in own if r.remedy))
        facts = [_fact(e) for e in es]
        whats = [_what(kind, d, name) for d in facts]
        cpus = sorted({d["cpu"] for d in facts if "cpu" in d} | {c for d in facts for c in d.get("stalled_cpus", [])})
        procs = sorted({f"{d['comm']}:{d['pid']}" for d in facts if "comm" in d})
        longest = max((d.get("duration_s", 0) for d in facts), default=0)
        nics = sorted({d["nic"]["driver"] for d in facts if d.get("nic")})
        title = f"{len(es)} {name}{'s' if len(es) > 1 else ''}: {whats[-1]}" + (
            f" (CPUs {', '.join(map(str, cpus))})" if len(cpus) > 1 else "")
        if nics and not facts[-1].get("nic"):
            title += f"; {', '.join(nics)} driver code on the stuck CPU in an earlier one"
        evidence = [f"kernel log seq {e.seq} at {when(e)}: {w} — {e.message.strip()}"
                    for e, w in list(zip(es, whats))[-8:]]
        if len(es) > 8:
            evidence.insert(0, f"{len(es) - 8} earlier {name} line(s) not shown (all in data.events)")
        # what to do: the rules' remedies, each stuck-CPU NIC driver's first; investigated, never performed
        acts = [Action("investigate", kind, name, commands=[f"# {r}"]) for r in rem]
        for drv in nics:
            frames = sorted({fr for d in facts if d.get("nic") and d["nic"]["driver"] == drv for fr in d["nic"]["frames"]})
            acts.insert(0, Action("investigate", drv, f"{name} in {drv} driver code", commands=[
                "# " + NIC_REMEDY.format(driver=drv, frames=", ".join(frames[:4]))]))
        out.append(Finding(kind, sev, title, evidence, remedy_text(acts),
                           {"events": facts, "cpus": cpus, "processes": procs, "longest_s": longest or None,
                            "count": len(es), "nic_drivers": nics}, acts))
    return out


@detector("lockups")
def from_window(w: Window) -> list[Finding]:
    return findings(w.events, since=w.since, rules=load_rules(w.rules))
