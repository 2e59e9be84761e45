"""Per-CPU softirq counts (/proc/softirqs: the registered `softirqs` collector) and the NIC's IRQ lines of
/proc/interrupts (IrqReader, read by the registered `nic_irqs` collector).

Which IRQ lines belong to a NIC is decided once, from the interface names and their device names
(eth0 -> virtio2 -> "virtio2-input.0"; ENA names its lines "eth0-Tx-Rx-N"), so a tick reads each
file once and keeps only the NIC lines of /proc/interrupts (it can have thousands of lines).
"""

from __future__ import annotations

import os
from operator import sub

from ..model.records import NicIrqs, Softirqs
from ..node.pread import Preader, read_text
from ..model.procfs import online_columns, parse_interrupts, parse_softirqs
from ..node.root import Root
from .registry import Collector, Deltas, collector


def _delta(a, b) -> list[int]:
    """Counter deltas; clamped only in the rare case one went backwards (CPU hotplug, reset)."""
    d = list(map(sub, b, a))
    return d if min(d, default=0) >= 0 else [max(0, x) for x in d]


def deltas(prev: dict[str, list[int]], cur: dict[str, list[int]]) -> dict[str, list[int]]:
    """Per-line (per-softirq) counter deltas of two reads; a line new since `prev` starts at zero."""
    return {k: _delta(prev[k], v) if k in prev else [0] * len(v) for k, v in cur.items()}


@collector("softirqs", uses=("check", "record"))
class SoftirqsReader(Collector):
    """/proc/softirqs every tick (kept open: collect/pread.py): each softirq's per-CPU count of the interval."""

    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader
        self.prev: dict | None = None

    def _read(self) -> dict[str, list[int]]:
        return parse_softirqs(read_text(self.reader, self.root, "/proc/softirqs"), self.root.join("/proc/softirqs"))

    def prime(self) -> None:
        self.prev = self._read()

    def read(self, interval: float, seen=None) -> Softirqs | None:
        prev, self.prev = self.prev, self._read()
        return Softirqs(deltas(prev, self.prev)) if prev is not None else None


def nic_irq_keys(root: Root) -> list[str]:
    """Substrings that mark a NIC's IRQ line: interface names and their device names."""
    keys = []
    for ifname in root.listdir("/sys/class/net"):
        if ifname == "lo" or not root.exists(f"/sys/class/net/{ifname}/device"):
            continue
        keys.append(ifname + "-")
        dev = root.join(f"/sys/class/net/{ifname}/device")
        if os.path.islink(dev):
            keys.append(os.path.basename(os.readlink(dev)) + "-")
    return keys


class IrqReader:
    """Both files stay open between reads (collect/pread.py).

    /proc/interrupts is costly to make (the kernel formats every IRQ line for every CPU: 69 us for 36
    lines on this 2-CPU VM, milliseconds on a 96-CPU node with hundreds of lines), and only the NIC's
    lines are kept. So it is read in full once every `rescan` reads (the NIC's IRQs change when its
    driver resets, the very event this tool looks for) and in between the NIC lines come from
    /sys/kernel/irq/N/per_cpu_count (one small file per line, ~2 us; possible CPUs, of which the
    online ones, /proc/interrupts' columns, are kept): the same figures. Without that directory (a
    fixture tree, an old kernel) or on any surprise there, the full file is read every time."""

    def __init__(self, root: Root, reader: Preader | None = None, rescan: int = 60):
        self.root = root
        self.keys = nic_irq_keys(root)
        self.reader = reader or Preader(root.live)
        self.rescan = rescan
        self.n = 0
        self.lines: list[tuple[str, str]] = []  # (key in the result, per_cpu_count path)
        self.cols: list[int] = []

    def _full(self) -> dict[str, list[int]]:
        text = read_text(self.reader, self.root, "/proc/interrupts", False)
        irq = parse_interrupts(text, self.keys, self.root.join("/proc/interrupts"))
        self.cols = online_columns(text)
        sysdir = self.root.join("/sys/kernel/irq")
        lines = []
        for k in irq:
            num = k.split(":", 1)[0]
            if num.isdigit() and os.path.exists(f"{sysdir}/{num}/per_cpu_count"):
                lines.append((k, f"{sysdir}/{num}/per_cpu_count"))
        self.lines = lines if len(lines) == len(irq) and self.cols else []
        return irq

    def _per_cpu(self) -> dict[str, list[int]] | None:
        """The NIC lines from sysfs; None on any surprise (then the full file is read)."""
        out = {}
        cols, read = self.cols, self.reader.read
        try:
            for k, path in self.lines:
                counts = read(path, True).split(b",")
                out[k] = [int(counts[c]) for c in cols]
        except (OSError, ValueError, IndexError):
            return None
        return out

    def read(self) -> dict[str, list[int]]:
        """The NIC's IRQ lines: per-CPU cumulative counts."""
        irq = None
        if self.keys:
            if self.lines and self.n % self.rescan:
                irq = self._per_cpu()
            if irq is None:
                irq = self._full()
        self.n += 1
        return irq or {}


@collector("nic_irqs", uses=("check", "record"))
class NicIrqsReader(Deltas):
    """The NIC's IRQ lines every tick (IrqReader): each line's per-CPU count of the interval."""

    def __init__(self, root: Root, reader: Preader):
        super().__init__(root, reader)
        self.irqs = IrqReader(root, reader)

    def _read(self) -> dict[str, list[int]]:
        return self.irqs.read()

    def read(self, interval: float, seen=None) -> NicIrqs | None:
        prev, cur = self.step()
        return NicIrqs(deltas(prev, cur)) if prev is not None else None
