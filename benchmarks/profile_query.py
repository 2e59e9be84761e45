"""Range-query latency on a stored 1 h, 96-CPU, 49 Hz profile (16.9 M samples): a 1 s and a 1 h
flame graph (folded stacks), a 1 s per-CPU flame graph, and a 60 s heatmap, straight from the store.
FlameScope would re-read and re-parse the perf script text (gigabytes at this size) for each."""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time

import numpy as np

from benchmarks.common import emit
from nodesleuth.profile.codec import encode
from nodesleuth.profile.parse import Batch
from nodesleuth.profile.query import Filter, folded, heatmap, load
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
    b.event = "cpu-clock:ppp"
    return b


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--hz", type=int, default=49)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    r = random.Random(1)
    stacks = [tuple(r.sample(FUNCS, r.randrange(5, 25))) for _ in range(5000)]
    d = tempfile.mkdtemp(prefix="ns-bench-prof-", dir="/var/tmp")
    try:
        w = StoreWriter(d, segment_seconds=3600 * 2)
        t0 = 1_800_000_000.0
        t = time.perf_counter()
        for i in range(0, a.seconds, 10):
            b = synth_batch(t0 + i, 10, a.cpus, a.hz, rng, stacks)
            ts, payload = encode(b)
            w.append("profile", ts, payload)
        w.close()
        build = time.perf_counter() - t
        reader = StoreReader(d)
        total = a.seconds * a.cpus * a.hz
        res = {}
        mid = a.seconds // 2
        for name, lo, hi, f in (("flame_1s", mid, mid + 1, Filter()), ("flame_1s_cpu39", mid, mid + 1, Filter(cpus={39})),
                                ("flame_1h", 0, a.seconds, Filter())):
            t = time.perf_counter()
            s = load(reader, t0 + lo, t0 + hi)
            fc = folded(s, f)
            res[name] = {"seconds": round(time.perf_counter() - t, 3), "samples": sum(fc.values())}
        t = time.perf_counter()
        s = load(reader, t0 + mid, t0 + mid + 60)
        hm = heatmap(s, Filter(), start=t0 + mid, end=t0 + mid + 60)
        res["heatmap_60s"] = {"seconds": round(time.perf_counter() - t, 3), "columns": len(hm.columns)}
        res["flame_1h"]["samples_per_s"] = round(total / res["flame_1h"]["seconds"])
        return emit({"benchmark": "profile_query", "profile": {"seconds": a.seconds, "cpus": a.cpus, "hz": a.hz,
                                                               "samples": total, "store_mb": round(reader.size() / 1e6, 1),
                                                               "build_seconds": round(build, 1)}, **res})
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
