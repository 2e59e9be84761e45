"""What one check window saw: the single input every detector reads (detect/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..model.records import Census
from ..model.records import ChurnSummary
from ..model.records import KernelEvent
from ..model.records import MemcgCost
from ..model.records import NicCounters
from ..model.records import Tick
from ..model.records import Unit


@dataclass(kw_only=True)
class Window:
    """Built by keyword only (13 fields of like types: a positional call would swap them silently)."""
    ticks: list[Tick]  # one per second, oldest first
    seconds: float
    census0: Census  # cgroup census when the window opened (walked)
    nics0: list[NicCounters] | None
    units0: list[Unit] | None  # None: systemd not inspected
    units1: list[Unit] | None
    events: list[KernelEvent]  # kernel-log events already in the ring plus those of the window
    since: float | None  # kernel-log lookback: older events are ignored
    churn: ChurnSummary | None = None
    memcg_cost: MemcgCost | None = None
    zombie_warn: int = 1000
    zombie_crit: int = 10000
    process_age: Callable[[int], float | None] | None = None  # main PID -> age, when PIDs are ours
    release: str | None = None  # /proc/sys/kernel/osrelease: which memcg-ID rule holds (model/memcg_ids.py)
    swap_total_kib: int | None = None  # /proc/meminfo SwapTotal; None: not read
    log_lines: list[str] = field(default_factory=list)  # journal lines of the lookback that name a cgroup mkdir failure
    rules: str | None = None  # the kernel-log rules file the events were matched with; None: the packaged one
    restarts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        b = {u.id: u.n_restarts for u in self.units0 or []}
        self.restarts = {u.id: u.n_restarts - b.get(u.id, u.n_restarts if self.units0 else 0)
                         for u in self.units1 or []}

    @property
    def last(self) -> Tick:
        return self.ticks[-1]
