"""Reading ticks back: decoded ranges (report/dump.py turns them into dump's exports)."""

from __future__ import annotations

from typing import Iterator

from ..model.records import Tick
from .codec import KEYFRAME, decode, decode_lazy
from .catalog import TICKS
from .store import StoreReader


def ticks(reader: StoreReader, t0: float | None, t1: float | None, on_segment=None,
          carry: bool = True, lazy: bool = False) -> Iterator[Tick]:
    """Decoded ticks in [t0, t1]; NIC counters and units are carried forward from up to a keyframe
    before t0, so every tick in the range has them. `lazy`: bulky fields built on first read
    (codec.LazyTick), for readers of many seconds that look closely at few."""
    start = None if t0 is None else t0 - KEYFRAME if carry else t0
    nics = units = None
    for t, payload in reader.read(TICKS, start, t1, on_segment):
        if t0 is not None and t < t0 and b'"nic"' not in payload and b'"u"' not in payload:
            continue  # before the range and carrying nothing forward: not worth decoding
        tk = decode_lazy(payload) if lazy else decode(payload)
        if tk.nics is not None:
            nics = tk.nics
        elif carry:
            tk.nics = nics
        if tk.units is not None:
            units = tk.units
        elif carry:
            tk.units = units
        if t0 is not None and t < t0:
            continue
        yield tk


