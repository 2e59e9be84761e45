"""The record types: what the collectors produce and the store, dump, exporter and web carry.

One home for each (below's model/sample.rs is the shape we follow): a collector fills these, the
store encodes them by field name (store/codec.py), and every export is `to_dict()` of them, so a
new field is written in one place. tests/test_model.py fails when a Tick field reaches neither the
dump, the exporter's metric vocabulary nor the web data.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from . import mpstat
from .metric import Metric
from .mpstat import CpuUtil
from .section import SECTIONS, MapSection, Section, key_of, table, untable
from .thresholds import CRASH_LOOP_RESTARTS
from .timeparse import iso

# `ethtool -S` counters that mean "the NIC reset itself, or a queue timed out or hung": the names drivers
# use (ENA total_resets, wd_expired, suspected_poll_starvation, missing_tx_cmpl...; virtio_net tx_timeouts;
# mlx5 tx_timeout...; bnxt reset_count; i40e tx_timeout_count...), matched by name so a driver not seen
# before is read too. Per-queue copies (a digit in the name) are left out: they repeat the totals
# queue by queue (96 queues, 96 series) and the per-queue sysfs tx_timeout is read apart.
RESET_COUNTER = re.compile(r"^(?:[a-z]+_)*(?:total_resets|resets?|reset_count|reset_fail\w*|tx_timeouts?|tx_timeout_count|"
                           r"timeouts?|wd_expired|watchdog\w*|suspected_poll_starvation|missing_tx_cmpl|missing_intr|"
                           r"missing_first_intr|admin_to|os_netdev_wd|tx_restart_queue|hangs?|tx_hang\w*|recover\w*)$")


def keyed_by_name(starve: dict) -> dict:
    """Starvation figures with CPU numbers as strings (JSON object keys), for the store and dumps."""
    return {**starve, **{k: {str(c): v for c, v in starve.get(k, {}).items()}
                         for k in ("ksoftirqd_wait_ms", "ksoftirqd_run_ms")}}


@dataclass(slots=True, unsafe_hash=True)
class ProcUse:
    """CPU a process used on one CPU over an interval. Treated as immutable but not frozen (made
    per busy task every second; a frozen dataclass's __init__ costs several times a slotted one's)."""

    pid: int
    comm: str
    cpu: int
    pct: float  # percent of that one CPU
    estimate: bool = False  # moved or scaled by fit_to_cpus: its threads ran on more than one CPU

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "pid": self.pid, "comm": self.comm, "pct": self.pct, "estimate": self.estimate}


_COLS: dict = {}  # (cpu, *stored jiffies) -> (all columns, CpuUtil): a second's rows repeat (~USER_HZ, mostly idle)
_BUSY: dict = {}  # stored jiffies -> busy % (the same for every CPU with that row)
MEMO_MAX = 1 << 16


def _column(cpu: int, stored: tuple[int, ...]):
    """(all columns, from_deltas) of one CPU's stored jiffies."""
    full = stored + (0,) * (len(mpstat.FIELDS) - len(stored)) if len(stored) <= len(mpstat.FIELDS) else stored
    return full, mpstat.from_deltas(cpu, full)


def _named(r: dict) -> bool:
    """Whether a record holds CPU rows in this version's column order (all do since they were named)."""
    order = r.get("cf")
    return "c" in r and "ca" in r and (not order or order is mpstat.FIELDS or list(order) == list(mpstat.FIELDS))


class CpuJiffies(MapSection):
    """Each CPU's /proc/stat jiffies over the tick's interval (collect/cpu.py; -1: "all", the shown CPUs' sum), its
    columns named by model/mpstat.py FIELDS. Tick.cpu, mpstat's percentages, is its view (util(): never stored, dumped
    as "cpus"). Stored over the record's own keys as before sections: cf (column names), ci (the CPUs, or their count
    when 0..n-1), c (rows, trailing zero columns left out), ca ("all"). The minute keeps busy/sys % instead (rollup)."""

    FIELD = "cpu_raw"
    KEY = "."
    DUMP = "cpus"  # its view's key: Tick.to_dict dumps `cpu` there
    NO_METRICS = "jiffies: exported as the ratios of `cpu`"
    WEB = "not shown: jiffies: drawn as the busy/sys values of `cpu`"

    def stored(self) -> dict:
        cpus = sorted(c for c in self if c >= 0)
        return {"cf": mpstat.FIELDS, "ci": cpus if cpus != list(range(len(cpus))) else len(cpus),
                "c": [_trim(self[c]) for c in cpus], "ca": list(self[-1])}

    @classmethod
    def from_stored(cls, rec: dict) -> "CpuJiffies | None":
        """A tick record's rows (None: none) by column name, with util(); remembered: a day of 96 CPUs is 8.3 M rows."""
        if "c" not in rec:
            return None
        raw, cpu, rows, ca = {}, {}, rec["c"], rec["ca"]
        if not _named(rec):  # "ca": since the mpstat arithmetic the shown CPUs' sum (before, the aggregate line's)
            *rows, ca = ([dict(zip(rec["cf"], v)).get(f, 0) for f in mpstat.FIELDS] for v in (*rows, ca))
        memo = _COLS
        if len(memo) > MEMO_MAX:
            memo.clear()
        get = memo.get
        for c, v in zip(rec["ci"] if isinstance(rec["ci"], list) else range(rec["ci"]), rows):
            raw[c], cpu[c] = get(k := (c, *v)) or memo.setdefault(k, _column(c, tuple(v)))
        raw[-1], cpu[-1] = _column(-1, tuple(ca))
        out = cls(raw)  # filled as a plain dict: a subclass's item stores are slower
        out._util = cpu
        return out

    def util(self) -> dict[int, CpuUtil]:
        """`cpu`: mpstat's percentages of each row (from_deltas)."""
        if "_util" not in self.__dict__:
            self._util = {c: _column(c, tuple(v))[1] for c, v in self.items()}
        return self._util

    @staticmethod
    def busy_of(rec: dict) -> tuple[list[int], list[float]] | None:
        """The CPUs of a tick record and their busy %, equal to from_deltas(...).busy, without making a CpuUtil per
        CPU (the hot-core rule reads this for every second). None: not a record it knows."""
        if not _named(rec):
            return None
        ci = rec["ci"] if isinstance(rec["ci"], list) else list(range(rec["ci"]))
        if len(ci) != len(rec["c"]) or len(set(ci)) != len(ci) or min(ci, default=0) < 0:
            return None  # rows from_stored would map otherwise (zip, dict): let it
        memo = _BUSY
        if len(memo) > MEMO_MAX:
            memo.clear()
        get = memo.get  # TICKLESS rows depend on cpu >= 0 only: every CPU here is
        return ci, [b if (b := get(k := tuple(v))) is not None else memo.setdefault(k, _column(0, k)[1].busy)
                    for v in rec["c"]]

    @staticmethod
    def util_of(rec: dict, c: int) -> "CpuUtil | None | bool":
        """CPU `c`'s percentages in a tick record, without the other rows (False: not a record it knows)."""
        if not _named(rec):
            return False
        rows, ci = (rec["ca"],) if c < 0 else rec["c"], [-1] if c < 0 else rec["ci"]  # "all" is always "ca"
        if isinstance(ci, list):
            i = next((j for j in range(min(len(ci), len(rows)) - 1, -1, -1) if ci[j] == c), None)  # the last wins
        else:
            i = c if c < min(ci, len(rows)) else None
        if i is None:
            return None
        return (_COLS.get(k := (c, *rows[i])) or _COLS.setdefault(k, _column(c, tuple(rows[i]))))[1]

    def busy_sys(self) -> list[tuple[int, float | None, float | None]]:
        """(cpu, busy %, sys %) of each CPU in order by plain arithmetic (mpstat's rules when a counter went back; None,
        None: no jiffies), made once: the minute's rollup and the 10 s aggregate both read it every second."""
        got = self.__dict__.get("_busy_sys")
        if got is None:
            got = self._busy_sys = []
            for c in sorted(c for c in self if c >= 0):
                d = self[c]
                if len(d) < 10:
                    d = tuple(d) + (0,) * (10 - len(d))
                total = d[0] + d[1] + d[2] + d[3] + d[4] + d[5] + d[6] + d[7]
                if total <= 0:
                    got.append((c, None, None))
                elif min(d) < 0 or d[8] > d[0] or d[9] > d[1]:  # a counter went back: mpstat's rules (model/mpstat.py)
                    u = _column(c, d)[1]
                    got.append((c, u.busy, u.sys))
                else:
                    got.append((c, 100.0 * (total - d[3] - d[4]) / total, 100.0 * d[2] / total))
        return got

    @classmethod
    def merge(cls, vals: list["CpuJiffies"]) -> "CpuJiffies":
        """Counters: each CPU's rows summed (its columns are mpstat's over the window: the 10 s tier)."""
        out: dict = {}
        for v in vals:
            for c, d in v.items():
                out[c] = sum_rows(out[c], d) if c in out else d
        return cls({c: tuple(v) for c, v in out.items()})


