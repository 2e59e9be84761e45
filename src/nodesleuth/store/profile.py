"""Profile batches to stored frames: one self-contained frame per batch (its own stack and comm
tables), so retention can drop any segment and a reader needs no global state. The store encodes
them (StoreWriter.write, store/encoding.py); profile/codec.py reads them back.

Payload: u32 header length | JSON header {t0, n, comms, frames, stacks, event, period} | columns as
little-endian arrays (time offsets in microseconds u32, cpu i16 (-1: not printed), pid i32 (-1: not
printed), tid i32, comm u32, stack u32) | periods u64 only when they vary (else header `period` is the
one value; 0 = perf printed none).

A batch is profile/parse.Batch (columns and interned tables), duck-typed: the store imports the
model only.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

COLS = (("dt_us", "<u4"), ("cpu", "<i2"), ("pid", "<i4"), ("tid", "<i4"), ("comm", "<u4"), ("stack", "<u4"))


def stored_times(times: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(t0, offsets in µs as stored, times as a reader decodes them): write-time aggregates bin the
    decoded times, so a sample falls in the same second and 20 ms row whichever path reads it."""
    t0 = float(times.min()) if len(times) else 0.0
    us = np.round((times - t0) * 1e6).astype("<u4")
    return t0, us, t0 + us.astype(np.float64) / 1e6


SPAN = 10.0  # s: the longest time one stored batch covers (readers look back 3 x SPAN for a range's start)


def encode_pieces(b, offset: float = 0.0, span: float = SPAN) -> list[tuple[float, bytes]]:
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


def encode(b, offset: float = 0.0) -> tuple[float, bytes]:
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


LOST_FIELDS = ("time", "cpu", "lost")


def encode_lost(rows: list[tuple[float, int, int]]) -> tuple[float, bytes]:
    """Samples perf lost, as (wall time perf noted it, CPU or -1, count) rows: (first time, payload)."""
    return rows[0][0], orjson.dumps({"f": LOST_FIELDS, "r": [list(r) for r in rows]})
