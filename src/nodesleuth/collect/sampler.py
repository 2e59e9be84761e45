"""One tick of everything the collectors provide; `check` keeps ticks in memory, `record` stores them."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from ..model.records import KernelEvent, Procs, Tick
from ..model.errors import InputError
from .cpu import CpuStat
from .kmsg import SHARE as KMSG_SHARE, KmsgReader
from ..node.pread import Preader
from .procs import Processes, clock_ticks
from ..node.root import Root
from .registry import Seen, registered

@dataclass(frozen=True)
class Preset:
    """What a Sampler reads and how often. check, record and the exporter differ only in this."""

    use: str = "check"  # which registered collectors run (collect/registry.py: check | record | exporter)
    threads: bool = True  # attribute CPU per thread (field 39 of each task)
    live_every: float = 60.0  # s between cgroup directory walks (the counts themselves every tick: collect/cgroups.py)
    units_every: int = 5  # ticks between systemd reads; 0: never
    ethtool_every: int = 10  # ticks between `ethtool -S`
    irqs: bool = False  # the NIC's IRQ lines per CPU (/proc/softirqs: the registered collector, check and record)
    util: bool = True  # percentages per tick (the recorder keeps jiffies and computes on read)
    procs_full_every: int = 1  # ticks between full process rescans (busy ones every tick)
    procs_full_max: int = 0  # > procs_full_every: defer full rescans up to this while /proc/stat is explained


# a check is short: NIC counters every tick so the window's delta is exact; check reads units itself
CHECK = Preset("check", units_every=0, ethtool_every=1, irqs=True)
RECORD = Preset("record", irqs=True, util=False, procs_full_max=10)
# the exporter's full tick runs every FULL_EVERY s (fleet/exporter.py; its 1 Hz tick reads /proc/stat alone):
# units and the NIC's ethtool counters on each full tick (every 15 s; every 5 s and 10 s when every second was full)
EXPORTER = Preset("exporter", units_every=1, ethtool_every=1)


class Sampler:
    @classmethod
    def preset(cls, root: Root, preset: Preset, **source) -> "Sampler":
        """A sampler for one use (CHECK, RECORD, EXPORTER); `source`: kmsg, ns_pid, rules_path, kmsg_boot."""
        return cls(root, **dataclasses.asdict(preset), **source)

    def __init__(self, root: Root, *, use: str = "check", threads: bool = True, live_every: float = 60.0,
                 nic_every: int = 1, units_every: int = 5, kmsg: bool | str = True,
                 ns_pid: int | None = None, ethtool: bool = True, rules_path: str | None = None,
                 irqs: bool = False, ethtool_every: int = 10, util: bool = True, procs_full_every: int = 1,
                 procs_full_max: int = 0, kmsg_boot: float | str | None = "root", units_timeout: float = 120.0):
        self.root = root
        self.util = util  # per-CPU percentages now; the recorder stores raw jiffies and skips this
        self.hz = clock_ticks()
        self.kmsg = None
        self.kmsg_problem: str | None = None
        if kmsg:
            from ..model.rules import load_rules

            path = kmsg if isinstance(kmsg, str) else None
            rules = load_rules(rules_path)
            try:
                self.kmsg = KmsgReader(root, path=path, rules=rules, boot=kmsg_boot)
                self.kmsg.follow(KMSG_SHARE)  # /dev/kmsg on its own thread after the first read (a file: per tick)
            except InputError as e:  # e.g. no btime in /proc/stat: the kernel log cannot be dated
                self.kmsg_problem = str(e)
        self.n = 0
        self._t: float | None = None
        self.recovered: list[str] = []  # sections that failed and read again since the caller last looked
        self.reader = Preader(root.live)  # files read every tick stay open (collect/pread.py)
        self._fast = CpuStat(root, self.reader)  # cpu_tick()'s own reader and baseline (from prime()'s at its first)
        self._fast_t: float | None = None  # its last read's time
        # the registered collectors of this use (collect/registry.py): one Tick field each
        # (`irqs` False: not the NIC's IRQ lines, which the exporter does without)
        opts = {"ns_pid": ns_pid, "units_every": units_every, "units_timeout": units_timeout, "nic_every": nic_every,
                "ethtool": ethtool, "ethtool_every": ethtool_every, "live_every": live_every, "busy_only": not util,
                "threads": threads, "procs_full_every": procs_full_every, "procs_full_max": procs_full_max}
        self.extra = [(r, r.cls(root, self.reader, **{o: opts[o] for o in r.options}))
                      for r in registered(use) if irqs or r.field != "nic_irqs"]
        # the CPUs' jiffies are read first and the processes second, by hand: the processes divide by the jiffies,
        # and the others' Seen.busy and Seen.procs come from the two
        self.cpustat: CpuStat = next(c for r, c in self.extra if r.field == "cpu_raw")
        self.procs: Processes = next(c for r, c in self.extra if r.field == "procs")
        self.extra = [(r, c) for r, c in self.extra if c is not self.cpustat and c is not self.procs]
        # a file that cannot be read degrades its section and the rest goes on: section -> "path: reason"
        self.problems: dict[str, str] = {"kernel log": self.kmsg_problem} if self.kmsg_problem else {}

    def _read(self, section: str, fn, default=None):
        """fn() or, when a file of that section cannot be read or parsed, `default` (noted once)."""
        try:
            return fn()
        except InputError as e:
            self.problems.setdefault(section, str(e))
            return default

    def prime(self) -> list[KernelEvent]:
        """First read: baselines for deltas; returns kernel-log events already in the ring."""
        self._t = time.time()
        self._read("cpu", self.cpustat.prime)
        self._read("processes", self.procs.prime)
        # what a collector's prime() read of a state (the NICs: the check's start, the exporter's first state)
        self.primed = {r.field: v for r, c in self.extra if (v := self._read(r.field, c.prime)) is not None}
        return self.kmsg.events() if self.kmsg else []

    def cpu_tick(self) -> Tick:
        """/proc/stat alone: each CPU's utilisation since the previous cpu_tick() (the first: since prime()),
        what the hot-core rule needs every second. The exporter runs this at 1 Hz and the full tick() at a
        slower cadence (fleet/exporter.py FULL_EVERY); the two keep their own baselines, so a tick() still
        covers all the time since the previous tick(). The Tick has no processes and no other section."""
        if self._t is None:
            self.prime()
        now, f, t0 = time.time(), self._fast, self._fast_t
        if t0 is None:
            f.stat, t0 = self.cpustat.stat, self._t
        raw = self._read("cpu", f.read)
        if f.cur is not None:
            self._fast_t = now
        return Tick(time=now, interval=max(1e-6, now - t0), cpu=f.iv.util if raw else {}, cpu_raw=raw)

    def kernel_events(self, interval: float = 1.0) -> list[KernelEvent]:
        """The kernel-log events that came since the last read, within a tick's share of `interval`: the exporter
        takes them every second beside cpu_tick() (a NIC reset's incident and its counts; a flooded file is read
        on at its usual pace), whichever of the two reads them first."""
        return self.kmsg.events(KMSG_SHARE * min(interval, 1.0)) if self.kmsg else []

    def section_now(self, field: str, interval: float = 1.0):
        """One registered collector's section read now, outside a tick (None when this use has none): the exporter
        reads the kernel log's counts every second with its events, so its dropped count never lags them."""
        for r, c in self.extra:
            if r.field == field:
                return self._read(field, lambda c=c: c.read(interval, Seen({}, [], self.kmsg)))
        return None

    def tick(self, force_walk: bool = False) -> Tick:
        if self._t is None:
            self.prime()
        now = time.time()
        interval = max(1e-6, now - self._t)
        # mpstat's arithmetic (model/mpstat.py): offline CPUs keep their last counters as the reference
        raw, cpu, busy, st = self._read("cpu", lambda: self.cpustat.read(interval)), {}, {}, self.cpustat
        ticks_per_cpu = interval * self.hz
        if raw is not None:
            iv, stat = st.iv, st.cur
            cpu, busy = (iv.util, {c: u.busy for c, u in iv.util.items() if c >= 0}) if self.util else ({}, iv.busy)
            # per-CPU jiffies of this interval: the denominator for per-process percentages
            ncpu = max(1, len([c for c in stat.cpus if c >= 0]))
            d = sum(stat.cpus[-1][:8]) - sum(st.prev.cpus[-1][:8])
            if d > 0:
                ticks_per_cpu = d / ncpu
        # user+nice+system jiffies per CPU: what processes can explain (collect/procs.py defers its full
        # rescan while they do)
        cpu_busy = {c: d[0] + d[1] + d[2] for c, d in raw.items() if c >= 0} if raw else None
        procs = self._read("processes", lambda: self.procs.top(ticks_per_cpu, cpu_busy, busy), Procs())
        seen = Seen(busy, procs, self.kmsg, force_walk)
        sections = {r.field: self._read(r.field, lambda c=c: c.read(interval, seen))
                    for r, c in self.extra if self.n % r.every == 0}
        sections = {k: v for k, v in sections.items() if v is not None}  # unread: the field's default
        for k, why in (p for v in sections.values() for p in getattr(v, "problems", ())):  # read around (Census)
            self.problems.setdefault(k, why)
        for r, c in self.extra:
            if c.recovers and r.field in sections and self.problems.pop(r.field, None) is not None:
                self.recovered.append(r.field)
        self._t = now
        self.n += 1
        return Tick(time=now, interval=interval, cpu=cpu, procs=procs, cpu_raw=raw, **sections)

    def kmsg_rest(self) -> list[KernelEvent]:
        """The kernel-log records not handed over yet (the follow thread's last batch; what a file's bounded tick
        left), read whole: after a check's window nothing waits on this read."""
        if self.kmsg is None:
            return []
        self.kmsg.unfollow()
        out = []
        while True:  # each read stops at max_records: until one is not cut short
            cut = self.kmsg.truncated
            out += self.kmsg.events(None)
            if self.kmsg.truncated == cut:
                return out

    def kmsg_account(self) -> dict | None:
        """The kernel-log reader's account since it started: records read, dropped (the kernel's seq numbers
        skipped them), the skipped ranges (the latest 1000), reads stopped at their bound."""
        r = self.kmsg
        if r is None:
            return None
        a = r.account()
        return {"source": r.path, "read": a["read"], "dropped": a["dropped"], "first_seq": a["first_seq"],
                "last_seq": a["last_seq"], "gaps": [list(g) for g in a["gaps"]], "gaps_total": a["gaps_total"],
                "bounded_reads": a["bounded"], "behind_bytes": r.behind_bytes}

    def close(self) -> None:
        for _, c in self.extra:
            c.close()
        self.procs.close()
        self.reader.close()
        if self.kmsg:
            self.kmsg.close()
