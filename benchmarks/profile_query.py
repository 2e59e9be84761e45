"""Range-query latency on a stored 96-CPU, 49 Hz profile: one second, one hour (16.9 M samples) and one
day, flame graph (folded stacks), top functions and subsecond heatmaps, with CPU / pid / comm / cgroup
filters, straight from the store the way `flame`, `top-functions` and `heatmap` read it, and through the
web API (/api/flame, /api/heatmap) of the real server (`nodesleuth serve`).

before and after run side by side in this one run on the same store: after = this tree, before = the
tree given by --baseline-src (its src/ directory; the issue's baseline is 7b28abc: `git archive 7b28abc
src | tar -x -C DIR`), each in its own process (benchmarks/profile_query_worker.py). Every answer is
compared (sha1 of the folded text / heatmap cells and hot marks): same_result says whether before
and after agree, raw_same says whether after equals the answer from every raw sample (checked where
reading the raw samples is affordable: 1 s ranges, an unaligned hour for one CPU).

The day: hours 0 and 23 are generated and stored like the hour (raw batches + aggregates); hours 1-22
are that first hour's hour-level and heatmap records re-stamped (the query reads them exactly as it
would distinct ones); their raw batches are not written, so no raw or before answer exists for a day's
heatmap (before read heatmaps from raw samples). The synthetic profile is a worst case for aggregation:
300 processes each on every CPU with 16 code paths, so (cpu, pid, stack) rows hardly repeat within a
minute; disk costs are given for it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import orjson

from benchmarks import BASE_ENV
from benchmarks.common import emit
from nodesleuth.store.catalog import HEAT, HEAT_ALL, agg as stream
from nodesleuth.profile.agg import LEVELS, Aggregator
from nodesleuth.profile.codec import encode
from nodesleuth.profile.parse import Batch
from nodesleuth.store.store import StoreReader, StoreWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
    agg = Aggregator(w.write)
    for i in range(0, 3600, 10):
        b = synth_batch(t0 + i, 10, a.cpus, a.hz, rng, stacks)
        ts, payload = encode(b)
        w.append("profile", ts, payload)
        agg.add(b)
    agg.flush()


def restamp(payload: bytes, t0: float) -> bytes:
    """An aggregate or heatmap record moved to another window (heatmap records carry tmin/tmax too)."""
    (hl,) = struct.unpack_from("<I", payload)
    h = orjson.loads(payload[4:4 + hl])
    d = t0 - h["t0"]
    h["t0"] = t0
    if "t1" in h:
        h["t1"] = t0 + h["level"]
    for k in ("tmin", "tmax"):
        if k in h:
            h[k] += d
    head = orjson.dumps(h)
    return struct.pack("<I", len(head)) + head + payload[4 + hl:]


FILTERS = {"": {}, "_cpu39": {"cpus": [39]}, "_pid7": {"pids": [7]}, "_comm": {"comms": ["comm9"]},
           "_cgroup": {"cgroup_pids": [7, 8, 9]}}  # a cgroup's pids as the CLI resolves them


def spec_of(ranges: dict) -> list[dict]:
    out = []
    for label, (lo, hi, heat_filters) in ranges.items():
        for fname, flt in FILTERS.items():
            out.append({"name": f"flame_{label}{fname}", "kind": "flame", "lo": lo, "hi": hi, "label": label, **flt})
        out.append({"name": f"top_functions_{label}", "kind": "top", "lo": lo, "hi": hi, "label": label})
        for fname in heat_filters:
            out.append({"name": f"heatmap_{label}{fname}", "kind": "heatmap", "lo": float(int(lo)),
                        "hi": float(-int(-hi)), "label": label, **FILTERS[fname]})
    return out


def run_worker(src: str, store: str, spec: list[dict], work: str, tag: str) -> dict:
    sp, out = os.path.join(work, f"spec-{tag}.json"), os.path.join(work, f"out-{tag}.json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    env = {**BASE_ENV, "PYTHONPATH": f"{os.path.abspath(src)}:{ROOT}"}
    p = subprocess.run([sys.executable, "-m", "benchmarks.profile_query_worker", store, sp, out], env=env,
                       cwd=ROOT, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"worker {tag} failed: {p.stderr[-2000:]}")
    with open(out) as f:
        return json.load(f)


def canonical(tree):
    """A d3 tree with every node's children in name order (trees that differ only in sibling order,
    which d3-flame-graph sorts anyway, compare equal)."""
    if not isinstance(tree, dict):
        return tree
    return {**tree, "children": sorted((canonical(k) for k in tree.get("children", [])), key=lambda k: k["name"])}


def web_calls(src: str, store: str, calls: dict, port: int) -> dict:
    """GET each call on `nodesleuth serve` of this tree; seconds and a digest of the answer."""
    import hashlib

    env = {**BASE_ENV, "PYTHONPATH": os.path.abspath(src)}
    srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", store, "--listen", f"127.0.0.1:{port}"],
                           env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    out = {}
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/summary", timeout=5)
                break
            except OSError:
                time.sleep(0.2)
        for name, path in calls.items():
            t = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=600) as r:
                    body = r.read()
                doc = json.loads(body)
                sec = round(time.perf_counter() - t, 3)
                key = doc.get("values") if "values" in doc else canonical(doc.get("tree"))
                out[name] = {"s": sec, "bytes": len(body),
                             "digest": hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16],
                             "samples": doc.get("samples")}
            except OSError as e:  # an HTTP error: what the tree answers (e.g. range too long)
                out[name] = {"s": round(time.perf_counter() - t, 3), "error": str(e)[:200]}
    finally:
        srv.terminate()
        srv.wait()
    return out


def free_port() -> int:
    import socket

    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--hz", type=int, default=49)
    ap.add_argument("--no-day", action="store_true")
    ap.add_argument("--baseline-src", help="the tree to compare with (its src/), run side by side")
    ap.add_argument("--no-web-baseline", action="store_true", help="skip the baseline's web calls (it loads "
                    "every raw sample of the hour)")
    a = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    r = random.Random(1)
    stacks = [tuple(r.sample(FUNCS, r.randrange(5, 25))) for _ in range(5000)]
    d = tempfile.mkdtemp(prefix="ns-bench-prof-", dir="/var/tmp")
    here = os.path.join(ROOT, "src")
    res: dict = {"goals": {"hour_s": 1.0, "day_s": 3.0, "second_s": 0.3}, "baseline_src": a.baseline_src}
    try:
        t0 = 1_800_000_000.0  # an hour boundary
        w = StoreWriter(d, segment_seconds=3600 * 2)
        t = time.perf_counter()
        write_hour(w, t0, a, rng, stacks)
        w.close()
        build = time.perf_counter() - t
        reader = StoreReader(d)
        names = ["profile", HEAT, HEAT_ALL] + [stream(lv, al) for lv in LEVELS for al in (False, True)]
        sizes = {str(s): sum(os.path.getsize(p) for p in reader.segments(s)) for s in names}
        res["profile_hour"] = {"seconds": 3600, "cpus": a.cpus, "hz": a.hz, "samples": 3600 * a.cpus * a.hz,
                               "build_seconds": round(build, 1),
                               "disk_mb": {k: round(v / 1e6, 1) for k, v in sizes.items()}}
        res["disk_mb_per_day_synthetic_worst_case"] = {k: round(24 * v / 1e6) for k, v in sizes.items()}
        res["disk_mb_per_day_synthetic_worst_case"]["total"] = round(24 * sum(sizes.values()) / 1e6)
        mid = t0 + 1800.25
        ranges = {"1s": (mid, mid + 1, ["", "_cpu39"]), "1h": (t0, t0 + 3600, ["", "_cpu39"]),
                  "1h_unaligned": (t0 + 0.5, t0 + 3599.5, ["", "_cpu39"])}
        if not a.no_day:
            recs = {s: next(p for _, p in reader.read(s)) for s in (stream(3600), stream(3600, True))}
            heat = {s: list(reader.read(s)) for s in (HEAT, HEAT_ALL)}
            w = StoreWriter(d, segment_seconds=3600 * 2)
            for h in range(1, 23):
                for s, rec in recs.items():
                    w.append(s, t0 + h * 3600, restamp(rec, t0 + h * 3600))
                for s, recs_ in heat.items():
                    for ht, p in recs_:
                        w.append(s, ht + h * 3600, restamp(p, ht + h * 3600))
            w.close()
            w = StoreWriter(d, segment_seconds=3600 * 2)
            write_hour(w, t0 + 23 * 3600, a, rng, stacks)
            w.close()
            ranges["1day_unaligned"] = (t0 + 0.5, t0 + 86400 - 0.5, ["", "_cpu39"])
            ranges["1day"] = (t0, t0 + 86400, ["", "_cpu39"])
        spec = spec_of(ranges)
        if not a.no_day:  # a day as the web view shows it: 3,600 columns of 24 s (recording/heatmap.py HEAT_COLS)
            spec += [{"name": f"heatmap_1day_step24{fn}", "kind": "heatmap", "lo": t0, "hi": t0 + 86400,
                      "label": "1day", "step": 24, **FILTERS[fn]} for fn in ("", "_cpu39")]
        raw = [dict(q, name="raw_" + q["name"], kind="raw_flame") for q in spec
               if q["kind"] == "flame" and (q["name"].startswith("flame_1s") or q["name"] == "flame_1h_unaligned_cpu39")]
        work = tempfile.mkdtemp(prefix="ns-bench-prof-work-", dir="/var/tmp")
        # range by range, after then before, so both see the same load of this shared machine
        after, before = {}, {}
        for label in ranges:
            group = [q for q in spec + raw if q["label"] == label]
            after.update(run_worker(here, d, group, work, "after"))
            if a.baseline_src:
                before.update(run_worker(a.baseline_src, d, [q for q in group if q["kind"] != "raw_flame" and "step" not in q and not (
                    q["kind"] == "heatmap" and (q["name"].startswith("heatmap_1day") or q["name"] in (
                        "heatmap_1h", "heatmap_1h_unaligned")))], work, "before"))
        for q in spec:
            n = q["name"]
            row = {"after_s": after[n]["s"], "samples": after[n]["samples"]}
            if n in before:
                row.update(before_s=before[n]["s"], same_result=before[n]["digest"] == after[n]["digest"],
                           speedup=round(before[n]["s"] / max(after[n]["s"], 1e-3), 1))
            elif a.baseline_src:
                row["before_s"] = None
                row["before_note"] = ("not run: before reads every raw sample of an hour (~75 s) or, for a "
                                      "day, raw samples this store does not hold (hours 1-22)")
            if "raw_" + n in after:
                row["raw_s"] = after["raw_" + n]["s"]
                row["raw_same"] = after["raw_" + n]["digest"] == after[n]["digest"]
            lim = 0.3 if "_1s" in n else 3.0 if "1day" in n else 1.0
            row["goal_met"] = after[n]["s"] < lim
            res[n] = row
        # the web API of the real server, this tree and the baseline
        hu0, hu1 = t0 + 0.5, t0 + 3599.5
        calls = {"web_flame_1h_unaligned": f"/api/flame?from={hu0}&to={hu1}",
                 "web_flame_1h_unaligned_cpu39": f"/api/flame?from={hu0}&to={hu1}&cpu=39",
                 "web_flame_1h_unaligned_pid7": f"/api/flame?from={hu0}&to={hu1}&pid=7",
                 "web_flame_1h_unaligned_comm": f"/api/flame?from={hu0}&to={hu1}&comm=comm9",
                 "web_flame_1h_unaligned_cgroup": f"/api/flame?from={hu0}&to={hu1}&cgroup=/",
                 "web_heatmap_1h_cpu39": f"/api/heatmap?from={t0}&to={t0 + 3600}&cpu=39",
                 "web_heatmap_1h": f"/api/heatmap?from={t0}&to={t0 + 3600}",
                 "web_flame_1s_cpu39": f"/api/flame?from={mid}&to={mid + 1}&cpu=39"}
        if not a.no_day:
            calls.update({"web_flame_1day_unaligned": f"/api/flame?from={t0 + 0.5}&to={t0 + 86399.5}",
                          "web_flame_1day_unaligned_cpu39": f"/api/flame?from={t0 + 0.5}&to={t0 + 86399.5}&cpu=39",
                          "web_heatmap_1day_cpu39": f"/api/heatmap?from={t0}&to={t0 + 86400}&cpu=39",
                          "web_heatmap_1day": f"/api/heatmap?from={t0}&to={t0 + 86400}"})
        wa = web_calls(here, d, calls, free_port())
        wb = {}
        if a.baseline_src and not a.no_web_baseline:
            # the baseline's API loads every raw sample of its range (then serves sub-ranges from memory):
            # an hour's heatmap for one CPU, then the flame graph of that hour for the same CPU
            wb = web_calls(a.baseline_src, d, {"web_heatmap_1h_cpu39": calls["web_heatmap_1h_cpu39"],
                                               "web_flame_1h_cpu39": f"/api/flame?from={t0}&to={t0 + 3600}&cpu=39"},
                           free_port())
            wa.update(web_calls(here, d, {"web_flame_1h_cpu39": f"/api/flame?from={t0}&to={t0 + 3600}&cpu=39"},
                                free_port()))
        for n, v in wa.items():
            row = {"after_s": v["s"], **{k: v[k] for k in ("bytes", "samples", "error") if k in v}}
            if n in wb:
                row.update(before_s=wb[n]["s"], same_result=wb[n].get("digest") == v.get("digest"),
                           before_error=wb[n].get("error"))
            row["goal_met"] = v["s"] < (0.3 if "_1s" in n else 3.0 if "1day" in n else 1.0)
            res[n] = row
        res["machine_load_1m"] = os.getloadavg()[0]
        shutil.rmtree(work, ignore_errors=True)
        return emit({"benchmark": "profile_query", **res})
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
