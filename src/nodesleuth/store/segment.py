"""Segment files: append-only frames, each with a CRC, bounded by age and bytes.

Layout of a store directory:
    nodesleuth-store.json        schema version (store/store.py)
    LOCK                         flock'ed by the one writer; readers never lock
    <stream>/<start_ms>.seg      segments, one writer process appends to the newest
    <stream>/<start_ms>.dict     a second copy of the segment's dictionary frame

Frame = 24-byte header + payload:
    magic b"NSF1" | u32 payload length | u32 crc32(header[8:] + payload) | f64 time | u8 kind | 3 pad
Kind 1 is a zstd raw-content dictionary (the segment's first record, uncompressed) that later
frames of the same segment are compressed against; kind 2 is a zstd-compressed record.

Damage: any single damaged byte loses at most the frame it hit. The dictionary is kept twice (the
segment's first frame and the .dict sidecar, written before any data frame), so a damaged first
frame costs that one second, not the segment; a damaged header resynchronises on the next magic
whose frame checks out, a damaged length is told apart from a torn tail by a valid frame after it.

Crash safety: a frame is written with one write(); a background thread fsyncs within
`sync_every` seconds (default: at once), so a kill -9 loses at most the frame being written and a
slow disk (an fsync that takes seconds) delays durability, not the 1 Hz loop. A full disk: the
frame is not left half-written (the file is cut back to its last whole frame), the caller is told
(`DiskFull`), drops the oldest segments and retries, or skips the record and says so.
"""

from __future__ import annotations

import errno
import fcntl
import math
import mmap
import os
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterator

import zstandard

from ..model.errors import InputError

MAGIC = b"NSF1"
HEADER = struct.Struct("<4sIIdB3x")
KIND_DICT = 1
KIND_DATA = 2
MAX_FRAME = 64 << 20
SKIP_EDGE = 1.0  # s: a ranged read steps over frames further than this outside its range (see _records)


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


def sidecar(seg_path: str) -> str:
    return seg_path[:-4] + ".dict"


def unlink_quietly(*paths: str) -> None:
    for q in paths:
        try:
            os.unlink(q)
        except OSError:
            pass


class DiskFull(OSError):
    """A write found no space (ENOSPC/EDQUOT); nothing partial was left in the file."""


class Syncer:
    """fsyncs written segments off the writer's path; records the slowest fsync it saw."""

    def __init__(self, every: float = 0.0):
        self.every = every
        self.pending: set[int] = set()
        self.cv = threading.Condition()
        self.stopping = False
        self.max_fsync = 0.0
        self.slow: list[float] = []  # fsyncs over a second, since last asked
        self.thread = threading.Thread(target=self._run, name="nodesleuth-fsync", daemon=True)
        self.thread.start()

    def add(self, fd: int) -> None:
        with self.cv:
            self.pending.add(fd)
            self.cv.notify()

    def flush(self, fd: int) -> None:
        """fsync now, on the caller's thread (before close)."""
        with self.cv:
            self.pending.discard(fd)
        self._fsync(fd)

    def _fsync(self, fd: int) -> None:
        t = time.monotonic()
        try:
            os.fsync(fd)
        except OSError:
            pass
        d = time.monotonic() - t
        self.max_fsync = max(self.max_fsync, d)
        if d > 1.0:
            self.slow.append(d)

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.pending and not self.stopping:
                    self.cv.wait()
                if self.stopping and not self.pending:
                    return
                fds, self.pending = self.pending, set()
            for fd in fds:
                self._fsync(fd)
            if self.every:
                time.sleep(self.every)

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify()
        self.thread.join(timeout=60)


