"""A store directory: one locked writer, any number of readers, bounded by age and bytes.

`nodesleuth-store.json` names the store's schema. A reader refuses, in one line, a directory that
is not a store and a store written by a newer nodesleuth than it reads; a store made before the
file existed (nodesleuth 0.1, schema 1) is recognised by its streams.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import threading
import time
from typing import Iterator

from ..model.errors import InputError
from ..model.files import PROBE_STATE_FILE
from . import catalog, encoding
from .catalog import KEEP, KEEP_DEFAULT, TICKS, Stream
from .segment import (Budget, DiskFull, Problem, SegmentReader, SegmentWriter, Syncer, lock_writer,
                      segment_start)

V1_STREAMS = ("ticks", "profile", "churn", "rollup")  # what nodesleuth 0.1 wrote (no description file)
META = "nodesleuth-store.json"
SCHEMA = 3  # the store layout and record schema this version writes (3: packed ticks, trained
# dictionaries, frame index, retention tiers; 1 and 2 are still read)
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


def cut_range(directory: str) -> tuple[float, float] | None:
    """The range a cut (store/cut.py) was made for, None for a store that is not a cut: what reads
    of a cut default to, since the cut also holds the margin explain reads around it."""
    c = (read_meta(directory) or {}).get("cut")
    try:
        return (float(c["from"]), float(c["to"])) if c else None
    except (KeyError, TypeError, ValueError):
        return None


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
    # the probes' state file (collect/probe_state.py) may share the directory: the DaemonSet's hostPath
    names = set(os.listdir(directory)) - {PROBE_STATE_FILE}
    if names & set(V1_STREAMS):
        return 1  # nodesleuth 0.1 wrote no description file
    if names - {"LOCK", WORK} and not for_writing:
        raise InputError(directory, "not a nodesleuth store (no nodesleuth-store.json and no ticks/profile/"
                         "churn/rollup streams)")
    if names - {"LOCK", WORK} and for_writing:
        raise InputError(directory, "not a nodesleuth store and not empty: refusing to write into it")
    return SCHEMA


class StoreWriter:
    """The one writer of a store. `tiers`: retention per tier (catalog.KEEP: "1s", "10s", "1m") as
    (seconds or None, bytes or None); a tier not given keeps catalog.KEEP_DEFAULT. `retention`, the
    age bound of schema 2, bounds every tier at once when `tiers` is not given."""

    def __init__(self, directory: str, retention: float | None = None, max_bytes: int | None = None,
                 segment_seconds: float = 3600.0, fsync_every: int = 1, background_sync: bool = True,
                 tiers: dict[str, tuple[float | None, int | None]] | None = None, meta: dict | None = None):
        check_store(directory, for_writing=True)
        self.dir = directory
        self._lock = lock_writer(directory)
        given = tiers
        if tiers is None:
            tiers = {k: (retention, None) for k in KEEP}
        self.tiers = {k: tiers.get(k, (KEEP_DEFAULT[k], None)) for k in KEEP}
        try:
            old = read_meta(directory) or {}
            from .. import __version__

            doc = {**old, **(meta or {}), "schema": SCHEMA, "written_by": f"nodesleuth {__version__}",
                   "created": old.get("created", time.time()),
                   "tiers": {k: {"keep_s": a, "max_bytes": b} for k, (a, b) in self.tiers.items()}}
            if doc != old:
                tmp = os.path.join(directory, META + ".tmp")
                with open(tmp, "w") as f:
                    json.dump(doc, f)
                os.rename(tmp, os.path.join(directory, META))
            # a killed predecessor's scratch (perf chunks): we hold the lock, nobody else uses it
            shutil.rmtree(os.path.join(directory, WORK), ignore_errors=True)
        except OSError as e:
            os.close(self._lock)
            raise InputError(directory, f"cannot write the store: {e.strerror or e}") from None
        self.budget = Budget(directory, retention, max_bytes, tiers=None if given is None else self.tiers)
        self.segment_seconds = segment_seconds
        self.fsync_every = fsync_every
        self.syncer = Syncer() if background_sync else None
        self.writers: dict[str, SegmentWriter] = {}
        self._mu = threading.Lock()  # the recorder loop and the profiler thread both append
        self.codecs: dict[str, object] = {}  # stream -> its codec (store/encoding.py), made on first write
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
                w = SegmentWriter(self.dir, stream, self.segment_seconds * st.segment_factor,
                                  fsync_every=self.fsync_every, level=st.level, syncer=self.syncer,
                                  train=st.dictionary == "trained")
            except OSError as e:
                raise InputError(os.path.join(self.dir, stream), f"cannot write: {e.strerror or e}") from None
            w.budget = self.budget
            self.writers[stream] = w
        return w

    def rolls(self, stream: Stream | str, t: float) -> bool:
        """Whether the next record of `stream` at `t` opens a new segment (store/codec.py's Encoder
        then refreshes its context: it goes into the new segment's head)."""
        with self._mu:
            return self.writer(stream).rolls(t)

    def write(self, stream: Stream | str, record, offset: float = 0.0, extra: dict | None = None) -> int:
        """Encode `record` with its stream's codec (store/encoding.py) and append what it makes; the
        bytes written. `offset`: what turns the record's clock into wall-clock seconds; `extra`: fields
        added to a tick's record. Encoding runs on the caller's thread outside the lock (a profile
        batch takes milliseconds; the 1 Hz loop must not wait for it): each stream has one writer."""
        st = catalog.get(stream)
        c = self.codecs.get(st.name)
        if c is None:
            c = self.codecs[st.name] = encoding.codec(st)
        return sum(self.append(st, t, payload, ctx)
                   for t, payload, ctx in c.frames(record, lambda t: self.rolls(st, t), offset, extra))

    def append(self, stream: Stream | str, t: float, payload: bytes, ctx: bytes = b"") -> int:
        """Write one encoded record (`ctx`: the codec context it was encoded against, kept in its
        segment's head; `write` encodes for the caller). On a full disk: drop the oldest closed segments one at a time until it fits; if nothing
        is left to drop the record is skipped (counted in `skipped`), never half-written."""
        with self._mu:
            w = self.writer(stream)
            while True:
                try:
                    n = w.append(t, payload, ctx)
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

    def _names(self, stream: Stream | str) -> tuple[str, list[str]]:
        """The stream's directory and its segment names in time order (listed once per reader: a
        month of hourly segments is 2,000 files, and a one-second read asks three times)."""
        name = catalog.get(stream).name
        d = os.path.join(self.dir, name)
        cache = self.__dict__.setdefault("_listed", {})
        got = cache.get(name)
        if got is None:
            try:
                got = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
            except FileNotFoundError:
                got = []
            except OSError as e:
                self.problems.append(Problem(d, 0, f"cannot list: {e.strerror or e}"))
                got = []
            cache[name] = got
        return d, got

    def segments(self, stream: Stream | str) -> list[str]:
        d, names = self._names(stream)
        return [os.path.join(d, n) for n in names]

    def has(self, stream: Stream | str) -> bool:
        """Whether the stream has any segment."""
        return bool(self._names(stream)[1])

    def first(self, stream: Stream | str = TICKS, indexed: bool = False) -> float | None:
        """The time of the stream's first record that decodes (`indexed`: that its index and frame
        header give, without decoding it: where a tier begins)."""
        d, names = self._names(stream)
        for p in (os.path.join(d, n) for n in names):
            if indexed:
                t = SegmentReader(p).first_indexed()
                if t is not None:
                    return t
            r = SegmentReader(p)
            first = None
            for t, _ in r.frames():
                first = t
                break
            self.problems += r.problems
            if first is not None:
                return first
        return None

    def span(self, stream: Stream | str = TICKS) -> tuple[float, float] | None:
        """First and last record time (the last segment's index finds the end)."""
        segs = self.segments(stream)
        if not segs:
            return None
        first = self.first(stream)
        if first is None:
            return None
        last = None
        for p in reversed(segs):
            r = SegmentReader(p, growing=p == segs[-1] and self.writing())
            last = r.last_time()
            self.problems += r.problems
            if last is not None:
                break
        return (first, last) if last is not None else None

    def read(self, stream: Stream | str = TICKS, t0: float | None = None, t1: float | None = None,
             on_segment=None, with_context: bool = False) -> Iterator[tuple]:
        """(time, payload) of the stream's records in [t0, t1], in time order; with_context:
        (time, payload, the codec context of its segment). The segments are found by their names and,
        in each, the range's start through its index: the cost is that of the range, not the store."""
        d, names = self._names(stream)
        first = 0
        if t0 is not None and names:  # the segment holding t0 is the last starting at or before it
            # names are the start in ms, 13 digits: they sort as their times do
            first = max(0, bisect.bisect_right(names, f"{max(0, int(t0 * 1000)):013d}.seg") - 1)
        for i in range(first, len(names)):
            p = os.path.join(d, names[i])
            start = segment_start(names[i])
            nxt = segment_start(names[i + 1]) if i + 1 < len(names) else None
            if t1 is not None and start > t1:
                break
            r = SegmentReader(p, growing=nxt is None and self.writing())
            if with_context:
                for t, payload in r.frames(t0, t1):
                    yield t, payload, r.context
            else:
                yield from r.frames(t0, t1)
            self.problems += r.problems
            if on_segment:
                on_segment(p, os.path.getsize(p) if os.path.exists(p) else 0)

    def size(self) -> int:
        total = 0
        for dp, _, files in os.walk(self.dir):
            total += sum(os.path.getsize(os.path.join(dp, f)) for f in files if f.endswith((".seg", ".dict", ".idx")))
        return total
