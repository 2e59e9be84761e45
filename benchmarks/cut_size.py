"""The size of `nodesleuth cut` for a 10-minute incident of a 96-CPU node, per stream, and its time.

The store: `nodesleuth record` on the animated 96-CPU / 1,000-process / 70,000-memcg fixture
(fixtures/nodes.py, as recorder_overhead.py runs it) for `--minutes` with `--segment 5m`, so
the cut's segments are compressed against trained dictionaries as an hour-old recording's are; or
an existing recording (`--store`). The last 10 minutes are cut (`--window`), and the cut is
checked: `dump` of it equals `dump` of the same range of the source. The fixture has no perf (the
profile of a 96-CPU node is not recorded here): the profile's share is given from
benchmarks/results/profile_query.json (a synthetic 96-CPU, 49 Hz hour, every CPU busy: its worst
case), scaled to the window and marked as such.

usage: python -m benchmarks.cut_size [--store DIR] [--minutes 16] [--window 600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks import BASE_ENV
from benchmarks.common import emit

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record_fixture(work: str, minutes: float) -> str:
    from fixtures.nodes import make_node
    from fixtures.trees import Animator

    fx = make_node(os.path.join(work, "node"), cpus=96, procs=1000, memcgs=70000)
    anim = Animator(fx, busy_cpu=39, busy_pid=110)
    stop = threading.Event()

    def animate():
        nxt = int(time.time()) + 1.5
        while not stop.is_set():
            time.sleep(max(0, nxt - time.time()))
            anim.step()
            nxt += 1

    th = threading.Thread(target=animate, daemon=True)
    th.start()
    st = os.path.join(work, "st")
    env = dict(BASE_ENV, PYTHONPATH=os.path.join(HERE, "src"))
    subprocess.run([sys.executable, "-m", "nodesleuth", "record", "--quiet", "--root", fx, "--store", st,
                    "--duration", f"{int(minutes * 60)}s", "--segment", "5m"], env=env, check=True,
                   stderr=subprocess.DEVNULL)
    stop.set()
    th.join()
    return st


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store")
    ap.add_argument("--minutes", type=float, default=16)
    ap.add_argument("--window", type=float, default=600)
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(HERE, "src"))
    from nodesleuth.store.store import StoreReader

    work = tempfile.mkdtemp(prefix="ns-cut-", dir="/var/tmp")
    env = dict(BASE_ENV, PYTHONPATH=os.path.join(HERE, "src"))
    ns = [sys.executable, "-m", "nodesleuth"]
    try:
        st = a.store or record_fixture(work, a.minutes)
        span = StoreReader(st).span()
        t1 = span[1]
        t0 = t1 - a.window
        out = os.path.join(work, "cut")
        t = time.perf_counter()
        p = subprocess.run(ns + ["cut", "--store", st, "--from", str(t0), "--to", str(t1), out], env=env,
                           capture_output=True, text=True)
        took = time.perf_counter() - t
        if p.returncode:
            raise SystemExit(p.stderr)
        per = {}
        for dp, _, fs in os.walk(out):
            if dp != out:
                per[os.path.basename(dp)] = sum(os.path.getsize(os.path.join(dp, f)) for f in fs)
        total = sum(per.values()) + os.path.getsize(os.path.join(out, "nodesleuth-store.json"))
        same = (subprocess.run(ns + ["dump", "--store", st, "--from", str(t0), "--to", str(t1)], env=env,
                               capture_output=True).stdout ==
                subprocess.run(ns + ["dump", "--store", out, "--from", str(t0), "--to", str(t1)], env=env,
                               capture_output=True).stdout)
        meta = json.load(open(os.path.join(out, "nodesleuth-store.json")))["cut"]
        prof = {}
        pq = os.path.join(HERE, "benchmarks", "results", "profile_query.json")
        if os.path.exists(pq):
            hour = json.load(open(pq)).get("profile_hour", {}).get("disk_mb", {})
            # a 10-minute window: a sixth of the hour of raw batches and of the 10 s aggregates; the
            # coarser aggregates' windows overlapping it (one 10 min and one 1 h window, whole)
            prof = {"profile": hour.get("profile", 0) * a.window / 3600,
                    "profile_agg10": hour.get("profile_agg10", 0) * a.window / 3600,
                    "profile_agg60": hour.get("profile_agg60", 0) * a.window / 3600,
                    "profile_agg600": hour.get("profile_agg600", 0) / 6 * 2,
                    "profile_agg3600": hour.get("profile_agg3600", 0)}
            prof = {k: round(v, 2) for k, v in prof.items()}
            prof["total"] = round(sum(prof.values()), 1)
        return emit({"benchmark": "cut_size", "window_s": a.window, "source": "given store" if a.store else
                     f"record on the 96-CPU fixture, {a.minutes} min, --segment 5m",
                     "cut_bytes": total, "cut_mb": round(total / 1e6, 3), "per_stream_bytes": per,
                     "records": meta["records"], "cut_wall_s": round(took, 2), "dump_identical": same,
                     "profile_mb_derived_worst_case": prof,
                     "note": "profile_mb_derived_worst_case: not measured here (no perf on the fixture); from "
                             "profile_query.json's synthetic 96-CPU 49 Hz hour, scaled to the window"})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
