"""The flame graph and the diff (a range against a baseline) documents of an open store: whole
minutes and hours from the write-time aggregates, raw samples only at the edges; a range the last
heatmap already loaded is cut from it. Perf's lost samples go with them, so the page says when its
ring was full."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.timeparse import iso
from ..profile.fastload import load_fast
from ..profile.folded import folded
from ..profile.load import load, lost_samples
from ..profile.samples import Filter
from ..store.catalog import PROFILE
from ..store.store import StoreReader
from .flametree import MAX_DEPTH, MIN_SHARE, flame
from .heatmap import ProfileCache


class Refused(Exception):
    """A question the recording cannot answer truthfully: the sentence to show and what it asked."""

    def __init__(self, message: str, **asked):
        super().__init__(message)
        self.message, self.asked = message, asked


@dataclass
class FlameQuery:
    """One flame graph asked for: its range, whose samples, and how much of the tree to send."""
    t0: float
    t1: float
    f: Filter
    cpu: int | None = None  # as asked (the document says it back)
    depth: int = MAX_DEPTH
    min_share: float = MIN_SHARE


def flame_filter(cpu: int | None, pid: int | None, comm: str | None, cgroup: str | None) -> Filter:
    """The flame graph's filter; a cgroup is resolved to the processes in it now (as the CLI's --cgroup)."""
    pids = None
    if cgroup:
        from ..node.cgroupfs import pids_in_cgroup
        from ..node.root import Root

        pids = pids_in_cgroup(Root("/"), cgroup)
    return Filter(cpus={cpu} if cpu is not None else None, pids={pid} if pid is not None else None,
                     comms={comm} if comm else None, cgroup_pids=pids)



def range_samples(reader: StoreReader, t0: float | None, t1: float | None, stacks_only: bool = False,
                  cpus: set[int] | None = None, on_segment=None):
    """The profile samples of [t0, t1] (None: the store's start, end) of an open store. stacks_only:
    for flame graphs and top functions, whole minutes and hours from the write-time aggregates (per-sample
    views: sample order, CPUs, tids, periods, heatmaps, need the raw samples)."""
    if stacks_only:
        return load_fast(reader, t0, t1, cpus, on_segment=on_segment)
    return load(reader, t0, t1, on_segment=on_segment)


def subset(s, t0: float, t1: float):
    return s.masked((s.t >= t0) & (s.t < t1))


def _samples(reader: StoreReader, q: FlameQuery, cache: ProfileCache | None):
    s = cache.peek(reader, q.t0, q.t1) if cache is not None else None
    return subset(s, q.t0, q.t1) if s is not None else load_fast(reader, q.t0, q.t1, q.f.cpus)


def _doc(reader: StoreReader, q: FlameQuery, s, base, b0: float | None, b1: float | None) -> dict:
    doc = flame(s, base, q.f, q.depth, q.min_share)
    doc["lost"] = lost_samples(reader, q.t0, q.t1, q.f.cpus)
    return {**doc, "from": q.t0, "to": q.t1, "cpu": q.cpu, "base_from": b0, "base_to": b1}


def flame_doc(reader: StoreReader, q: FlameQuery, cache: ProfileCache | None = None) -> dict:
    """The flame graph of q's range."""
    return _doc(reader, q, _samples(reader, q, cache), None, None, None)


def diff_doc(reader: StoreReader, q: FlameQuery, b0: float, b1: float, cache: ProfileCache | None = None) -> dict:
    """q's range against the baseline [b0, b1] (normalised to it); Refused when the baseline holds
    no samples of q's filter: a diff against nothing would call every frame new."""
    s = _samples(reader, q, cache)
    base = load_fast(reader, b0, b1, q.f.cpus)
    if not len(base) or not sum(folded(base, q.f).values()):
        span = reader.span(PROFILE)
        where = (f"the profile covers {iso(span[0])} .. {iso(span[1])}" if span else "there is no profile")
        what = f" for CPU {q.cpu}" if q.cpu is not None else ""
        raise Refused(f"the baseline window {iso(b0)} .. {iso(b1)} holds no profile samples{what} "
                      f"({where}): choose a baseline inside it", base_from=b0, base_to=b1)
    return _doc(reader, q, s, base, b0, b1)
