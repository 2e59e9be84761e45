"""/proc/stat read once per tick (sysstat PR #439: read it once); mpstat's arithmetic on it is
model/mpstat.py."""

from __future__ import annotations

from ..model.mpstat import CpuTimes, parse_stat
from ..node.pread import Preader, read_text
from ..node.root import Root


def read_stat(root: Root, reader: Preader | None = None) -> CpuTimes:
    """`reader` (a loop's) keeps /proc/stat open and re-reads it with pread (one single_open record)."""
    if reader is None:
        return parse_stat(root.read("/proc/stat"), root.join("/proc/stat"))
    return parse_stat(read_text(reader, root, "/proc/stat"), root.join("/proc/stat"))


