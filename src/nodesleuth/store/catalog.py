"""Every stream a store holds, declared once: its name, the record type its frames carry, how it is
encoded, its tier (the time resolution one record stands for) and the retention tier it is kept
by. Writers and readers name streams only through this module (the store refuses a stream it does
not list), so a new stream is one declaration here plus its encoder, and `nodesleuth-store.json`
readers of any version can tell what a directory holds.

Frames of every stream are zstd-compressed and checksummed by store/segment.py; `encoding` says what
the payload inside is, `dictionary` what they are compressed against.

Retention tiers (`record --tier-1s 7d --tier-10s 30d --tier-1m 365d`, store/store.py): every stream
is kept as long as its `keep` tier says: the 1 Hz ticks and the raw profile for days, the 10 s
aggregates of both for a month, the per-minute rollups and profile aggregates for a year. Under
the byte bound the finest tier's oldest segments go first, so the coarser ones still cover that
time. Readers take the finest tier that covers the range they read and say which (store/tier.py).
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
    keep: str = "1s"  # the retention tier that bounds it: one of KEEP
    dictionary: str = "first"  # "first": its segment's first record; "trained": on its previous segment
    codec: str = ""  # what StoreWriter.write encodes its records with (store/encoding.py; every stream has one)

    @property
    def segment_factor(self) -> int:
        """Segment length in units of the store's segment length (coarser tiers: fewer, longer files)."""
        return SEGMENT_FACTOR[self.keep]

    def __str__(self) -> str:
        return self.name

    def __fspath__(self) -> str:  # os.path.join(store_dir, TICKS): the stream's directory
        return self.name


KEEP = ("1s", "10s", "1m")  # retention tiers, finest first
KEEP_DEFAULT = {"1s": 7 * 86400.0, "10s": 30 * 86400.0, "1m": 365 * 86400.0}
SEGMENT_FACTOR = {"1s": 1, "10s": 6, "1m": 24}

# zstd level 3 for ticks: a tick compresses in 0.02 ms at 3 against 0.05 ms at 6 for 0-1% fewer
# bytes against a trained dictionary, and it runs every second (benchmarks/results/summary.md)
TICKS = Stream("ticks", "model.records.Tick", "numbers packed by field name, schema 3 (store/codec.py, "
               "store/pack.py); schema 1-2: JSON", "1s", level=3, dictionary="trained", codec="tick")
TICKS10 = Stream("ticks10s", "model.records.Tick, 10 s aggregate (store/tier.py: summed jiffies, per-CPU max "
                 "busy and hot seconds, processes' mean %, events kept)", "as ticks (store/codec.py)", "10s",
                 level=3, keep="10s", dictionary="trained", codec="tick")
ROLLUP = Stream("rollup", "model.records.RollupMinute", "JSON object per minute (store/rollup.py)", "1min", keep="1m",
                codec="minute")
CHURN = Stream("churn", "model.records.CgEvent", "field-name table per perf chunk (store/churn.py)", "event",
               keep="10s", codec="churn")
PROFILE = Stream("profile", "profile batch", "columns + stack tables, <= 10 s a frame (store/profile.py)", "batch",
                 codec="batch")
PROFILE_LOST = Stream("profile_lost", "lost-sample counts (time, cpu, n)", "columns (store/profile.py)", "event",
                      keep="10s", codec="lost")
AGG_LEVELS = (10, 60, 600, 3600)  # s: the profile's write-time aggregate windows (profile/agg.py)


def _window(s: int) -> str:
    return f"{s // 3600}h" if s >= 3600 and s % 3600 == 0 else f"{s // 60}min" if s >= 60 else f"{s}s"


AGG = {(lv, a): Stream(f"profile_agg{lv}" + ("all" if a else ""), "profile aggregate: (cpu, pid, comm, stack) -> "
                       "count" + (", summed over CPUs" if a else ""), "columns + stack tables (store/aggregates.py)",
                       _window(lv), keep="10s" if lv < 60 else "1m", codec="agg")
       for lv in AGG_LEVELS for a in (False, True)}
HEAT = Stream("profile_heat60", "subsecond heatmap cells per CPU", "cells + per-second counts (store/aggregates.py)",
              "1min", keep="10s", codec="heat")
HEAT_ALL = Stream("profile_heat60all", "subsecond heatmap cells summed over CPUs", "dense grid (store/aggregates.py)",
                  "1min", keep="10s", codec="heat_all")

STREAMS: dict[str, Stream] = {s.name: s for s in (TICKS, TICKS10, ROLLUP, CHURN, PROFILE, PROFILE_LOST, HEAT,
                                                  HEAT_ALL, *AGG.values())}


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
