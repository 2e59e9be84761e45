"""Zombie (dying) cgroups: count, live:tracked ratio, memory cost, growth, and who makes them."""

from __future__ import annotations

import dataclasses

from ..model.kube import pod_owner
from ..model.records import Census
from ..model.records import ChurnSummary
from ..model.records import MemcgCost
from ..model.records import Unit
from ..model.actions import Action, owner_commands, protected, remedy_text
from ..model.thresholds import ZOMBIE_CRIT, ZOMBIE_WARN
from . import proof
from .findings import Finding, human_bytes
from .registry import detector
from .window import Window



def findings(first: Census, last: Census, meminfo: dict[str, int], seconds: float,
             units: list[Unit] | None = None, churn: ChurnSummary | None = None,
             warn: int = ZOMBIE_WARN, crit: int = ZOMBIE_CRIT, restarts: dict[str, int] | None = None,
             cost: MemcgCost | None = None) -> list[Finding]:
    """`restarts`: each unit's NRestarts growth over the window (ties a creator to a unit: one
    creating process per restart). `cost`: what one memcg costs on this node, measured by the probe."""
    out = []
    loopers = [u for u in (units or []) if u.crash_looping or (restarts or {}).get(u.id, 0) > 0]
    grew = restarts or {}
    for c in last.v1:
        if c.dying is None:
            continue
        c0 = first.controller(c.name)
        growth = c.dying - (c0.dying if c0 and c0.dying is not None else c.dying)
        if c.dying == 0 and growth <= 0:
            continue
        out.append(_finding(c.name, "v1", c.tracked, c.live, c.dying, growth, seconds, meminfo, loopers,
                            _on(churn, c.hierarchy), last, warn, crit, grew, cost))
    if last.v2 is not None:
        v = last.v2
        dying = v.memory_dying()
        d0 = first.v2
        before = d0.memory_dying() if d0 else dying
        if dying > 0 or dying - before > 0:
            name = "memory" if "memory" in v.subsys else "all"
            out.append(_finding(name, "v2", v.nr_descendants + 1 + dying, v.nr_descendants + 1, dying,
                                dying - before, seconds, meminfo, loopers, _on(churn, 0), last, warn, crit, grew, cost))
    return out


def _on(churn: ChurnSummary | None, hierarchy: int) -> ChurnSummary | None:
    """The churn of one hierarchy (the tracepoints' root id: the v1 hierarchy number of /proc/cgroups,
    0 for cgroup2), so a hybrid host's v1 and v2 findings each show their own creators, once."""
    if churn is None:
        return None
    return dataclasses.replace(churn, creators=[c for c in churn.creators if c.hierarchy == hierarchy])


