"""What the explain families share: the hypothesis each returns, the context each reads, and the few
measures more than one family takes of the episode (its ticks, its excess, the interrupt lines and the
per-process rows of the core)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...detect.incidents import _window
from ...model.thresholds import MIN_ZOMBIES, WALK_DYING_SHARE, ZOMBIE_WARN


@dataclass
class Hypothesis:
    family: str
    share: float | None  # of the core's excess busy time, 0..1
    verdict: str
    summary: str  # the sentence a leading explanation is made of
    cause: str | None = None  # named only when the family's own rule holds end to end
    rule: str = ""
    evidence: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"family": self.family, "share": None if self.share is None else round(self.share, 4),
                "verdict": self.verdict, "summary": self.summary, "cause": self.cause, "rule": self.rule,
                "evidence": self.evidence, "data": self.data}


@dataclass
class Context:
    """What a family reads: the recording, the incident and its episode on the hot core, the core's
    profile (explain/chain.py CoreProfile, None without one), the chain's links by name and the victim's
    measures (ksoftirqd's wait ...)."""
    rec: object
    inc: object
    ep: object
    prof: object
    links: dict
    victim: dict

    @property
    def dying(self) -> int | None:
        res = self.links.get("resource")
        return (res.data or {}).get("dying") if res else None

    @property
    def live(self) -> int | None:
        res = self.links.get("resource")
        return (res.data or {}).get("live") if res else None


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def excess(ep) -> float:
    return max(1e-9, ep.excess / 100)


def ticks(rec, ep) -> list:
    return _window(rec.ticks, ep.start, ep.end)


def zombie_walk(dying: int | None, live: int | None) -> tuple[bool, str]:
    """Whether memory-cgroup code is a walk over zombies: at least WALK_DYING_SHARE of the memcgs dying
    (and >= MIN_ZOMBIES), so most of what a walk visits is dying; where the live count is unknown,
    >= ZOMBIE_WARN dying. With fewer, the walk (reclaim's, a stats read's) is over live memcgs."""
    d = dying or 0
    if live is None:
        return d >= ZOMBIE_WARN, f"{d} memory cgroups dying (live count unknown; a walk over zombies needs >= {ZOMBIE_WARN})"
    share = d / max(1, d + live)
    ok = d >= MIN_ZOMBIES and share >= WALK_DYING_SHARE
    return ok, (f"{d} of {d + live} memory cgroups dying ({pct(share)}; a walk over zombies needs >= "
                f"{pct(WALK_DYING_SHARE)} and >= {MIN_ZOMBIES})")


def irq_lines(rec, ep) -> list:
    """The interrupt lines the core served in (or just around) the episode: [line, name, per_s], busiest first."""
    best: dict = {}
    for t in _window(rec.ticks, ep.start - 6, ep.end + 6):
        it = getattr(t, "irqtop", None)
        if it is None:
            continue
        for line, name, per_s in it.cpus.get(str(ep.cpu), []):
            if per_s > best.get(line, (None, 0))[1]:
                best[line] = (name, per_s)
    return sorted(([k, n, r] for k, (n, r) in best.items()), key=lambda x: -x[2])


def hog_rows(rec, ep) -> list[dict]:
    rows = []
    for t in ticks(rec, ep):
        h = getattr(t, "hogs", None)
        if h is not None:
            rows += [r for r in h.rows if r["cpu"] == ep.cpu]
    return rows
