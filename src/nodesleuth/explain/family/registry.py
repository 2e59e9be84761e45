"""The explain families register themselves. A family is `NAME(ctx) -> Hypothesis | None` in its own
module of this package, decorated @family("NAME", rank=N) (ctx: common.Context); `hypotheses` runs every
one on an episode, the way collect/registry.py runs collectors and detect/registry.py detectors.

To add one: write explain/family/NAME.py with a function decorated @family("NAME", rank=N) (the rank
orders families of equal verdict and share: lower first) and its corpus case (tests/corpus/). Nothing
else wires it: every module of this package is imported once when the families are asked for.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from ...model.thresholds import CONTRIBUTE, CONTRIBUTING, NOT_PROVEN, PROVE, PROVEN, UNKNOWN
from .common import Context, Hypothesis

_FAMILIES: dict[str, tuple[int, Callable[[Context], Hypothesis | None]]] = {}
ORDER = {PROVEN: 0, CONTRIBUTING: 1, NOT_PROVEN: 2, UNKNOWN: 3}  # verdicts, most explaining first


def family(name: str, rank: int):
    def reg(fn: Callable[[Context], Hypothesis | None]):
        if name in _FAMILIES:
            raise ValueError(f"explain family {name!r} registered twice")
        _FAMILIES[name] = (rank, fn)
        return fn
    return reg


def families() -> dict[str, Callable[[Context], Hypothesis | None]]:
    """Every family by name, in rank order."""
    from . import __path__ as here

    for m in pkgutil.iter_modules(here):
        importlib.import_module(f"{__package__}.{m.name}")
    return {k: fn for k, (_, fn) in sorted(_FAMILIES.items(), key=lambda kv: kv[1][0])}


def hypotheses(rec, inc, ep, prof, links: dict, victim: dict) -> tuple[list[Hypothesis], list[str]]:
    """Every family's hypothesis for this episode, most explaining first, and notes (throttling)."""
    from .throttle import notes

    ctx = Context(rec, inc, ep, prof, links, victim)
    hs = [h for h in (fn(ctx) for fn in families().values()) if h is not None]
    _walk_or_reclaim(hs, prof, ep)
    hs.sort(key=lambda h: (ORDER.get(h.verdict, 4), -(h.share or 0.0)))
    g = next((h for h in hs if h.family == "group"), None)
    if g is not None:
        _place_group(hs, g)
    return hs, notes(rec, ep)


def _walk_or_reclaim(hs: list[Hypothesis], prof, ep) -> None:
    """A charge over a limit reclaims, and reclaim walks the memcgs it reclaims from (shrink_node_memcgs): a
    walk over live memcgs, with reclaim proven and at least half as many samples as the memcg code, is
    reclaim's own walk and charging (family reclaim), not a cause of its own; unless one maker made the live
    memcgs the walk crosses over the trace (live_maker proven): then the walk leads, named by its maker."""
    walk = next((h for h in hs if h.family == "memcg_walk"), None)
    rec_h = next((h for h in hs if h.family == "reclaim"), None)
    if (walk is not None and rec_h is not None and walk.data.get("over") == "live"
            and walk.verdict in (PROVEN, CONTRIBUTING) and rec_h.verdict == PROVEN
            and prof is not None and prof.reclaim >= PROVE * prof.memcg):
        maker = walk.data.get("live_maker") or {}
        if walk.verdict == PROVEN and maker.get("verdict") == PROVEN:
            # the live memcgs the walk crosses were made, over the trace, by one maker (>= PROVE of the live
            # count's growth): that walk is why each reclaim costs the core what it does, and the maker is its
            # root cause; reclaim is what set it off (contributing)
            rec_h.verdict = CONTRIBUTING
            rec_h.evidence.append(f"each reclaim walks the live memcgs {maker.get('comm')} made "
                                  f"({maker.get('kept')}): the walk (family memcg_walk) is the cost, reclaim its trigger")
            return
        walk.verdict, walk.cause = NOT_PROVEN, None
        walk.evidence.append(f"page reclaim is proven on CPU {ep.cpu} ({rec_h.share * 100:.0f}% of the excess): the "
                             "memcg code over live memcgs is reclaim's own walk and charging (family reclaim)")


def _place_group(hs: list[Hypothesis], g: Hypothesis) -> None:
    """The rules between a group (family/group.py) and the other families, in place."""
    order = ORDER
    if (g.data.get("parent") or {}).get("pid") is not None:
        # /proc's "COMM (exited children)" entry of the group's parent is the group's own time: the group
        # names it (who started them, how many), so it goes before the single-process reading of it
        pp = g.data["parent"]["pid"]
        same = [i for i, h in enumerate(hs) if h.family in ("user", "kernel") and h.data.get("pid") == pp
                and str(h.data.get("comm", "")).endswith(" (exited children)")]
        if same and same[0] < hs.index(g) and order.get(g.verdict, 4) <= order.get(hs[same[0]].verdict, 4):
            hs.remove(g)
            hs.insert(same[0], g)
    if g.verdict in (PROVEN, CONTRIBUTING):
        # a group competes with single processes (user, kernel), not with a mechanism (memcg walk, reclaim,
        # softirq, irq, rt, lock) that is proven or contributing and explains at least PROVE of what the group
        # does: the group's samples are then mostly its processes' time in that mechanism, which says why the
        # core is busy; the group only who was there
        mech = [i for i, h in enumerate(hs) if h.verdict in (PROVEN, CONTRIBUTING)
                and h.family not in ("user", "kernel", "group") and (h.share or 0.0) >= PROVE * (g.share or 0.0)]
        if mech:
            if g.verdict == PROVEN:
                g.verdict, g.cause = CONTRIBUTING, None
                g.evidence.append(f"{hs[mech[0]].family} ({hs[mech[0]].verdict}) is what the core did: the group "
                                  "is who did it (contributing at most)")
            if mech[-1] > hs.index(g):
                hs.remove(g)
                hs.insert(mech[-1], g)
    if g.verdict == PROVEN and (g.data.get("rest_share") or 0.0) >= CONTRIBUTE:
        # a proven group whose other processes add >= CONTRIBUTE of the core beyond its busiest one (a
        # forking parent): the group, not that one process, explains the core
        one = next((i for i, h in enumerate(hs) if h.family in ("user", "kernel") and h.verdict == PROVEN), None)
        if one is not None and one < hs.index(g):
            hs.remove(g)
            hs.insert(one, g)
