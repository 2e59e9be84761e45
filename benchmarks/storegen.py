"""Write long stores fast: days of a 96-CPU recording without ticking a sampler millions of times.

A pool of real ticks is sampled off the animated 96-CPU fixture (fixtures/nodes.py: a quiet
node, and one with CPU 39 pinned), encoded once by the recorder's own codec (schema 3, store/codec.py)
and compressed once against one trained dictionary; every segment then gets the same head frame
(that dictionary and the codec's context) and its frames are the pooled compressed records under
new frame headers (a schema-3 tick takes its time from its frame header, so every second reads back
with its own time). The 10 s aggregates are the recorder's (store/tier.py) over the pool, pooled the
same way; the per-minute rollups are encoded per minute (they carry their time). Index and .dict
sidecars are written as the store writes them. The result is a store the readers cannot tell from
a recorded one, except that its seconds repeat with the pool's period.

Hot cores: a 10-minute hot core on CPU 39 every 6 hours (from 00:05 of each 6 h block), as in
benchmarks/scale.py, so explain finds incidents anywhere in it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import zlib

import orjson
import zstandard

from nodesleuth.store import catalog
from nodesleuth.store.catalog import ROLLUP, TICKS, TICKS10
from nodesleuth.store.codec import Encoder
from nodesleuth.store.rollup import Rollup, encode as rollup_encode
from nodesleuth.store.segment import (DICT_SIZE, HEADER, KIND_DATA, KIND_DICT, KIND_HEAD, MAGIC, encode_frame,
                                      encode_head, index_path, sidecar)
from nodesleuth.store.store import META, SCHEMA
from nodesleuth.store.tier import Aggregator

HOT_EVERY = 21600
HOT_FROM, HOT_TO = 300, 900


def hot_at(t: float) -> bool:
    s = int(t) % HOT_EVERY
    return HOT_FROM <= s < HOT_TO


@dataclasses.dataclass
class Pool:
    """Compressed records and the head frame they need."""

    head: bytes  # the head frame's payload (dictionary + context)
    quiet: list[bytes]
    hot: list[bytes]

    def pick(self, i: int, t: float) -> bytes:
        p = self.hot if hot_at(t) else self.quiet
        return p[i % len(p)]


def _pool(records_quiet: list[bytes], records_hot: list[bytes], ctx: bytes, level: int = 3) -> Pool:
    zd = zstandard.train_dictionary(DICT_SIZE, records_quiet + records_hot, level=level, f=16)
    c = zstandard.ZstdCompressor(level=level, dict_data=zd, write_checksum=False, write_content_size=True)
    return Pool(encode_head(zd.as_bytes(), True, ctx), [c.compress(p) for p in records_quiet],
                [c.compress(p) for p in records_hot])


def tick_pools(quiet: list, hot: list) -> tuple[Pool, Pool]:
    """(1 s pool, 10 s pool) from sampled ticks."""
    enc = Encoder()
    for tk in quiet + hot:  # the context: every process of the pool
        enc.record(tk)
        enc._compact(enc.record(tk))
    enc.refresh()
    q = [enc.encode(dataclasses.replace(tk, interval=1.0)) for tk in quiet]
    h = [enc.encode(dataclasses.replace(tk, interval=1.0)) for tk in hot]
    p1 = _pool(q, h, enc.ctx)
    aggs = {}
    for name, src in (("quiet", quiet), ("hot", hot)):
        ag, out = Aggregator(), []
        for i, tk in enumerate(src * 2):
            got = ag.add(dataclasses.replace(tk, time=1_000_000.0 + i + 1, interval=1.0))
            if got is not None:
                out.append(got)
        aggs[name] = out
    e10 = Encoder()
    for tk, extra in aggs["quiet"] + aggs["hot"]:
        e10._compact(e10.record(tk, extra))
    e10.refresh()
    p10 = _pool([e10.encode(tk, x) for tk, x in aggs["quiet"]], [e10.encode(tk, x) for tk, x in aggs["hot"]], e10.ctx)
    return p1, p10


def _write_segment(directory: str, start: float, head: bytes, frames: list[tuple[float, bytes]]) -> int:
    name = f"{int(start * 1000):013d}.seg"
    path = os.path.join(directory, name)
    first = encode_frame(start, KIND_HEAD, head)
    body = bytearray(first)
    idx = bytearray()
    pack_hdr = HEADER.pack
    pack_tail = __import__("struct").Struct("<dB3x").pack
    crc32 = zlib.crc32
    import struct

    ient = struct.Struct("<iI").pack
    for t, payload in frames:
        off = len(body)
        tail = pack_tail(t, KIND_DATA)
        body += pack_hdr(MAGIC, len(payload), crc32(payload, crc32(tail)) & 0xFFFFFFFF, t, KIND_DATA)
        body += payload
        e = ient(int((t - start) * 1000 // 1), off)
        idx += e + struct.pack("<I", crc32(e) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(body)
    with open(sidecar(path), "wb") as f:
        f.write(first)
    with open(index_path(path), "wb") as f:
        f.write(idx)
    return len(body) + len(first) + len(idx)


def write_stream(store: str, stream, pool: Pool, t0: float, t1: float, step: float,
                 segment: float = 3600.0) -> int:
    d = os.path.join(store, stream.name)
    os.makedirs(d, exist_ok=True)
    seg = segment * stream.segment_factor
    total = 0
    t = t0
    i = 0
    while t <= t1:
        start = t
        frames = []
        while t <= t1 and t - start < seg:
            frames.append((t, pool.pick(i, t)))
            i += 1
            t += step
        total += _write_segment(d, start, pool.head, frames)
    return total


def write_rollups(store: str, quiet: list, hot: list, t0: float, t1: float, segment: float = 3600.0) -> int:
    """Per-minute rollups of [t0, t1] from the pools' minutes (re-timed, encoded per minute)."""
    mins = {}
    for name, src in (("quiet", quiet), ("hot", hot)):
        r = Rollup()
        for i, tk in enumerate((src * 3)[:121]):
            r.add(dataclasses.replace(tk, time=60.0 * 1000 + i, interval=1.0))
        mins[name] = orjson.loads(rollup_encode(r.flush()))
    d = os.path.join(store, ROLLUP.name)
    os.makedirs(d, exist_ok=True)
    seg = segment * ROLLUP.segment_factor
    total = 0
    m = t0 - t0 % 60
    while m <= t1:
        start = m
        first = None
        frames = []
        cctx = None
        while m <= t1 and m - start < seg:
            rec = dict(mins["hot" if hot_at(m) else "quiet"], t=m)
            payload = orjson.dumps(rec)
            if first is None:
                first = payload
                cctx = zstandard.ZstdCompressor(level=ROLLUP.level, dict_data=zstandard.ZstdCompressionDict(
                    first, dict_type=zstandard.DICT_TYPE_RAWCONTENT), write_checksum=False, write_content_size=True)
            frames.append((m, cctx.compress(payload)))
            m += 60
        total += _write_segment(d, start, encode_head(first, False), frames)
    return total


