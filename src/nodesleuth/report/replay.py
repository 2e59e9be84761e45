"""Terminal replay of a recording: what happened each second, on the hottest CPUs (or all)."""

from __future__ import annotations

from typing import Iterator

from rich.console import Console

from ..model.records import Tick
from ..model.timeparse import iso


def hottest(t: Tick, prev: Tick | None, n: int | None) -> list:
    """CPUs by busy % this second; ties go to the CPU that was busier the second before, then the
    lower number (never silently to CPU 0)."""
    before = prev.cpu if prev else {}
    cpus = sorted((u for c, u in t.cpu.items() if c >= 0),
                  key=lambda u: (-round(u.busy, 1), -(before[u.cpu].busy if u.cpu in before else 0.0), u.cpu))
    return cpus if n is None else cpus[:n]


def line(t: Tick, prev: Tick | None = None, top: int | None = 2) -> str:
    node = t.cpu.get(-1)
    parts = [iso(t.time)[11:23]]
    if node:
        parts.append(f"node {node.busy:5.1f}%")
    for u in hottest(t, prev, top):
        who = sorted((p for p in t.procs if p.cpu == u.cpu), key=lambda p: -p.pct)[:2]
        parts.append(f"CPU {u.cpu:>3} {u.busy:5.1f}% (sys {u.sys:3.0f}%)"
                     + (": " + ", ".join(f"{p.comm}[{p.pid}] {p.pct:.0f}%{'~' if p.estimate else ''}" for p in who)
                        if who else ""))
    mem = t.census.memory_dying()
    if mem is not None:
        parts.append(f"memcg dying {mem}")
    if t.starve and t.starve.get("ksoftirqd_wait_ms"):
        c, ms = max(t.starve["ksoftirqd_wait_ms"].items(), key=lambda kv: kv[1])
        if ms >= 100:
            parts.append(f"ksoftirqd/{c} waited {ms:.0f} ms")
    for e in t.events:
        parts.append(f"!! {e.reason} {e.ifname}".rstrip())
    return " | ".join(parts)


def render(ts: Iterator[Tick], top: int | None = 2, console: Console | None = None) -> int:
    con = console or Console(highlight=False, soft_wrap=True)
    n = 0
    prev = None
    for t in ts:
        con.print(line(t, prev, top), markup=False, style="bold red" if t.events else None)
        prev = t
        n += 1
    return n
