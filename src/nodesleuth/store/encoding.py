"""Each stream's records to frames, owned by the store: StoreWriter.write hands a record to its
stream's codec (named by catalog.Stream.codec) and appends the frames it makes. A codec with state
(the ticks' segment context, store/codec.py) is kept per stream by the writer, so the recorder and
the runners hand records and never manage contexts or segment rolls.

A codec's `frames(record, rolls, offset, extra)` returns [(time, payload, context)]: `rolls(t)`
says whether a frame at `t` opens a new segment, `offset` turns a record's clock into wall-clock
seconds (perf's monotonic clock), `extra` adds fields to a tick's record."""

from __future__ import annotations

import functools

from . import churn, rollup
from .codec import Encoder


class TickCodec:
    """Ticks, every second's or a window's aggregate: one Encoder per stream, its context refreshed
    when a segment opens (the new segment's head keeps the context its records are written against)."""

    def __init__(self):
        self.enc = Encoder()

    def frames(self, tick, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        enc = self.enc
        if rolls(tick.time):
            enc.refresh()
        return [(tick.time, enc.encode(tick, extra), enc.ctx)]


class MinuteCodec:
    """A minute's rollup (model.records.RollupMinute), stored at its minute's start."""

    @staticmethod
    def frames(minute, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        return [(minute.t, rollup.encode(minute), b"")]


class ChurnCodec:
    """A perf chunk's cgroup events (model.records.CgEvent, on perf's clock), stored at the first."""

    @staticmethod
    def frames(events, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        return [(*churn.encode(events, offset), b"")]


class BatchCodec:
    """A profile batch (profile/parse.Batch, on perf's clock), in pieces of <= store/profile.SPAN s.
    Encoded on the caller's thread (the profiler's, not the 1 Hz loop's); numpy is loaded only here."""

    @staticmethod
    def frames(batch, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        from .profile import encode_pieces

        return [(t, payload, b"") for t, payload in encode_pieces(batch, offset)]


class LostCodec:
    """Samples perf or the kernel lost: (wall time, cpu or -1, count) rows, stored at the first."""

    @staticmethod
    def frames(rows, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        from .profile import encode_lost

        return [(*encode_lost(rows), b"")]


class AggCodec:
    """The profile's aggregates (profile/agg.AggRows; HeatMinute per CPU, or summed over CPUs), stored at
    their window's start (store/aggregates.py). `kind`: the stream's codec name."""

    def __init__(self, kind: str):
        self.kind = kind

    def frames(self, record, rolls, offset: float = 0.0, extra: dict | None = None) -> list[tuple[float, bytes, bytes]]:
        from .aggregates import encode_agg, encode_heat

        return [(*(encode_agg(record) if self.kind == "agg" else encode_heat(record, self.kind == "heat_all")), b"")]


CODECS = {"tick": TickCodec, "minute": MinuteCodec, "churn": ChurnCodec, "batch": BatchCodec, "lost": LostCodec,
          **{k: functools.partial(AggCodec, k) for k in ("agg", "heat", "heat_all")}}


def codec(stream):
    """A new codec for `stream` (a catalog.Stream); ValueError for a stream without one."""
    make = CODECS.get(stream.codec)
    if make is None:
        raise ValueError(f"stream {stream.name} has no codec in store/encoding.py: append its payloads")
    return make()
