"""Ticks to compact records and back, by field name.

Schema 3 (this version writes it): the schema-2 record below, with its numbers packed into byte
columns (store/pack.py) and three things not repeated:
- the time: the frame header holds it (store/segment.py; read back rounded to the ms, as stored
  before);
- each CPU's idle jiffies: stored as its row's total minus the most common total of the second
  (`cR`), 0 on most CPUs (every CPU's columns add up to the same USER_HZ share of the interval);
- a process's name, when the segment's context (its head frame) already names that pid: the
  Encoder's context lists the processes it saw over the previous segment.
Each frame still decodes on its own, with its segment's head (dictionary and context).

Schema 2: every list of records is a table `{"f": [field names], "r": rows}` named after the
dataclass fields of the model (procs, units, kernel events, cgroup counts), every single record is
an object keyed by field name, and per-CPU jiffies carry their column names. A reader maps names to
fields: a field it does not know is ignored, a field the record lacks takes its default. So adding a
field never mis-reads an old recording, and an old version reading a new one keeps what it knows.
Schema 1 (positional lists, written up to nodesleuth 0.1) is still read.

Per-CPU columns are stored as jiffy deltas (not percentages) so a read computes exactly what
mpstat would have printed for that second. Slow-changing data (NIC counters, units) is stored
when it changes and at least every `KEYFRAME` seconds, so a read from any point finds it within
that look-back.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import orjson

from ..model.errors import InputError
from ..model.records import (SECTIONS, Census, CpuJiffies, Events, KernelEvent, Meminfo, NicIrqs, Nics, Procs, ProcUse,
                             Tick, Unit, Units)
from ..model.section import kept, restore, store_into
from . import pack as packing

VERSION = 3  # the tick record schema this version writes
READS = (1, 2, 3)  # and the ones it reads
KEYFRAME = 60.0


class Encoder:
    """Ticks to records. `version` 3 (packed, store/pack.py) or 2 (JSON, for comparisons and tests).

    A schema-3 record is read with its segment's context (`ctx`, kept in the segment's head frame):
    the store's tick codec (store/encoding.py, one Encoder per stream) calls `refresh()` when a new
    segment is about to open and appends `ctx` with every record, so each segment holds the context
    its records were written against."""

    def __init__(self, version: int = VERSION):
        if version not in (2, 3):
            raise ValueError(f"cannot write tick schema {version}")
        self.version = version
        self._last: dict[str, dict] = {}  # sections that change rarely (Section.CHANGES): the last form kept
        self._last_key = -1e18
        self.seen: dict[int, str] = {}  # pid -> name, seen since the last refresh
        self.comms: dict[int, str] = {}  # the context: names the current segment's head holds
        self.ctx = b""

    def refresh(self) -> None:
        """A new context for the segment about to open: the processes seen since the last one."""
        self.comms, self.seen = self.seen, {}
        self.ctx = orjson.dumps({"comm": {str(p): c for p, c in sorted(self.comms.items())}}) if self.comms else b""
        self._last_key = -1e18  # a new segment starts with NIC counters and units (a keyframe)

    def encode(self, t: Tick, extra: dict | None = None) -> bytes:
        rec = self.record(t, extra)
        if self.version == 2:
            return orjson.dumps(rec)
        return packing.pack(self._compact(rec))

    def _compact(self, rec: dict) -> dict:
        """Schema 2 -> 3: no time, idle as the row total's difference, known names left out."""
        rec["v"] = 3
        del rec["t"]
        rows = rec.get("c")
        if rows and all(len(r) >= 4 for r in rows):
            tots = [sum(r[:8]) for r in rows]
            R = Counter(tots).most_common(1)[0][0]
            rec["c"] = [[r[0], r[1], r[2], tot - R, *r[4:]] for r, tot in zip(rows, tots)]
            rec["cR"] = R
        comms, seen = self.comms, self.seen
        for row in rec["p"]["r"] if "p" in rec else ():  # Procs.F: cpu, pid, pct, comm, estimate
            pid, comm = row[1], row[3]
            seen[pid] = comm
            if comms.get(pid) == comm:
                row[3] = None
        return rec

    def record(self, t: Tick, extra: dict | None = None) -> dict:
        """The schema-2 record of a tick (JSON by field name)."""
        key = t.time - self._last_key >= KEYFRAME
        if key:
            self._last_key = t.time
        secs = kept(t)  # registered collectors' sections (model/section.py), in their declaration order
        rec = {"v": 2, "t": round(t.time, 3), "iv": round(t.interval, 3)}
        for name in [n for n in secs if SECTIONS[n].CHANGES]:
            form = secs[name].stored()
            if not key and self._last.get(name) == form:
                del secs[name]
            self._last[name] = form
        store_into(rec, secs)
        if extra:
            rec.update(extra)
        return rec


