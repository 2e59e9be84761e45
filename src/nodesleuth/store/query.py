"""Reading ticks back: decoded ranges (report/dump.py turns them into dump's exports)."""

from __future__ import annotations

from typing import Iterator

from ..model.records import SECTIONS, Tick
from .codec import KEYFRAME, decode, decode_lazy, decode_record
from .catalog import TICKS, Stream
from .store import StoreReader

CARRIED = [n for n, c in SECTIONS.items() if c.CHANGES]
_KEYS = [f'"{SECTIONS[n].KEY or n}"'.encode() for n in CARRIED]  # how a record holding one starts it


def _carried(reader: StoreReader, stream: Stream, t0: float | None, t1: float | None, carry: bool, on_segment,
             decode_one) -> Iterator[tuple[Tick, object]]:
    """(tick, extra) of `stream` in [t0, t1], decode_one(payload, t, ctx) -> (tick, extra); the sections stored when
    they change (CHANGES: NICs, units) carried forward from up to a keyframe before t0, so every tick has them."""
    start = None if t0 is None else t0 - KEYFRAME if carry else t0
    last: dict = {}
    for t, payload, ctx in reader.read(stream, start, t1, on_segment, with_context=True):
        if t0 is not None and t < t0 and not any(k in payload for k in _KEYS):
            continue  # before the range and carrying nothing forward: not worth decoding
        tk, extra = decode_one(payload, t, ctx)
        for name in CARRIED:
            if getattr(tk, name) is not None:
                last[name] = getattr(tk, name)
            elif carry:
                setattr(tk, name, last.get(name))
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
