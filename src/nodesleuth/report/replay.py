"""Terminal replay of a recording: what happened each second."""

from __future__ import annotations

from typing import Iterator

from rich.console import Console

from ..collect.sampler import Tick
from ..timeparse import iso


def line(t: Tick) -> str:
    cpus = [u for c, u in t.cpu.items() if c >= 0]
    node = t.cpu.get(-1)
    hot = max(cpus, key=lambda u: u.busy, default=None)
    parts = [iso(t.time)[11:23]]
    if node:
        parts.append(f"node {node.busy:5.1f}%")
    if hot:
        parts.append(f"hot CPU {hot.cpu:>3} {hot.busy:5.1f}% (sys {hot.sys:4.0f}%)")
        who = sorted((p for p in t.procs if p.cpu == hot.cpu), key=lambda p: -p.pct)[:2]
        if who:
            parts.append(", ".join(f"{p.comm}[{p.pid}] {p.pct:.0f}%" for p in who))
    mem = t.census.memory_dying()
    if mem is not None:
        parts.append(f"memcg dying {mem}")
    for e in t.events:
        parts.append(f"!! {e.reason} {e.ifname}".rstrip())
    return " | ".join(parts)


def render(ts: Iterator[Tick], console: Console | None = None) -> int:
    con = console or Console(highlight=False, soft_wrap=True)
    n = 0
    for t in ts:
        con.print(line(t), markup=False, style="bold red" if t.events else None)
        n += 1
    return n
