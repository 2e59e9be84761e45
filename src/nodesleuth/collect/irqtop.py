"""Whose interrupts each CPU serves: /proc/interrupts in full every IRQTOP_EVERY ticks (the kernel
formats every line for every CPU: costly on big nodes, so not every second), the busiest lines per
CPU since the previous full read."""

from __future__ import annotations

import time

from ..model.records import IrqTop
from ..node.pread import read_text
from .registry import Deltas, collector

EVERY = 5  # ticks between full reads
TOP = 3
MIN_PER_S = 100.0
# a device's numbered line is kept from a lower rate: under load a NIC's NAPI poll runs with its interrupt
# masked (a saturated receive path fires a few dozen a second), and the local timer's 250/s would hide it
MIN_DEVICE_PER_S = 5.0


def parse_all_interrupts(text: str) -> tuple[list[int], dict[str, tuple[str, list[int]]]]:
    """(the CPU numbers of the columns, line -> (name, per-CPU counts)) for every line of
    /proc/interrupts (numbered device lines and the named ones: LOC, RES, CAL, TLB...)."""
    lines = text.splitlines()
    if not lines:
        return [], {}
    cpus = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU") and c[3:].isdigit()]
    n = len(cpus)
    out = {}
    for ln in lines[1:]:
        key, sep, rest = ln.partition(":")
        if not sep:
            continue
        parts = rest.split()
        counts = []
        for p in parts[:n]:
            if not p.isdigit():
                break
            counts.append(int(p))
        if not counts:
            continue
        name = " ".join(parts[len(counts):])
        out[key.strip()] = (name, counts + [0] * (n - len(counts)))
    return cpus, out


@collector("irqtop", every=EVERY)
class IrqTopReader(Deltas):
    prev: tuple[float, list[int], dict] | None

    def _read(self):
        text = read_text(self.reader, self.root, "/proc/interrupts", one_record=False)
        return (time.monotonic(), *parse_all_interrupts(text))

    def read(self, interval: float, seen=None) -> IrqTop | None:
        prev, cur = self.step()
        if prev is None:
            return None
        span = max(1e-3, cur[0] - prev[0])
        cpus, lines = cur[1], cur[2]
        if cpus != prev[1]:  # a CPU came or went: columns moved; next time
            return IrqTop(span, {})
        top: dict[str, list] = {}
        dev: dict[str, list] = {}
        for key, (name, counts) in lines.items():
            old = prev[2].get(key)
            if old is None:
                continue
            for i, c in enumerate(cpus):
                rate = (counts[i] - old[1][i]) / span
                if rate >= MIN_PER_S:
                    top.setdefault(str(c), []).append([key, name, round(rate, 1)])
                elif rate >= MIN_DEVICE_PER_S and key.isdigit():
                    dev.setdefault(str(c), []).append([key, name, round(rate, 1)])
        out = {}
        for c in set(top) | set(dev):
            busiest = sorted(top.get(c, []), key=lambda x: -x[2])[:TOP]
            devices = [r for r in busiest if r[0].isdigit()]
            if len(devices) < TOP:  # the busiest device lines, also those under MIN_PER_S
                more = sorted(dev.get(c, []) + [r for r in top.get(c, []) if r[0].isdigit() and r not in devices],
                              key=lambda x: -x[2])
                busiest += more[:TOP - len(devices)]
            out[c] = sorted(busiest, key=lambda x: -x[2])
        return IrqTop(round(span, 2), out)
