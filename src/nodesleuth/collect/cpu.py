"""/proc/stat read once per tick (sysstat PR #439: read it once); mpstat's arithmetic on it is
model/mpstat.py. The registered `cpu_raw` collector: the CPUs' jiffies since its last read."""

from __future__ import annotations

from ..model.mpstat import CpuTimes, interval as cpu_interval, parse_stat
from ..model.records import CpuJiffies
from ..node.pread import Preader, read_text
from ..node.root import Root
from .registry import Collector, collector


def read_stat(root: Root, reader: Preader | None = None) -> CpuTimes:
    """`reader` (a loop's) keeps /proc/stat open and re-reads it with pread (one single_open record)."""
    if reader is None:
        return parse_stat(root.read("/proc/stat"), root.join("/proc/stat"))
    return parse_stat(read_text(reader, root, "/proc/stat"), root.join("/proc/stat"))


@collector("cpu_raw", options=("busy_only",))
class CpuStat(Collector):
    """Each CPU's jiffies since the last read, and their interval `iv` (mpstat's percentages; with `busy_only`, the
    recorder's, busy % alone). The sampler reads it first, itself (its problems under "cpu"): the processes and the
    other collectors' Seen.busy come from it; cpu_tick() keeps a second one."""

    def __init__(self, root: Root, reader: Preader, busy_only: bool = False):
        super().__init__(root, reader)
        self.busy_only, self.stat = busy_only, None  # the baseline: the last read, offline CPUs' last counters carried
        self.prev = self.cur = self.iv = None  # the last read's baseline, its /proc/stat as read (None: unread), interval

    def prime(self) -> None:
        self.stat = read_stat(self.root, self.reader)

    def read(self, interval: float = 1.0, seen=None) -> CpuJiffies | None:
        """None without a baseline: the first read becomes it."""
        self.cur = self.iv = None
        self.prev, self.stat = self.stat, read_stat(self.root, self.reader)
        self.cur = self.stat
        if self.prev is None:
            return None
        self.iv = cpu_interval(self.prev, self.cur, busy_only=self.busy_only)
        self.stat = self.iv.carry
        return CpuJiffies(self.iv.deltas)
