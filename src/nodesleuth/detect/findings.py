"""The finding record every detector returns and every report prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1, "ok": 0}


@dataclass
class Finding:
    kind: str  # zombie_cgroups | hot_core | nic_reset | crash_loop
    severity: str  # critical | warning | info
    title: str
    evidence: list[str]
    remediation: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    actions: list = field(default_factory=list)  # model.actions.Action: what `remedy` may perform

    @property
    def problem(self) -> bool:
        return SEVERITY_RANK[self.severity] >= SEVERITY_RANK["warning"]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["actions"] = [a.to_dict() for a in self.actions]
        return d


def ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: -SEVERITY_RANK[f.severity])


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
