"""The detectors register themselves. A detector is `findings(window) -> list[Finding]` in its own
module, decorated @detector("kind"); `check` runs every one on one Window (detect/window.py), the
way node_exporter registers collectors and node-problem-detector registers log watchers.

To add one: write detect/NAME.py with a function decorated @detector("kind"). Nothing else wires it:
every module of this package is imported once when the detectors are asked for.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

from .findings import Finding
from .window import Window

_DETECTORS: dict[str, Callable[[Window], list[Finding]]] = {}


def detector(name: str):
    def reg(fn: Callable[[Window], list[Finding]]):
        if name in _DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        _DETECTORS[name] = fn
        return fn
    return reg


def detectors() -> dict[str, Callable[[Window], list[Finding]]]:
    from . import __path__ as here

    for m in pkgutil.iter_modules(here):
        importlib.import_module(f"{__package__}.{m.name}")
    return dict(_DETECTORS)


def run(window: Window) -> list[Finding]:
    out: list[Finding] = []
    for fn in detectors().values():
        out += fn(window)
    return out
