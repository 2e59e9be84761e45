"""Every stream a store holds, declared once: its name, the record type its frames carry, how it is
encoded, and its tier (the time resolution one record stands for). Writers and readers name streams
only through this module (the store refuses a stream it does not list), so a new stream is one
declaration here plus its encoder, and `nodesleuth-store.json` readers of any version can tell what a
directory holds.

Frames of every stream are zstd-compressed and checksummed by store/segment.py; `encoding` says what
the payload inside is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stream:
    name: str  # the directory under the store
    record: str  # the record type a frame decodes to
    encoding: str  # what a payload is, and where its codec lives
    tier: str  # what one record stands for: "1s", "1min", a window ("10s".."1h"), "event", "batch"
    level: int = 6  # zstd level of its frames

    def __str__(self) -> str:
        return self.name

    def __fspath__(self) -> str:  # os.path.join(store_dir, TICKS): the stream's directory
        return self.name


# zstd level 3 for ticks: several times cheaper than 6 for a few % more bytes, and it runs every
# second (benchmarks/results/summary.md)
TICKS = Stream("ticks", "model.records.Tick", "JSON by field name, schema 2 (store/codec.py)", "1s", level=3)
ROLLUP = Stream("rollup", "model.records.RollupMinute", "JSON object per minute (store/rollup.py)", "1min")
CHURN = Stream("churn", "model.records.CgEvent", "field-name table per perf chunk (store/churn.py)", "event")
PROFILE = Stream("profile", "profile batch", "columns + stack tables, <= 10 s a frame (profile/codec.py)", "batch")
PROFILE_LOST = Stream("profile_lost", "lost-sample counts (time, cpu, n)", "columns (profile/codec.py)", "event")
AGG_LEVELS = (10, 60, 600, 3600)  # s: the profile's write-time aggregate windows (profile/agg.py)


def _window(s: int) -> str:
    return f"{s // 3600}h" if s >= 3600 and s % 3600 == 0 else f"{s // 60}min" if s >= 60 else f"{s}s"


AGG = {(lv, a): Stream(f"profile_agg{lv}" + ("all" if a else ""), "profile aggregate: (cpu, pid, comm, stack) -> "
                       "count" + (", summed over CPUs" if a else ""), "columns + stack tables (profile/agg.py)",
                       _window(lv)) for lv in AGG_LEVELS for a in (False, True)}
HEAT = Stream("profile_heat60", "subsecond heatmap cells per CPU", "cells + per-second counts (profile/agg.py)", "1min")
HEAT_ALL = Stream("profile_heat60all", "subsecond heatmap cells summed over CPUs", "dense grid (profile/agg.py)", "1min")

STREAMS: dict[str, Stream] = {s.name: s for s in (TICKS, ROLLUP, CHURN, PROFILE, PROFILE_LOST, HEAT, HEAT_ALL,
                                                  *AGG.values())}


def agg(level: int, all_cpus: bool = False) -> Stream:
    """The aggregate stream of one window: rows per CPU, or (all_cpus) the same rows summed over
    CPUs, kept apart so a query without a CPU filter reads only the small records."""
    return AGG[(level, all_cpus)]


def get(stream: Stream | str) -> Stream:
    """The catalog's stream for a name; ValueError for one the catalog does not declare."""
    s = STREAMS.get(stream if isinstance(stream, str) else stream.name)
    if s is None:
        raise ValueError(f"stream {stream!r} is not declared in store/catalog.py")
    return s
