"""A store directory: one locked writer, any number of readers, bounded by age and bytes.

`nodesleuth-store.json` names the store's schema. A reader refuses, in one line, a directory that
is not a store and a store written by a newer nodesleuth than it reads; a store made before the
file existed (nodesleuth 0.1, schema 1) is recognised by its streams.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from typing import Iterator

from ..model.errors import InputError
from . import catalog
from .catalog import TICKS, Stream
from .segment import Budget, DiskFull, Problem, SegmentReader, SegmentWriter, Syncer, lock_writer, segment_start

V1_STREAMS = ("ticks", "profile", "churn", "rollup")  # what nodesleuth 0.1 wrote (no description file)
META = "nodesleuth-store.json"
SCHEMA = 2  # the store layout and record schema this version writes
WORK = ".work"  # scratch space of the writer (perf chunks); emptied when a writer starts


def read_meta(directory: str) -> dict | None:
    p = os.path.join(directory, META)
    try:
        with open(p) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InputError(p, f"unreadable store description: {getattr(e, 'strerror', None) or e}") from None


def check_store(directory: str, for_writing: bool = False) -> int:
    """The store's schema; raises InputError for a directory that is not a usable store."""
    if not os.path.isdir(directory):
        if for_writing and not os.path.exists(directory):
            return SCHEMA
        raise InputError(directory, "no such store directory")
    if not os.access(directory, os.R_OK | os.X_OK):
        raise InputError(directory, "permission denied: cannot read the store (run as its owner or root)")
    meta = read_meta(directory)
    if meta is not None:
        schema = meta.get("schema")
        if not isinstance(schema, int):
            raise InputError(os.path.join(directory, META), "no schema number")
        if schema > SCHEMA:
            raise InputError(directory, f"store schema {schema} was written by a newer nodesleuth "
                             f"({meta.get('written_by', '?')}); this version reads up to schema {SCHEMA}")
        return schema
    names = set(os.listdir(directory))
    if names & set(V1_STREAMS):
        return 1  # nodesleuth 0.1 wrote no description file
    if names - {"LOCK", WORK} and not for_writing:
        raise InputError(directory, "not a nodesleuth store (no nodesleuth-store.json and no ticks/profile/"
                         "churn/rollup streams)")
    if names - {"LOCK", WORK} and for_writing:
        raise InputError(directory, "not a nodesleuth store and not empty: refusing to write into it")
    return SCHEMA


class StoreWriter:
    def __init__(self, directory: str, retention: float | None = None, max_bytes: int | None = None,
                 segment_seconds: float = 3600.0, fsync_every: int = 1, background_sync: bool = True):
        check_store(directory, for_writing=True)
        self.dir = directory
        self._lock = lock_writer(directory)
        try:
            meta = read_meta(directory) or {}
            if meta.get("schema") != SCHEMA:
                from .. import __version__

                tmp = os.path.join(directory, META + ".tmp")
                with open(tmp, "w") as f:
                    json.dump({"schema": SCHEMA, "written_by": f"nodesleuth {__version__}",
                               "created": meta.get("created", time.time())}, f)
                os.rename(tmp, os.path.join(directory, META))
            # a killed predecessor's scratch (perf chunks): we hold the lock, nobody else uses it
            shutil.rmtree(os.path.join(directory, WORK), ignore_errors=True)
        except OSError as e:
            os.close(self._lock)
            raise InputError(directory, f"cannot write the store: {e.strerror or e}") from None
        self.budget = Budget(directory, retention, max_bytes)
        self.segment_seconds = segment_seconds
        self.fsync_every = fsync_every
        self.syncer = Syncer() if background_sync else None
        self.writers: dict[str, SegmentWriter] = {}
        self._mu = threading.Lock()  # the recorder loop and the profiler thread both append
        self.skipped = 0  # records not written because the disk was full
        self.full_drops = 0  # oldest segments dropped early because the disk was full
        self.full_since: float | None = None

    def workdir(self, name: str) -> str:
        d = os.path.join(self.dir, WORK, name)
        os.makedirs(d, exist_ok=True)
        return d

    def writer(self, stream: Stream | str) -> SegmentWriter:
        """The segment writer of a stream the catalog declares (ValueError for any other)."""
        st = catalog.get(stream)
        stream = st.name
        w = self.writers.get(stream)
        if w is None:
            try:
                w = SegmentWriter(self.dir, stream, self.segment_seconds, fsync_every=self.fsync_every,
                                  level=st.level, syncer=self.syncer)
            except OSError as e:
                raise InputError(os.path.join(self.dir, stream), f"cannot write: {e.strerror or e}") from None
            w.budget = self.budget
            self.writers[stream] = w
        return w

    def append(self, stream: Stream | str, t: float, payload: bytes) -> int:
        """Write one record. On a full disk: drop the oldest closed segments one at a time until it
        fits; if nothing is left to drop the record is skipped (counted in `skipped`), never
        half-written."""
        with self._mu:
            w = self.writer(stream)
            while True:
                try:
                    n = w.append(t, payload)
                    break
                except DiskFull:
                    dropped = self.budget.enforce(need=1, keep=w.path)
                    self.full_drops += len(dropped)
                    if not dropped:
                        self.skipped += 1
                        if self.full_since is None:
                            self.full_since = time.time()
                        return 0
                except OSError as e:
                    raise InputError(w.path or w.dir, f"cannot write: {e.strerror or e}") from None
            self.full_since = None
            return n

    def enforce(self, now: float | None = None) -> list[str]:
        with self._mu:
            return self.budget.enforce(now)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        if self.syncer is not None:
            self.syncer.stop()
        shutil.rmtree(os.path.join(self.dir, WORK), ignore_errors=True)
        os.close(self._lock)


