"""Family user: one process on the core, >= half of it in user space. `process` is family kernel's too."""

from __future__ import annotations

from ...detect.proof import verdict
from ...model.thresholds import NOT_PROVEN, PROVE, PROVEN, UNKNOWN
from .common import Context, Hypothesis, excess, pct
from .registry import family


SPLIT_PART = 0.25  # of a process's samples: the smaller mode's part, for its time to count as split
SPLIT_BOTH = 0.8  # of its samples in user space or kernel code of no other family, for a split process


@family("user", rank=70)
def user(ctx: Context) -> Hypothesis:
    return process(ctx, False)


def process(ctx: Context, kernel: bool) -> Hypothesis:
    """The busiest process on the core, in user space or (kernel) in kernel code that is no other family's."""
    ep, prof, procs_link = ctx.ep, ctx.prof, ctx.links.get("processes")
    fam = "kernel" if kernel else "user"
    rule = (f"one process takes >= {pct(PROVE)} of the core's excess busy time, >= half of it "
            + ("in kernel code that is not memcg, reclaim, softirq or lock spinning" if kernel else "in user space")
            + f" (or split between the modes: this one its larger part, the other >= {pct(SPLIT_PART)}, both >= {pct(SPLIT_BOTH)})")
    if prof is not None:
        tot = prof.n + prof.lost
        best = None
        for pid, (comm, c, k, mc) in prof.by_pid.items():
            own = prof.kernel_of.get(pid, 0) if kernel else c - k
            # ties go to the process with more samples, then the lower pid: never to the order samples
            # were read in (a cut of a store reads them in another order than the store: same verdict)
            if best is None or (own, c, -pid) > (best[3], best[2], -best[0]):
                best = (pid, comm, c, own)
        if best is None:
            return Hypothesis(fam, 0.0, NOT_PROVEN, f"no process on CPU {ep.cpu}", None, rule)
        pid, comm, c, own = best
        frac = own / max(1, c)
        # the other mode's part no mechanism family claims (user space, or kernel code that is no other family's)
        other = (c - prof.by_pid[pid][2]) if kernel else prof.kernel_of.get(pid, 0)
        split = frac < 0.5 and own >= other >= SPLIT_PART * c and own + other >= SPLIT_BOTH * c
        # a process whose time is split between the modes (a daemon making cgroups: 49% kernel, 41% user), this
        # family's the larger part, the other at least SPLIT_PART of it and the mechanism families (memcg, reclaim,
        # softirq, lock) under 1 - SPLIT_BOTH: the process as a whole is what the core ran, no mechanism explains
        # it; it is named by the larger part, the split said beside it
        part = own + other if split else own
        share = min(1.0, part / tot / excess(ep))
        vd = verdict(share) if frac >= 0.5 or split else NOT_PROVEN if share >= PROVE else verdict(share)
        where = "in the kernel" if kernel else "in user space"
        fn = next((r["function"] for r in prof.top if bool(r.get("kernel")) == kernel), None)
        also = (f" and {pct(other / max(1, c))} " + ("in user space" if kernel else "in kernel code of no other family")
                if split else "")
        summary = (f"{comm} (pid {pid}) {pct(c / max(1, prof.n))} of CPU {ep.cpu}, {pct(frac)} of it {where}{also}"
                   + (f" (hottest {fn})" if fn else ""))
        cause = f"{comm} (pid {pid}), {where}" + (f": {fn}" if fn and kernel else "") if vd == PROVEN else None
        ev = [f"its time is split between the modes ({pct(frac)} {where}{also}): the process as a whole, named by "
              "the larger part"] if split else []
        return Hypothesis(fam, share, vd, summary, cause, rule, ev, {"pid": pid, "comm": comm, "fraction": round(frac, 3),
                                                                     **({"split": round(other / max(1, c), 3)} if split else {})})
    top = (procs_link.data or {}).get("top") if procs_link else None
    if not top:
        return Hypothesis(fam, None, UNKNOWN, f"no per-process data on CPU {ep.cpu}", None, rule)
    # no profile: /proc's per-process share, and the core's usr vs sys split for where it ran
    p = top[0]
    part = ep.sys_mean if kernel else ep.usr_mean
    frac = part / max(1e-9, ep.busy_mean)
    share = min(1.0, p["cpu_share"] * frac / excess(ep))
    vd = verdict(share) if frac >= 0.5 else NOT_PROVEN
    where = "in the kernel" if kernel else "in user space"
    return Hypothesis(fam, share, vd, f"{p['comm']} (pid {p['pid']}) {pct(p['cpu_share'])} of CPU {ep.cpu}, the core "
                      f"{pct(frac)} {where} (/proc; no profile)", f"{p['comm']} (pid {p['pid']}), {where}"
                      if vd == PROVEN else None, rule, [], {"pid": p["pid"], "comm": p["comm"], "source": "proc"})
