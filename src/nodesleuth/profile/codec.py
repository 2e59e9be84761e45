"""Profile batches read back from the store (Decoded, decode_lost). Their format and the writing
side live in store/profile.py (the store encodes what it stores); its names are re-exported here for
the readers and tests that use them."""

from __future__ import annotations

import struct
from operator import itemgetter

import numpy as np
import orjson

from ..model.errors import InputError
from ..store.profile import COLS, LOST_FIELDS, SPAN, encode, encode_lost, encode_pieces, stored_times

__all__ = ["COLS", "LOST_FIELDS", "SPAN", "Decoded", "decode_lost", "encode", "encode_lost", "encode_pieces",
           "stored_times"]


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


def decode_lost(payload: bytes, where: str) -> list[tuple[float, int, int]]:
    try:
        doc = orjson.loads(payload)
        ix = [doc["f"].index(k) for k in LOST_FIELDS]
        return [(float(r[ix[0]]), int(r[ix[1]]), int(r[ix[2]])) for r in doc["r"]]
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise InputError(where, f"undecodable lost-samples record: {e}") from None