def _trim(v) -> list[int]:
    """Drop trailing zero columns (steal, guest, gnice are zero on most nodes)."""
    n = len(v)
    while n > 4 and v[n - 1] == 0:
        n -= 1
    return v[:n]  # a tuple stays a tuple: the same JSON array


class Procs(list, Section):
    """The busiest processes of each CPU this tick (collect/procs.py; top(): the TOP of each CPU at MIN_PCT % or more):
    a plain list of ProcUse to every reader. Stored under "p" as a table by column name, percent in tenths (integers
    compress better), on every tick record, empty too (store/codec.py interns the names per segment). Declared right
    after CpuJiffies: a record keeps them in that order, as before sections. The 10 s tier keeps each process's
    mean over its window (merge_over), the minute none."""

    FIELD = "procs"
    KEY = "p"
    NO_METRICS = "per-process labels are unbounded cardinality: /snapshot carries the top processes"
    WEB = "not shown: per cell on hover (/api/cell)"
    F = ("cpu", "pid", "pct", "comm", "estimate")  # the stored columns
    TOP = 5  # processes kept per CPU
    MIN_PCT = 0.5  # % of a CPU

    @classmethod
    def top(cls, uses) -> "Procs":
        """The TOP processes of each CPU at MIN_PCT % of it or more, by CPU then share."""
        by_cpu: dict[int, list[ProcUse]] = {}
        for u in uses:
            if u.pct >= cls.MIN_PCT:
                by_cpu.setdefault(u.cpu, []).append(u)
        return cls(p for c in sorted(by_cpu) for p in sorted(by_cpu[c], key=lambda p: -p.pct)[:cls.TOP])

    def to_dict(self) -> list:
        return [p.to_dict() for p in self]

    def dumped(self) -> list:
        return self.to_dict()

    def empty(self) -> bool:
        return False  # stored and dumped on every tick: a second without busy processes says so

    def stored(self) -> dict:
        return {"f": self.F, "r": [[p.cpu, p.pid, int(round(p.pct * 10)), p.comm, 1 if p.estimate else 0]
                                   for p in self]}

    @classmethod
    def from_stored(cls, d: dict) -> "Procs":
        """The table by column name, without a dict per row (a tick has ~100 rows)."""
        names = d.get("f", [])
        rows = d.get("r", [])
        try:
            ic, ip, iq, im = (names.index(n) for n in ("cpu", "pid", "pct", "comm"))
        except ValueError:
            return cls(ProcUse(r["pid"], r["comm"], r["cpu"], r["pct"] / 10, bool(r.get("estimate", 0)))
                       for r in (dict(zip(names, row)) for row in rows))
        ie = names.index("estimate") if "estimate" in names else None
        if ie is None:
            return cls(ProcUse(row[ip], row[im], row[ic], row[iq] / 10, False) for row in rows)
        return cls(ProcUse(row[ip], row[im], row[ic], row[iq] / 10, bool(row[ie])) for row in rows)

    @classmethod
    def merge(cls, vals: list["Procs"]) -> "Procs":
        """A window of seconds of one second each: merge_over."""
        return cls.merge_over(vals, [1.0] * len(vals))

    @classmethod
    def merge_over(cls, vals: list["Procs"], seconds: list[float]) -> "Procs":
        """A window (the 10 s tier): each process's mean % of its CPU over it, each second weighted by its interval,
        then the window's top()."""
        use: dict[tuple[int, int], list] = {}
        for v, iv in zip(vals, seconds):
            for p in v:
                slot = use.get((p.pid, p.cpu))
                if slot is None:
                    use[(p.pid, p.cpu)] = [p.comm, p.pct * iv, p.estimate]
                else:
                    slot[0] = p.comm
                    slot[1] += p.pct * iv
                    slot[2] = slot[2] or p.estimate
        total = sum(seconds)
        return cls.top(ProcUse(pid, comm, cpu, v / total if total > 0 else 0.0, est)
                       for (pid, cpu), (comm, v, est) in use.items())


@dataclass(frozen=True)
class ControllerCount:
    """One v1 controller: /proc/cgroups num_cgroups vs directories under its mount."""

    name: str
    hierarchy: int
    tracked: int  # num_cgroups: includes dying cgroups until they are freed
    live: int | None  # directories including the root; None if unknown: not mounted here, or its directory is absent
    mount: str | None

    @property
    def dying(self) -> int | None:
        return None if self.live is None else max(0, self.tracked - self.live)

    def to_dict(self) -> dict:
        return {"controller": self.name, "hierarchy": self.hierarchy, "tracked": self.tracked, "live": self.live,
                "dying": self.dying, "mount": self.mount}


@dataclass(frozen=True)
class V2Stat:
    mount: str
    nr_descendants: int  # None (and nr_dying_descendants) in a minute stored before census was a section, on v2
    nr_dying_descendants: int
    subsys: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (live, dying), 6.12+

    def memory_dying(self) -> int:
        """Dying memory cgroups: the root's nr_dying_subsys_memory (6.12+), else every dying cgroup."""
        return self.subsys["memory"][1] if "memory" in self.subsys else self.nr_dying_descendants

    def memory_live(self) -> int:
        """Live memory cgroups, the root included, on the same count as memory_dying()."""
        return self.subsys["memory"][0] if "memory" in self.subsys else self.nr_descendants + 1

    def to_dict(self) -> dict:
        return {"mount": self.mount, "nr_descendants": self.nr_descendants,
                "nr_dying_descendants": self.nr_dying_descendants,
                "subsys": {k: list(v) for k, v in self.subsys.items()}}


@dataclass(frozen=True)
class DyingSubtree:
    """A live v2 cgroup whose removed children are still dying (where the zombies were made)."""

    path: str
    dying: int


@dataclass(frozen=True)
class Census(Section):
    """Tracked, live and dying cgroups (collect/cgroups.py): per v1 controller, the v2 root's cgroup.stat and the
    v2 subtrees holding dying cgroups (walked). Every tick has one (empty when unread). Stored over the record's
    own keys as before sections: cg (the v1 rows), c2 (v2) and ds (the subtrees)."""

    FIELD = "census"
    KEY = "."
    DUMP = "cgroups"
    WEB = "panel:census"
    METRICS = (Metric("nodesleuth_cgroups_tracked", "gauge", "Cgroups the kernel tracks, dying ones included",
                      ("controller", "hierarchy")),
               Metric("nodesleuth_cgroups_live", "gauge", "Cgroups with a directory", ("controller", "hierarchy")),
               Metric("nodesleuth_cgroups_dying", "gauge", "Removed cgroups still alive in the kernel",
                      ("controller", "hierarchy")),
               # served by model/metrics.tick_gauges with the node's ID rule (the kernel release a tick lacks)
               Metric("nodesleuth_memcg_ids_used", "gauge", "Memory-cgroup IDs held, at most (of 65535: a memcg "
                      "mkdir fails with ENOSPC when all are held): live memcgs plus the dying ones this kernel lets "
                      "keep an ID (model/memcg_ids.py: all before 4.8; since 4.8 only swap-pinned ones, so with swap "
                      "on, all dying ones are counted)"),
               Metric("nodesleuth_memcg_ids_used_ratio", "gauge", "nodesleuth_memcg_ids_used / 65535"))
    CG = ("name", "hierarchy", "tracked", "live")  # a v1 row as stored (the mount is not)

    time: float = 0.0
    v1: tuple[ControllerCount, ...] = ()
    v2: V2Stat | None = None
    dying_subtrees: tuple[DyingSubtree, ...] = ()
    live_walked_at: float | None = None
    problems: tuple[tuple[str, str], ...] = ()  # (section, "path: reason") that could not be read

    def controller(self, name: str) -> ControllerCount | None:
        return next((c for c in self.v1 if c.name == name), None)

    def memory_dying(self) -> int | None:
        """Best count of dying memory cgroups on either hierarchy."""
        mem = self.controller("memory")
        if mem is not None and mem.dying is not None:
            return mem.dying
        return None if self.v2 is None else self.v2.memory_dying()

    def memory_live(self) -> int | None:
        """Live memory cgroups (the root included), the same hierarchy memory_dying() counts."""
        mem = self.controller("memory")
        if mem is not None and mem.live is not None:
            return mem.live
        return None if self.v2 is None else self.v2.memory_live()

    def to_dict(self) -> dict:
        return {"v1": [c.to_dict() for c in self.v1], "v2": None if self.v2 is None else self.v2.to_dict()}

    def stored(self) -> dict:
        d = {"cg": table(self.v1, self.CG), "c2": self.v2 and self.v2.to_dict(),
             "ds": self.dying_subtrees and table(self.dying_subtrees, ("path", "dying"))}
        return {k: v for k, v in d.items() if v}  # the v1 rows always, an empty table too

    @classmethod
    def from_stored(cls, d: dict) -> "Census":
        """In a tick's record `d` is the record (its time too); in a minute's, its own."""
        cg, c2 = d.get("cg") or {}, d.get("c2")
        v1 = tuple(ControllerCount(x.get("name"), x.get("hierarchy", 0), x.get("tracked", 0), x.get("live"), None)
                   for x in (dict(zip(cg.get("f", []), r)) for r in cg.get("r", [])))
        v2 = None if c2 is None else V2Stat(c2.get("mount", ""), c2.get("nr_descendants"), c2.get(
            "nr_dying_descendants"), {k: tuple(x) for k, x in c2.get("subsys", {}).items()})
        return cls(d.get("t", 0.0), v1, v2, tuple(untable(d.get("ds"), DyingSubtree, "census")))

    @classmethod
    def merge(cls, vals: list["Census"]) -> "Census":
        """A state: the window's last second."""
        return vals[-1]

    @classmethod
    def fold(cls, vals: list["Census"]) -> "Census | None":
        """A minute: its last second's memory counts, what the chart draws (the v1 memory row, else the v2 root's
        counts with its memory ones); None (nothing stored) when it has neither."""
        c = vals[-1]
        v1 = tuple(x for x in c.v1 if x.name == "memory")
        v2 = c.v2 and dataclasses.replace(c.v2, subsys={k: v for k, v in c.v2.subsys.items() if k == "memory"})
        return cls(c.time, v1, None if v1 else v2) if v1 or v2 else None

    def samples(self):
        v2 = self.v2  # a minute stored before census was a section may know v2's memory count only
        rows = [(c.name, "v1", c.tracked, c.live, c.dying) for c in self.v1] + ([] if v2 is None else [
            ("all", "v2", None, None if v2.nr_descendants is None else v2.nr_descendants + 1, v2.nr_dying_descendants),
            *((k, "v2", None, *x) for k, x in v2.subsys.items())])
        for name, hier, *counts in rows:
            for kind, n in zip(("tracked", "live", "dying"), counts):
                if n is not None:
                    yield f"nodesleuth_cgroups_{kind}", (name, hier), n


