"""`nodesleuth cut`: a small store holding one time range of a big one, that `explain`, `serve`
and `dump` read on another machine.

Every stream the catalog declares is cut to what its readers look at for [t0, t1]: the ticks, their
10 s aggregates and rollups of the range, with the minute of ticks before it that carries the NIC
counters and units forward (store/query.py KEYFRAME); the profile's batches and lost-sample
counts, with the minute before (explain's profile window starts there); each profile aggregate's
windows that overlap the range; the cgroup churn trace from 10 minutes before (explain follows a
zombie back to the mkdir that made it). The kernel-log lines are in the ticks (events), so they
come with them. Each stream is cut around the range's reach, not the range alone: what explain reads
for [t0, t1] (explain/load.extent: its margin either side, widened until no episode is cut), so an
incident that began before t0, or a hot core that lasted past t1, reads in the cut as in the source.

Frames are copied as they are, compressed against the same dictionary: each copied segment gets
its source segment's head frame (dictionary and codec context), its own .dict copy and a new
index, so the cut reads exactly as the original did, second for second, and costs no
recompression. The store description is the source's, with a `cut` entry (range, source, host,
when). The cut is written beside OUT and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time

from ..model.errors import InputError
from . import catalog
from .codec import KEYFRAME
from .segment import KIND_DICT, KIND_HEAD, SegmentReader, segment_start, sidecar, write_segment
from .store import META, SCHEMA, StoreReader, read_meta

CHURN_BEFORE = 600.0  # explain/load.py reads the churn trace from 10 minutes before its ticks


def before(st: catalog.Stream) -> float:
    """Seconds before t0 a stream's readers look back."""
    if st.name in (catalog.TICKS.name, catalog.TICKS10.name):
        return KEYFRAME + 10.0
    if st is catalog.CHURN:
        return CHURN_BEFORE
    if st.name.startswith("profile_agg"):
        return float(st.name[len("profile_agg"):].removesuffix("all") or 60)
    return 60.0


def after(st: catalog.Stream) -> float:
    return 10.0 if st.name.startswith("profile") else 0.0  # lost samples are noted up to 5 s late


def _segments(reader: StoreReader, st: catalog.Stream, a: float, b: float) -> list[str]:
    segs = reader.segments(st)
    starts = [segment_start(os.path.basename(p)) for p in segs]
    out = []
    for i, p in enumerate(segs):
        nxt = starts[i + 1] if i + 1 < len(starts) else None
        if starts[i] > b + 1 or (nxt is not None and nxt < a):
            continue
        out.append(p)
    return out


def cut(src: str, t0: float, t1: float, out: str, reach: tuple[float, float] | None = None) -> dict:
    """Write [t0, t1] of the store `src` as a new store `out`, each stream from `reach` (what explain
    reads for the range; default the range itself); returns what went in."""
    reader = StoreReader(src)
    r0, r1 = (min(t0, reach[0]), max(t1, reach[1])) if reach else (t0, t1)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(out, "exists and is not empty: refusing to write a cut into it")
    part = out.rstrip("/") + f".part-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)
    counts: dict[str, int] = {}
    try:
        os.makedirs(part)
        for st in catalog.STREAMS.values():
            a, b = r0 - before(st), r1 + after(st)
            n = 0
            newest = reader.segments(st)[-1:] if reader.writing() else []
            for seg in _segments(reader, st, a, b):
                sr = SegmentReader(seg, growing=seg in newest)  # a recorder appending: its tail is not damage
                head = None
                frames: list[tuple[float, bytes]] = []
                for kind, t, payload, _ in sr._records(a, b, seek=True):
                    if kind in (KIND_DICT, KIND_HEAD):
                        head = (kind, bytes(payload))
                    elif a <= t <= b:
                        frames.append((t, bytes(payload)))
                reader.problems += sr.problems
                if not frames:
                    continue
                if head is None:  # a damaged first frame: its copy in the .dict sidecar
                    try:
                        with open(sidecar(seg), "rb") as f:
                            fr = SegmentReader._frame(f.read(), 0)
                    except OSError:
                        fr = None
                    if fr is None or fr[0] not in (KIND_DICT, KIND_HEAD):
                        continue  # the segment's dictionary is lost: its frames cannot be read anyway
                    head = (fr[0], bytes(fr[2]))
                write_segment(os.path.join(part, st.name), frames[0][0], head[0], head[1], frames)
                n += len(frames)
            if n:
                counts[st.name] = n
        meta = read_meta(src) or {"schema": reader.schema}
        meta.setdefault("schema", reader.schema if reader.schema <= SCHEMA else SCHEMA)
        meta["cut"] = {"from": t0, "to": t1, "reach": [r0, r1], "source": os.path.abspath(src),
                       "host": socket.gethostname(), "made": time.time(), "records": counts}
        with open(os.path.join(part, META), "w") as f:
            json.dump(meta, f)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.rename(part, out)
    except OSError as e:
        shutil.rmtree(part, ignore_errors=True)
        raise InputError(out, f"cannot write the cut: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out) for f in fs)
    return {"out": out, "from": t0, "to": t1, "reach": (r0, r1), "records": counts, "bytes": size,
            "problems": reader.problems}
