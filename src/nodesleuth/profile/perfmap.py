"""A JIT's symbols: /tmp/perf-PID.map, the file perf reads for an anonymous executable map."""

from __future__ import annotations

from .elf import STB_GLOBAL
from .symtable import SymTable


def perf_map_symbols(path: str) -> SymTable | None:
    """A JIT's /tmp/perf-PID.map (`START SIZE name` in hex), as perf reads it."""
    rows = []
    try:
        with open(path, errors="replace") as f:
            for ln in f:
                p = ln.rstrip("\n").split(" ", 2)
                if len(p) < 3:
                    continue
                try:
                    s, n = int(p[0], 16), int(p[1], 16)
                except ValueError:
                    continue
                rows.append((s, s + n, STB_GLOBAL, p[2]))
    except OSError:
        return None
    return SymTable(rows, dedup=True) if rows else None
