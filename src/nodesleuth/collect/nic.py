"""NIC counters: /sys/class/net/*/statistics, per-queue tx_timeout, and `ethtool -S` driver stats (the
registered `nics` collector).

The driver stats come from node/ethtool.py: the SIOCETHTOOL ioctl on the live host (or from a
container that shares the host's network namespace), `ethtool -S` in the host's namespace
otherwise, a recorded `ethtool -S` output in a fixture tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..model.errors import InputError
from ..model.records import NicCounters, Nics
from ..node.ethtool import EthtoolStats, driver_stats
from ..node.pread import Preader
from ..node.root import Root
from .registry import Collector, collector


STATS = ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors", "rx_missed_errors")


@dataclass
class _Nic:
    ifname: str
    driver: str
    bus: str
    stat_paths: list[tuple[str, str]]  # (counter name, path) of the counters this interface has


class NicReader:
    """The physical interfaces (those with a device/): which exist, their driver, bus and counter files are found
    once (and again every `rescan_every` reads, or when a read fails: an interface went away or was renamed); the
    counter files stay open and are re-read with pread. `previous` supplies the ethtool counters on reads that
    skip ethtool (it may fork a process: the recorder runs it at a lower rate)."""

    def __init__(self, root: Root, reader: Preader | None = None, rescan_every: int = 60):
        self.root = root
        self.shared = reader is not None
        self.reader = reader or Preader(root.live)
        self.rescan_every = max(1, rescan_every)
        self.n = 0
        self.nics: list[_Nic] | None = None
        self.ethtool = EthtoolStats() if root.live and root.same_ns("net") is not False else None

    def close(self) -> None:
        """The ethtool socket; the Preader is the caller's when it passed one."""
        if self.ethtool is not None:
            self.ethtool.close()
        if not self.shared:
            self.reader.close()

    def _scan(self) -> list[_Nic]:
        root, base, out = self.root, "/sys/class/net", []
        for ifname in sorted(root.listdir(base)):
            if ifname == "lo" or not root.exists(f"{base}/{ifname}/device"):
                continue
            d = f"{base}/{ifname}"
            paths = [(n, root.join(f"{d}/statistics/{n}")) for n in STATS]
            drv = bus = ""
            link = root.join(f"{d}/device/driver")
            if os.path.islink(link):
                drv = os.path.basename(os.readlink(link))
            dev = root.join(f"{d}/device")
            if os.path.islink(dev):
                bus = os.path.basename(os.readlink(dev))
            for line in (root.read_opt(f"{d}/device/uevent") or "").splitlines():
                if line.startswith("PCI_SLOT_NAME="):
                    bus = line.split("=", 1)[1]
            out.append(_Nic(ifname, drv, bus, [(n, p) for n, p in paths if os.path.exists(p)]))
        return out

    def read(self, with_ethtool: bool = True, previous: list[NicCounters] | None = None) -> list[NicCounters]:
        if self.nics is None or self.n % self.rescan_every == 0:
            self.nics = self._scan()
        self.n += 1
        try:
            return self._read(with_ethtool, previous)
        except FileNotFoundError:
            self.nics = self._scan()  # gone or renamed since the last scan: once more, from scratch
            return self._read(with_ethtool, previous)

    def _read(self, with_ethtool: bool, previous: list[NicCounters] | None) -> list[NicCounters]:
        prev = {n.ifname: n for n in previous or []}
        out, read = [], self.reader.read
        for nic in self.nics or []:
            stats = {}
            for name, path in nic.stat_paths:
                try:
                    txt = read(path, True)
                except FileNotFoundError:
                    raise
                except OSError as e:
                    raise InputError(path, e.strerror or str(e)) from None
                try:
                    stats[name] = int(txt)
                except ValueError:
                    raise InputError(path, f"not an integer: {txt[:40]!r}") from None
            p = prev.get(nic.ifname)
            d = f"/sys/class/net/{nic.ifname}"
            if with_ethtool or p is None:  # per-queue files: at the (lower) ethtool rate
                qto = 0
                for q in self.root.listdir(f"{d}/queues"):
                    if q.startswith("tx-"):
                        t = self.root.read_opt(f"{d}/queues/{q}/tx_timeout")
                        if t is not None and t.strip().isdigit():
                            qto += int(t)
            else:
                qto = p.queue_tx_timeouts
            if with_ethtool:  # asked here only about the interface the root names (node/root.py same_netdev)
                here = self.ethtool if self.ethtool is not None and self.root.same_netdev(nic.ifname) else None
                eth = driver_stats(self.root, nic.ifname, here)
            else:
                eth = p.ethtool if p else {}
            out.append(NicCounters(nic.ifname, nic.driver, stats, qto, eth, nic.bus))
        return out


@collector("nics", options=("nic_every", "ethtool", "ethtool_every"))
class NicsReader(Collector):
    """The NICs every `nic_every` ticks (NicReader); `ethtool -S` at prime() and every `ethtool_every` ticks, its
    counters carried over between (a read after a failed one asks ethtool again)."""

    def __init__(self, root: Root, reader: Preader, nic_every: int = 1, ethtool: bool = True, ethtool_every: int = 10):
        super().__init__(root, reader)
        self.nics = NicReader(root, reader)
        self.every, self.ethtool, self.ethtool_every = max(1, nic_every), ethtool, max(1, ethtool_every)
        self.n = 0
        self.last: Nics | None = None

    def prime(self) -> Nics:
        self.last = Nics(self.nics.read(self.ethtool))
        return self.last

    def read(self, interval: float, seen=None) -> Nics | None:
        n, self.n = self.n, self.n + 1
        if n % self.every:
            return None
        prev, self.last = self.last, None
        self.last = Nics(self.nics.read(self.ethtool and (prev is None or (n + 1) % self.ethtool_every == 0), prev))
        return self.last

    def close(self) -> None:
        self.nics.close()
