"""Soft lockups, hard lockups, RCU stalls and hung tasks from the kernel log: each a finding of its own.

A CPU stuck in the kernel for tens of seconds is the extreme form of the starvation nodesleuth hunts (and
a NIC on that CPU misses its NAPI polls), so these are problems in themselves, not context. The rules
file says which lines are lockups (class "lockup", family = the kind below); this file only groups them.
"""

from __future__ import annotations

from collections import defaultdict

from ..model.records import KernelEvent
from ..model.rules import when
from .findings import Finding
from .registry import detector
from .window import Window

KINDS = {
    "soft_lockup": ("soft lockup", "critical",
                    "a CPU ran kernel code without scheduling for the time shown: find what pinned it "
                    "(the stack trace after the line; perf top -C CPU) and move IRQs/RPS off that CPU"),
    "hard_lockup": ("hard lockup", "critical",
                    "a CPU stopped taking timer interrupts: read the NMI backtrace after the line; "
                    "consider kernel.hardlockup_panic=1 with kdump to capture it"),
    "rcu_stall": ("RCU stall", "critical",
                  "a CPU or task held off an RCU grace period: read the stall report's CPU list and stack; "
                  "a starved rcu kthread means the CPU is too busy (see hot core findings)"),
    "hung_task": ("hung task", "warning",
                  "a task slept uninterruptibly past kernel.hung_task_timeout_secs: its stack after the line "
                  "names what it waits on (I/O, a lock)"),
}


def _fact(e: KernelEvent) -> dict:
    f = e.fields
    d = {"seq": e.seq, "time": e.time, "clock": e.clock, "uptime_s": None if e.usec is None else e.usec / 1e6,
         "reason": e.reason, "message": e.message}
    for k in ("cpu", "comm", "pid"):
        if f.get(k) is not None:
            d[k] = int(f[k]) if k != "comm" else f[k]
    if f.get("seconds") is not None:
        d["duration_s"] = int(f["seconds"])
    if f.get("jiffies") is not None:
        d["duration_jiffies"] = int(f["jiffies"])
    if f.get("flavor"):
        d["flavor"] = f["flavor"]
    if f.get("cpus"):  # an RCU stall's report names the stalled CPUs on its next lines
        d["stalled_cpus"] = [int(c) for c in f["cpus"].split(",")]
    if f.get("ticks") is not None:
        d["ticks_this_gp"] = int(f["ticks"])
    return d


def _what(kind: str, d: dict) -> str:
    who = f"{d['comm']}:{d['pid']}" if "comm" in d else ""
    if kind == "soft_lockup":
        return f"CPU {d.get('cpu', '?')} stuck for {d.get('duration_s', '?')} s in {who or '?'}"
    if kind == "hard_lockup":
        return f"CPU {d.get('cpu', '?')} hard-locked"
    if kind == "hung_task":
        return f"task {who or '?'} blocked for more than {d.get('duration_s', '?')} s"
    dur = f", t={d['duration_jiffies']} jiffies" if "duration_jiffies" in d else ""
    cpus = d.get("stalled_cpus")
    on = f" on CPU{'s' if len(cpus) > 1 else ''} {', '.join(map(str, cpus))}" if cpus else ""
    return f"{d.get('flavor', 'rcu')} stall{on}{dur}"


def findings(events: list[KernelEvent], since: float | None = None) -> list[Finding]:
    """One finding per kind (soft_lockup, hard_lockup, rcu_stall, hung_task) with every line's facts.
    Events without a wall time are kept whatever `since` is: their age cannot be judged."""
    by: dict[str, list[KernelEvent]] = defaultdict(list)
    for e in events:
        kind = e.family or e.kind
        if e.category == "lockup" and kind in KINDS and (since is None or e.time is None or e.time >= since):
            by[kind].append(e)
    out = []
    for kind, es in by.items():
        name, sev, rem = KINDS[kind]
        facts = [_fact(e) for e in es]
        whats = [_what(kind, d) for d in facts]
        cpus = sorted({d["cpu"] for d in facts if "cpu" in d})
        procs = sorted({f"{d['comm']}:{d['pid']}" for d in facts if "comm" in d})
        longest = max((d.get("duration_s", 0) for d in facts), default=0)
        title = f"{len(es)} {name}{'s' if len(es) > 1 else ''}: {whats[-1]}" + (
            f" (CPUs {', '.join(map(str, cpus))})" if len(cpus) > 1 else "")
        evidence = [f"kernel log seq {e.seq} at {when(e)}: {w} — {e.message.strip()}"
                    for e, w in list(zip(es, whats))[-8:]]
        if len(es) > 8:
            evidence.insert(0, f"{len(es) - 8} earlier {name} line(s) not shown (all in data.events)")
        out.append(Finding(kind, sev, title, evidence, [rem],
                           {"events": facts, "cpus": cpus, "processes": procs,
                            "longest_s": longest or None, "count": len(es)}))
    return out


@detector("lockups")
def from_window(w: Window) -> list[Finding]:
    return findings(w.events, since=w.since)