@dataclass(frozen=True)
class KernelEvent:
    seq: int
    time: float | None  # wall clock, seconds; None when it cannot be derived (see `clock`)
    usec: int | None  # since boot, when the log form carries it
    reason: str
    kind: str
    severity: str
    driver: str
    ifname: str
    message: str
    reset_reason: str | None = None
    fields: dict = field(default_factory=dict)
    category: str = ""  # the rule's class (nic, lockup); empty in recordings made before it existed
    family: str = ""
    clock: str = "boot"  # wall: the line's own time | boot: boot time + uptime | read: when read | none: unknown

    def to_dict(self) -> dict:
        return {"seq": self.seq, "time": self.time, "reason": self.reason, "kind": self.kind, "ifname": self.ifname,
                "reset_reason": self.reset_reason, "message": self.message, "category": self.category,
                "family": self.family, "clock": self.clock, "fields": self.fields}


class Events(list, Section):
    """The kernel-log events that came this tick (collect/kernellog.py): a plain list of KernelEvent to every reader,
    stored under "ev" as a table by field name as before sections (the time to the µs)."""

    FIELD = "events"
    KEY = "ev"
    WEB = "data:events"
    # the exporter counts them in its own state (a NIC reset's lines grouped into one incident: fleet/exporter.py)
    METRICS = (Metric("nodesleuth_nic_kernel_events", "counter", "NIC trouble lines in the kernel log",
                      ("device", "reason")),
               Metric("nodesleuth_incidents", "counter", "Incidents seen since start (detect/incidents.py rule)",
                      ("kind",)))

    def to_dict(self) -> list:
        return [e.to_dict() for e in self]

    def dumped(self) -> list:
        return self.to_dict()

    def empty(self) -> bool:
        return not self

    def stored(self) -> dict:
        names = [f.name for f in dataclasses.fields(KernelEvent)]
        return {"f": names, "r": [[round(e.time, 6) if n == "time" else getattr(e, n) for n in names] for e in self]}

    @classmethod
    def from_stored(cls, d: dict) -> "Events":
        return cls(untable(d, KernelEvent, "events"))

    @classmethod
    def merge(cls, vals: list["Events"]) -> "Events":
        """Every event of the window."""
        return cls(e for v in vals for e in v)


@dataclass(frozen=True)
class NicCounters:
    ifname: str
    driver: str
    stats: dict[str, int]  # /sys/class/net/IF/statistics/*
    queue_tx_timeouts: int  # sum over queues/tx-*/tx_timeout
    ethtool: dict[str, int] = field(default_factory=dict)
    bus: str = ""  # PCI address the kernel log's dev_* lines use

    def resets(self) -> dict[str, int]:
        """Every reset/timeout counter the driver has, zeros included (what /metrics exports, so a
        rate() starts from the first scrape), and the sum of the per-queue sysfs tx_timeout."""
        out = {k: v for k, v in self.ethtool.items() if RESET_COUNTER.match(k) and not any(c.isdigit() for c in k)}
        out["queue_tx_timeout"] = self.queue_tx_timeouts
        return out

    def trouble(self) -> dict[str, int]:
        """Reset/timeout counters that are non-zero."""
        return {k: v for k, v in self.resets().items() if v}


class Nics(list, Section):
    """The physical NICs' counters (collect/nic.py): a plain list of NicCounters to every reader, stored under
    "nic" as before sections (each interface's chosen statistics and its trouble), when it changed."""

    FIELD = "nics"
    KEY = "nic"
    CHANGES = True
    WEB = "not shown: their trouble shows as kernel events and incidents; counters are in dump and /metrics"
    # the exporter serves these from its own state (the last full tick's NICs: fleet/exporter.py)
    METRICS = (Metric("nodesleuth_nic_driver_resets", "counter", "NIC driver reset/timeout counters (ethtool -S, "
                      "per-queue tx_timeout)", ("device", "counter")),)
    STATS = ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "tx_errors", "rx_missed_errors")

    def to_dict(self) -> dict:
        return {n.ifname: n.trouble() for n in self}

    def stored(self) -> dict:
        return {n.ifname: {"driver": n.driver, "bus": n.bus, "queue_tx_timeouts": n.queue_tx_timeouts,
                           "stats": {k: n.stats.get(k, 0) for k in self.STATS}, "ethtool": n.trouble()} for n in self}

    @classmethod
    def from_stored(cls, d: dict) -> "Nics":
        return cls(NicCounters(ifname, n.get("driver", ""), n.get("stats", {}), n.get("queue_tx_timeouts", 0),
                               {k: x for k, x in n.get("ethtool", {}).items() if k != "queue_tx_timeout"},
                               n.get("bus", "")) for ifname, n in d.items())

    @classmethod
    def merge(cls, vals: list["Nics"]) -> "Nics":
        """Counters the kernel keeps running: the window's last read."""
        return vals[-1]


@dataclass(frozen=True)
class Unit:
    id: str
    n_restarts: int
    active: str
    sub: str
    enabled: str  # UnitFileState: enabled, disabled, masked, static...
    result: str
    exit_status: int
    main_pid: int
    restart: str  # Restart= policy
    restart_usec: int
    fragment: str
    cgroup: str

    @property
    def crash_looping(self) -> bool:
        return self.sub == "auto-restart" or (self.n_restarts >= CRASH_LOOP_RESTARTS and self.result != "success")

    def to_dict(self) -> dict:
        return {"unit": self.id, "n_restarts": self.n_restarts, "active": self.active, "sub": self.sub,
                "enabled": self.enabled, "result": self.result, "exit_status": self.exit_status,
                "crash_looping": self.crash_looping}


class Units(list, Section):
    """systemd's service units (collect/units.py, every few ticks): a plain list of Unit to every reader, stored
    under "u" as a table by field name as before sections, when it changed."""

    FIELD = "units"
    KEY = "u"
    CHANGES = True
    WEB = "not shown: shown by explain's chain (creator -> unit), not as a series"
    # the exporter serves these from its own state (a crash loop remembered between full ticks: fleet/exporter.py)
    METRICS = (Metric("nodesleuth_unit_restarts", "counter", "systemd NRestarts per service", ("unit",)),
               Metric("nodesleuth_unit_crash_looping", "gauge", "1 if the unit is in a restart loop", ("unit",)))

    def to_dict(self) -> list:
        return [u.to_dict() for u in self]

    def stored(self) -> dict:
        return table(self, tuple(f.name for f in dataclasses.fields(Unit)))

    @classmethod
    def from_stored(cls, d: dict) -> "Units":
        return cls(untable(d, Unit, "units"))

    @classmethod
    def merge(cls, vals: list["Units"]) -> "Units":
        """A state: the window's last answer."""
        return vals[-1]


def sum_rows(a, b) -> list:
    """Two per-CPU rows added column by column (the shorter one padded with zeros)."""
    if len(a) < len(b):
        a = list(a) + [0] * (len(b) - len(a))
    elif len(b) < len(a):
        b = list(b) + [0] * (len(a) - len(b))
    return [x + y for x, y in zip(a, b)]


_NUM = (int, float)