class StoreReader:
    """Reads a store while a writer may be appending; damage is collected in `problems`."""

    def __init__(self, directory: str):
        self.schema = check_store(directory)
        self.dir = directory
        self.problems: list[Problem] = []
        self._writing: bool | None = None

    def writing(self) -> bool:
        """Whether a `record` holds the store's lock now (its newest segments may grow)."""
        if self._writing is None:
            import fcntl

            try:
                fd = os.open(os.path.join(self.dir, "LOCK"), os.O_RDONLY)
            except OSError:
                self._writing = False
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._writing = False
            except OSError:
                self._writing = True
            finally:
                os.close(fd)
        return self._writing

    def segments(self, stream: Stream | str) -> list[str]:
        d = os.path.join(self.dir, catalog.get(stream).name)
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
        except FileNotFoundError:
            return []
        except OSError as e:
            self.problems.append(Problem(d, 0, f"cannot list: {e.strerror or e}"))
            return []
        return [os.path.join(d, n) for n in names]

    def span(self, stream: Stream | str = TICKS) -> tuple[float, float] | None:
        """First and last record time (reads the last segment to find the end)."""
        segs = self.segments(stream)
        if not segs:
            return None
        first = None
        for p in segs:
            r = SegmentReader(p)
            for t, _ in r.frames():
                first = t
                break
            self.problems += r.problems
            if first is not None:
                break
        last = None
        for p in reversed(segs):
            last = SegmentReader(p, growing=p == segs[-1] and self.writing()).last_time()
            if last is not None:
                break
        return (first, last) if first is not None else None

    def read(self, stream: Stream | str = TICKS, t0: float | None = None, t1: float | None = None,
             on_segment=None) -> Iterator[tuple[float, bytes]]:
        segs = self.segments(stream)
        starts = [segment_start(os.path.basename(p)) for p in segs]
        for i, p in enumerate(segs):
            nxt = starts[i + 1] if i + 1 < len(starts) else None
            if t1 is not None and starts[i] > t1:
                break
            if t0 is not None and nxt is not None and nxt < t0:
                continue
            r = SegmentReader(p, growing=nxt is None and self.writing())
            yield from r.frames(t0, t1)
            self.problems += r.problems
            if on_segment:
                on_segment(p, os.path.getsize(p) if os.path.exists(p) else 0)

    def size(self) -> int:
        total = 0
        for dp, _, files in os.walk(self.dir):
            total += sum(os.path.getsize(os.path.join(dp, f)) for f in files if f.endswith((".seg", ".dict")))
        return total
