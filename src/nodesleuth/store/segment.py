"""Segment files: append-only frames, each with a CRC, bounded by age and bytes.

Layout of a store directory:
    nodesleuth-store.json        schema version (store/store.py)
    LOCK                         flock'ed by the one writer; readers never lock
    <stream>/<start_ms>.seg      segments, one writer process appends to the newest
    <stream>/<start_ms>.dict     a second copy of the segment's head (dictionary) frame
    <stream>/<start_ms>.idx      the segment's frame index: time -> offset (schema 3)

Frame = 24-byte header + payload:
    magic b"NSF1" | u32 payload length | u32 crc32(header[8:] + payload) | f64 time | u8 kind | 3 pad
Kind 2 is a zstd-compressed record, compressed against the segment's dictionary, which the
segment's first frame holds: kind 1 (schema <= 2) is a raw-content dictionary, the segment's first
record uncompressed; kind 3 (schema 3, the segment's head) is zstd-compressed
    u8 dictionary type (1: raw content, 2: a zstd dictionary trained on the stream's previous
    segment) | u32 dictionary length | dictionary | the codec's context (store/codec.py: the names of
    the processes it will not repeat), possibly empty.
A stream whose catalog entry says `dictionary="trained"` (the 1 Hz ticks: thousands of small
records a segment) gets a dictionary trained on a sample of its previous segment's records; the
first segment after a start uses its first record, as before.

Index: after each data frame, one 12-byte entry goes to the .idx file: i32 ms since the segment's
start | u32 offset of the frame | u32 crc32 of those 8 bytes. A ranged read finds its start by
bisection over the index and reads from the last good entry at or before it, so reading one second
costs the same in a one-hour store and a one-year one. The index is never trusted alone: an entry
whose checksum fails is passed over (the read starts from the good entry before it and steps over
frame headers from there: a damaged entry costs the frames up to the next good one, read, not
lost), a missing or short index (a crash between a frame and its entry, a store copied without
it) is the same as scanning frames, and every frame found through it is checked as usual.

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

import bisect
import errno
import fcntl
import math
import mmap
import os
import random
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
KIND_HEAD = 3
DICT_RAW, DICT_TRAINED = 1, 2
HEAD = struct.Struct("<BI")
INDEX = struct.Struct("<iII")
TRAIN_SAMPLES = 300  # records of a segment kept to train the next segment's dictionary
TRAIN_MIN = 50  # fewer than this: the next segment uses its first record
# records larger than this are compressed with a context made for them, dropped after: zstd sizes a
# context's tables (and keeps them) by the largest input it has seen, up to its level's window. Measured
# (levels 3 and 6, a 16 KB dictionary): a context is 0.6-0.7 MB after 16 KB records, 1.1-1.2 MB after
# 64 KB, 3.4-3.5 MB after 4 MB; making one anew costs 0.05-0.3 ms. A tick (1 Hz) is a few KB and keeps
# its context; a profile batch or aggregate (every 10 s or less often) is tens of KB to MBs and does not
KEEP_CONTEXT_BYTES = 16 << 10
DICT_SIZE = 16384  # a trained dictionary (stored compressed, ~7 KB, twice a segment)
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


def index_path(seg_path: str) -> str:
    return seg_path[:-4] + ".idx"


def index_entry(ms: int, off: int) -> bytes:
    head = struct.pack("<iI", ms, off)
    return head + struct.pack("<I", zlib.crc32(head) & 0xFFFFFFFF)


def encode_head(zdict: bytes, trained: bool, ctx: bytes = b"") -> bytes:
    """A segment's head frame payload (kind 3): its dictionary and the codec's context."""
    return zstandard.ZstdCompressor(level=9).compress(
        HEAD.pack(DICT_TRAINED if trained else DICT_RAW, len(zdict)) + zdict + ctx)


def decode_head(payload: bytes) -> tuple[zstandard.ZstdDecompressor, bytes]:
    """(decompressor, codec context) of a head frame; ValueError if it is not one."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(payload)
        kind, n = HEAD.unpack_from(raw, 0)
    except (zstandard.ZstdError, struct.error) as e:
        raise ValueError(f"undecodable segment head: {e}") from None
    zd = raw[HEAD.size:HEAD.size + n]
    if kind not in (DICT_RAW, DICT_TRAINED) or len(zd) != n:
        raise ValueError("undecodable segment head")
    d = zstandard.ZstdCompressionDict(zd, dict_type=zstandard.DICT_TYPE_RAWCONTENT if kind == DICT_RAW
                                      else zstandard.DICT_TYPE_FULLDICT)
    return zstandard.ZstdDecompressor(dict_data=d), bytes(raw[HEAD.size + n:])