def sum_num(a, b):
    """Numbers summed, dicts of them key by key (ksoftirqd wait/run per CPU), anything else: b's."""
    if a is None:
        return b
    if b is None:
        return a
    ta, tb = type(a), type(b)
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            x = out.get(k)
            if x is None:
                out[k] = v
            elif type(x) in _NUM and type(v) in _NUM:  # the per-CPU figures: no call each
                out[k] = x + v
            else:
                out[k] = sum_num(x, v)
        return out
    if ta in _NUM and tb in _NUM:
        return a + b
    return b


class Meminfo(MapSection):
    """/proc/meminfo (bytes; the KEYS this kernel prints, collect/meminfo.py): Percpu and Slab are where
    dying memory cgroups show their cost. Stored under "mi" as before sections, even when unread ({})."""

    FIELD = "meminfo"
    KEY = "mi"
    WEB = "panel:memory"
    KEYS = ("MemTotal", "MemAvailable", "Percpu", "Slab", "SUnreclaim", "Cached")
    DRAWN = ("Percpu", "Slab")  # what the minute tier keeps (older minutes: RollupMinute's percpu, slab)
    METRICS = (Metric("nodesleuth_memory_percpu_bytes", "gauge", "Percpu from /proc/meminfo"),
               Metric("nodesleuth_memory_slab_bytes", "gauge", "Slab from /proc/meminfo"))

    def empty(self) -> bool:
        return False

    @classmethod
    def merge(cls, vals: list["Meminfo"]) -> "Meminfo":
        """A state: the window's last second."""
        return cls(vals[-1])

    @classmethod
    def fold(cls, vals: list["Meminfo"]) -> "Meminfo":
        return cls({k: vals[-1][k] for k in cls.DRAWN if k in vals[-1]})

    def samples(self):
        for k, m in zip(self.DRAWN, self.METRICS):
            if k in self:
                yield m.name, (), self[k]


class NicIrqs(MapSection):
    """The NIC's IRQ lines of /proc/interrupts (collect/irqs.py): per line, its per-CPU count this interval.
    Stored under "ni" as before sections: each line's CPUs that took some, as [cpu, delta] pairs."""

    FIELD = "nic_irqs"
    KEY = "ni"
    WEB = "not shown: in dump and the recording; the starvation chart shows NET_RX/NET_TX per second"
    NO_METRICS = "per-CPU per-IRQ line: in /snapshot and the recording"

    def stored(self) -> dict:
        """Each line's CPUs that took some, and its last CPU (so the rows' length reads back)."""
        return {k: [[c, d] for c, d in enumerate(v) if d or c == len(v) - 1] for k, v in self.items()}

    @classmethod
    def from_stored(cls, d: dict, n: int | None = None) -> "NicIrqs":
        """Rows of `n` CPUs (None: up to the highest CPU stored)."""
        if n is None:
            n = 1 + max((c for v in d.values() for c, _ in v), default=0)
        out = cls()
        for k, pairs in d.items():
            row = out[k] = [0] * n
            for c, x in pairs:
                if c < n:
                    row[c] = x
        return out

    @classmethod
    def from_record(cls, d: dict, rec: dict) -> "NicIrqs":
        """In a tick's record, rows as long as its CPU rows ("c", "ci"; older records stored no last CPU)."""
        rows, ci = rec.get("c"), rec.get("ci")
        if rows is None:
            return cls.from_stored(d)
        return cls.from_stored(d, len(set(ci[:len(rows)]) | {-1}) - 1 if isinstance(ci, list) else
                               max(0, min(ci, len(rows))))

    @classmethod
    def merge(cls, vals: list["NicIrqs"]) -> "NicIrqs":
        """A window: each line's per-CPU counts summed."""
        out = cls()
        for v in vals:
            for k, row in v.items():
                out[k] = sum_rows(out[k], row) if k in out else list(row)
        return out


class Softirqs(MapSection):
    """Per-CPU softirq counts of the interval (/proc/softirqs deltas): name -> one count per CPU."""

    FIELD = "softirqs"
    KEY = "si"  # stored so before sections were
    WEB = "panel:starve"
    NO_METRICS = "per-CPU per-softirq series are 10 x CPUs: the ksoftirqd wait and PSI say what matters"

    @classmethod
    def merge(cls, vals: list["Softirqs"]) -> "Softirqs":
        """A window: each softirq's per-CPU counts summed."""
        return cls(NicIrqs.merge(vals))

    MINUTE = ("NET_RX", "NET_TX")  # what the minute tier keeps: the rows the starvation chart draws

    @classmethod
    def fold(cls, vals: list["Softirqs"]) -> "Softirqs":
        """A minute: the network softirqs' per-CPU counts summed (the other 8 rows would be 4/5 of its size)."""
        m = cls.merge(vals)
        return cls({k: v for k, v in m.items() if k in cls.MINUTE})


class Starve(MapSection):
    """The victim's side of the interval (collect/starvation.py): ksoftirqd wait and run per CPU (ms),
    CPU pressure (ms of it some task waited), and the interval (s) they cover."""

    FIELD = "starve"
    KEY = "sv"  # stored so before sections were
    DUMP = "starvation"
    WEB = "panel:starve"
    METRICS = (Metric("nodesleuth_ksoftirqd_wait_ratio", "gauge",
                      "Fraction of the interval ksoftirqd/N waited for its CPU (runnable, not running)", ("cpu",)),
               Metric("nodesleuth_cpu_pressure_some_ratio", "gauge",
                      "Fraction of the interval some task waited for a CPU (/proc/pressure/cpu)"))

    def to_dict(self) -> dict:
        return keyed_by_name(self)

    def stored(self) -> dict:
        return keyed_by_name(self)

    @classmethod
    def from_stored(cls, d: dict) -> "Starve":
        starve = dict(d)
        for k in ("ksoftirqd_wait_ms", "ksoftirqd_run_ms"):
            per = starve.get(k, {})
            starve[k] = dict(zip(_int_keys(tuple(per)), per.values()))
        return cls(starve)

    @classmethod
    def merge(cls, vals: list["Starve"]) -> "Starve":
        """A window: waits, runs, pressure and the interval summed."""
        out = None
        for v in vals:
            out = sum_num(out, v)
        return cls(out or {})

    def samples(self):
        iv = max(1e-6, self.get("interval") or 1.0)
        for c, ms in sorted(self.get("ksoftirqd_wait_ms", {}).items()):
            yield "nodesleuth_ksoftirqd_wait_ratio", (str(c),), round(min(1.0, ms / 1000 / iv), 4)
        if self.get("psi_cpu_some_ms") is not None:
            yield "nodesleuth_cpu_pressure_some_ratio", (), round(min(1.0, self["psi_cpu_some_ms"] / 1000 / iv), 4)


_INT_KEYS: dict = {}


def _int_keys(keys: tuple[str, ...]) -> tuple[int, ...]:
    """CPU numbers of JSON object keys (strings), converted once: every second has the same 96+."""
    ints = _INT_KEYS.get(keys)
    if ints is None:
        if len(_INT_KEYS) > 64:
            _INT_KEYS.clear()
        ints = _INT_KEYS[keys] = tuple(map(int, keys))
    return ints


