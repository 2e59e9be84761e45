"""A store directory: one locked writer, any number of readers, bounded by age and bytes."""

from __future__ import annotations

import os
import threading
from typing import Iterator

from ..errors import InputError
from .segment import Budget, Problem, SegmentReader, SegmentWriter, lock_writer, segment_start

TICKS = "ticks"


class StoreWriter:
    def __init__(self, directory: str, retention: float | None = None, max_bytes: int | None = None,
                 segment_seconds: float = 3600.0, fsync_every: int = 1):
        self.dir = directory
        self._lock = lock_writer(directory)
        self.budget = Budget(directory, retention, max_bytes)
        self.segment_seconds = segment_seconds
        self.fsync_every = fsync_every
        self.writers: dict[str, SegmentWriter] = {}
        self._mu = threading.Lock()  # the recorder loop and the profiler thread both append

    def writer(self, stream: str) -> SegmentWriter:
        w = self.writers.get(stream)
        if w is None:
            w = SegmentWriter(self.dir, stream, self.segment_seconds, fsync_every=self.fsync_every)
            w.budget = self.budget
            self.writers[stream] = w
        return w

    def append(self, stream: str, t: float, payload: bytes) -> int:
        with self._mu:
            return self.writer(stream).append(t, payload)

    def enforce(self, now: float | None = None) -> list[str]:
        with self._mu:
            return self.budget.enforce(now)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        os.close(self._lock)


class StoreReader:
    """Reads a store while a writer may be appending; damage is collected in `problems`."""

    def __init__(self, directory: str):
        if not os.path.isdir(directory):
            raise InputError(directory, "no such store directory")
        self.dir = directory
        self.problems: list[Problem] = []

    def segments(self, stream: str) -> list[str]:
        d = os.path.join(self.dir, stream)
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
        except FileNotFoundError:
            return []
        return [os.path.join(d, n) for n in names]

    def span(self, stream: str = TICKS) -> tuple[float, float] | None:
        """First and last record time (reads the last segment to find the end)."""
        segs = self.segments(stream)
        if not segs:
            return None
        first = None
        for p in segs:
            for t, _ in SegmentReader(p).frames():
                first = t
                break
            if first is not None:
                break
        last = None
        for p in reversed(segs):
            for t, _ in SegmentReader(p).frames():
                last = t
            if last is not None:
                break
        return (first, last) if first is not None else None

    def read(self, stream: str = TICKS, t0: float | None = None, t1: float | None = None,
             on_segment=None) -> Iterator[tuple[float, bytes]]:
        segs = self.segments(stream)
        starts = [segment_start(os.path.basename(p)) for p in segs]
        for i, p in enumerate(segs):
            nxt = starts[i + 1] if i + 1 < len(starts) else None
            if t1 is not None and starts[i] > t1:
                break
            if t0 is not None and nxt is not None and nxt < t0:
                continue
            r = SegmentReader(p)
            yield from r.frames(t0, t1)
            self.problems += r.problems
            if on_segment:
                on_segment(p, os.path.getsize(p) if os.path.exists(p) else 0)

    def size(self) -> int:
        total = 0
        for dp, _, files in os.walk(self.dir):
            total += sum(os.path.getsize(os.path.join(dp, f)) for f in files if f.endswith(".seg"))
        return total
