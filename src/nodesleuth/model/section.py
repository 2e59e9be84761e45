"""A part of a second that a registered collector fills (collect/registry.py).

A new kind of data reaches every view by declaring it once, here in the model: subclass Section with
a dataclass of its fields, set FIELD (the Tick field that holds it; add that field to Tick), METRICS
(its series) and WEB (the web panel that draws it, web/panels/NAME.py, or why none does), and
implement samples() for /metrics and merge() for the 10 s tier (how a window of seconds folds into one). Then the store keeps it by field name (store/codec.py), `dump`
prints to_dict(), the exporter and `dump --format openmetrics` serve samples(), with no other file
touched. tests/test_model.py checks every declaration.
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
    def merge(cls, vals: list["Section"]) -> "Section":
        """A window of seconds as one (store/tier.py's 10 s tier): every section says how (counters summed,
        a state its last second's); tests/test_model.py checks each class defines it."""
        raise NotImplementedError(cls.__name__)

    def samples(self) -> Iterable[tuple[str, tuple, float]]:
        """(metric name, label values, value) for /metrics; counters carry the kernel's own totals."""
        return ()