@dataclass
class Softnet(Section):
    """Per CPU over the interval: /proc/net/softnet_stat, the kernel's per-CPU receive work
    (net/core/net-procfs.c softnet_seq_show; model/procfs.parse_softnet reads every generation's
    columns). What a starved core does to the network shows here first: time_squeeze counts
    net_rx_action running out of budget or time with work left, dropped the packets its backlog had
    no room for. Deltas of the kernel's u32 counters (modulo 2^32); backlog_len is a gauge; a column
    the running kernel does not print is None."""

    FIELD = "softnet"
    METRICS = tuple(Metric(f"nodesleuth_softnet_{n}", "counter", h, ("cpu",)) for n, h in (
        ("processed", "Packets processed by each CPU (softnet_stat, as node_exporter's node_softnet_processed_total)"),
        ("dropped", "Packets dropped because the CPU's backlog was full (softnet_stat)"),
        ("times_squeezed", "Times net_rx_action ran out of budget or time with work left (softnet_stat time_squeeze)"),
        ("received_rps", "RPS interrupts received by the CPU (softnet_stat)"),
        ("flow_limit_count", "Packets dropped by the flow limit (softnet_stat)"))) + (
        Metric("nodesleuth_softnet_backlog_len", "gauge", "Packets in the CPU's backlog queues (softnet_stat)",
               ("cpu",)),)
    WEB = "panel:softnet"

    cpus: list[int]
    processed: list[int]
    dropped: list[int]
    time_squeeze: list[int]
    received_rps: list[int] | None = None
    flow_limit_count: list[int] | None = None
    backlog_len: list[int] | None = None
    totals: dict | None = None  # the kernel's counters now, for /metrics (not stored: deltas are)

    COUNTERS = (("processed", "processed"), ("dropped", "dropped"), ("time_squeeze", "times_squeezed"),
                ("received_rps", "received_rps"), ("flow_limit_count", "flow_limit_count"))

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "totals"}
        return d

    def stored(self) -> dict:
        """Only the CPUs where something moved: a quiet 96-CPU node stores a few rows, not 96."""
        cols = [k for k in ("processed", "dropped", "time_squeeze", "received_rps", "flow_limit_count", "backlog_len")
                if getattr(self, k) is not None]
        vals = [getattr(self, k) for k in cols]
        rows = [[c, *(v[i] for v in vals)] for i, c in enumerate(self.cpus) if any(v[i] for v in vals)]
        n = len(self.cpus)
        return {"cpus": n if self.cpus == list(range(n)) else self.cpus, "f": cols, "r": rows}

    @classmethod
    def from_stored(cls, d: dict) -> "Softnet":
        cpus = list(range(d["cpus"])) if isinstance(d["cpus"], int) else list(d["cpus"])
        at = {c: i for i, c in enumerate(cpus)}
        cols = {k: [0] * len(cpus) for k in d.get("f", [])}
        for row in d.get("r", []):
            i = at.get(row[0])
            if i is not None:
                for k, v in zip(d.get("f", []), row[1:]):
                    cols[k][i] = v
        return cls(cpus=cpus, processed=cols.get("processed", [0] * len(cpus)),
                   dropped=cols.get("dropped", [0] * len(cpus)), time_squeeze=cols.get("time_squeeze", [0] * len(cpus)),
                   received_rps=cols.get("received_rps"), flow_limit_count=cols.get("flow_limit_count"),
                   backlog_len=cols.get("backlog_len"))

    def samples(self):
        if self.totals:
            for key, name in self.COUNTERS:
                col = self.totals.get(key)
                if col is not None:
                    for c, v in zip(self.cpus, col):
                        yield f"nodesleuth_softnet_{name}", (str(c),), v
        if self.backlog_len is not None:
            for c, v in zip(self.cpus, self.backlog_len):
                yield "nodesleuth_softnet_backlog_len", (str(c),), v

    def of(self, cpu: int) -> dict:
        """One CPU's figures this interval (empty when the CPU has no row: offline)."""
        if cpu not in self.cpus:
            return {}
        i = self.cpus.index(cpu)
        return {k: getattr(self, k)[i] for k in ("processed", "dropped", "time_squeeze", "received_rps",
                                                   "flow_limit_count", "backlog_len") if getattr(self, k) is not None}

    @classmethod
    def merge(cls, vals: list["Softnet"]) -> "Softnet":
        """A window of seconds (the 10 s tier): each CPU's counters summed, its backlog the last second's."""
        cpus = sorted({c for v in vals for c in v.cpus})
        at = {c: i for i, c in enumerate(cpus)}
        cols: dict = {}
        for k in ("processed", "dropped", "time_squeeze", "received_rps", "flow_limit_count", "backlog_len"):
            if all(getattr(v, k) is None for v in vals):
                cols[k] = None
                continue
            col = [0] * len(cpus)
            for v in vals:
                for c, x in zip(v.cpus, getattr(v, k) or ()):
                    col[at[c]] = x if k == "backlog_len" else col[at[c]] + x
            cols[k] = col
        return cls(cpus=cpus, **cols)


def _in(ticks, t0: float, t1: float) -> list:
    """Ticks whose interval ends in (t0, t1] (the half second of slack of detect/incidents._window)."""
    return [t for t in ticks if t0 < t.time <= t1 + 0.5]


SOFTNET_EVIDENCE = ("time_squeeze", "dropped", "processed", "received_rps")


def softnet_on(ticks, cpu: int, t0: float, t1: float, before: float = 60.0) -> dict:
    """One CPU's softnet_stat over (t0, t1]: time_squeeze, dropped, processed, received_rps, summed,
    with the same per second in the `before` seconds before and the largest of the other CPUs', so a
    reader sees whether the network work left undone is this core's and new. Empty when no tick of
    the window has a softnet section (not recorded, or the CPU had no row: offline)."""
    def tot(ts, which) -> tuple[dict, float]:
        out: dict = {}
        secs = 0.0
        for t in ts:
            s = t.softnet
            if s is None:
                continue
            secs += t.interval
            rows = [s.of(c) for c in s.cpus if which(c)]
            for k in SOFTNET_EVIDENCE:
                vals = [r[k] for r in rows if k in r]
                if vals:
                    out[k] = out.get(k, 0) + sum(vals)
        return out, secs

    during, prior = _in(ticks, t0, t1), _in(ticks, t0 - before, t0)
    here, secs = tot(during, lambda c: c == cpu)
    if not secs or not here:
        return {}
    out = {"cpu": cpu, "seconds": round(secs, 2), **here}
    b, bsecs = tot(prior, lambda c: c == cpu)
    if bsecs:
        out["before_per_s"] = {k: round(v / bsecs, 2) for k, v in b.items()}
    others: dict[int, int] = {}
    for t in during:
        if t.softnet is not None:
            for c, v in zip(t.softnet.cpus, t.softnet.time_squeeze):
                if c != cpu:
                    others[c] = others.get(c, 0) + v
    if others:
        c, v = max(others.items(), key=lambda kv: kv[1])
        out["others_max_squeeze"] = {"cpu": c, "time_squeeze": v}
    return out


def softnet_text(s: dict) -> str:
    """softnet_on() in one line of evidence."""
    b = s.get("before_per_s")
    line = (f"softnet_stat on CPU {s['cpu']} over {s['seconds']:.0f} s: {s.get('time_squeeze', 0)} time_squeeze "
            f"(net_rx_action out of budget/time with packets left), {s.get('dropped', 0)} dropped (backlog full), "
            f"{s.get('processed', 0)} packets processed")
    if b is not None:
        line += (f"; in the minute before {b.get('time_squeeze', 0):g}/s squeezed, {b.get('dropped', 0):g}/s dropped")
    o = s.get("others_max_squeeze")
    if o is not None:
        line += f"; the most on another CPU: {o['time_squeeze']} squeezes on CPU {o['cpu']}"
    return line


# TCP health counters, node_exporter's names (Prefix_Name); file: snmp (Tcp) or netstat (TcpExt), and
# what counts them (net/ipv4 increment sites; kernel/mib-table.md of the issue-29 research)
TCP_COUNTERS = {
    "Tcp_RetransSegs": "segments retransmitted (counted per segment: a TSO skb counts all it carries; SYN-ACK "
                       "retransmits too)",
    "Tcp_OutSegs": "segments sent (the retransmit ratio's denominator)",
    "Tcp_InErrs": "segments received in error (bad checksum, malformed)",
    "Tcp_OutRsts": "segments sent with RST",
    "Tcp_EstabResets": "connections that went from ESTABLISHED or CLOSE_WAIT straight to CLOSED (RST received, "
                       "abortive close, or killed by retries)",
    "TcpExt_TCPTimeouts": "retransmission timer (RTO) firings",
    "TcpExt_TCPLostRetransmit": "retransmitted segments lost again",
    "TcpExt_TCPAbortOnTimeout": "connections killed because retries ran out (tcp_retries2, tcp_syn_retries, "
                                "TCP_USER_TIMEOUT)",
    "TcpExt_TCPAbortOnData": "connections reset because data arrived after close, or closed with unread data",
    "TcpExt_TCPSynRetrans": "SYN and SYN-ACK retransmits",
    "TcpExt_ListenOverflows": "connections dropped because the listener's accept queue was full",
    "TcpExt_ListenDrops": "SYNs and connections dropped at a listener (overflows included)",
    "TcpExt_TCPRcvQDrop": "segments dropped because the socket's receive buffer was full (5.0+)",
    "TcpExt_TCPBacklogDrop": "segments dropped because the socket's backlog was full while its owner held it",
}
TCP_SNMP = tuple(k for k in TCP_COUNTERS if k.startswith("Tcp_"))


