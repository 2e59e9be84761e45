"""`nodesleuth remedy`: perform the remediation explain (or check) proposes. Dry run by default."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field

from ..collect.units import _systemctl
from ..lab.zombies import drop_caches, memory_num_cgroups


@dataclass
class Plan:
    units: list[str] = field(default_factory=list)  # to disable --now and mask
    reclaim: bool = False
    why: list[str] = field(default_factory=list)

    def commands(self, ns_pid: int | None) -> list[str]:
        pre = f"nsenter -t {ns_pid} -m -p -- " if ns_pid else ""
        out = []
        for u in self.units:
            out += [f"{pre}systemctl disable --now {u}", f"{pre}systemctl mask {u}"]
        if self.reclaim:
            out.append("sync; echo 3 > /proc/sys/vm/drop_caches")
        return out


def plan_from_incidents(incidents) -> Plan:
    p = Plan()
    for inc in incidents:
        for lk in inc.links:
            if lk.name == "unit_loop" and lk.status == "found" and lk.data.get("unit") not in p.units:
                p.units.append(lk.data["unit"])
                p.why.append(f"{lk.data['unit']}: {lk.summary}")
            if lk.name == "resource" and lk.status == "found" and lk.confidence != "low":
                p.reclaim = True
    return p


def plan_from_findings(findings) -> Plan:
    p = Plan()
    for f in findings:
        if f.kind == "crash_loop" and f.problem:
            p.units.append(f.data["unit"])
            p.why.append(f.title)
        if f.kind == "zombie_cgroups" and f.problem:
            p.reclaim = True
            p.why.append(f.title)
    return p


def apply(plan: Plan, ns_pid: int | None, log=print) -> dict:
    res = {"units": {}, "zombies_before": None, "zombies_after": None}
    cmd = _systemctl(ns_pid)
    for u in plan.units:
        for args in (["disable", "--now", u], ["mask", u]):
            p = subprocess.run(cmd + args, capture_output=True, text=True, timeout=60)
            log(f"$ systemctl {' '.join(args)}  -> exit {p.returncode}" + (f": {p.stderr.strip()}" if p.returncode else ""))
        st = subprocess.run(cmd + ["show", "-p", "ActiveState,SubState,UnitFileState,NRestarts", u],
                            capture_output=True, text=True, timeout=30).stdout
        res["units"][u] = dict(line.split("=", 1) for line in st.split())
    if plan.reclaim:
        res["zombies_before"] = memory_num_cgroups()
        t = time.perf_counter()
        drop_caches()
        res["reclaim_seconds"] = round(time.perf_counter() - t, 3)
        time.sleep(1.0)  # freeing dying memcgs is asynchronous
        res["zombies_after"] = memory_num_cgroups()
        log(f"$ sync; echo 3 > /proc/sys/vm/drop_caches -> memory num_cgroups {res['zombies_before']} -> "
            f"{res['zombies_after']}")
    return res
