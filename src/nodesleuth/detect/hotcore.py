"""Hot single cores: one CPU >= 90% busy for >= 3 s while the rest of the node is quiet.

This is what 96-core averages hide (the incident's CPU 39 at 100 %sys with the node at ~5%).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..collect.sampler import Tick
from .findings import Finding


@dataclass
class Episode:
    cpu: int
    start: float  # wall time the first hot interval began
    end: float
    seconds: float
    busy_mean: float
    busy_min: float
    sys_mean: float
    soft_mean: float
    irq_mean: float
    others_mean: float
    node_mean: float
    top: list[tuple[int, str, float]]  # (pid, comm, mean % of that CPU over the episode)


def episodes(ticks: list[Tick], busy_min: float = 90.0, min_seconds: float = 3.0,
             others_max: float = 60.0) -> list[Episode]:
    """Runs of >= min_seconds with one CPU >= busy_min, kept when the other CPUs averaged
    < others_max over the run (so one noisy second elsewhere does not break a run on 2-CPU hosts)."""
    runs: dict[int, list[Tick]] = defaultdict(list)
    out: list[Episode] = []

    def close(cpu: int) -> None:
        run = runs.pop(cpu, [])
        secs = sum(t.interval for t in run)
        if run and secs >= min_seconds - 0.25:  # sampling jitter: 2.8 s of 1 s ticks is 3 ticks
            e = _episode(cpu, run, secs)
            if e.others_mean < others_max:
                out.append(e)

    last_t = None
    for t in ticks:
        cpus = [c for c in t.cpu if c >= 0]
        if not cpus:
            continue
        gap = last_t is not None and t.time - t.interval - last_t > 1.5  # a missing sample breaks runs
        last_t = t.time
        for c in cpus:
            if gap and c in runs:
                close(c)
            if t.cpu[c].busy >= busy_min:
                runs[c].append(t)
            elif c in runs:
                close(c)
    for c in list(runs):
        close(c)
    return sorted(out, key=lambda e: (-e.seconds, e.cpu))


def _episode(cpu: int, run: list[Tick], secs: float) -> Episode:
    busy = [t.cpu[cpu].busy for t in run]
    n = len(run)
    cpus = [c for c in run[0].cpu if c >= 0]
    others = [sum(t.cpu[o].busy for o in cpus if o != cpu) / max(1, len(cpus) - 1) for t in run]
    node = [t.cpu[-1].busy if -1 in t.cpu else 0.0 for t in run]
    procs: dict[tuple[int, str], float] = defaultdict(float)
    for t in run:
        for p in t.procs:
            if p.cpu == cpu:
                procs[(p.pid, p.comm)] += p.pct
    top = sorted(((pid, comm, v / n) for (pid, comm), v in procs.items()), key=lambda x: -x[2])[:5]
    return Episode(cpu, run[0].time - run[0].interval, run[-1].time, secs, sum(busy) / n, min(busy),
                   sum(t.cpu[cpu].sys for t in run) / n, sum(t.cpu[cpu].soft for t in run) / n,
                   sum(t.cpu[cpu].irq for t in run) / n, sum(others) / n, sum(node) / n, top)


def findings(ticks: list[Tick], **kw) -> list[Finding]:
    out = []
    for e in episodes(ticks, **kw):
        kernel = e.sys_mean + e.soft_mean + e.irq_mean
        procs = ", ".join(f"{comm} (pid {pid}) {pct:.0f}%" for pid, comm, pct in e.top) or "no process seen"
        ev = [f"CPU {e.cpu} was {e.busy_mean:.0f}% busy (min {e.busy_min:.0f}%) for {e.seconds:.1f} s "
              f"while the other CPUs averaged {e.others_mean:.0f}% and the node {e.node_mean:.0f}%",
              f"CPU {e.cpu} split: sys {e.sys_mean:.0f}%, softirq {e.soft_mean:.0f}%, irq {e.irq_mean:.0f}%",
              f"on CPU {e.cpu}: {procs}"]
        rem = []
        if e.top:
            pid, comm, _ = e.top[0]
            rem.append(f"profile it: perf record -C {e.cpu} -g -- sleep 10 (or nodesleuth flame --cpu {e.cpu})")
            rem.append(f"if {comm} should not be pinned there: taskset -pc <other cpus> {pid}")
        if kernel >= 50:
            rem.append("mostly kernel time: check zombie cgroups and NIC IRQ/NAPI placement "
                       "(grep Tx-Rx /proc/interrupts; IRQBALANCE_BANNED_CPUS)")
        out.append(Finding("hot_core", "warning",
                           f"CPU {e.cpu} pinned at {e.busy_mean:.0f}% for {e.seconds:.0f} s while the node "
                           f"averaged {e.node_mean:.0f}%", ev, rem,
                           {"cpu": e.cpu, "start": e.start, "end": e.end, "seconds": round(e.seconds, 2),
                            "busy": round(e.busy_mean, 1), "sys": round(e.sys_mean, 1),
                            "softirq": round(e.soft_mean, 1), "irq": round(e.irq_mean, 1),
                            "others_busy": round(e.others_mean, 1), "node_busy": round(e.node_mean, 1),
                            "top": [{"pid": p, "comm": c, "pct": round(v, 1)} for p, c, v in e.top]}))
    return out