def netstat_metric(key: str) -> str:
    """The exported name of a TCP counter: node_exporter's node_netstat_Tcp_RetransSegs in Prometheus'
    snake_case (promtool lints node_exporter's camelCase): nodesleuth_netstat_tcp_retrans_segs."""
    prefix, name = key.split("_", 1)
    return "nodesleuth_netstat_" + prefix.lower() + "_" + re.sub(
        r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
TCP_NETSTAT = tuple(k for k in TCP_COUNTERS if k.startswith("TcpExt_"))


@dataclass
class Tcp(Section):
    """TCP health per second from /proc/net/snmp and /proc/net/netstat, which are per network namespace:
    the host's (init) netns every tick, and the netns of running pods/containers (one process each,
    /proc/PID/net/*), at most a bounded number a tick, the rest in turn (collect/tcp.py). Deltas of the
    kernel's counters; a netns read after several ticks covers `s` seconds; only namespaces where a
    counter moved are kept. A pod's retransmits never show in the host's counters."""

    FIELD = "tcp"
    METRICS = tuple(Metric(netstat_metric(k), "counter",
                           f"Statistic {k.replace('_', '', 1)} (node_exporter's node_netstat_{k}): {h}; per network "
                           "namespace, netns=\"\" the host's", ("netns",)) for k, h in TCP_COUNTERS.items())
    WEB = "panel:tcp"

    init: dict | None  # the host's netns: key -> delta this interval (a key the kernel lacks is absent); None: unread
    netns: list = field(default_factory=list)  # other netns whose counters moved: {"ns", "pid", "comm", "cgroup", "s", "d"}
    known: int = 0  # other network namespaces known (enumerated from /proc/*/ns/net)
    read: int = 0  # of them read this tick
    missing: list = field(default_factory=list)  # counters this kernel does not have (TCPRcvQDrop before 5.0)
    totals: dict | None = None  # the kernel's counters per netns label, for /metrics (not stored: deltas are)

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "totals"}

    def stored(self) -> dict:
        """The host's counters that moved only (a quiet second is a few bytes); `missing` says which the
        kernel lacks, so a reader tells 0 from absent."""
        d = self.to_dict()
        if self.init is not None:
            d["init"] = {k: v for k, v in self.init.items() if v}
        return d

    @classmethod
    def from_stored(cls, d: dict) -> "Tcp":
        t = cls.from_dict(d)
        if t.init is not None:
            t.init = {**{k: 0 for k in TCP_COUNTERS if k not in t.missing}, **t.init}
        return t

    def sum(self, key: str) -> int:
        """One counter's delta over every netns read this tick."""
        return (self.init or {}).get(key, 0) + sum(n["d"].get(key, 0) for n in self.netns)

    @classmethod
    def merge(cls, vals: list["Tcp"]) -> "Tcp":
        """A window of seconds: the host's deltas summed (None when no second read it), each other netns's
        deltas and seconds summed under its last second's pid/comm/cgroup."""
        inits = [v.init for v in vals if v.init is not None]
        init = None
        if inits:
            init = {}
            for d in inits:
                for k, x in d.items():
                    init[k] = init.get(k, 0) + x
        by: dict = {}
        for v in vals:
            for n in v.netns:
                m = by.setdefault(n["ns"], {**n, "s": 0, "d": {}})
                m.update({k: n[k] for k in n if k not in ("s", "d")})
                m["s"] += n.get("s", 0)
                for k, x in n["d"].items():
                    m["d"][k] = m["d"].get(k, 0) + x
        return cls(init, list(by.values()), max(v.known for v in vals), sum(v.read for v in vals), vals[-1].missing)

    def samples(self):
        for label, vals in (self.totals or {}).items():
            for k in TCP_COUNTERS:
                if k in vals:
                    yield netstat_metric(k), (label,), vals[k]


def tcp_in(ticks, t0: float, t1: float) -> dict:
    """TCP counters summed over (t0, t1] and every netns read: {"seconds", "d": {key: n}, "by_ns":
    {ns: {"pid", "comm", "cgroup", "d"}}} (ns 0 is the host's). Empty when no tick there has a tcp section."""
    d: dict[str, int] = {}
    by: dict = {}
    secs = 0.0
    for t in _in(ticks, t0, t1):
        s = t.tcp
        if s is None:
            continue
        secs += t.interval
        parts = ([{"ns": 0, "pid": 1, "comm": "(host)", "cgroup": "", "d": s.init}] if s.init else []) + s.netns
        for n in parts:
            slot = by.setdefault(n["ns"], {"pid": n.get("pid"), "comm": n.get("comm"), "cgroup": n.get("cgroup"),
                                           "d": {}})
            for k, v in n["d"].items():
                d[k] = d.get(k, 0) + v
                slot["d"][k] = slot["d"].get(k, 0) + v
    return {"seconds": round(secs, 2), "d": d, "by_ns": by} if secs else {}


@dataclass
class Sockets(Section):
    """The connections behind a TCP counter spike: a bounded inet_diag scan (collect/inetdiag.py) of the
    netns whose counters spiked, run only then (capped in time and count; never every second), keeping
    the sockets retransmitting or in RTO backoff with their owner (a /proc/*/fd inode scan for those
    few only) and cgroup id. One entry per netns scanned this tick."""

    FIELD = "sockets"
    METRICS = (Metric("nodesleuth_socket_scans", "counter", "Per-connection inet_diag scans that TCP counter "
                      "spikes triggered (capped per netns and in time)"),
               Metric("nodesleuth_socket_scan_seconds", "counter", "CPU seconds the triggered socket scans took "
                      "(inet_diag walk, tcp_info decode, owner lookup)"))
    WEB = "panel:tcp"

    scans: list  # {"ns", "pid", "why", "walked", "truncated", "ms", "cpu_ms", "conns": [...]}
    totals: dict | None = None  # scans and CPU seconds since the collector started, for /metrics (not stored)

    def to_dict(self) -> dict:
        return {"scans": self.scans}

    @classmethod
    def merge(cls, vals: list["Sockets"]) -> "Sockets":
        """A window of seconds: every scan of it (at most one a second)."""
        return cls([x for v in vals for x in v.scans])

    def samples(self):
        if self.totals:
            yield "nodesleuth_socket_scans", (), self.totals["scans"]
            yield "nodesleuth_socket_scan_seconds", (), round(self.totals["cpu_s"], 6)


def sockets_in(ticks, t0: float, t1: float) -> list[dict]:
    """Every connection the triggered scans of (t0, t1] found, each with its scan's time and netns."""
    out = []
    for t in _in(ticks, t0, t1):
        if t.sockets is not None:
            for sc in t.sockets.scans:
                out += [{**c, "t": t.time, "ns": sc["ns"]} for c in sc["conns"]]
    return out


@dataclass
class StatRead(Section):
    """What one read of the root memory cgroup's memory.stat cost, timed every few seconds: the
    read kubelet and cAdvisor make of every node (open, read to the end, close). On old kernels it
    walked every memcg, dying ones included, so its cost grew with the zombies; on kernels with
    rstat it flushes only the CPUs' pending updates. explain sets it against the dying count and
    the hot core's memory-cgroup share over a recording (the dose-response)."""

    FIELD = "stat_read"
    METRICS = (Metric("nodesleuth_memory_stat_read_seconds", "gauge",
                      "Wall time of the last read of the root cgroup's memory.stat (timed every few seconds)"),
               Metric("nodesleuth_memory_stat_read_cpu_seconds", "gauge",
                      "CPU time of the last read of the root cgroup's memory.stat (CLOCK_THREAD_CPUTIME_ID of "
                      "the reading thread: the kernel's work for it)"))
    WEB = "not shown: explain's dose-response section (the read's cost against the dying memcgs)"

    path: str  # the file read (v2: <mount>/memory.stat; v1: the memory hierarchy's root)
    wall_us: float
    cpu_us: float  # CPU time of the reading thread (CLOCK_THREAD_CPUTIME_ID, exact): the kernel's work for the read
    bytes: int

    def samples(self):
        yield "nodesleuth_memory_stat_read_seconds", (), self.wall_us / 1e6
        yield "nodesleuth_memory_stat_read_cpu_seconds", (), self.cpu_us / 1e6

    @classmethod
    def merge(cls, vals: list["StatRead"]) -> "StatRead":
        """A window of seconds (the 10 s tier): the costliest read of the window (a gauge timed every
        few seconds; the dose-response asks how costly a read became)."""
        return max(vals, key=lambda v: v.cpu_us)


@dataclass(kw_only=True)  # built by field name only: a field added here cannot shift a caller's others
class Tick:
    time: float
    interval: float  # seconds covered by cpu/procs
    cpu: dict[int, CpuUtil]
    procs: Procs = field(default_factory=Procs)  # a plain list given: made one
    census: Census = field(default_factory=Census)  # empty when unread
    cpu_raw: CpuJiffies | None = None  # jiffies per /proc/stat column this interval (a plain mapping given: made one)
    # sections of registered collectors (model/section.py): None when not read this tick
    events: Events = field(default_factory=Events)
    nics: Nics | None = None
    meminfo: Meminfo = field(default_factory=Meminfo)  # {} when unread
    nic_irqs: NicIrqs | None = None  # per-CPU deltas of the NIC's IRQ lines
    units: Units | None = None  # None on ticks where no new answer came
    softirqs: Softirqs | None = None  # per-CPU deltas this interval
    starve: Starve | None = None  # ksoftirqd wait/run per CPU (ms), CPU pressure (ms): collect/starvation.py
    softnet: Softnet | None = None
    vmstat: Vmstat | None = None
    irqtop: IrqTop | None = None
    hogs: Hogs | None = None
    tcp: Tcp | None = None
    sockets: Sockets | None = None
    kernel_log: KernelLog | None = None
    stat_read: StatRead | None = None
    kube: "Kube | None" = None
    spawns: Spawns | None = None

    def __post_init__(self):
        if self.cpu_raw is not None and not isinstance(self.cpu_raw, CpuJiffies):
            self.cpu_raw = CpuJiffies(self.cpu_raw)
        if not isinstance(self.procs, Procs):
            self.procs = Procs(self.procs)

    def cpu_busy(self) -> tuple[list[int], list[float]]:
        """The CPUs (not "all") and their busy %, in `cpu`'s order: what the hot-core rule reads
        every second (a decoded tick may answer without building `cpu`: store/codec.py)."""
        cpus = [c for c in self.cpu if c >= 0]
        return cpus, [self.cpu[c].busy for c in cpus]

    def cpu_of(self, c: int) -> CpuUtil | None:
        """`cpu.get(c)` (a decoded tick may answer without building `cpu`)."""
        return self.cpu.get(c)

    def to_dict(self) -> dict:
        """The one dict form of a second: `dump --format json`, and what the web and tests read."""
        d = {"time": self.time, "iso": iso(self.time), "interval": self.interval,
             "cpus": {("all" if c < 0 else str(c)): u.to_dict() for c, u in sorted(self.cpu.items())}}
        for name, cls in SECTIONS.items():  # a section dumped as its view (cpu_raw as `cpu`) finds its key taken
            d.setdefault(key_of(cls), None if getattr(self, name) is None else getattr(self, name).dumped())
        return d


