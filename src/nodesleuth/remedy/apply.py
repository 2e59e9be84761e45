"""`nodesleuth remedy`: plan from what explain or check proved, print it, and perform it with --apply.

Only proven actions are planned: a unit is disabled only when an explained incident proves it makes
the zombies that cost the core (or, from a live check, when the unit is crash-looping and zombies
are present and growing under its cgroup); protected units are refused unless named explicitly.
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass, field

from ..collect.cgroups import census
from ..model.errors import InputError
from ..node.cgroupfs import Memcg, drop_caches
from ..node.root import Root
from ..node.systemd import act, nsenter, unit_state
from ..model.actions import RECLAIM_V1, Action, protected


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def units(self) -> list[str]:
        return [a.target for a in self.actions if a.kind == "disable_unit"]

    @property
    def reclaim(self) -> bool:
        return any(a.kind == "reclaim" for a in self.actions)

    def add(self, a: Action, allow: set[str]) -> None:
        if a.kind == "investigate":
            return
        if any(x.kind == a.kind and x.target == a.target for x in self.actions):
            return
        if a.kind == "disable_unit" and protected(a.target) and a.target not in allow:
            self.refused.append(f"{a.target} is protected (node-critical); name it with --unit {a.target} to act")
            return
        self.actions.append(a)

    def commands(self, ns_pid: int | None) -> list[str]:
        return [c for a in self.actions for c in a.command_lines(nsenter(ns_pid)) if not c.startswith("#")]


def plan(proposers, allow: set[str] = frozenset()) -> Plan:
    """A plan from what explained incidents or check findings propose (both carry `actions`)."""
    p = Plan()
    for x in proposers:
        for a in x.actions:
            p.add(a, allow)
    return p


def _dying(root: Root) -> int | None:
    """Dying memory cgroups as `check` counts them (the same census: v1 num_cgroups minus the
    directories, v2 cgroup.stat), so before/after agree with what check reported."""
    try:
        return census(root).memory_dying()
    except InputError:
        return None


def apply(plan: Plan, ns_pid: int | None, log=print, root: Root = Root("/")) -> dict:
    """Perform the plan. Every action's outcome is in the result; `failed` lists the ones that did
    not take effect (the CLI then exits non-zero and names them)."""
    res: dict = {"units": {}, "zombies_before": None, "zombies_after": None, "failed": []}
    for u in plan.units:
        for args in (["disable", "--now", u], ["mask", u]):
            p = act(args, root, ns_pid)
            log(f"$ systemctl {' '.join(args)}  -> exit {p.returncode}" + (f": {p.stderr.strip()}" if p.returncode else ""))
            if p.returncode != 0:
                res["failed"].append(f"systemctl {' '.join(args)}: exit {p.returncode}"
                                     + (f" ({p.stderr.strip().splitlines()[-1]})" if p.stderr.strip() else ""))
        st = unit_state(u, root, ns_pid)
        res["units"][u] = st
        if st.get("UnitFileState") not in ("masked", "masked-runtime") and not any(u in f for f in res["failed"]):
            res["failed"].append(f"{u} is not masked afterwards (UnitFileState={st.get('UnitFileState', '?')})")
    for a in (x for x in plan.actions if x.kind == "reclaim"):
        res["zombies_before"] = _dying(root)
        t = time.perf_counter()
        try:
            if a.target.startswith("/"):  # cgroup v2: reclaim under the parent the zombies were removed from
                mc = Memcg(root)
                n = max(1 << 20, mc.usage(a.target))
                try:
                    mc.reclaim(a.target, n)
                except OSError as e:
                    if e.errno != errno.EAGAIN:  # EAGAIN: less than asked could be reclaimed; it did what it could
                        raise
                how = f"echo {n} > {mc.path(a.target)}/memory.reclaim"
            else:
                drop_caches(root)
                how = RECLAIM_V1
        except (OSError, InputError) as e:
            res["failed"].append(f"reclaim {a.target or 'node'}: {getattr(e, 'strerror', None) or e}")
            log(f"reclaim failed: {e}")
            continue
        res["reclaim_seconds"] = round(time.perf_counter() - t, 3)
        time.sleep(1.0)  # freeing dying memcgs is asynchronous
        res["zombies_after"] = _dying(root)
        log(f"$ {how} -> dying memory cgroups {res['zombies_before']} -> {res['zombies_after']}")
    return res
