"""The kernel log of each tick, from the sampler's reader (collect/kmsg.py, Seen.kmsg): its new events (the
`events` section), and its account (`kernel_log`, read after them): what it read, what the kernel overwrote
before it could (a flood), the sequence ranges skipped, reads stopped at the per-tick bound, as the tick's
KernelLog section, so the store, dump, /metrics (nodesleuth_kernel_log_dropped_total) and check say a flood."""

from __future__ import annotations

from ..model.records import Events, KernelLog
from ..node.pread import Preader
from ..node.root import Root
from .kmsg import SHARE
from .registry import Collector, collector


@collector("events")  # before kernel_log, which counts what this read
class KernelEvents(Collector):
    """The events that came this tick, within its share of the interval: a flood's rest waits, or is overwritten
    in the ring and counted dropped (kernel_log)."""

    def read(self, interval: float, seen=None) -> Events | None:
        r = getattr(seen, "kmsg", None)
        return None if r is None else Events(r.events(SHARE * min(interval, 1.0)))


@collector("kernel_log")
class KernelLogCounts(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.prev = (0, 0, 0, 0)  # the reader's records, lost, truncated, gaps_total at the last tick

    def read(self, interval: float, seen=None) -> KernelLog | None:
        r = getattr(seen, "kmsg", None)
        if r is None:
            return None
        a = r.account()  # consistent while /dev/kmsg is followed on its thread
        now = (a["read"], a["dropped"], a["bounded"], a["gaps_total"])
        prev, self.prev = self.prev, now
        new = min(now[3] - prev[3], len(a["gaps"]), KernelLog.GAPS)  # this tick's gaps (the latest, if more)
        gaps = [list(g) for g in a["gaps"][len(a["gaps"]) - new:]] if new else None
        return KernelLog(now[0] - prev[0], now[1] - prev[1], now[2] - prev[2], gaps, r.behind_bytes,
                         {"read": now[0], "dropped": now[1], "bounded": now[2]})