@dataclass
class MemcgCost:
    percpu_bytes: float  # Percpu per memory cgroup
    slab_bytes: float  # Slab per memory cgroup (upper bound for a dying one)
    probes: int  # memcgs made
    batches: int
    possible_cpus: int
    version: str  # "v1" or "v2"

    def to_dict(self) -> dict:
        return {"percpu_bytes_per_memcg": round(self.percpu_bytes), "slab_bytes_per_memcg": round(self.slab_bytes),
                "probes": self.probes, "batches": self.batches, "possible_cpus": self.possible_cpus,
                "version": self.version}


@dataclass(frozen=True)
class CgEvent:
    time: float  # perf clock seconds
    event: str  # mkdir | rmdir | release
    comm: str
    pid: int
    hierarchy: int
    cg_id: int
    path: str


@dataclass
class Creator:
    """Who made cgroups in a churn trace (one comm and path pattern), and what became of them."""

    comm: str
    pattern: str
    hierarchy: int = 0
    mkdir: int = 0
    rmdir: int = 0
    pids: set = field(default_factory=set)
    unit: str | None = None  # the unit its cgroups sit under, by path (the most common)
    freed: int = 0  # removed and released within the zombie age
    still_dying: int = 0  # lasting: still dying the zombie age after removal (freed later, or never)
    young: int = 0  # removed less than the zombie age before the trace ended: undecided
    lifetimes: list = field(default_factory=list)  # rmdir -> release, seconds, of the released ones
    first: float = 0.0  # first and last mkdir
    last: float = 0.0
    pod: dict | None = None  # the Kubernetes pod its cgroups sit under (model/kube.py PodRef.to_dict(); names and
    #                          the restarting container filled from the node by node/kube.py name_creators)


@dataclass
class ChurnSummary:
    seconds: float
    creators: list[Creator]
    released: int  # rmdir'd cgroups freed within the trace
    still_dying: int  # rmdir'd in the trace, not released by its end
    lifetimes: list[float]  # rmdir -> release seconds
    events: int


@dataclass
class RollupMinute:
    """One minute of the recording in brief, written beside its 1 Hz ticks (store/rollup.py), so a
    day's timeline is 1,440 small records. Field names are the stored keys (kept short: one a minute
    for a year of retention)."""

    t: float  # the minute's start
    n: int  # ticks it summarises
    busy: list[int]  # per CPU: mean of the per-second busy %
    bmax: list[int]  # per CPU: max of the per-second busy % (a 3 s hot core still shows)
    sys: list[int]  # per CPU: mean sys %
    ev: list = field(default_factory=list)  # NIC events of the minute: [time, reason, kind, ifname]
    x: dict | None = None  # sections folded over the minute (Section.fold), stored by field name (model/section.py)


@dataclass
class ZombiePosture:
    """Whether this kernel has the problem class at all: does page cache still keep removed memory
    cgroups dying here, and can the kernel say how many there are."""

    kernel: str  # uname -r
    hierarchy: str  # v1 | v2 | hybrid (v1 memory controller beside a cgroup2 mount)
    reparents_lru: bool | None  # lru_reparent_memcg in /proc/kallsyms (7.1+, or a distro backport); None: unreadable
    nr_dying_subsys: bool | None  # cgroup.stat has nr_dying_subsys_memory (6.12+); None on pure v1
    probe: dict | None = None  # {"wait_s", "kinds": {"tmpfs"|"disk": {"made", "dying"}}, "exact"}; None: not run
    problem: str | None = None  # why the probe could not run

    @property
    def accumulate(self) -> bool | None:
        """True when removed memcgs stayed dying under the probe's page cache (after writeback, where
        it watched that: the problem class is here), False when none did, None when not measured."""
        if not self.probe or not self.probe.get("kinds"):
            return None
        final = [k.get("after_writeback") or k for k in self.probe["kinds"].values() if k["made"]]
        if any(f["dying"] is None for f in final):
            return None
        return any(f["dying"] > 0.5 * k["made"] for f, k in zip(final, (k for k in self.probe["kinds"].values()
                                                                          if k["made"])))

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "accumulate": self.accumulate}


@dataclass
class Vmstat(Section):
    """Reclaim and paging over the interval (/proc/vmstat deltas, node-wide): whether memory pressure
    was making the kernel scan and steal pages, directly in the allocating task (direct reclaim,
    what puts it on its CPU) or in kswapd; how often an allocation stalled; OOM kills."""

    FIELD = "vmstat"
    KEYS = ("pgscan_direct", "pgscan_kswapd", "pgsteal_direct", "pgsteal_kswapd", "allocstall", "pgmajfault",
            "compact_stall", "oom_kill", "workingset_refault_file")
    METRICS = tuple(Metric(f"nodesleuth_vmstat_{k}", "counter", f"/proc/vmstat {k} (allocstall: the sum of "
                           "allocstall_*)" if k == "allocstall" else f"/proc/vmstat {k}") for k in KEYS)
    WEB = "panel:reclaim"

    deltas: dict  # key -> delta this interval (keys this kernel prints)
    totals: dict | None = None  # the kernel's counters now, for /metrics (not stored)

    def to_dict(self) -> dict:
        return {"deltas": self.deltas}

    def stored(self) -> dict:
        return {k: v for k, v in self.deltas.items() if v}

    @classmethod
    def from_stored(cls, d: dict) -> "Vmstat":
        return cls({k: d.get(k, 0) for k in cls.KEYS})

    @classmethod
    def from_dict(cls, d: dict) -> "Vmstat":
        return cls(dict(d.get("deltas", {})))

    @classmethod
    def merge(cls, vals: list["Vmstat"]) -> "Vmstat":
        """A window of seconds: the deltas summed."""
        out: dict = {}
        for v in vals:
            for k, x in v.deltas.items():
                out[k] = out.get(k, 0) + x
        return cls(out)

    def samples(self):
        for k, v in (self.totals or {}).items():
            yield f"nodesleuth_vmstat_{k}", (), v


@dataclass
class IrqTop(Section):
    """Per CPU, the interrupt lines that fired most there since the previous full read of
    /proc/interrupts (read every few seconds: it costs the kernel milliseconds on a big node):
    [[line, name, count per second], ...]: the 3 busiest with >= 100/s, and the 3 busiest device
    (numbered) lines from 5/s (a NIC under load polls with its interrupt masked). Whose interrupts a
    CPU serves, whatever the device (a NIC's, a disk's, a timer's)."""

    FIELD = "irqtop"
    NO_METRICS = "per-CPU per-line series would be unbounded: in dump and in explain's evidence"
    WEB = "not shown: explain's evidence for a CPU whose irq/softirq time is high (which device's lines)"

    span: float  # seconds the counts cover
    cpus: dict  # str(cpu) -> [[line, name, per_s], ...]

    @classmethod
    def merge(cls, vals: list["IrqTop"]) -> "IrqTop":
        """A window of reads: each line's rate over their spans together, the top 3 a CPU again."""
        span = sum(v.span for v in vals)
        counts: dict = {}
        for v in vals:
            for cpu, rows in v.cpus.items():
                for line, name, per_s in rows:
                    key = (cpu, line)
                    counts[key] = (name, counts.get(key, (name, 0.0))[1] + per_s * v.span)
        cpus: dict = {}
        for (cpu, line), (name, n) in counts.items():
            cpus.setdefault(cpu, []).append([line, name, round(n / span, 1) if span else 0.0])
        return cls(span, {c: sorted(r, key=lambda x: -x[2])[:3] for c, r in cpus.items()})


def _rows_by(vals: list, key: Callable[[dict], Any], fold: Callable[[dict, dict], dict]) -> dict:
    """The `rows` of a window's seconds by key(row), a key's later rows folded in by fold(kept, row): the
    walk Spawns.merge and Hogs.merge share. A row is copied when first seen, so a fold that adds into
    it never edits a stored second's."""
    by: dict = {}
    for v in vals:
        for r in v.rows:
            k = key(r)
            m = by.get(k)
            by[k] = dict(r) if m is None else fold(m, r)
    return by


