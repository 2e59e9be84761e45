"""Throttling beside the hypotheses: evidence about a process, not a cause of a hot core (a quota caps a
process below a core), so a note, not a family."""

from __future__ import annotations

from .common import hog_rows


def notes(rec, ep) -> list[str]:
    out = []
    seen = {}
    for r in hog_rows(rec, ep):
        if r.get("nr_throttled"):
            k = (r["pid"], r["comm"], r.get("cgroup"))
            n, ms = seen.get(k, (0, 0.0))
            seen[k] = (n + r["nr_throttled"], ms + (r.get("throttled_ms") or 0.0))
    for (pid, comm, cg), (n, ms) in seen.items():
        out.append(f"{comm} (pid {pid}) was throttled {n} times ({ms:.0f} ms) by the CPU quota of {cg}")
    return out