def unlink_quietly(*paths: str) -> None:
    for q in paths:
        try:
            os.unlink(q)
        except OSError:
            pass


def write_segment(directory: str, start: float, head_kind: int, head: bytes, frames: list[tuple[float, bytes]],
                  fsync: bool = True) -> str:
    """A whole closed segment at once: its head frame (as read from another segment: kind 1 or 3,
    payload unchanged), its data frames (compressed payloads, unchanged: same dictionary), the .dict
    copy and the index. For `cut` and the benchmarks' generator; the recorder appends instead."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{int(start * 1000):013d}.seg")
    first = encode_frame(start, head_kind, head)
    body = bytearray(first)
    idx = bytearray()
    for t, payload in frames:
        idx += index_entry(int(math.floor((t - start) * 1000)), len(body))
        body += encode_frame(t, KIND_DATA, payload)
    for p, data in ((sidecar(path), first), (path, body), (index_path(path), idx)):
        with open(p + ".tmp", "wb") as f:
            f.write(data)
            if fsync:
                os.fsync(f.fileno())
        os.rename(p + ".tmp", p)
    return path


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
    """Appends frames to the newest segment of one stream; rolls by age (and when the codec's
    context changes), enforces retention, keeps the frame index."""

    def __init__(self, directory: str, stream: str, segment_seconds: float = 3600.0, fsync_every: int = 1,
                 level: int = 6, syncer: Syncer | None = None, train: bool = False):
        self.dir = os.path.join(directory, stream)
        os.makedirs(self.dir, exist_ok=True)
        self.segment_seconds = segment_seconds
        self.fsync_every = max(1, fsync_every)
        self.level = level
        self.syncer = syncer
        self.train = train
        self.fd: int | None = None
        self.idx_fd: int | None = None
        self.path: str | None = None
        self.start: float = 0.0
        self.size = 0
        self.ctx = b""  # the codec context of the open segment
        self.cctx: zstandard.ZstdCompressor | None = None  # kept between records while they are small
        self.zdict: zstandard.ZstdCompressionDict | None = None  # the open segment's
        self.samples: list[bytes] = []  # records of the open segment to train the next one's dictionary
        self._rng = random.Random(0)
        self.frames = 0
        self.unsynced = 0
        self.bytes_written = 0
        self.budget: "Budget | None" = None  # enforced whenever a segment is opened

    def rolls(self, t: float) -> bool:
        """Whether a record at `t` opens a new segment (a codec refreshes its context then)."""
        return self.fd is None or t - self.start >= self.segment_seconds

    def _dictionary(self, first: bytes) -> tuple[bytes, bool]:
        """The new segment's dictionary: trained on the last segment's sample, else its first record."""
        samples, self.samples = self.samples, []
        if self.train and len(samples) >= TRAIN_MIN:
            try:
                # f=16: 2^16-entry tables (the default 2^20 took 12 MB more RSS, for 1% fewer bytes)
                return zstandard.train_dictionary(DICT_SIZE, samples, level=self.level, f=16).as_bytes(), True
            except zstandard.ZstdError:  # too little material: the first record serves
                pass
        return first, False

    def _open(self, t: float, first: bytes, ctx: bytes = b"") -> None:
        self.close()
        name = f"{int(t * 1000):013d}.seg"
        path = os.path.join(self.dir, name)
        zd, trained = self._dictionary(first)
        frame = encode_frame(t, KIND_HEAD, encode_head(zd, trained, ctx))
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
        try:
            self.idx_fd = os.open(index_path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError:  # no index: reads scan this segment's frames instead
            self.idx_fd = None
        self.fd, self.path, self.start, self.size = fd, path, t, os.fstat(fd).st_size
        self.ctx, self.frames = ctx, 0
        self.zdict = zstandard.ZstdCompressionDict(zd, dict_type=zstandard.DICT_TYPE_FULLDICT if trained
                                                   else zstandard.DICT_TYPE_RAWCONTENT)
        self.cctx = None
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
        if self.idx_fd is not None:
            os.close(self.idx_fd)
            self.idx_fd = None
        if path:
            unlink_quietly(path, sidecar(path), index_path(path))

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

    def append(self, t: float, payload: bytes, ctx: bytes = b"") -> int:
        """Write one record; returns the bytes it took on disk. `ctx`: the codec context the record
        was encoded against (a different one opens a new segment, whose head holds it)."""
        if self.fd is None or t - self.start >= self.segment_seconds or ctx != self.ctx:
            self._open(t, payload, ctx)
        before, off = self.bytes_written, self.size
        cctx = self.cctx or zstandard.ZstdCompressor(level=self.level, dict_data=self.zdict, write_checksum=False,
                                                     write_content_size=True)
        self._write(encode_frame(t, KIND_DATA, cctx.compress(payload)))
        # a context's tables grow to fit its largest record and stay that size: kept only while records
        # are small (a profile aggregate's record of a few MB left ~2-3 MB per stream held for good)
        self.cctx = cctx if len(payload) <= KEEP_CONTEXT_BYTES else None
        if self.idx_fd is not None:
            try:  # not part of the frame's durability: a lost entry is found again by scanning
                os.write(self.idx_fd, index_entry(int(math.floor((t - self.start) * 1000)), off))
                self.bytes_written += INDEX.size
            except OSError:
                os.close(self.idx_fd)
                self.idx_fd = None
        self.frames += 1
        if self.train:  # a uniform sample of the segment's records (reservoir)
            if len(self.samples) < TRAIN_SAMPLES:
                self.samples.append(payload)
            else:
                j = self._rng.randrange(self.frames)
                if j < TRAIN_SAMPLES:
                    self.samples[j] = payload
        return self.bytes_written - before

    def close(self) -> None:
        if self.fd is not None:
            if self.syncer is not None:
                self.syncer.flush(self.fd)
            else:
                os.fsync(self.fd)
            os.close(self.fd)
            self.fd = None
        if self.idx_fd is not None:
            os.close(self.idx_fd)
            self.idx_fd = None


class Budget:
    """Disk bounds for a whole store: drop whole oldest segments by age and by bytes, per retention
    tier (catalog.KEEP) and for the store. Over the store's byte bound the finest tier's oldest
    segments go first: the coarser tiers still cover their time."""

    def __init__(self, directory: str, retention: float | None, max_bytes: int | None,
                 tiers: dict[str, tuple[float | None, int | None]] | None = None):
        self.dir = directory
        self.retention = retention
        self.max_bytes = max_bytes
        self.tiers = tiers  # keep tier -> (max age s, max bytes); None: `retention` for every stream
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
                    for q in (sidecar(p), index_path(p)):
                        try:
                            size += os.path.getsize(q)
                        except OSError:
                            pass
                    out.append((segment_start(name), p, size))
        return sorted(out)

    def _keep(self, p: str) -> str:
        from .catalog import STREAMS

        st = STREAMS.get(os.path.basename(os.path.dirname(p)))
        return st.keep if st is not None else "1s"

    def enforce(self, now: float | None = None, keep: str | None = None, need: int = 0) -> list[str]:
        """Drop what is past the bounds; `need` > 0 (a full disk) also drops oldest closed segments
        (finest tier first) until that many bytes are freed."""
        from .catalog import KEEP

        now = time.time() if now is None else now
        segs = self.segments()
        dropped: list[str] = []
        gone: set[str] = set()
        newest = {os.path.dirname(p): p for _, p, _ in segs}  # each stream's segment being written

        def drop(p: str) -> None:
            dropped.append(p)
            gone.add(p)

        # a segment is old when the one after it in the same stream started before the cut-off
        by_stream: dict[str, list] = {}
        for s in segs:
            by_stream.setdefault(os.path.dirname(s[1]), []).append(s)
        for d, lst in by_stream.items():
            age = self.retention if self.tiers is None else self.tiers.get(self._keep(lst[0][1]), (None,))[0]
            if age is None:
                continue
            for (start, p, size), nxt in zip(lst, lst[1:]):
                if nxt[0] < now - age and p != keep:
                    drop(p)
        if self.tiers is not None:  # each tier's own byte bound: its oldest segments first
            for tier in KEEP:
                cap = self.tiers.get(tier, (None, None))[1]
                if cap is None:
                    continue
                mine = [s for s in segs if s[1] not in gone and self._keep(s[1]) == tier]
                total = sum(s[2] for s in mine)
                for start, p, size in mine:
                    if total <= cap:
                        break
                    if p == keep or newest[os.path.dirname(p)] == p:
                        continue
                    drop(p)
                    total -= size
        order = sorted(segs, key=lambda s: (KEEP.index(self._keep(s[1])) if self._keep(s[1]) in KEEP else 0, s[0]))
        if self.max_bytes is not None:
            total = sum(s[2] for s in segs if s[1] not in gone)
            for start, p, size in order:
                if total <= self.max_bytes:
                    break
                if p in gone or p == keep or newest[os.path.dirname(p)] == p:
                    continue
                drop(p)
                total -= size
        if need > 0:
            freed = 0
            for start, p, size in order:
                if freed >= need:
                    break
                if p in gone or p == keep or newest[os.path.dirname(p)] == p:
                    continue
                drop(p)
                freed += size
        for p in dropped:
            unlink_quietly(p, sidecar(p), index_path(p))
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


_LOCAL = threading.local()  # a decompressor is used by one thread at a time (the web server has several)


class _Heads(dict):
    def clear(self) -> None:  # every thread's cache (benchmarks empty it to read cold)
        super().clear()
        _LOCAL.__dict__.clear()


_HEADS = _Heads()  # head frame bytes -> (decompressor, context), per thread: a trained dictionary is built once


def _head(kind: int, payload: bytes):
    """(decompressor, codec context) of a segment's first frame (kind 1 or 3)."""
    heads = getattr(_LOCAL, "heads", None)
    if heads is None:
        heads = _LOCAL.heads = {}
    hit = heads.get(payload)
    if hit is None:
        if kind == KIND_DICT:
            hit = (zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(
                payload, dict_type=zstandard.DICT_TYPE_RAWCONTENT)), b"")
        else:
            hit = decode_head(payload)
        if len(heads) >= 64:
            heads.clear()
        heads[payload] = hit
    return hit