def generate(store: str, seconds: int, end: float, p1: Pool, p10: Pool, quiet: list, hot: list,
             tick_seconds: int | None = None) -> dict:
    """A store of `seconds` ending at `end`: 10 s aggregates and rollups over all of it, 1 s ticks over
    its last `tick_seconds` (all of it by default)."""
    os.makedirs(store, exist_ok=True)
    with open(os.path.join(store, META), "w") as f:
        json.dump({"schema": SCHEMA, "written_by": "benchmarks/storegen.py", "created": time.time(),
                   "tiers": {k: {"keep_s": None, "max_bytes": None} for k in catalog.KEEP}}, f)
    t0 = float(int(end - seconds))
    a = time.time()
    ts = tick_seconds if tick_seconds is not None else seconds
    out = {"seconds": seconds, "tick_seconds": ts,
           "ticks_bytes": write_stream(store, TICKS, p1, float(int(end - ts)) + 1, end, 1.0),
           "ticks10s_bytes": write_stream(store, TICKS10, p10, t0 + 10, end, 10.0),
           "rollup_bytes": write_rollups(store, quiet, hot, t0, end)}
    out["write_s"] = round(time.time() - a, 1)
    return out


def sample(work: str, n_quiet: int = 120, n_hot: int = 60) -> tuple[list, list]:
    from benchmarks.scale import sample_ticks

    return sample_ticks(work, False, n_quiet), sample_ticks(work, True, n_hot)


def _check_kinds() -> None:  # the generator writes what segment.py reads
    assert KIND_DICT != KIND_HEAD != KIND_DATA


__all__ = ["generate", "tick_pools", "sample", "hot_at"]
