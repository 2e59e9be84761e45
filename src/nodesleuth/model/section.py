"""A part of a second that a registered collector fills (collect/registry.py).

A new kind of data reaches every view by declaring it once, here in the model: subclass Section with
a dataclass of its fields, set FIELD (the Tick field that holds it; add that field to Tick), METRICS
(its series) and WEB (the web panel that draws it, web/panels/NAME.py, "data:KEY" for a key of the timeline's
data web/data.py fills from it, or why none does), and
implement samples() for /metrics and merge() for the 10 s tier (how a window of seconds folds into
one); fold() says what the minute tier keeps (by default: the minute merged as merge() does, for a
section a panel draws; nothing for the others). Then the store keeps it by field name in the tick,
the 10 s and the minute records (store/codec.py, store/tier.py, store/rollup.py), `dump` prints
to_dict() under DUMP (default FIELD), the exporter and `dump --format openmetrics` serve samples(),
with no other file touched. tests/test_model.py checks every declaration.

KEY: the record key of a section that was stored before sections were (the hand-wired fields of
older versions: "p", "sv", "si", "mi", "ni", "u", "nic", "ev"; "." for one stored over several of the record's own
keys: the census's cg, c2, ds, the CPUs' cf, ci, c, ca), so every store written since reads the same; a new
section leaves it empty (kept under "x" by FIELD).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Iterable

from .metric import Metric

SECTIONS: dict[str, type["Section"]] = {}  # Tick field -> its record type, in declaration order


class Section:
    FIELD: ClassVar[str] = ""
    METRICS: ClassVar[tuple[Metric, ...]] = ()
    WEB: ClassVar[str] = ""  # "panel:NAME" (web/panels/NAME.py) or "not shown: why"
    NO_METRICS: ClassVar[str] = ""  # why a section with no METRICS is not exported
    KEY: ClassVar[str] = ""  # its own record key (sections older than the pattern); "" -> record["x"][FIELD]
    DUMP: ClassVar[str] = ""  # its key in `dump` and Tick.to_dict() ("" -> FIELD)
    CHANGES: ClassVar[bool] = False  # a state that rarely moves: a tick record keeps it only when it changed, and at
    # each keyframe (store/codec.py), so a second without it reads None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.FIELD:
            if cls.FIELD in SECTIONS:
                raise TypeError(f"two sections fill Tick.{cls.FIELD}")
            SECTIONS[cls.FIELD] = cls

    def to_dict(self) -> dict:
        """The dump's form, and the store's (by field name: a reader ignores names it does not know)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Section":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def stored(self) -> dict:
        """What the store keeps (default: to_dict(); a section may keep less, e.g. only rows that moved)."""
        return self.to_dict()

    @classmethod
    def from_stored(cls, d: dict) -> "Section":
        return cls.from_dict(d)

    @classmethod
    def from_record(cls, d: dict, rec: dict) -> "Section":
        """From its stored form `d` in the record `rec` (a section whose form leans on another part of the
        record overrides this: NicIrqs, whose rows are as long as the tick's CPU rows)."""
        return cls.from_stored(d)

    @classmethod
    def merge(cls, vals: list["Section"]) -> "Section":
        """A window of seconds as one (store/tier.py's 10 s tier): every section says how (counters summed,
        a state its last second's); tests/test_model.py checks each class defines it."""
        raise NotImplementedError(cls.__name__)

    @classmethod
    def merge_over(cls, vals: list["Section"], seconds: list[float]) -> "Section":
        """merge(), told each value's interval (what store/tier.py calls): a section whose values are rates over
        their second (Procs: % of a CPU) weighs them by it; the others ignore it."""
        return cls.merge(vals)

    @classmethod
    def fold(cls, vals: list["Section"]) -> "Section | None":
        """A minute as one (store/rollup.py, kept a year): what a panel draws for a day, so by default a
        drawn section's merge() and nothing for one no panel shows."""
        return cls.merge(vals) if cls.WEB.startswith("panel:") else None

    def empty(self) -> bool:
        """Nothing to keep (a mapping section with no entries): stored and dumped as absent (None)."""
        return False

    def dumped(self):
        """Its value in `dump` and Tick.to_dict() (None when empty)."""
        return None if self.empty() else self.to_dict()

    def samples(self) -> Iterable[tuple[str, tuple, float]]:
        """(metric name, label values, value) for /metrics; counters carry the kernel's own totals."""
        return ()


class MapSection(dict, Section):
    """A section that is a mapping (the hand-wired tick fields of older versions: a plain dict to every reader,
    so `tk.starve.get(...)` and `tk.softirqs["NET_RX"]` read as before)."""

    def to_dict(self) -> dict:
        return dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MapSection":
        return cls(d)

    def empty(self) -> bool:
        return not self


def table(objs, names: tuple[str, ...]) -> dict:
    """Dataclass rows as a table by field name (the store's form of a list of records)."""
    return {"f": list(names), "r": [[getattr(o, n) for n in names] for o in objs]}


def untable(d: dict | None, cls, where: str = "record") -> list:
    """Rows of a field-name table to `cls` instances: unknown names ignored, missing ones defaulted."""
    from .errors import InputError

    if not d:
        return []
    known = {f.name for f in dataclasses.fields(cls)}
    names = d.get("f", [])
    keep = [(i, n) for i, n in enumerate(names) if n in known]
    out = []
    for row in d.get("r", []):
        try:
            out.append(cls(**{n: row[i] for i, n in keep}))
        except (TypeError, IndexError) as e:
            raise InputError(where, f"{cls.__name__} row {row!r:.80}: {e}") from None
    return out


def key_of(cls: type[Section]) -> str:
    """The section's key in `dump` and Tick.to_dict()."""
    return cls.DUMP or cls.FIELD


def kept(obj) -> dict[str, Section]:
    """The sections of a tick (or of anything with the Tick fields) that hold something, by field name."""
    out = {}
    for name in SECTIONS:
        v = getattr(obj, name, None)
        if v is not None and not v.empty():
            out[name] = v
    return out


def store_into(rec: dict, sections: dict[str, Section], keys: bool = True) -> dict:
    """Sections into a record: under their own KEY (older ones, in tick records) or record["x"][FIELD]
    (`keys` False: every one, as the minute records keep them)."""
    for name, v in sections.items():
        k = SECTIONS[name].KEY if keys else ""
        if k == ".":
            rec.update(v.stored())
        elif k:
            rec[k] = v.stored()
        else:
            rec.setdefault("x", {})[name] = v.stored()
    return rec


def restore(rec: dict, where: str, only: str | tuple[str, ...] | None = None, keys: bool = True) -> dict[str, Section]:
    """A record's sections by field name (`only`: just that one, or those); a name this version does not know is
    ignored. A section that does not decode is an InputError naming `where`."""
    from .errors import InputError

    x = rec.get("x") or {}
    out = {}
    names = SECTIONS if only is None else (only,) if isinstance(only, str) else only
    for name in names:
        cls = SECTIONS[name]
        d = (rec if cls.KEY == "." else rec.get(cls.KEY)) if cls.KEY and keys else x.get(name)
        if d is None:
            continue
        try:
            out[name] = cls.from_record(d, rec)
        except (TypeError, KeyError, ValueError, IndexError, AttributeError) as e:
            raise InputError(where, f"{name} section {str(d)[:60]!r}: {e}") from None
    return out
