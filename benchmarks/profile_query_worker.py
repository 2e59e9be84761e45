"""Times profile range queries of one source tree (the nodesleuth on PYTHONPATH) against a store, the way
its CLI answers them, so benchmarks/profile_query.py can run the tree before and after side by side.

argv: STORE SPEC.json OUT.json. Each spec entry {name, kind, lo, hi, cpus, pids, comms, cgroup_pids};
kind: flame (folded stacks as `flame --format folded`), top (`top-functions`), heatmap (`heatmap
--json`: the aggregates where this tree has them, else the samples), raw_flame (every raw sample:
the reference result). Out: {name: {s, digest, samples}}; s = the query (the digest, sha1 of the answer to compare trees, is
not timed).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from types import SimpleNamespace


def main() -> None:
    try:  # a tree after profile/query.py was split by concern
        from nodesleuth.profile import fastload, folded, heatmap, load, samples, top
        pq = SimpleNamespace(Filter=samples.Filter, load=load.load, load_fast=fastload.load_fast, folded=folded.folded,
                             folded_text=folded.folded_text, top_functions=top.top_functions,
                             heatmap=heatmap.heatmap, heatmap_fast=heatmap.heatmap_fast)
    except ImportError:  # an older tree (the benchmark runs trees side by side)
        from nodesleuth.profile import query as pq
    from nodesleuth.store.store import StoreReader

    store, spec_path, out_path = sys.argv[1:4]
    with open(spec_path) as f:
        spec = json.load(f)
    out = {}
    for q in spec:
        reader = StoreReader(store)
        f = pq.Filter(cpus=set(q["cpus"]) if q.get("cpus") else None, pids=set(q["pids"]) if q.get("pids") else None,
                      comms=set(q["comms"]) if q.get("comms") else None,
                      cgroup_pids=set(q["cgroup_pids"]) if q.get("cgroup_pids") else None)
        lo, hi, kind = q["lo"], q["hi"], q["kind"]
        t = time.perf_counter()
        if kind in ("flame", "raw_flame"):
            s = pq.load_fast(reader, lo, hi, f.cpus) if kind == "flame" else pq.load(reader, lo, hi)
            fc = pq.folded(s, f)
            sec = time.perf_counter() - t
            text, n = pq.folded_text(fc), sum(fc.values())
        elif kind == "top":
            rows = pq.top_functions(pq.load_fast(reader, lo, hi, f.cpus), f, kernel_only=False, n=15)
            sec = time.perf_counter() - t
            text, n = json.dumps(rows), None
        else:
            kw = {"step": q["step"]} if q.get("step", 1) > 1 else {}  # columns of N seconds (a day's view)
            h = pq.heatmap_fast(reader, f, start=lo, end=hi, **kw) if hasattr(pq, "heatmap_fast") else None
            if h is None:
                h = pq.heatmap(pq.load(reader, lo, hi), f, start=lo, end=hi)
            sec = time.perf_counter() - t
            text = json.dumps([h.start, h.values, h.hot_cpus, h.hot_note])
            n = sum(map(sum, h.values))
        out[q["name"]] = {"s": round(sec, 3), "digest": hashlib.sha1(text.encode()).hexdigest()[:16], "samples": n}
        print(q["name"], out[q["name"]], file=sys.stderr, flush=True)
        with open(out_path, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
