"""One tick of everything the collectors provide; `check` keeps ticks in memory, `record` stores them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from operator import sub

from .cgroups import Census, CgroupCensus
from .cpu import CpuTimes, CpuUtil, from_deltas, read_stat
from .irqs import IrqReader
from .kmsg import KernelEvent, KmsgReader
from .meminfo import read_meminfo
from .nic import NicCounters, NicReader
from .pread import Preader
from .procs import ProcUse, TaskSampler, clock_ticks, fit_to_cpus
from .root import Root
from .starvation import StarvationReader, deltas as starvation_deltas
from .units import Unit, read_units

TOP_PER_CPU = 5


@dataclass
class Tick:
    time: float
    interval: float  # seconds covered by cpu/procs
    cpu: dict[int, CpuUtil]
    procs: list[ProcUse]
    census: Census
    meminfo: dict[str, int]
    events: list[KernelEvent] = field(default_factory=list)
    nics: list[NicCounters] | None = None  # None on ticks where NICs were not read
    units: list[Unit] | None = None
    cpu_raw: dict[int, tuple[int, ...]] | None = None  # jiffies per /proc/stat column this interval
    softirqs: dict[str, list[int]] | None = None  # per-CPU deltas this interval
    nic_irqs: dict[str, list[int]] | None = None  # per-CPU deltas of the NIC's IRQ lines
    starve: dict | None = None  # ksoftirqd wait/run per CPU (ms), CPU pressure (ms): collect/starvation.py


def top_per_cpu(uses: list[ProcUse], n: int = TOP_PER_CPU, min_pct: float = 0.5) -> list[ProcUse]:
    by_cpu: dict[int, list[ProcUse]] = {}
    for u in uses:
        if u.pct >= min_pct:
            by_cpu.setdefault(u.cpu, []).append(u)
    out = []
    for cpu in sorted(by_cpu):
        out.extend(sorted(by_cpu[cpu], key=lambda u: -u.pct)[:n])
    return out


def _delta(a, b) -> list[int]:
    """Counter deltas; clamped only in the rare case one went backwards (CPU hotplug, reset)."""
    d = list(map(sub, b, a))
    return d if min(d, default=0) >= 0 else [max(0, x) for x in d]


def _deltas(prev: dict[str, list[int]], cur: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: _delta(prev[k], v) if k in prev else [0] * len(v) for k, v in cur.items()}


MEMINFO_KEYS = ("MemTotal", "MemAvailable", "Percpu", "Slab", "SUnreclaim", "Cached")


class Sampler:
    def __init__(self, root: Root, *, threads: bool = True, live_every: float = 60.0,
                 nic_every: int = 1, units_every: int = 5, kmsg: bool | str = True,
                 ns_pid: int | None = None, ethtool: bool = True, rules_path: str | None = None,
                 irqs: bool = False, ethtool_every: int = 10, util: bool = True, procs_full_every: int = 1,
                 starvation: bool = True):
        self.root = root
        self.threads = threads
        self.census = CgroupCensus(root, live_every=live_every)
        self.nic_every = nic_every
        self.units_every = units_every
        self.ns_pid = ns_pid
        self.ethtool = ethtool
        self.ethtool_every = max(1, ethtool_every)
        self.util = util  # per-CPU percentages now; the recorder stores raw jiffies and skips this
        self.nics: list[NicCounters] | None = None  # the last NIC read (ethtool counters carried over)
        self.hz = clock_ticks()
        self.kmsg = None
        if kmsg:
            from .kmsg import load_rules

            path = kmsg if isinstance(kmsg, str) else None
            self.kmsg = KmsgReader(root, path=path, rules=load_rules(rules_path))
        self.n = 0
        self._stat: CpuTimes | None = None
        self.tasks = TaskSampler(root, threads, full_every=procs_full_every)
        self._t: float | None = None
        self.units_seen = True
        self.reader = Preader(root.live)  # files read every tick stay open (collect/pread.py)
        self.nic_reader = NicReader(root, self.reader)
        self.irqs = IrqReader(root, self.reader) if irqs else None
        self._irq_prev: tuple[dict, dict] | None = None
        self.starvation = StarvationReader(root, self.reader) if starvation else None
        self._starve_prev: dict | None = None

    @property
    def stat(self) -> CpuTimes | None:
        """The last /proc/stat read (check averages over its window from the first to the last)."""
        return self._stat

    def prime(self) -> list[KernelEvent]:
        """First read: baselines for deltas; returns kernel-log events already in the ring."""
        self._t = time.time()
        self._stat = read_stat(self.root)
        self.tasks.sample(0, self._uptime())
        self.nics = self.nic_reader.read(self.ethtool)
        if self.starvation:
            self._starve_prev = self.starvation.read()
        if self.irqs:
            self._irq_prev = self.irqs.read()
        return self.kmsg.read()[1] if self.kmsg else []

    def tick(self, force_walk: bool = False) -> Tick:
        if self._stat is None:
            self.prime()
        now = time.time()
        stat = read_stat(self.root)
        interval = max(1e-6, now - self._t)
        raw = {c: tuple(_delta(self._stat.cpus[c], v)) for c, v in stat.cpus.items() if c in self._stat.cpus}
        cpu = {}
        if self.util:  # percentages from the same deltas the store keeps
            cpu = {c: u for c, u in ((c, from_deltas(c, d)) for c, d in raw.items()) if u is not None}
        # per-CPU jiffies of this interval: the denominator for per-process percentages
        ncpu = max(1, len([c for c in stat.cpus if c >= 0]))
        total = stat.cpus[-1]
        prev_total = self._stat.cpus[-1]
        ticks_per_cpu = (sum(total[:8]) - sum(prev_total[:8])) / ncpu
        if ticks_per_cpu <= 0:
            ticks_per_cpu = interval * self.hz
        busy = {}
        for c, d in raw.items():
            tot = sum(d[:8])
            if c >= 0 and tot > 0:
                busy[c] = 100.0 * (tot - d[3] - d[4]) / tot
        procs = top_per_cpu(fit_to_cpus(self.tasks.sample(ticks_per_cpu, self._uptime()), busy))
        census = self.census.sample(now, force_walk=force_walk)
        mi = read_meminfo(self.root, self.reader, MEMINFO_KEYS)
        events = self.kmsg.read()[1] if self.kmsg else []
        nics = None
        if self.n % self.nic_every == 0:
            # prime() read ethtool already: the next refresh is `ethtool_every` ticks later
            eth = self.ethtool and (self.nics is None or (self.n + 1) % self.ethtool_every == 0)
            nics = self.nics = self.nic_reader.read(eth, self.nics)
        units = None
        # no systemd here: ask again only once a minute (a namespace's systemd may come up later)
        if self.units_every and self.n % (self.units_every if self.units_seen else 60) == 0:
            units = read_units(self.root, self.ns_pid)
            self.units_seen = units is not None
        si = ni = None
        if self.irqs:
            cur = self.irqs.read()
            si, ni = (_deltas(a, b) for a, b in zip(self._irq_prev, cur))
            self._irq_prev = cur
        starve = None
        if self.starvation:
            cur_s = self.starvation.read()
            starve = starvation_deltas(self._starve_prev, cur_s, interval)
            self._starve_prev = cur_s
        self._stat, self._t = stat, now
        self.n += 1
        return Tick(now, interval, cpu, procs, census, {k: mi[k] for k in MEMINFO_KEYS if k in mi},
                    events, nics, units, raw, si, ni, starve)

    def _uptime(self) -> float | None:
        """Clock ticks since boot (for processes that started between scans)."""
        try:
            text = self.reader.read_opt(self.root.join("/proc/uptime"), True)
            return float(text.split()[0]) * self.hz if text else None
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        self.tasks.close()
        self.reader.close()
        if self.kmsg:
            self.kmsg.close()
