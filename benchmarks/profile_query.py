"""Range-query latency on a stored 96-CPU, 49 Hz profile: one second, one hour (16.9 M samples) and one
day, flame graph (folded stacks), top functions and heatmaps, with CPU / pid / comm filters, straight
from the store, the way `flame`, `top-functions` and `heatmap` read it.

before: every query decodes the raw samples of its range (query.load), as all queries did until the
write-time aggregates existed. after: flame graphs and top functions read whole hours and minutes from
the per-minute/per-hour aggregates (query.load_fast) and raw samples only for the partial minutes at the
edges; heatmaps still read raw samples (they need each sample's time).

The day: hours 0 and 23 are generated and stored like the hour (raw batches + aggregates); hours 1-22
are that first hour's aggregate record re-stamped (the query reads them exactly as it would 22 distinct
ones: same rows, same tables); their raw batches are not written (no query of the day reads them).
The synthetic profile is a worst case for aggregation: 300 processes each on every CPU with 16 code
paths, so (cpu, pid, stack) rows hardly repeat within a minute; disk costs are given for it.
"""

from __future__ import annotations

import argparse
import random
import shutil
import struct
import tempfile
import time

import numpy as np
import orjson

from benchmarks.common import emit
from nodesleuth.profile.agg import Aggregator, stream
from nodesleuth.profile.codec import encode
from nodesleuth.profile.parse import Batch
from nodesleuth.profile.query import Filter, folded, heatmap, load, load_fast, top_functions
from nodesleuth.store.store import StoreReader, StoreWriter

FUNCS = [f"k_func_{i}_[k]" for i in range(400)] + [f"user_func_{i}" for i in range(600)]


def synth_batch(t0: float, seconds: float, cpus: int, hz: int, rng: np.random.Generator, stacks) -> Batch:
    n = int(seconds * hz) * cpus
    b = Batch()
    b.times = (t0 + np.repeat(np.arange(int(seconds * hz)) / hz, cpus) + rng.random(n) * 1e-4).tolist()
    b.cpus = np.tile(np.arange(cpus), int(seconds * hz)).tolist()
    pids = rng.integers(0, 300, n)
    b.pids = pids.tolist()
    b.tids = (pids + rng.integers(0, 4, n)).tolist()
    b.comms = [f"comm{i}" for i in range(300)]
    b.comm_ids = pids.tolist()
    b.stacks = stacks
    # each process runs its own few code paths, as real ones do (stack = f(pid, one of 16 paths))
    b.stack_ids = ((pids * 16 + rng.integers(0, 16, n)) % len(stacks)).tolist()
    b.periods = [20408163] * n
    b.event_ids = [0] * n
    b.events = ["cpu-clock"]
    return b


def write_hour(w: StoreWriter, t0: float, a, rng, stacks) -> None:
    agg = Aggregator(w.append)
    for i in range(0, 3600, 10):
        b = synth_batch(t0 + i, 10, a.cpus, a.hz, rng, stacks)
        ts, payload = encode(b)
        w.append("profile", ts, payload)
        agg.add(b)
    agg.flush()


def restamp(payload: bytes, t0: float) -> bytes:
    (hl,) = struct.unpack_from("<I", payload)
    h = orjson.loads(payload[4:4 + hl])
    h["t0"], h["t1"] = t0, t0 + h["level"]
    head = orjson.dumps(h)
    return struct.pack("<I", len(head)) + head + payload[4 + hl:]


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return round(time.perf_counter() - t, 3), r


def queries(reader, lo, hi, label, res, before=True):
    """flame (all, cpu, pid, comm), top functions; after (load_fast) and, if asked, before (load)."""
    filters = {"": Filter(), "_cpu39": Filter(cpus={39}), "_pid7": Filter(pids={7}), "_comm": Filter(comms={"comm9"})}
    for name, f in filters.items():
        sec, fc = timed(lambda f=f: folded(load_fast(reader, lo, hi, f.cpus), f))
        res[f"flame_{label}{name}"] = {"after_s": sec, "samples": sum(fc.values())}
        if before and name in ("", "_cpu39"):  # before = 17 s a query for the hour: two suffice
            sec_b, fcb = timed(lambda f=f: folded(load(reader, lo, hi), f))
            res[f"flame_{label}{name}"].update(before_s=sec_b, same_result=fcb == fc)
    sec, top = timed(lambda: top_functions(load_fast(reader, lo, hi), Filter(), n=10))
    res[f"top_functions_{label}"] = {"after_s": sec, "first": top[0]["function"] if top else None}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--hz", type=int, default=49)
    ap.add_argument("--no-day", action="store_true")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    r = random.Random(1)
    stacks = [tuple(r.sample(FUNCS, r.randrange(5, 25))) for _ in range(5000)]
    d = tempfile.mkdtemp(prefix="ns-bench-prof-", dir="/var/tmp")
    res: dict = {}
    try:
        t0 = 1_800_000_000.0  # an hour boundary
        w = StoreWriter(d, segment_seconds=3600 * 2)
        t = time.perf_counter()
        write_hour(w, t0, a, rng, stacks)
        w.close()
        build = time.perf_counter() - t
        reader = StoreReader(d)
        sizes = {s: sum(__import__("os").path.getsize(p) for p in reader.segments(s))
                 for s in ("profile", stream(60), stream(3600), stream(60, True), stream(3600, True))}
        total = 3600 * a.cpus * a.hz
        mid = t0 + 1800.25
        queries(reader, mid, mid + 1, "1s", res)
        queries(reader, t0, t0 + 3600, "1h", res)
        queries(reader, t0 + 0.5, t0 + 3599.5, "1h_unaligned", res)
        for name, (lo, hi, f) in {"heatmap_60s": (mid, mid + 60, Filter()),
                                  "heatmap_60s_cpu39": (mid, mid + 60, Filter(cpus={39})),
                                  "heatmap_1h_cpu39": (t0, t0 + 3600, Filter(cpus={39}))}.items():
            sec, hm = timed(lambda lo=lo, hi=hi, f=f: heatmap(load(reader, lo, hi), f, start=lo, end=hi))
            res[name] = {"seconds": sec, "columns": len(hm.columns)}
        res["profile_hour"] = {"seconds": 3600, "cpus": a.cpus, "hz": a.hz, "samples": total,
                               "build_seconds": round(build, 1),
                               "disk_mb": {k: round(v / 1e6, 1) for k, v in sizes.items()}}
        res["disk_mb_per_day_synthetic_worst_case"] = {k: round(24 * v / 1e6) for k, v in sizes.items()}
        if not a.no_day:
            recs = {s: next(p for _, p in reader.read(s)) for s in (stream(3600), stream(3600, True))}
            w = StoreWriter(d, segment_seconds=3600 * 2)
            for h in range(1, 23):
                for s, rec in recs.items():
                    w.append(s, t0 + h * 3600, restamp(rec, t0 + h * 3600))
            w.close()
            w = StoreWriter(d, segment_seconds=3600 * 2)
            write_hour(w, t0 + 23 * 3600, a, rng, stacks)
            w.close()
            reader = StoreReader(d)
            queries(reader, t0 + 0.5, t0 + 86400 - 0.5, "1day_unaligned", res, before=False)
            queries(reader, t0, t0 + 86400, "1day", res, before=False)
        res["goals"] = {"hour_s": 1.0, "day_s": 3.0, "second_s": 0.3}
        return emit({"benchmark": "profile_query", **res})
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
