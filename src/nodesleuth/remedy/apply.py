"""`nodesleuth remedy`: plan from what explain or check proved, print it, and perform it with --apply.

Only proven actions are planned: a unit is disabled only when an explained incident proves it makes
the zombies that cost the core (or, from a live check, when the unit is crash-looping and zombies
are present and growing under its cgroup); protected units are refused unless named explicitly.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field

from ..collect.units import systemctl
from .actions import Action, protected


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
        return [c for a in self.actions for c in a.command_lines(ns_pid) if not c.startswith("#")]


def plan(proposers, allow: set[str] = frozenset()) -> Plan:
    """A plan from what explained incidents or check findings propose (both carry `actions`)."""
    p = Plan()
    for x in proposers:
        for a in x.actions:
            p.add(a, allow)
    return p


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def memory_tracked(proc_cgroups: str = "/proc/cgroups") -> int | None:
    try:
        with open(proc_cgroups) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] == "memory":
                    return int(parts[2])
    except (OSError, ValueError, IndexError):
        return None
    return None


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    _write("/proc/sys/vm/drop_caches", "3")


def apply(plan: Plan, ns_pid: int | None, log=print) -> dict:
    res: dict = {"units": {}, "zombies_before": None, "zombies_after": None}
    cmd = systemctl(ns_pid)
    for u in plan.units:
        for args in (["disable", "--now", u], ["mask", u]):
            p = subprocess.run(cmd + args, capture_output=True, text=True, timeout=60)
            log(f"$ systemctl {' '.join(args)}  -> exit {p.returncode}" + (f": {p.stderr.strip()}" if p.returncode else ""))
        st = subprocess.run(cmd + ["show", "-p", "ActiveState,SubState,UnitFileState,NRestarts", u],
                            capture_output=True, text=True, timeout=30).stdout
        res["units"][u] = dict(line.split("=", 1) for line in st.split())
    if plan.reclaim:
        res["zombies_before"] = memory_tracked()
        t = time.perf_counter()
        drop_caches()
        res["reclaim_seconds"] = round(time.perf_counter() - t, 3)
        time.sleep(1.0)  # freeing dying memcgs is asynchronous
        res["zombies_after"] = memory_tracked()
        log(f"$ sync; echo 3 > /proc/sys/vm/drop_caches -> memory num_cgroups {res['zombies_before']} -> "
            f"{res['zombies_after']}")
    return res


def euid_ok() -> bool:
    return os.geteuid() == 0