_CTX: dict = {}  # context bytes -> pid -> name


def _context(ctx: bytes) -> dict[int, str]:
    got = _CTX.get(ctx)
    if got is None:
        try:
            got = {int(p): c for p, c in orjson.loads(ctx).get("comm", {}).items()} if ctx else {}
        except (orjson.JSONDecodeError, AttributeError, ValueError):
            got = {}
        if len(_CTX) > 16:
            _CTX.clear()
        _CTX[ctx] = got
    return got


def _load(payload: bytes, where: str, t: float | None = None, ctx: bytes = b"") -> dict:
    """The schema-2 form of a record of any schema (1 stays as it is)."""
    if payload[:1] == b"{":
        try:
            r = orjson.loads(payload)
        except orjson.JSONDecodeError as e:
            raise InputError(where, f"undecodable record: {e}") from None
    else:
        try:
            r = packing.unpack(payload)
        except ValueError as e:
            raise InputError(where, str(e)) from None
        if not isinstance(r, dict) or r.get("v") != 3:
            raise InputError(where, "undecodable record: not a tick")
        if t is None:
            raise InputError(where, "a schema 3 record is read with its frame's time")
        return _expand(r, t, ctx, where)
    v = r.get("v", 1)
    if v != 1 and v not in READS:
        raise InputError(where, f"record schema {v} is newer than this nodesleuth reads ({max(READS)}); upgrade")
    return r


def _expand(r: dict, t: float, ctx: bytes, where: str) -> dict:
    """Schema 3 -> 2 (Encoder._compact undone)."""
    r["t"] = round(t, 3)
    try:
        R = r.pop("cR", None)
        if R is not None:
            r["c"] = [[x[0], x[1], x[2], R + x[3] - (sum(x[:8]) - x[3]), *x[4:]] for x in r["c"]]
        p = r.get("p")
        if p:
            names = p["f"]
            ip, im = names.index("pid"), names.index("comm")
            rows = p["r"]
            if any(row[im] is None for row in rows):
                comms = _context(ctx)
                for row in rows:
                    if row[im] is None:
                        row[im] = comms.get(row[ip], "?")
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise InputError(where, f"undecodable record: {e}") from None
    return r


def decode(payload: bytes, where: str = "tick", t: float | None = None, ctx: bytes = b"") -> Tick:
    """A stored tick; `t` and `ctx`: its frame's time and its segment's context (schema 3 needs them)."""
    return decode_record(payload, where, t, ctx)[0]


def decode_record(payload: bytes, where: str = "tick", t: float | None = None, ctx: bytes = b"") -> tuple[Tick, dict]:
    """`decode`, and the record it was made from (its fields by stored name)."""
    r = _load(payload, where, t, ctx)
    if r.get("v", 1) == 1:
        return decode_v1(r), r
    return _tick(r, where), r


def _tick(r: dict, where: str) -> Tick:
    secs = restore(r, where)
    raw = secs.get("cpu_raw")
    return Tick(time=r["t"], interval=r["iv"], cpu=raw.util() if raw else {}, **secs)


class _OnRead:
    """A tick field made from its record the first time it is read, then a plain attribute (a
    non-data descriptor: the instance's value, once set, wins; assigning works as usual)."""

    def __init__(self, make):
        self.make = make

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        v = self.make(obj)
        obj.__dict__[self.name] = v
        return v