@dataclass
class SegmentReader:
    """Reads frames of one segment; never raises on damage, records a Problem instead."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    growing: bool = False  # a writer may be appending to this segment now: a short tail is not damage
    context: bytes = b""  # the codec context of the segment's head (set once its head is read)

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

    def _sidecar_head(self):
        try:
            with open(sidecar(self.path), "rb") as f:
                fr = self._frame(f.read(), 0)
        except OSError:
            return None
        if fr is None or fr[0] not in (KIND_DICT, KIND_HEAD):
            return None
        try:
            return _head(fr[0], bytes(fr[2]))
        except ValueError:
            return None

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
                    if kind not in (KIND_DICT, KIND_HEAD):
                        return t
                    f.seek(length, os.SEEK_CUR)
        except OSError:
            return None

    def _index(self, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        """Entries lo..hi of the segment's index (ms, offset, crc), unchecked; [] when there is none."""
        try:
            with open(index_path(self.path), "rb") as f:
                if lo:
                    f.seek(lo * INDEX.size)
                raw = f.read() if hi is None else f.read((hi - lo) * INDEX.size)
        except OSError:
            return []
        n = len(raw) // INDEX.size
        return list(INDEX.iter_unpack(raw[:n * INDEX.size]))

    @staticmethod
    def _good(e) -> bool:
        return zlib.crc32(struct.pack("<iI", e[0], e[1])) & 0xFFFFFFFF == e[2]

    def first_indexed(self) -> float | None:
        """The time of the segment's first record from its index (checked against the frame header
        it names), without reading the record; None: no usable index."""
        start = segment_start(os.path.basename(self.path))
        for m, off, crc in self._index(0, 8):
            if not self._good((m, off, crc)):
                continue
            try:
                with open(self.path, "rb") as f:
                    f.seek(off)
                    head = f.read(HEADER.size)
            except OSError:
                return None
            if len(head) == HEADER.size:
                magic, _, _, t, kind = HEADER.unpack(head)
                if magic == MAGIC and kind == KIND_DATA and math.floor((t - start) * 1000) == m:
                    return t
            return None
        return None

    def _window(self, ms: int) -> list[tuple[int, int, int]]:
        """The index entries around `ms`: a long index (a day of seconds) is not read whole; where the
        entry should be is guessed from its last entry (records come at a steady pace) and only the
        entries around the guess are read; the whole index when the guess misses."""
        try:
            size = os.path.getsize(index_path(self.path))
        except OSError:
            return []
        n = size // INDEX.size
        if n <= 1024:
            return self._index()
        last = self._index(n - 1, n)
        if not last or not self._good(last[0]) or last[0][0] <= 0:
            return self._index()
        guess = min(n - 1, max(0, int(n * ms / last[0][0])))
        lo, hi = max(0, guess - 300), min(n, guess + 300)
        got = self._index(lo, hi)
        good = [e for e in got if self._good(e)]
        if good and (good[0][0] <= ms or lo == 0) and (hi == n or good[-1][0] > ms):
            return got
        return self._index()

    def seek(self, t: float, data=None) -> int:
        """The offset of a data frame at or before `t` (0: the segment's start), from the index: the
        last entry at or before `t` whose checksum holds and that points at a frame of its time."""
        start = segment_start(os.path.basename(self.path))
        ms = math.floor((t - start) * 1000)
        entries = self._window(ms)
        if not entries:
            return 0
        i = bisect.bisect_right([e[0] for e in entries], ms)
        n = len(data) if data is not None else None
        for j in range(min(i, len(entries)) - 1, -1, -1):
            m, off, crc = entries[j]
            if not self._good(entries[j]) or m > ms:
                continue  # a damaged entry: the good one before it
            if data is not None:
                if off + HEADER.size > n:
                    continue
                magic, _, _, ft, kind = HEADER.unpack_from(data, off)
                if magic != MAGIC or kind != KIND_DATA or math.floor((ft - start) * 1000) != m:
                    continue  # not the frame it names (a stale index): trust the frames instead
            return off
        return 0

    def _records(self, t0: float | None = None, t1: float | None = None,
                 seek: bool = False) -> Iterator[tuple[int, float, bytes, int]]:
        """(kind, time, payload, end offset) of every whole, checksum-valid frame; damage noted in `problems`.
        The segment's first frame (its head) always comes first. With a range, a data frame whose header
        puts it more than SKIP_EDGE s outside [t0, t1] is stepped over unread (no checksum, no copy), but
        only when its time lies between its neighbours' (frames are written in time order): a header whose
        time was damaged out of its place is checked as usual, so the damage is found and said, never a
        frame silently skipped. `seek`: start from the index's entry at or before t0 - SKIP_EDGE (frames
        before it are not looked at: a read's cost does not grow with the segment)."""
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
        if seek and t0 is not None:
            at = self.seek(t0 - SKIP_EDGE, data)
            if at > 0:
                fr = self._frame(data, 0)
                if fr is not None and fr[0] in (KIND_DICT, KIND_HEAD):
                    yield fr[0], fr[1], fr[2], fr[3]
                else:  # its second copy (the .dict sidecar) serves; the damage is said
                    self.problems.append(Problem(self.path, 0, "first frame (the segment's dictionary) "
                                                 "damaged; its .dict copy used"))
                off = at
        while off + HEADER.size <= n:
            if ranged:
                magic, length, _, t, kind = unpack(data, off)
                end = off + HEADER.size + length
                if t > hi + SKIP_EDGE and magic == MAGIC and kind == KIND_DATA and length <= MAX_FRAME \
                        and prev_t is not None and prev_t <= t and end + HEADER.size <= n:
                    m2, l2, _, t2, k2 = unpack(data, end)
                    if m2 == MAGIC and k2 == KIND_DATA and l2 <= MAX_FRAME and t <= t2:
                        return  # past the range, in time order: nothing later is in it
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

    def _data(self, t0: float | None = None, t1: float | None = None,
              seek: bool = False) -> Iterator[tuple[float, bytes, object, int]]:
        """(time, compressed payload, its decompressor, offset) of every data frame (with a range: of
        those that may lie in it; see _records)."""
        dctx = None
        for kind, t, payload, off in self._records(t0, t1, seek):
            if kind in (KIND_DICT, KIND_HEAD):
                try:
                    dctx, self.context = _head(kind, bytes(payload))
                except ValueError as e:
                    self.problems.append(Problem(self.path, off, str(e)))
                continue
            if dctx is None:
                got = self._sidecar_head()
                if got is None:
                    self.problems.append(Problem(self.path, off, "segment dictionary lost (first frame and "
                                                 ".dict sidecar unreadable); rest of segment skipped"))
                    return
                dctx, self.context = got
            yield t, payload, dctx, off

    def frames(self, t0: float | None = None, t1: float | None = None,
               seek: bool = True) -> Iterator[tuple[float, bytes]]:
        for t, payload, dctx, off in self._data(t0, t1, seek):
            if (t0 is not None and t < t0) or (t1 is not None and t > t1):
                continue
            try:
                yield t, dctx.decompress(payload)
            except zstandard.ZstdError as e:
                self.problems.append(Problem(self.path, off, f"undecodable frame: {e}"))

    def last_time(self) -> float | None:
        """The time of the last record `frames()` yields, decompressing from the end back only until
        one decodes (a store's span needs its end: a whole segment decompressed was 3,600 records).
        The index's last good entry saves reading the frames before it."""
        entries = self._index()
        start = segment_start(os.path.basename(self.path))
        t = start + entries[-1][0] / 1000.0 if entries else None
        data = list(self._data(t, math.inf, seek=True) if t is not None else self._data())
        for t, payload, dctx, off in reversed(data):
            try:
                dctx.decompress(payload)
                return t
            except zstandard.ZstdError as e:
                self.problems.append(Problem(self.path, off, f"undecodable frame: {e}"))
        if entries:  # nothing decodable after the index's last entry: look at the whole segment
            for t, payload, dctx, off in reversed(list(self._data())):
                try:
                    dctx.decompress(payload)
                    return t
                except zstandard.ZstdError:
                    pass
        return None


def summarise(problems: list[Problem]) -> str:
    """One line for any number of read problems."""
    if not problems:
        return ""
    files = {p.path for p in problems}
    first = problems[0]
    return (f"{len(problems)} unreadable part(s) of the recording skipped in {len(files)} file(s); "
            f"first: {first}")
