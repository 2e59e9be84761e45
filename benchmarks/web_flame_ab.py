"""/api/flame of `nodesleuth serve`, before and after, in turns on one store: the synthetic 96-CPU,
49 Hz hour of benchmarks/profile_query.py (16.9 M samples), unaligned hour (all CPUs, CPU 39, cgroup /)
and one second of CPU 39. Each round starts a fresh server of each tree; answers are compared (sha1
of the d3 tree). Prints JSON: every round's seconds per call and tree.

usage: python -m benchmarks.web_flame_ab --baseline-src DIR/src [--store DIR] [--rounds 3]
(DIR/src: `git archive REV src | tar -x -C DIR`; without --store the hour is generated, ~2-3 min)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import types

import numpy as np

from benchmarks.common import emit
from benchmarks.profile_query import FUNCS, ROOT, free_port, web_calls, write_hour
from nodesleuth.store.store import StoreWriter

T0 = 1_800_000_000.0  # an hour boundary


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline-src", required=True)
    ap.add_argument("--store", help="a store profile_query's hour was written to (else one is generated)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    made = None
    store = a.store
    if store is None:
        made = store = tempfile.mkdtemp(prefix="ns-bench-webflame-", dir="/var/tmp")
        rng, r = np.random.default_rng(1), random.Random(1)
        stacks = [tuple(r.sample(FUNCS, r.randrange(5, 25))) for _ in range(5000)]
        w = StoreWriter(store, segment_seconds=7200)
        write_hour(w, T0, types.SimpleNamespace(cpus=96, hz=49), rng, stacks)
        w.close()
    hu0, hu1, mid = T0 + 0.5, T0 + 3599.5, T0 + 1800.25
    calls = {"web_flame_1h_unaligned": f"/api/flame?from={hu0}&to={hu1}",
             "web_flame_1h_unaligned_cpu39": f"/api/flame?from={hu0}&to={hu1}&cpu=39",
             "web_flame_1h_unaligned_cgroup": f"/api/flame?from={hu0}&to={hu1}&cgroup=/",
             "web_flame_1s_cpu39": f"/api/flame?from={mid}&to={mid + 1}&cpu=39"}
    res: dict = {"benchmark": "web_flame_ab", "goal_s": 1.0, "baseline_src": a.baseline_src, "rounds": a.rounds}
    try:
        for _ in range(a.rounds):
            for tag, src in (("before", a.baseline_src), ("after", os.path.join(ROOT, "src"))):
                for k, v in web_calls(src, store, calls, free_port()).items():
                    row = res.setdefault(k, {"before_s": [], "after_s": [], "digests": {}})
                    row[f"{tag}_s"].append(v["s"])
                    row["digests"].setdefault(tag, set()).add(v.get("digest"))
        for k in calls:
            row = res[k]
            row["same_result"] = len(row["digests"]["before"] | row["digests"]["after"]) == 1
            del row["digests"]
            row["after_median_s"] = sorted(row["after_s"])[len(row["after_s"]) // 2]
            row["before_median_s"] = sorted(row["before_s"])[len(row["before_s"]) // 2]
            row["goal_met"] = row["after_median_s"] < res["goal_s"]
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return emit(res)


if __name__ == "__main__":
    main()
