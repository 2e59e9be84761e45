"""Charts below the timeline, registered the way collectors and detectors are: a module here calls
panel(Panel(...)) with what to draw (series, their units, y axes) and how one recorded second becomes a
point (a rollup minute, for long ranges, reads as a tick too, unless the panel gives its own form). The timeline's data carries every panel's
points; static/app.js draws any panel from that description, so a new chart is one file here (and a
script under static/panels/NAME.js only for a drawing lineChart cannot do)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

UNITS = ("count", "bytes", "ms", "rate", "pct")  # how app.js formats a value of each (see fmt in app.js)


@dataclass(frozen=True)
class Series:
    key: str  # the point's key
    label: str  # the legend's name
    axis: str  # the scale of one of the panel's axes
    color: str
    dash: tuple[int, ...] | None = None
    missing: str = ""  # said under the chart when no point of the range has this series


@dataclass(frozen=True)
class Axis:
    scale: str  # the name series refer to
    unit: str  # one of UNITS
    label: str
    floor: float = 1.0  # the axis shows at least 0..floor


@dataclass(frozen=True)
class Panel:
    name: str  # the element id and the key in the timeline's data
    title: str
    order: int  # position below the timeline
    fields: tuple[str, ...]  # the Tick fields it draws (tests/test_model.py checks every field is drawn or excused)
    axes: tuple[Axis, ...]
    series: tuple[Series, ...]
    from_tick: Callable  # Tick -> point dict (with "t") or None
    from_minute: Callable | None = None  # RollupMinute -> point or None (None: from_tick of the minute as a tick,
    # store/tier.from_minute, whose sections are folded over the minute as each Section.fold says)
    thin: str = "last"  # thinning to the screen's columns: "last" value or the bucket's "max" (spikes survive)
    extra: dict = field(default_factory=dict)

    def doc(self, points: list[dict]) -> dict:
        notes = [s.missing for s in self.series if s.missing and not any(p.get(s.key) is not None for p in points)]
        return {"title": self.title, "axes": [a.__dict__ for a in self.axes],
                "series": [{k: v for k, v in s.__dict__.items() if k != "missing"} for s in self.series],
                "points": points, "notes": notes}


PANELS: dict[str, Panel] = {}


def panel(p: Panel) -> Panel:
    if p.name in PANELS and PANELS[p.name] is not p:
        raise ValueError(f"two panels named {p.name!r}")
    PANELS[p.name] = p
    return p


def panels() -> list[Panel]:
    """Every panel (importing each module here once), in display order."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
    return sorted(PANELS.values(), key=lambda p: (p.order, p.name))
