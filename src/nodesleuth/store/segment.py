"""Segment files: append-only frames, each with a CRC, bounded by age and bytes.

Layout of a store directory:
    LOCK                         flock'ed by the one writer; readers never lock
    <stream>/<start_ms>.seg      segments, one writer process appends to the newest

Frame = 24-byte header + payload:
    magic b"NSF1" | u32 payload length | u32 crc32(header[8:] + payload) | f64 time | u8 kind | 3 pad
Kind 1 is a zstd raw-content dictionary (the segment's first record, uncompressed) that later
frames of the same segment are compressed against; kind 2 is a zstd-compressed record.

Crash safety: a frame is written with one write() and fsync'ed (every `fsync_every` frames,
default each one), so kill -9 or a power cut loses at most the frame being written. A reader
treats a short or CRC-failing frame at the tail as not yet written; a bad frame elsewhere is
reported, and the reader resynchronises on the next magic.
"""

from __future__ import annotations

import fcntl
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import zstandard

from ..errors import InputError

MAGIC = b"NSF1"
HEADER = struct.Struct("<4sIIdB3x")
KIND_DICT = 1
KIND_DATA = 2
MAX_FRAME = 64 << 20


@dataclass
class Problem:
    path: str
    offset: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}@{self.offset}: {self.what}"


def _crc(header_tail: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(header_tail)) & 0xFFFFFFFF


def encode_frame(t: float, kind: int, payload: bytes) -> bytes:
    tail = struct.pack("<dB3x", t, kind)
    return HEADER.pack(MAGIC, len(payload), _crc(tail, payload), t, kind) + payload


def segment_start(name: str) -> float:
    return int(name.split(".")[0]) / 1000.0


class SegmentWriter:
    """Appends frames to the newest segment of one stream; rolls by age, enforces retention."""

    def __init__(self, directory: str, stream: str, segment_seconds: float = 3600.0, fsync_every: int = 1,
                 level: int = 6):
        self.dir = os.path.join(directory, stream)
        os.makedirs(self.dir, exist_ok=True)
        self.segment_seconds = segment_seconds
        self.fsync_every = max(1, fsync_every)
        self.level = level
        self.fd: int | None = None
        self.path: str | None = None
        self.start: float = 0.0
        self.cctx: zstandard.ZstdCompressor | None = None
        self.unsynced = 0
        self.bytes_written = 0
        self.budget: "Budget | None" = None  # enforced whenever a segment is opened

    def _open(self, t: float, first: bytes) -> None:
        self.close()
        self.start = t
        name = f"{int(t * 1000):013d}.seg"
        self.path = os.path.join(self.dir, name)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        d = zstandard.ZstdCompressionDict(first, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        self.cctx = zstandard.ZstdCompressor(level=self.level, dict_data=d, write_checksum=False,
                                             write_content_size=True)
        self._write(encode_frame(t, KIND_DICT, first), sync=True)
        if self.budget is not None:
            self.budget.enforce(keep=self.path)

    def _write(self, frame: bytes, sync: bool = False) -> None:
        os.write(self.fd, frame)
        self.bytes_written += len(frame)
        self.unsynced += 1
        if sync or self.unsynced >= self.fsync_every:
            os.fsync(self.fd)
            self.unsynced = 0

    def append(self, t: float, payload: bytes) -> int:
        """Write one record; returns the bytes it took on disk."""
        if self.fd is None or t - self.start >= self.segment_seconds:
            self._open(t, payload)
        before = self.bytes_written
        self._write(encode_frame(t, KIND_DATA, self.cctx.compress(payload)))
        return self.bytes_written - before

    def close(self) -> None:
        if self.fd is not None:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = None


class Budget:
    """Disk bounds for a whole store: drop whole oldest segments by age and by total bytes."""

    def __init__(self, directory: str, retention: float | None, max_bytes: int | None):
        self.dir = directory
        self.retention = retention
        self.max_bytes = max_bytes
        self.dropped: list[str] = []

    def segments(self) -> list[tuple[float, str, int]]:
        out = []
        for stream in os.listdir(self.dir):
            sd = os.path.join(self.dir, stream)
            if not os.path.isdir(sd):
                continue
            for name in os.listdir(sd):
                if name.endswith(".seg"):
                    p = os.path.join(sd, name)
                    try:
                        out.append((segment_start(name), p, os.path.getsize(p)))
                    except OSError:
                        pass
        return sorted(out)

    def enforce(self, now: float | None = None, keep: str | None = None) -> list[str]:
        now = time.time() if now is None else now
        segs = self.segments()
        dropped = []
        # a segment is old when the one after it in the same stream started before the cut-off
        if self.retention is not None:
            by_stream: dict[str, list] = {}
            for s in segs:
                by_stream.setdefault(os.path.dirname(s[1]), []).append(s)
            for lst in by_stream.values():
                for (start, p, size), nxt in zip(lst, lst[1:]):
                    if nxt[0] < now - self.retention and p != keep:
                        dropped.append(p)
        total = sum(s[2] for s in segs if s[1] not in dropped)
        if self.max_bytes is not None:
            newest = {os.path.dirname(p): p for _, p, _ in segs}  # each stream's segment being written
            for start, p, size in segs:
                if total <= self.max_bytes:
                    break
                if p in dropped or p == keep or newest[os.path.dirname(p)] == p:
                    continue
                dropped.append(p)
                total -= size
        for p in dropped:
            try:
                os.unlink(p)
            except OSError:
                pass
        self.dropped += dropped
        return dropped


def lock_writer(directory: str) -> int:
    """One writer per store; a second `record` on the same directory gets a clear error."""
    os.makedirs(directory, exist_ok=True)
    p = os.path.join(directory, "LOCK")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(p, "another nodesleuth record is writing this store") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


@dataclass
class SegmentReader:
    """Reads frames of one segment; never raises on damage, records a Problem instead."""

    path: str
    problems: list[Problem] = field(default_factory=list)

    def frames(self, t0: float | None = None, t1: float | None = None) -> Iterator[tuple[float, bytes]]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except OSError as e:
            self.problems.append(Problem(self.path, 0, e.strerror or str(e)))
            return
        dctx = None
        off = 0
        n = len(data)
        while off + HEADER.size <= n:
            magic, length, crc, t, kind = HEADER.unpack_from(data, off)
            if magic != MAGIC or length > MAX_FRAME:
                nxt = data.find(MAGIC, off + 1)
                self.problems.append(Problem(self.path, off, "bad frame header; skipped to next frame"
                                             if nxt >= 0 else "bad frame header; rest of segment skipped"))
                if nxt < 0:
                    return
                off = nxt
                continue
            end = off + HEADER.size + length
            if end > n:
                # the tail frame is being written or was cut by a crash: not an error for the reader
                return
            payload = data[off + HEADER.size:end]
            if _crc(data[off + 12:off + HEADER.size], payload) != crc:
                self.problems.append(Problem(self.path, off, "checksum mismatch; frame skipped"))
                nxt = data.find(MAGIC, off + 1)
                if nxt < 0:
                    return
                off = nxt
                continue
            off = end
            if kind == KIND_DICT:
                dctx = zstandard.ZstdDecompressor(
                    dict_data=zstandard.ZstdCompressionDict(payload, dict_type=zstandard.DICT_TYPE_RAWCONTENT))
                continue
            if dctx is None:
                self.problems.append(Problem(self.path, off, "data before the segment dictionary; skipped"))
                continue
            if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                continue
            try:
                yield t, dctx.decompress(payload)
            except zstandard.ZstdError as e:
                self.problems.append(Problem(self.path, off, f"undecodable frame: {e}"))
