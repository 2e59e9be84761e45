"""The memory controller's 65,535 IDs: how many are held (live memcgs, and dying ones on kernels or with
swap that keep theirs: model/memcg_ids.py), how fast they go, and the cgroup mkdirs that already failed."""

from __future__ import annotations

from ..model.actions import Action, remedy_text
from ..model.memcg_ids import ID_MAX, id_use, mkdir_errno, mkdir_failure, release, rule_for
from ..model.thresholds import MEMCG_IDS_CRIT, MEMCG_IDS_HORIZON, MEMCG_IDS_WARN
from .findings import Finding
from .registry import detector
from .window import Window


def _held(census, rule, swap):
    live, dying = census.memory_live(), census.memory_dying()
    if live is None:
        return None
    return id_use(live, dying or 0, rule, swap)


@detector("memcg_ids")
def findings(w: Window) -> list[Finding]:
    rel = release(w.release or "")
    rule = rule_for(rel)
    last = _held(w.last.census, rule, w.swap_total_kib)
    code = mkdir_errno(rel)
    failures = [f for f in (mkdir_failure(line) for line in w.log_lines) if f is not None
                and (f.errno != "EBUSY" or code == "EBUSY")]  # EBUSY names the ID space only on 6.12+
    if last is None:
        return []
    first = _held(w.census0, rule, w.swap_total_kib) or last
    share = last.high / ID_MAX
    growth = last.high - first.high
    rate = growth / w.seconds if w.seconds > 0 else 0.0
    left = ID_MAX - last.high
    eta = left / rate if rate > 0 else None
    sev = ("critical" if share >= MEMCG_IDS_CRIT or any(f.errno in ("ENOSPC", "EBUSY") for f in failures)
           else "warning" if share >= MEMCG_IDS_WARN or (eta is not None and eta <= MEMCG_IDS_HORIZON) or failures
           else "info")
    if rule is None and sev == "critical" and not any(f.errno in ("ENOSPC", "EBUSY") for f in failures):
        sev = "warning"  # the share is an upper bound when the kernel's rule is unknown
    if sev == "info":
        return []  # far from the limit: nothing to say on every check
    k = rel and f"{rel[0]}.{rel[1]}"
    if rule is None:
        how = f"kernel release unknown ({w.release!r}): counting every dying memcg as holding an ID"
        why_dying = f"{last.dying} dying (counted: the kernel's rule is unknown)"
    elif rule.dying_hold == "all":
        how = f"kernel {k} keeps a dying memcg's ID until it is freed ({rule.source})"
        why_dying = f"{last.dying} dying on this kernel, which keeps dying memcgs' IDs"
    elif last.swap is False:
        how = (f"kernel {k} releases a dying memcg's ID at offline and keeps it only for swap entries; no swap is "
               f"configured, so dying memcgs hold none ({rule.source})")
        why_dying = f"{last.dying} dying (holding no ID: no swap here)"
    else:
        how = (f"kernel {k} releases a dying memcg's ID at offline but keeps it while swap entries record it; "
               f"{'swap is on' if last.swap else 'swap unknown'}, so up to all {last.dying} dying may hold one "
               f"({rule.source})")
        why_dying = f"up to {last.dying} dying (those with pages in swap)"
    held = f"{last.low}" if last.low == last.high else f"{last.low}..{last.high}"
    ev = [f"memory cgroup IDs held: {held} of {ID_MAX} ({share:.1%} at most): {last.live} live + {why_dying}", how]
    if growth:
        ev.append(f"growth: {growth:+d} IDs in {w.seconds:.0f} s" +
                  (f" -> all {ID_MAX} held in ~{_dur(eta)} at this rate" if eta is not None else ""))
    for f in failures[:5]:
        ev.append(f"cgroup creation already failed ({f.who}, {f.errno}): {f.line[:300]}")
    if len(failures) > 5:
        ev.append(f"... {len(failures) - 5} more failed cgroup mkdirs in the log")
    said = "no space left on device" if code == "ENOSPC" else "device or resource busy"
    why = (f"why pods fail: mkdir of a new memory cgroup fails with {code} (\"{said}\" on kernel {k or '?'}) when all "
           f"{ID_MAX} IDs are held; kubelet cannot create the pod's cgroup (FailedCreatePodContainer) and runc the "
           f"container's. Held now: {last.live} live + {why_dying}")
    ev.append(why)
    if any(f.errno == "ENOMEM" for f in failures):
        ev.append("a cgroup mkdir failing with ENOMEM (\"cannot allocate memory\") is not the ID space: on 3.10 "
                  "kernels (RHEL/CentOS 7) it is kernel-memory accounting's per-memcg cache IDs, also exhausted by "
                  "dying memcgs (kubernetes#61937)")
    # what to do, as actions (model/actions.py renders every line): the churn's maker found and stopped, the dying
    # memcgs' page cache dropped (said, not proposed: the zombie finding proposes reclaim when it is critical)
    acts = [Action("investigate", "memory cgroups", "who makes the memory cgroups", commands=[
        "# find who makes the memory cgroups (the zombie_cgroups finding's creator, `nodesleuth check --seconds 60`) "
        "and stop the churn"])]
    said = list(acts)
    if rule is None or rule.dying_hold == "all" or last.swap is not False:
        said.append(Action("reclaim", "", "free dying memcgs' IDs: drop their page cache"))
        if last.swap is not False:
            acts.append(Action("investigate", "swap", "swap-pinned dying memcgs keep their IDs", commands=[
                "swapoff -a && swapon -a   # where memory allows: swap-pinned IDs go when their pages are swapped "
                "in or freed"]))
            said.append(acts[-1])
    acts.append(Action("investigate", "node", "pods already fail to start",
                       commands=["# reboot the node if pods already fail to start"]))
    said.append(acts[-1])
    rem = remedy_text(said)
    data = {"ids_max": ID_MAX, "ids_held_low": last.low, "ids_held_high": last.high, "ratio": round(share, 4),
            "live": last.live, "dying": last.dying, "swap": last.swap, "kernel": w.release,
            "dying_hold": rule.dying_hold if rule else None, "growth": growth, "seconds": round(w.seconds, 1),
            "exhausted_in_seconds": None if eta is None else round(eta), "failures": [
                {"who": f.who, "errno": f.errno, "path": f.path, "line": f.line} for f in failures]}
    return [Finding("memcg_ids", sev, f"memory cgroup IDs {share:.0%} used ({last.high} of {ID_MAX})"
                    + (f", {len(failures)} cgroup mkdirs already failed" if failures else ""), ev, rem, data, acts)]


def _dur(s: float) -> str:
    return f"{s / 86400:.1f} days" if s >= 86400 else f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min"
