"""Per-CPU softirq counts (/proc/softirqs) and the NIC's IRQ lines of /proc/interrupts.

Which IRQ lines belong to a NIC is decided once, from the interface names and their device names
(eth0 -> virtio2 -> "virtio2-input.0"; ENA names its lines "eth0-Tx-Rx-N"), so a tick reads each
file once and keeps only the NIC lines of /proc/interrupts (it can have thousands of lines).
"""

from __future__ import annotations

import os

from ..errors import InputError
from .pread import Preader
from .root import Root


def _ints(path: str, fields: list[str], n: int, line: str) -> list[int]:
    try:
        return list(map(int, fields[:n]))
    except ValueError:
        raise InputError(path, f"malformed line {line[:60]!r}") from None


def parse_softirqs(text: str, path: str = "/proc/softirqs") -> dict[str, list[int]]:
    lines = text.splitlines()
    if not lines or not lines[0].split() or not lines[0].split()[0].startswith("CPU"):
        raise InputError(path, "no CPU header line")
    n = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        out[name.strip()] = _ints(path, rest.split(), n, line)
    return out


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


def parse_interrupts(text: str, keys: list[str], path: str = "/proc/interrupts") -> dict[str, list[int]]:
    """Per-CPU counts of the IRQ lines whose description contains one of `keys`."""
    lines = text.splitlines()
    if not lines:
        raise InputError(path, "empty file")
    n = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        if not any(k in line for k in keys):  # most lines are not the NIC's: skip without splitting
            continue
        irq, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        desc = " ".join(fields[n:])
        if any(k in desc for k in keys):
            name = fields[-1] if fields else irq.strip()
            out[f"{irq.strip()}:{name}"] = _ints(path, fields, n, line)
    return out


class IrqReader:
    """Both files stay open between reads (collect/pread.py)."""

    def __init__(self, root: Root, reader: Preader | None = None):
        self.root = root
        self.keys = nic_irq_keys(root)
        self.reader = reader or Preader(root.live)

    def _text(self, abspath: str, one_record: bool) -> str:
        p = self.root.join(abspath)
        try:
            return self.reader.read(p, one_record).decode(errors="replace")
        except OSError as e:
            raise InputError(p, e.strerror or str(e)) from None

    def read(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        si = parse_softirqs(self._text("/proc/softirqs", True), self.root.join("/proc/softirqs"))
        irq = parse_interrupts(self._text("/proc/interrupts", False), self.keys, self.root.join("/proc/interrupts")) \
            if self.keys else {}
        return si, irq
