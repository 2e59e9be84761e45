"""Reclaim and paging, node-wide, every tick: a handful of /proc/vmstat counters (one pread)."""

from __future__ import annotations

from ..model.records import Vmstat
from ..node.pread import read_text
from .registry import Deltas, collector


def parse_vmstat(text: str) -> dict[str, int]:
    """The counters of Vmstat.KEYS this kernel prints (allocstall: the sum of allocstall_<zone>,
    one line per zone since 4.10, a single `allocstall` before)."""
    out: dict[str, int] = {}
    want = set(Vmstat.KEYS)
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k.startswith("allocstall"):
            out["allocstall"] = out.get("allocstall", 0) + int(v or 0)
        elif k in want:
            out[k] = int(v or 0)
    return out


@collector("vmstat")
class VmstatReader(Deltas):
    prev: dict[str, int] | None

    def _read(self) -> dict[str, int]:
        return parse_vmstat(read_text(self.reader, self.root, "/proc/vmstat"))

    def read(self, interval: float, seen=None) -> Vmstat | None:
        prev, cur = self.step()
        if prev is None:
            return None
        return Vmstat({k: max(0, v - prev.get(k, v)) for k, v in cur.items()}, cur)
