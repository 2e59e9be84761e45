"""Reading ticks back: decoded ranges (report/dump.py turns them into dump's exports)."""

from __future__ import annotations

from typing import Iterator

from ..model.records import Tick
from .codec import KEYFRAME, decode, decode_lazy, decode_record
from .catalog import TICKS, Stream
from .store import StoreReader


def _carried(reader: StoreReader, stream: Stream, t0: float | None, t1: float | None, carry: bool, on_segment,
             decode_one) -> Iterator[tuple[Tick, object]]:
    """(tick, extra) of `stream` in [t0, t1], decode_one(payload, t, ctx) -> (tick, extra); NIC counters
    and units carried forward from up to a keyframe before t0, so every tick in the range has them."""
    start = None if t0 is None else t0 - KEYFRAME if carry else t0
    nics = units = None
    for t, payload, ctx in reader.read(stream, start, t1, on_segment, with_context=True):
        if t0 is not None and t < t0 and b'"nic"' not in payload and b'"u"' not in payload:
            continue  # before the range and carrying nothing forward: not worth decoding
        tk, extra = decode_one(payload, t, ctx)
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
        yield tk, extra


def ticks(reader: StoreReader, t0: float | None, t1: float | None, on_segment=None,
          carry: bool = True, lazy: bool = False) -> Iterator[Tick]:
    """Decoded ticks in [t0, t1], carried forward (_carried). `lazy`: bulky fields built on first read
    (codec.LazyTick), for readers of many seconds that look closely at few."""
    dec = decode_lazy if lazy else decode
    for tk, _ in _carried(reader, TICKS, t0, t1, carry, on_segment, lambda p, t, c: (dec(p, "tick", t, c), None)):
        yield tk


def ticks_with(reader: StoreReader, stream: Stream, t0: float | None, t1: float | None, carry: bool = True,
               on_segment=None) -> Iterator[tuple[Tick, dict]]:
    """Decoded records of a tick-shaped stream (the 10 s aggregates) in [t0, t1], each with the
    record's own fields beyond the tick's (store/tier.py's "ag"); carried forward as `ticks`."""
    return _carried(reader, stream, t0, t1, carry, on_segment, lambda p, t, c: decode_record(p, "tick", t, c))
