"""Ticks to compact JSON records and back. Integers where possible: zstd does the rest.

Per-CPU columns are stored as jiffy deltas (not percentages) so a read computes exactly what
mpstat would have printed for that second. Slow-changing data (NIC counters, units) is stored
when it changes and at least every `KEYFRAME` seconds, so a read from any point finds it within
that look-back.
"""

from __future__ import annotations

import orjson

from ..collect.cgroups import Census, ControllerCount, DyingSubtree, V2Stat
from ..collect.cpu import from_deltas
from ..collect.kmsg import KernelEvent
from ..collect.nic import NicCounters
from ..collect.procs import ProcUse
from ..collect.sampler import Tick
from ..collect.units import Unit

VERSION = 1
KEYFRAME = 60.0
NIC_STATS = ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "tx_errors", "rx_missed_errors")


def _trim(v) -> list[int]:
    """Drop trailing zero columns (steal, guest, gnice are zero on most nodes)."""
    v = list(v)
    while len(v) > 4 and v[-1] == 0:
        v.pop()
    return v


class Encoder:
    def __init__(self):
        self._nic = None
        self._units = None
        self._last_key = -1e18

    def encode(self, t: Tick, extra: dict | None = None) -> bytes:
        key = t.time - self._last_key >= KEYFRAME
        if key:
            self._last_key = t.time
        cpus = sorted(c for c in (t.cpu_raw or {}) if c >= 0)
        rec: dict = {"v": VERSION, "t": round(t.time, 3), "iv": round(t.interval, 3)}
        if t.cpu_raw:
            rec["ci"] = cpus if cpus != list(range(len(cpus))) else len(cpus)
            rec["c"] = [_trim(t.cpu_raw[c]) for c in cpus]
            rec["ca"] = list(t.cpu_raw[-1])
        rec["p"] = [[p.cpu, p.pid, int(round(p.pct * 10)), p.comm] for p in t.procs]
        c = t.census
        rec["cg"] = [[x.name, x.hierarchy, x.tracked, x.live] for x in c.v1]
        if c.v2 is not None:
            rec["c2"] = [c.v2.mount, c.v2.nr_descendants, c.v2.nr_dying_descendants,
                         {k: list(v) for k, v in c.v2.subsys.items()}]
        if c.dying_subtrees:
            rec["ds"] = [[s.path, s.dying] for s in c.dying_subtrees]
        rec["mi"] = t.meminfo
        if t.softirqs:
            rec["si"] = t.softirqs
        if t.nic_irqs:  # affined IRQs: sparse [cpu, delta] pairs
            rec["ni"] = {k: [[c, d] for c, d in enumerate(v) if d] for k, v in t.nic_irqs.items()}
        if t.events:
            rec["ev"] = [[e.seq, round(e.time, 6), e.usec, e.reason, e.kind, e.severity, e.driver, e.ifname,
                          e.message, e.reset_reason, e.fields] for e in t.events]
        if t.nics is not None:
            nic = {n.ifname: [n.driver, n.bus, n.queue_tx_timeouts, {k: n.stats.get(k, 0) for k in NIC_STATS},
                              n.trouble()] for n in t.nics}
            if key or nic != self._nic:
                rec["nic"] = nic
                self._nic = nic
        if t.units is not None:
            units = [[u.id, u.n_restarts, u.active, u.sub, u.enabled, u.result, u.exit_status, u.main_pid,
                      u.restart, u.restart_usec, u.fragment, u.cgroup] for u in t.units]
            if key or units != self._units:
                rec["u"] = units
                self._units = units
        if extra:
            rec.update(extra)
        return orjson.dumps(rec)


def decode(payload: bytes) -> Tick:
    r = orjson.loads(payload)
    cpu = {}
    raw = None
    if "c" in r:
        ci = r["ci"] if isinstance(r["ci"], list) else list(range(r["ci"]))
        raw = {c: tuple(v) + (0,) * (10 - len(v)) for c, v in zip(ci, r["c"])}
        raw[-1] = tuple(r["ca"])
        for c, v in raw.items():
            u = from_deltas(c, v)
            if u is not None:
                cpu[c] = u
    procs = [ProcUse(pid, comm, c, pct / 10) for c, pid, pct, comm in r.get("p", [])]
    v1 = tuple(ControllerCount(n, h, tr, lv, None) for n, h, tr, lv in r.get("cg", []))
    v2 = None
    if "c2" in r:
        m, nd, ndd, sub = r["c2"]
        v2 = V2Stat(m, nd, ndd, {k: tuple(v) for k, v in sub.items()})
    subtrees = tuple(DyingSubtree(p, d) for p, d in r.get("ds", []))
    census = Census(r["t"], v1, v2, subtrees, None)
    events = [KernelEvent(*e) for e in r.get("ev", [])]
    nics = None
    if "nic" in r:
        nics = []
        for ifname, (drv, bus, qto, stats, trouble) in r["nic"].items():
            eth = {k: v for k, v in trouble.items() if k != "queue_tx_timeout"}
            nics.append(NicCounters(ifname, drv, stats, qto, eth, bus))
    units = [Unit(*u) for u in r["u"]] if "u" in r else None
    ni = None
    if "ni" in r:
        n = len(raw) - 1 if raw else 1 + max((c for v in r["ni"].values() for c, _ in v), default=0)
        ni = {}
        for k, pairs in r["ni"].items():
            row = [0] * n
            for c, d in pairs:
                row[c] = d
            ni[k] = row
    return Tick(r["t"], r["iv"], cpu, procs, census, r.get("mi", {}), events, nics, units, raw,
                r.get("si"), ni)