class LazyTick(Tick):
    """A decoded tick whose bulky fields (per-CPU columns, processes, cgroup census, starvation,
    NIC IRQ rows) are built from the record only when read. Explain reads a day of 96 CPUs: busy
    per CPU for every second, the rest only around the seconds it explains; building all of it
    for every second was most of its time. Equal to `decode`'s tick field by field."""

    cpu = _OnRead(lambda self: self.cpu_raw.util() if self.cpu_raw else {})  # its jiffies' view, made with them
    procs = _OnRead(lambda self: restore(self._r, self._where, "procs").get("procs") or Procs())
    cpu_raw, census, starve, nic_irqs = (_OnRead(lambda self, k=k: restore(self._r, self._where, k).get(k))
                                         for k in ("cpu_raw", "census", "starve", "nic_irqs"))

    def __eq__(self, other):
        """Equal to a Tick with equal fields (the dataclass's own __eq__ wants the same class)."""
        if not isinstance(other, Tick):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(Tick))

    def cpu_busy(self) -> tuple[list[int], list[float]]:
        if "cpu" not in self.__dict__:
            got = CpuJiffies.busy_of(self._r)
            if got is not None:
                return got
        return super().cpu_busy()

    def cpu_of(self, c: int):
        got = False if "cpu" in self.__dict__ else CpuJiffies.util_of(self._r, c)
        return super().cpu_of(c) if got is False else got


# the sections a LazyTick decodes at once; one its record lacks is its field's default (None, or an empty mapping)
_EAGER = {f.name: f.default_factory if f.default_factory is not dataclasses.MISSING else lambda: None
          for f in dataclasses.fields(Tick) if f.name in SECTIONS and not isinstance(vars(LazyTick).get(f.name), _OnRead)}


def decode_lazy(payload: bytes, where: str = "tick", t: float | None = None, ctx: bytes = b"") -> Tick:
    """`decode`, with the bulky fields built on first read (LazyTick). The record is parsed and
    checked here, so an undecodable or too new record fails at once, as with `decode`."""
    r = _load(payload, where, t, ctx)
    if r.get("v", 1) == 1:
        return decode_v1(r)
    t = LazyTick.__new__(LazyTick)
    t._r, t._where = r, where
    t.time, t.interval = r["t"], r["iv"]
    t.__dict__.update({name: make() for name, make in _EAGER.items()}, **restore(r, where, tuple(_EAGER)))
    return t


def decode_v1(r: dict) -> Tick:
    """Schema 1: positional lists, as nodesleuth 0.1 wrote them (tests/golden/store-v1)."""
    raw = CpuJiffies.from_stored(r)
    procs = [ProcUse(pid, comm, c, pct / 10) for c, pid, pct, comm in r.get("p", [])]
    census = Census.from_stored({"t": r["t"], "cg": {"f": Census.CG, "r": r.get("cg", [])}, "ds": {"f": ("path", "dying"),
                                 "r": r.get("ds", [])}, "c2": dict(zip(("mount", "nr_descendants", "nr_dying_descendants",
                                                                        "subsys"), r["c2"])) if "c2" in r else None})
    events = Events(KernelEvent(*e) for e in r.get("ev", []))
    nics = Nics.from_stored({k: dict(zip(("driver", "bus", "queue_tx_timeouts", "stats", "ethtool"), v))
                             for k, v in r["nic"].items()}) if "nic" in r else None
    units = Units(Unit(*u) for u in r["u"]) if "u" in r else None
    ni = NicIrqs.from_stored(r["ni"], len(raw) - 1 if raw else None) if "ni" in r else None
    return Tick(time=r["t"], interval=r["iv"], cpu=raw.util() if raw else {}, procs=procs, census=census, meminfo=Meminfo(r.get("mi", {})),
                events=events, nics=nics, units=units, cpu_raw=raw, nic_irqs=ni,
                **restore(r, "schema 1 record", "softirqs"))
