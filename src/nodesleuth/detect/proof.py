"""The proof rules, in one place: what proves that a process made the zombies, what ties a
crash-looping unit to them, and how a share becomes a verdict. `check` and `explain` both decide with
these functions; their thresholds are model/thresholds.py's (the hot-core rule's too, which
detect/incidents.py applies)."""

from __future__ import annotations

from ..model.thresholds import (CONTRIBUTE, CONTRIBUTING, MIN_ZOMBIES, NOT_PROVEN, PROVE, PROVEN, RESTARTS_TIE,
                                UNKNOWN)


def verdict(share: float | None) -> str:
    """A measured share of the link above as a verdict; no measure is `unknown`, never a guess."""
    if share is None:
        return UNKNOWN
    return PROVEN if share >= PROVE else CONTRIBUTING if share >= CONTRIBUTE else NOT_PROVEN


def creator(lasting: int, growth: int | None, dying: int | None = None) -> tuple[str, float | None]:
    """(verdict, share) for the creator whose removed cgroups stayed dying (`lasting`), against the
    growth of dying memory cgroups over the same trace (or, when they did not grow, the dying count).

    Proven only when all three hold: it left at least MIN_ZOMBIES; they are at least PROVE of the
    growth (it explains most of it); and the growth is at least PROVE of them (the kernel's own count
    shows them, they were not offset by frees elsewhere). Share = lasting / growth, at most 1."""
    denom = growth if growth and growth > 0 else (dying or 0)
    share = min(1.0, lasting / denom) if denom else (0.0 if lasting == 0 else None)
    if lasting < MIN_ZOMBIES:
        return NOT_PROVEN, share
    if share is None:
        return UNKNOWN, None
    vd = verdict(share)
    if vd == PROVEN and growth is not None and growth < PROVE * lasting:
        vd = CONTRIBUTING  # the count did not grow by them: something else freed as many, or they are old
    return vd, share


def tie(unit_by_path: str | None, processes: int, loopers: list[tuple]) -> tuple | None:
    """(unit, how, restarts) of the restarting unit that made a creator's cgroups, or None.

    `loopers`: (Unit, restarts in the window) of units that restarted or are crash-looping. A unit is
    tied by the cgroup path the creator's cgroups sit under (unit_by_path), or by one creating
    process per restart (RESTARTS_TIE): a crash loop starts one agent per restart."""
    for u, n in loopers:
        if unit_by_path and u.id == unit_by_path:
            return u, "cgroup path", n
    lo, hi = RESTARTS_TIE
    for u, n in loopers:
        if n and lo <= processes / n <= hi:
            return u, f"{processes} creating processes for {n} restarts", n
    return None