def _finding(ctrl: str, ver: str, tracked: int, live: int, dying: int, growth: int, seconds: float,
             meminfo: dict[str, int], loopers: list[Unit], churn: ChurnSummary | None, census: Census,
             warn: int, crit: int, grew: dict[str, int], cost: MemcgCost | None = None) -> Finding:
    percpu, slab = meminfo.get("Percpu", 0), meminfo.get("Slab", 0)
    share = dying / tracked if tracked else 0.0
    sev = "critical" if dying >= crit else "warning" if dying >= warn or growth >= 10 else "info"
    where = f"cgroup {ver} {ctrl}"
    ev = [f"{where}: {tracked} tracked vs {live} live -> {dying} dying "
          f"({tracked / max(1, live):.0f}x the live count)"]
    memcg = ctrl in ("memory", "all")
    held = cost is not None and memcg
    if held:
        ev.append(f"memory cost measured here: one memory cgroup holds {human_bytes(cost.percpu_bytes)} of Percpu "
                  f"on {cost.possible_cpus} possible CPUs (and at most {human_bytes(cost.slab_bytes)} of Slab; "
                  f"probe of {cost.probes} empty memcgs): {dying} dying hold ~{human_bytes(dying * cost.percpu_bytes)} "
                  f"Percpu (node total {human_bytes(percpu)}), up to ~{human_bytes(dying * cost.slab_bytes)} Slab")
    elif memcg:
        ev.append(f"memory cost: Percpu {human_bytes(percpu)}, Slab {human_bytes(slab)} "
                  f"({share:.0%} of tracked cgroups are dying; up to ~{human_bytes(percpu * share)} Percpu "
                  f"and ~{human_bytes(slab * share)} Slab attributable; per-memcg cost not measured)")
    else:
        sev = "info" if sev == "warning" and dying < crit else sev  # only memcgs are walked by stat reads
    ev.append(f"growth: {growth:+d} dying in {seconds:.0f} s ({growth * 60 / max(seconds, 1e-9):+.1f}/min)")
    acts: list[Action] = []
    makers: list[str] = []
    proven_unit, proven_pod = _creator(churn, growth, dying, loopers, grew, ev, makers)
    for u in loopers:
        tie = "proven creator" if u.id == proven_unit else "suspect only: not tied to the zombies by a churn trace"
        ev.append(f"crash-looping unit {u.id}: NRestarts={u.n_restarts} ({grew.get(u.id, 0):+d} in the window), "
                  f"{u.active}/{u.sub}, enabled={u.enabled} ({tie})")
        if u.id not in makers:
            makers.append(u.id)
    if proven_unit:
        acts.append(Action("disable_unit", proven_unit, f"{proven_unit} makes cgroups that stay dying",
                           protected=protected(proven_unit)))
    if proven_pod:
        who = pod_owner(proven_pod)
        acts.append(Action("investigate", who, f"the containers of pod {who} make cgroups that stay dying "
                           "(its owner fixes or removes it: nodesleuth never deletes a pod)",
                           commands=owner_commands(proven_pod, proven_pod.get("container") or "<container>")))
    for s in census.dying_subtrees[:3]:
        ev.append(f"{s.dying} dying cgroups were removed from under {s.path}")
        makers.append(s.path)
    if not makers:
        ev.append("creator unknown: no crash-looping unit seen; run `nodesleuth check --seconds 60` "
                  "or `nodesleuth explain --trace 60` to catch the creator in the act")
    # reclaim the page cache that pins them: under the parent they were removed from (v2), else the node's; said
    # always, proposed to `remedy` only when critical or when their creator is proven
    reclaim = Action("reclaim", census.dying_subtrees[0].path if census.dying_subtrees and ver == "v2" else "",
                     f"{dying} dying memory cgroups")
    if ctrl in ("memory", "all") and (sev == "critical" or proven_unit or proven_pod):
        acts.append(reclaim)
    rem = remedy_text(acts if reclaim in acts else acts + [reclaim])
    title = (f"{dying} zombie {ctrl} cgroups ({ver}): {tracked} tracked vs {live} live"
             + (f", suspect: {makers[0]}" if makers else ""))
    return Finding("zombie_cgroups", sev, title, ev, rem,
                   {"controller": ctrl, "version": ver, "tracked": tracked, "live": live, "dying": dying,
                    "ratio": round(tracked / max(1, live), 1), "growth": growth, "seconds": round(seconds, 1),
                    "percpu_bytes": percpu, "slab_bytes": slab, "creators": makers,
                    "dying_subtrees": [{"path": s.path, "dying": s.dying} for s in census.dying_subtrees],
                    "proven_unit": proven_unit, "proven_pod": proven_pod,
                    "memcg_cost": cost.to_dict() if held else None,
                    "dying_percpu_bytes": round(dying * cost.percpu_bytes) if held else None}, acts)


def _creator(churn: ChurnSummary | None, growth: int, dying: int, loopers: list[Unit], grew: dict[str, int],
             ev: list[str], makers: list[str]) -> tuple[str | None, dict | None]:
    """(proven unit, proven pod) of a churn trace's most lasting creator (detect/proof.py), its creators said in
    `ev` and named in `makers`."""
    if churn is None or not churn.creators:
        return None, None
    proven_pod = None
    for cr in churn.creators[:3]:
        ev.append(f"churn traced for {churn.seconds:.0f} s: {cr.comm} made {cr.mkdir} and removed "
                  f"{cr.rmdir} cgroups like {cr.pattern}" + (f" (unit {cr.unit})" if cr.unit else "")
                  + (f" (containers of pod {pod_owner(cr.pod)})" if cr.pod else "")
                  + f"; {cr.freed} freed, {cr.still_dying} still dying at the end")
        makers.append(f"pod {pod_owner(cr.pod)}" if cr.pod else cr.unit or cr.comm)
    top = churn.creators[0]  # the most lasting (model/churn.py)
    vd, _ = proof.creator(top.still_dying, growth, dying)
    tied = None
    if vd == proof.PROVEN and top.pod:
        # kubelet restarts the container and the runtime makes its cgroup: the pod is the creator
        proven_pod = top.pod
        ev.append(f"proven creator: the containers of pod {pod_owner(top.pod)} ({top.comm} made them) left "
                  f"{top.still_dying} cgroups dying and the dying count grew {growth:+d}")
    elif vd == proof.PROVEN:
        hit = proof.tie(top.unit, len(top.pids), [(u, grew.get(u.id, 0)) for u in loopers])
        tied = hit[0].id if hit else None
        ev.append(f"proven creator: {top.comm} left {top.still_dying} cgroups dying and the dying count grew "
                  f"{growth:+d}" + (f"; it runs as {tied} (tied by {hit[1]})" if hit else "; no unit tied to it"))
    else:
        ev.append(f"no creator is proven: the most lasting, {top.comm}, left {top.still_dying} cgroups dying "
                  f"while the count grew {growth:+d} (needs >= {proof.MIN_ZOMBIES}, >= {proof.PROVE:.0%} of the "
                  f"growth, and the growth >= {proof.PROVE:.0%} of them)")
    return tied, proven_pod


@detector("zombie_cgroups")
def from_window(w: Window) -> list[Finding]:
    return findings(w.census0, w.last.census, w.last.meminfo, w.seconds, w.units1, w.churn, w.zombie_warn,
                    w.zombie_crit, w.restarts, w.memcg_cost)
