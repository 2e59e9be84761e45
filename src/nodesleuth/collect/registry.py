"""Collectors that register themselves, the way node_exporter's do: a module in collect/ decorates its
class with @collector(FIELD), and every Sampler whose use it names reads it each tick (or every
`every` ticks) into Tick.FIELD. The record type is the model's (model/section.py says how it reaches
the store, dump, /metrics and the web), so adding one touches that record and this module's file.

A collector class: __init__(self, root, reader) (reader: the sampler's Preader for files read every
tick), prime() for the first read (a state it read then, or None: Sampler.primed), read(interval, seen) -> Section | None (InputError: the section is
unread this tick and the check says so), close(). `seen` is what the sampler read before it this
tick (Seen: the per-CPU busy %, the top processes), for collectors that look closer only where
something is hot, so their cost stays bounded.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..node.pread import Preader
    from ..node.root import Root

USES = ("check", "record", "exporter")


@dataclass(frozen=True)
class Seen:
    busy: dict  # CPU -> busy % this tick
    procs: list  # model.records.ProcUse: the top processes per CPU this tick
    kmsg: object = None  # the sampler's kernel-log reader (collect/kmsg.py KmsgReader), or None
    walk: bool = False  # the caller wants this tick's costly reads done now (the census's walk: a check's last tick)


@dataclass(frozen=True)
class Registration:
    field: str  # the Tick field (model/section.py SECTIONS)
    cls: type
    uses: tuple[str, ...]
    every: int  # ticks between reads
    options: tuple[str, ...] = ()  # the Sampler's keyword arguments its __init__ takes (e.g. units_every)


_REGISTERED: dict[str, Registration] = {}


def collector(field: str, uses: tuple[str, ...] = USES, every: int = 1, options: tuple[str, ...] = ()):
    def reg(cls):
        if field in _REGISTERED and _REGISTERED[field].cls is not cls:
            raise ValueError(f"two collectors fill Tick.{field}")
        _REGISTERED[field] = Registration(field, cls, tuple(uses), max(1, every), tuple(options))
        return cls
    return reg


def registered(use: str | None = None) -> list[Registration]:
    """Every registered collector (importing each module of collect/ once), or those of one use."""
    from . import __path__ as here

    for m in pkgutil.iter_modules(here):
        importlib.import_module(f"{__package__}.{m.name}")
    return [r for r in _REGISTERED.values() if use is None or use in r.uses]


class Collector:
    """A registered collector's base: the root and the sampler's reader kept; prime() and close() do nothing
    (a collector with a baseline to take or something to release says so). `recovers`: a read after a failed
    one is said (the recorder says "read again"), for a source that comes and goes (systemd)."""

    recovers = False

    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader

    def prime(self) -> None:
        pass

    def close(self) -> None:
        pass


class Deltas(Collector):
    """A collector of counters, whose record is the change since its last read: `prime()` takes the first
    reading, `step()` returns (previous, current) and keeps current (previous is None until primed).
    Its files are read through the sampler's reader (one pread a tick) and it holds nothing to close."""

    def __init__(self, root: Root, reader: Preader):
        super().__init__(root, reader)
        self.prev = None

    def _read(self):
        raise NotImplementedError

    def prime(self) -> None:
        self.prev = self._read()

    def step(self):
        cur = self._read()
        prev, self.prev = self.prev, cur
        return prev, cur