class SegmentWriter:
    """Appends frames to the newest segment of one stream; rolls by age, enforces retention."""

    def __init__(self, directory: str, stream: str, segment_seconds: float = 3600.0, fsync_every: int = 1,
                 level: int = 6, syncer: Syncer | None = None):
        self.dir = os.path.join(directory, stream)
        os.makedirs(self.dir, exist_ok=True)
        self.segment_seconds = segment_seconds
        self.fsync_every = max(1, fsync_every)
        self.level = level
        self.syncer = syncer
        self.fd: int | None = None
        self.path: str | None = None
        self.start: float = 0.0
        self.size = 0
        self.cctx: zstandard.ZstdCompressor | None = None
        self.unsynced = 0
        self.bytes_written = 0
        self.budget: "Budget | None" = None  # enforced whenever a segment is opened

    def _open(self, t: float, first: bytes) -> None:
        self.close()
        name = f"{int(t * 1000):013d}.seg"
        path = os.path.join(self.dir, name)
        frame = encode_frame(t, KIND_DICT, first)
        tmp = sidecar(path) + ".tmp"
        try:
            # the sidecar first: a segment never exists without a second copy of its dictionary
            with open(tmp, "wb") as f:  # not fsync'ed here: a slow disk must not stall the 1 Hz loop;
                f.write(frame)  # a lost sidecar costs only the second copy, the segment has the first
            os.rename(tmp, sidecar(path))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            unlink_quietly(tmp, sidecar(path))
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(e.errno, f"{path}: {e.strerror}") from None
            raise
        self.fd, self.path, self.start, self.size = fd, path, t, os.fstat(fd).st_size
        d = zstandard.ZstdCompressionDict(first, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        self.cctx = zstandard.ZstdCompressor(level=self.level, dict_data=d, write_checksum=False,
                                             write_content_size=True)
        try:
            self._write(frame, sync=self.syncer is None)
        except DiskFull:
            self._abandon()
            raise
        if self.budget is not None:
            self.budget.enforce(keep=self.path)

    def _abandon(self) -> None:
        """Remove a segment that could not get its first frame on disk."""
        fd, path = self.fd, self.path
        self.fd = self.path = None
        if fd is not None:
            os.close(fd)
        if path:
            unlink_quietly(path, sidecar(path))

    def _write(self, frame: bytes, sync: bool = False) -> None:
        try:
            n = os.write(self.fd, frame)
            if n != len(frame):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            # never leave half a frame: cut the file back to its last whole frame
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(e.errno, f"{self.path}: {e.strerror}") from None
            raise
        self.size += n
        self.bytes_written += n
        self.unsynced += 1
        if sync or self.unsynced >= self.fsync_every:
            if self.syncer is not None:
                self.syncer.add(self.fd)
            else:
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
            if self.syncer is not None:
                self.syncer.flush(self.fd)
            else:
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
                        size = os.path.getsize(p)
                    except OSError:
                        continue
                    try:
                        size += os.path.getsize(sidecar(p))
                    except OSError:
                        pass
                    out.append((segment_start(name), p, size))
        return sorted(out)

    def enforce(self, now: float | None = None, keep: str | None = None, need: int = 0) -> list[str]:
        """Drop what is past the bounds; `need` > 0 (a full disk) also drops oldest closed segments
        until that many bytes are freed."""
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
        if need > 0:
            newest = {os.path.dirname(p): p for _, p, _ in segs}
            freed = 0
            for start, p, size in segs:
                if freed >= need:
                    break
                if p in dropped or p == keep or newest[os.path.dirname(p)] == p:
                    continue
                dropped.append(p)
                freed += size
        for p in dropped:
            unlink_quietly(p, sidecar(p))
        self.dropped += dropped
        return dropped


def lock_writer(directory: str) -> int:
    """One writer per store; a second `record` on the same directory gets a clear error."""
    p = os.path.join(directory, "LOCK")
    try:
        os.makedirs(directory, exist_ok=True)
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise InputError(directory, f"cannot write the store: {e.strerror or e}") from None
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
    growing: bool = False  # a writer may be appending to this segment now: a short tail is not damage

    @staticmethod
    def _frame(data: bytes, off: int):
        """(kind, time, payload, end) of a whole, checksum-valid frame at off; else None."""
        if off + HEADER.size > len(data):
            return None
        magic, length, crc, t, kind = HEADER.unpack_from(data, off)
        end = off + HEADER.size + length
        if magic != MAGIC or length > MAX_FRAME or end > len(data):
            return None
        payload = data[off + HEADER.size:end]
        if _crc(data[off + 12:off + HEADER.size], payload) != crc:
            return None
        return kind, t, payload, end

    def _next_valid(self, data: bytes, off: int) -> int:
        j = off
        while True:
            j = data.find(MAGIC, j + 1)
            if j < 0 or self._frame(data, j) is not None:
                return j

    def _sidecar_dict(self):
        try:
            with open(sidecar(self.path), "rb") as f:
                fr = self._frame(f.read(), 0)
        except OSError:
            return None
        if fr is None or fr[0] != KIND_DICT:
            return None
        return zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(fr[2], dict_type=zstandard.DICT_TYPE_RAWCONTENT))

    def first_time(self) -> float | None:
        """The time of the segment's first record from frame headers alone (no payload is read)."""
        try:
            with open(self.path, "rb") as f:
                while True:
                    head = f.read(HEADER.size)
                    if len(head) < HEADER.size:
                        return None
                    magic, length, _, t, kind = HEADER.unpack(head)
                    if magic != MAGIC:
                        return None
                    if kind != KIND_DICT:
                        return t
                    f.seek(length, os.SEEK_CUR)
        except OSError:
            return None

    def _records(self, t0: float | None = None, t1: float | None = None) -> Iterator[tuple[int, float, bytes, int]]:
        """(kind, time, payload, end offset) of every whole, checksum-valid frame; damage noted in `problems`.
        With a range, a data frame whose header puts it more than SKIP_EDGE s outside [t0, t1] is stepped
        over unread (no checksum, no copy: an unaligned hour needs a second at each edge of a 100 MB
        segment), but only when its time lies between its neighbours' (frames are written in time
        order): a header whose time was damaged out of its place is checked as usual, so the damage is
        found and said, never a frame silently skipped."""
        ranged = t0 is not None or t1 is not None
        try:
            with open(self.path, "rb") as f:
                if ranged:
                    try:
                        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    except (ValueError, OSError):  # empty file (or no mmap here): read it
                        data = f.read()
                else:
                    data = f.read()
        except OSError as e:
            self.problems.append(Problem(self.path, 0, f"cannot read: {e.strerror or e}"))
            return
        lo = -math.inf if t0 is None else t0
        hi = math.inf if t1 is None else t1
        prev_t = None
        off = 0
        n = len(data)
        unpack = HEADER.unpack_from
        while off + HEADER.size <= n:
            if ranged:
                magic, length, _, t, kind = unpack(data, off)
                end = off + HEADER.size + length
                if (magic == MAGIC and kind == KIND_DATA and length <= MAX_FRAME and end + HEADER.size <= n
                        and (t < lo - SKIP_EDGE or t > hi + SKIP_EDGE) and prev_t is not None and prev_t <= t):
                    m2, l2, _, t2, k2 = unpack(data, end)
                    if m2 == MAGIC and k2 == KIND_DATA and l2 <= MAX_FRAME and t <= t2:
                        prev_t, off = t, end
                        continue
            fr = self._frame(data, off)
            if fr is None:
                nxt = self._next_valid(data, off)
                if nxt < 0:
                    magic, length = HEADER.unpack_from(data, off)[:2]
                    if magic == MAGIC and off + HEADER.size + length > n:
                        if not self.growing:  # no writer: the frame was cut (a crash) or its length damaged
                            self.problems.append(Problem(self.path, off, "last frame cut short; skipped"))
                        return  # else the tail frame is being written
                    self.problems.append(Problem(self.path, off, "checksum mismatch; last frame skipped"
                                                 if magic == MAGIC else "bad frame header; rest of segment skipped"))
                    return
                magic, length = HEADER.unpack_from(data, off)[:2]
                what = ("checksum mismatch; frame skipped" if magic == MAGIC and off + HEADER.size + length <= nxt
                        else "bad frame header; skipped to next frame")
                self.problems.append(Problem(self.path, off, what))
                off = nxt
                continue
            kind, t, payload, off = fr
            if kind == KIND_DATA:
                prev_t = t
            yield kind, t, payload, off

    def _data(self, t0: float | None = None, t1: float | None = None) -> Iterator[tuple[float, bytes, object, int]]:
        """(time, compressed payload, its decompressor, offset) of every data frame (with a range: of
        those that may lie in it; see _records)."""
        dctx = None
        for kind, t, payload, off in self._records(t0, t1):
            if kind == KIND_DICT:
                dctx = zstandard.ZstdDecompressor(
                    dict_data=zstandard.ZstdCompressionDict(payload, dict_type=zstandard.DICT_TYPE_RAWCONTENT))
                continue
            if dctx is None:
                dctx = self._sidecar_dict()
                if dctx is None:
                    self.problems.append(Problem(self.path, off, "segment dictionary lost (first frame and "
                                                 ".dict sidecar unreadable); rest of segment skipped"))
                    return
            yield t, payload, dctx, off

    def frames(self, t0: float | None = None, t1: float | None = None) -> Iterator[tuple[float, bytes]]:
        for t, payload, dctx, off in self._data(t0, t1):
            if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                continue
            try:
                yield t, dctx.decompress(payload)
            except zstandard.ZstdError as e:
                self.problems.append(Problem(self.path, off, f"undecodable frame: {e}"))

    def last_time(self) -> float | None:
        """The time of the last record `frames()` yields, decompressing from the end back only until
        one decodes (a store's span needs its end: a whole segment decompressed was 3,600 records)."""
        data = list(self._data())
        for t, payload, dctx, off in reversed(data):
            try:
                dctx.decompress(payload)
                return t
            except zstandard.ZstdError as e:
                self.problems.append(Problem(self.path, off, f"undecodable frame: {e}"))
        return None


def summarise(problems: list[Problem]) -> str:
    """One line for any number of read problems."""
    if not problems:
        return ""
    files = {p.path for p in problems}
    first = problems[0]
    return (f"{len(problems)} unreadable part(s) of the recording skipped in {len(files)} file(s); "
            f"first: {first}")
