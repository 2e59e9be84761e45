"""The detectors, listed once. A detector is `findings(window) -> list[Finding]` in its own module,
registered with @detector; `check` runs them all on one Window (detect/window.py), the way
node_exporter registers collectors and node-problem-detector registers log watchers.

To add one: write detect/NAME.py with a function decorated @detector("kind"), add NAME to MODULES.
"""

from __future__ import annotations

import importlib
from typing import Callable

from .findings import Finding
from .window import Window

MODULES = ("zombies", "hotcore", "nic", "lockups", "units")
_DETECTORS: dict[str, Callable[[Window], list[Finding]]] = {}


def detector(name: str):
    def reg(fn: Callable[[Window], list[Finding]]):
        if name in _DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        _DETECTORS[name] = fn
        return fn
    return reg


def detectors() -> dict[str, Callable[[Window], list[Finding]]]:
    for m in MODULES:
        importlib.import_module(f"{__package__}.{m}")
    return dict(_DETECTORS)


def run(window: Window) -> list[Finding]:
    out: list[Finding] = []
    for fn in detectors().values():
        out += fn(window)
    return out