@dataclass
class Spawns(Section):
    """Processes started this interval: /proc/stat's `processes` counter (forks and clones since boot,
    node-wide: threads count too), and, on a second with at least collect/spawns.MIN_FORKS of them, who
    started the processes a listing of /proc caught alive, grouped by parent and command (docs/groups.md).
    A process that starts and exits between two listings is not caught: the rows are a sample, the
    counter is exact."""

    FIELD = "spawns"
    METRICS = (Metric("nodesleuth_processes_forked", "counter", "Processes and threads started on the node "
                      "(/proc/stat processes)"),)
    WEB = "not shown: explain's evidence for a group of short-lived processes (docs/groups.md)"
    MAX: ClassVar[int] = 8

    forks: int  # started this interval, node-wide (threads included)
    total: int | None = None  # the kernel's counter now, for /metrics and `dump --format openmetrics`
    # one row per (parent, command) of the processes new since the last listing (at most MAX, most first):
    # {"ppid", "pcomm", "comm", "new": caught alive this interval, "brief": caught in the last listing and gone in
    #  this one (lived under ~2 intervals), "lasting": caught in the last listing and still alive,
    #  "cgroup": the parent's (v2 path, or the first v1 line's), "child_cgroup": a caught child's when it is not
    #  the parent's (a shim starting a pod's exec probes: the pod is the children's), "listed": 1 when /proc was
    #  listed this interval}
    rows: list = field(default_factory=list)
    listed: bool = False  # /proc was listed this interval (forks >= MIN_FORKS, and the interval before too)

    @classmethod
    def merge(cls, vals: list["Spawns"]) -> "Spawns":
        """A window of seconds: forks summed; rows of the same parent and command summed, the MAX largest."""
        def add(m: dict, r: dict) -> dict:
            for f in ("new", "brief", "lasting"):
                m[f] = m.get(f, 0) + r.get(f, 0)
            if r.get("child_cgroup") and not m.get("child_cgroup"):
                m["child_cgroup"] = r["child_cgroup"]
            return m

        by = _rows_by(vals, lambda r: (r["ppid"], r["comm"]), add)
        rows = sorted(by.values(), key=lambda r: -r["new"])[:cls.MAX]
        return cls(sum(v.forks for v in vals), vals[-1].total if vals else None, rows, any(v.listed for v in vals))

    def to_dict(self) -> dict:
        return {"forks": self.forks, "total": self.total, "rows": self.rows, "listed": self.listed}

    def samples(self):
        if self.total is not None:
            yield "nodesleuth_processes_forked", (), self.total


@dataclass
class Hogs(Section):
    """The processes that took a large share of a CPU this tick (>= 20%), looked at closer: their
    scheduling class (a SCHED_FIFO/RR task can starve ksoftirqd), and whether their cgroup's CPU
    quota throttled them (cpu.stat nr_throttled, throttled time). At most 8 a tick: bounded."""

    FIELD = "hogs"
    # per-process labels would be unbounded; a pod's container is named only on these rows (>= 20% of a CPU,
    # at most MAX a second), so the series at any scrape are at most MAX
    METRICS = (Metric("nodesleuth_pod_cpu_ratio", "gauge", "Fraction of a CPU a Kubernetes pod's container took over "
                      "the last interval, for the processes that took >= 20% of a CPU (at most 8 series)",
                      ("cpu", "namespace", "pod", "container")),)
    MAX: ClassVar[int] = 8
    WEB = "not shown: explain's evidence for the processes on a hot core (class, throttling)"

    rows: list  # [{"pid", "comm", "cpu", "pct", "policy", "rt_priority", "cgroup", "nr_throttled", "throttled_ms",
    #              "pod" (model/kube.py PodRef.to_dict(), only for a process in a Kubernetes pod)}]

    @classmethod
    def merge(cls, vals: list["Hogs"]) -> "Hogs":
        """A window of seconds: each (process, CPU) at its largest share of the window, the 8 largest."""
        best = _rows_by(vals, lambda r: (r["pid"], r["cpu"]), lambda m, r: r if r["pct"] > m["pct"] else m)
        return cls(sorted(best.values(), key=lambda r: -r["pct"])[:cls.MAX])

    def samples(self):
        by: dict = {}
        for r in self.rows:
            p = r.get("pod")
            if p:
                k = (str(r["cpu"]), p.get("namespace", ""), p.get("pod", "") or p.get("uid", ""), p.get("container", ""))
                by[k] = by.get(k, 0.0) + r["pct"] / 100
        for k, v in list(by.items())[:self.MAX]:
            yield "nodesleuth_pod_cpu_ratio", k, round(v, 4)


@dataclass
class KernelLog(Section):
    """The kernel-log reader's own account of a tick (collect/kernellog.py): records read, records it never saw
    (`dropped`: the kernel's sequence numbers jumped, i.e. the ring overwrote them before this reader got to
    them, as in a flood), the sequence ranges it skipped, reads stopped at the per-tick bound with records left
    for the next one (`bounded`), and, following a file, the bytes not yet read (`behind_bytes`). A flood shows
    here as read > 0 and dropped > 0; the events of the lines read are matched as always."""

    FIELD = "kernel_log"
    METRICS = (
        Metric("nodesleuth_kernel_log_records", "counter", "Kernel-log records read and matched against the rules"),
        Metric("nodesleuth_kernel_log_dropped", "counter", "Kernel-log records never read: the kernel's sequence "
               "numbers skipped them (overwritten in the ring before they were read, e.g. during a flood)"),
        Metric("nodesleuth_kernel_log_bounded_reads", "counter", "Reads of the kernel log stopped at their "
               "per-tick bound (time or records) with records left for the next tick"),
        Metric("nodesleuth_kernel_log_behind_bytes", "gauge", "Bytes of a followed kernel-log file not read yet "
               "(0 when caught up; absent for /dev/kmsg)"))
    WEB = "not shown: the reader's bookkeeping; its events are on the timeline, its drops in dump and /metrics"

    read: int
    dropped: int
    bounded: int = 0
    gaps: list | None = None  # [[first, last], ...] kernel sequence numbers skipped this tick (at most GAPS)
    behind_bytes: int | None = None
    totals: dict | None = None  # the reader's counts since it started, for /metrics (not stored)

    GAPS: ClassVar[int] = 64

    @classmethod
    def merge(cls, vals: list["KernelLog"]) -> "KernelLog":
        """A window of seconds: the counts summed, the skipped ranges kept (at most GAPS), the last lag."""
        gaps = [g for v in vals for g in (v.gaps or ())][:cls.GAPS]
        return cls(sum(v.read for v in vals), sum(v.dropped for v in vals), sum(v.bounded for v in vals),
                   gaps or None, vals[-1].behind_bytes)

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "totals"}

    def samples(self):
        t = self.totals or {}
        yield "nodesleuth_kernel_log_records", (), t.get("read", self.read)
        yield "nodesleuth_kernel_log_dropped", (), t.get("dropped", self.dropped)
        yield "nodesleuth_kernel_log_bounded_reads", (), t.get("bounded", self.bounded)
        if self.behind_bytes is not None:
            yield "nodesleuth_kernel_log_behind_bytes", (), self.behind_bytes


@dataclass
class Kube(Section):
    """The Kubernetes pods kubelet runs on this node as the node itself records them (node/kube.py: kubelet's
    /var/log/pods), with each container's restart count (the highest N of its N.log files): names for the
    uids that cgroup paths carry, and the restart loops of containers, a Kubernetes form of a crash-looping
    unit. Written when it changed, and at least once a minute."""

    FIELD = "kube"
    METRICS = (Metric("nodesleuth_container_restarts", "gauge",
                      "Restarts of a container in a restart loop (kubelet's log files), for at most "
                      f"{10} containers with >= {CRASH_LOOP_RESTARTS} restarts: namespace, pod, container labels",
                      ("namespace", "pod", "container")),)
    WEB = "not shown: names processes and zombie creators in check, explain and the incidents page"
    LOOP_SERIES: ClassVar[int] = 10  # the most restart-loop series /metrics carries (bounded cardinality)

    pods: list  # [{"uid", "namespace", "pod", "containers": {name: restarts}}]

    @classmethod
    def merge(cls, vals: list["Kube"]) -> "Kube":
        """A window of seconds: the last listing (a state, not a counter)."""
        return vals[-1]

    def loops(self, minimum: int = CRASH_LOOP_RESTARTS) -> list[tuple[dict, str, int]]:
        """(pod, container, restarts) of the containers restarted at least `minimum` times, most first."""
        out = [(p, c, n) for p in self.pods for c, n in p.get("containers", {}).items() if n >= minimum]
        return sorted(out, key=lambda x: (-x[2], x[0].get("namespace", ""), x[0].get("pod", ""), x[1]))

    def by_uid(self) -> dict[str, dict]:
        return {p["uid"]: p for p in self.pods}

    def samples(self):
        for p, c, n in self.loops()[:self.LOOP_SERIES]:
            yield "nodesleuth_container_restarts", (p.get("namespace", ""), p.get("pod", ""), c), float(n)


