"""Profile batches in the store: one self-contained frame per batch (its own stack and comm tables),
so retention can drop any segment and a reader needs no global state.

Payload: u32 header length | JSON header {t0, n, comms, frames, stacks, event, period} | columns as
little-endian arrays (time offsets in microseconds u32, cpu i16 (-1: not printed), pid i32 (-1: not
printed), tid i32, comm u32, stack u32) | periods u64 only when they vary (else header `period` is the
one value; 0 = perf printed none).
"""

from __future__ import annotations

import struct
from operator import itemgetter

import numpy as np
import orjson

from ..model.errors import InputError
from .parse import Batch

COLS = (("dt_us", "<u4"), ("cpu", "<i2"), ("pid", "<i4"), ("tid", "<i4"), ("comm", "<u4"), ("stack", "<u4"))


def stored_times(times: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(t0, offsets in µs as stored, times as a reader decodes them): write-time aggregates bin the
    decoded times, so a sample falls in the same second and 20 ms row whichever path reads it."""
    t0 = float(times.min()) if len(times) else 0.0
    us = np.round((times - t0) * 1e6).astype("<u4")
    return t0, us, t0 + us.astype(np.float64) / 1e6


SPAN = 10.0  # s: the longest time one stored batch covers (readers look back 3 x SPAN for a range's start)


def encode_pieces(b: Batch, offset: float = 0.0, span: float = SPAN) -> list[tuple[float, bytes]]:
    """encode() in pieces of at most `span` seconds each. A batch can cover far more than one rotation
    (perf did not rotate, or stacks waited minutes to be named on a slow machine); stored whole it is
    stamped with its first sample and a reader of a later range, looking back only 3 x SPAN, misses it."""
    times = np.asarray(b.times, dtype=np.float64)
    if not len(times) or times.max() - times.min() < span:
        return [encode(b, offset)]
    order = np.argsort(times, kind="stable")
    t = times[order]
    cuts, start = [], t[0]
    for i in range(1, len(t)):  # a new piece where a sample is `span` after the piece's first
        if t[i] - start >= span:
            cuts.append(i)
            start = t[i]
    return [encode(b.subset(part), offset) for part in np.split(order, cuts)]


def encode(b: Batch, offset: float = 0.0) -> tuple[float, bytes]:
    """`offset` turns perf's clock into wall-clock seconds; returns (batch start time, payload)."""
    times = np.asarray(b.times, dtype=np.float64) + offset
    t0, us, _ = stored_times(times)
    t0 = t0 if len(times) else offset
    frames: dict[str, int] = {}
    stacks = []
    for st in b.stacks:
        stacks.append([frames.setdefault(f, len(frames)) for f in st])
    periods = np.asarray(b.periods, dtype="<u8")
    one = int(periods[0]) if len(periods) and (periods == periods[0]).all() else None
    head = orjson.dumps({"t0": t0, "n": len(b), "comms": b.comms, "frames": list(frames), "stacks": stacks,
                         "event": b.event, "period": one if one is not None or not len(periods) else "col"})
    cols = [us, np.asarray(b.cpus, "<i2"), np.asarray(b.pids, "<i4"),
            np.asarray(b.tids, "<i4"), np.asarray(b.comm_ids, "<u4"), np.asarray(b.stack_ids, "<u4")]
    if one is None and len(periods):
        cols.append(periods)
    return t0, struct.pack("<I", len(head)) + head + b"".join(c.tobytes() for c in cols)


def _names(frames: list[str], ids: list[int]) -> tuple[str, ...]:
    if len(ids) > 1:
        return itemgetter(*ids)(frames)  # C speed: this runs for every stack of every batch read
    return (frames[ids[0]],) if ids else ()


class Decoded:
    """A batch as numpy columns plus its tables (stacks as tuples of frame names)."""

    __slots__ = ("t", "cpu", "pid", "tid", "comm", "stack", "comms", "frames", "stack_frames", "event", "period")

    def __init__(self, payload: bytes, where: str = "profile frame"):
        try:
            (hl,) = struct.unpack_from("<I", payload)
            h = orjson.loads(payload[4:4 + hl])
            n = h["n"]
            off = 4 + hl
            arrs = []
            for _, dt in COLS:
                a = np.frombuffer(payload, dtype=dt, count=n, offset=off)
                off += a.nbytes
                arrs.append(a)
            per = h.get("period", 0)
            if per == "col":
                self.period = np.frombuffer(payload, dtype="<u8", count=n, offset=off)
            else:
                self.period = np.full(n, per or 0, dtype=np.uint64)
        except (struct.error, ValueError, KeyError) as e:
            raise InputError(where, f"undecodable profile batch: {e}") from None
        self.t = h["t0"] + arrs[0].astype(np.float64) / 1e6
        self.cpu, self.pid, self.tid, self.comm, self.stack = arrs[1:]
        self.comms = h["comms"]
        self.frames = h["frames"]
        self.stack_frames = h["stacks"]
        self.event = h.get("event", "")

    def stack_names(self, i: int) -> tuple[str, ...]:
        """Stacks are built on demand: a narrow query touches few of a batch's."""
        return _names(self.frames, self.stack_frames[i])

    @property
    def stacks(self) -> list[tuple[str, ...]]:
        return [self.stack_names(i) for i in range(len(self.stack_frames))]


LOST_FIELDS = ("time", "cpu", "lost")


def encode_lost(rows: list[tuple[float, int, int]]) -> tuple[float, bytes]:
    """Samples perf lost, as (wall time perf noted it, CPU or -1, count) rows: (first time, payload)."""
    return rows[0][0], orjson.dumps({"f": LOST_FIELDS, "r": [list(r) for r in rows]})


def decode_lost(payload: bytes, where: str) -> list[tuple[float, int, int]]:
    try:
        doc = orjson.loads(payload)
        ix = [doc["f"].index(k) for k in LOST_FIELDS]
        return [(float(r[ix[0]]), int(r[ix[1]]), int(r[ix[2]])) for r in doc["r"]]
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise InputError(where, f"undecodable lost-samples record: {e}") from None
