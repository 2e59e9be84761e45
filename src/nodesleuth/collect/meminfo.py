"""/proc/meminfo: Percpu and Slab are where dying memory cgroups show their cost."""

from __future__ import annotations

from ..model.procfs import parse_meminfo
from ..node.pread import Preader, read_text
from ..node.root import Root


def read_meminfo(root: Root, reader: Preader | None = None, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """`reader` (the recorder's) keeps the file open between ticks; `keys`: see parse_meminfo."""
    if reader is None:
        return parse_meminfo(root.read("/proc/meminfo"), root.join("/proc/meminfo"), keys)
    return parse_meminfo(read_text(reader, root, "/proc/meminfo"), root.join("/proc/meminfo"), keys)
