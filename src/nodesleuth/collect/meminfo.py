"""/proc/meminfo: Percpu and Slab are where dying memory cgroups show their cost."""

from __future__ import annotations

from ..model.procfs import parse_meminfo
from ..model.records import Meminfo
from ..node.pread import Preader, read_text
from ..node.root import Root
from .registry import Collector, collector


def read_meminfo(root: Root, reader: Preader | None = None, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """`reader` (the recorder's) keeps the file open between ticks; `keys`: see parse_meminfo."""
    if reader is None:
        return parse_meminfo(root.read("/proc/meminfo"), root.join("/proc/meminfo"), keys)
    return parse_meminfo(read_text(reader, root, "/proc/meminfo"), root.join("/proc/meminfo"), keys)


@collector("meminfo")
class MeminfoReader(Collector):
    def read(self, interval: float, seen=None) -> Meminfo:
        mi = read_meminfo(self.root, self.reader, Meminfo.KEYS)
        return Meminfo({k: mi[k] for k in Meminfo.KEYS if k in mi})
