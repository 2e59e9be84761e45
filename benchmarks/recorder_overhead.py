"""Recorder overhead: CPU and RSS of `nodesleuth record` at 1 Hz on a 96-CPU / 1,000-process /
70,000-tracked-memcg fixture node (animated like a live kernel), and, side by side on this live
host over the same seconds, nodesleuth record vs sysstat's `sadc 1` and `mpstat -P ALL 1`.

Budget (issue 3): own CPU <= 1% of one core, RSS <= 60 MB, store <= 150 MB/day.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

from benchmarks.common import Measured, emit
from nodesleuth.lab.fixture import Animator, make_v1_node

SADC = "/usr/lib/sysstat/sadc"


def store_bytes(d: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs if f.endswith(".seg"))


def steady_state(d: str) -> dict:
    """Per-second cost after start-up, from the recorder's own CPU figure stored in each tick, and
    bytes per tick excluding each segment's one-off dictionary frame (amortised per 1 h segment)."""
    import orjson

    from nodesleuth.store.segment import HEADER
    from nodesleuth.store.store import StoreReader

    r = StoreReader(d)
    recs = [(t, orjson.loads(p)) for t, p in r.read()]
    (t0, a), (t1, b) = recs[1], recs[-1]
    cpu_per_s = (b["self"][0] - a["self"][0]) / (t1 - t0)
    segs = r.segments("ticks")
    dict_bytes = 0
    for p in segs:
        with open(p, "rb") as f:
            hdr = f.read(HEADER.size)
        dict_bytes += HEADER.size + HEADER.unpack(hdr)[1]
    per_tick = (store_bytes(d) - dict_bytes) / len(recs)
    per_day = per_tick * 86400 + dict_bytes / len(segs) * 24
    return {"steady_cpu_pct_of_core": round(100 * cpu_per_s, 3), "ticks": len(recs),
            "bytes_per_tick": round(per_tick), "dict_frame_bytes": dict_bytes // len(segs),
            "steady_mb_per_day": round(per_day / 1e6, 1), "rss_mb_last_tick": round(b["self"][1] / 1024, 1)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--procs", type=int, default=1000)
    ap.add_argument("--tracked", type=int, default=70000)
    a = ap.parse_args(argv)
    # the fixture lives on tmpfs when there is one: /proc and /sys are memory-backed too
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="ns-bench-rec-", dir=shm)
    try:
        fx = make_v1_node(os.path.join(work, "node"), ncpu=a.cpus, nprocs=a.procs, tracked=a.tracked)
        anim = Animator(fx, busy_cpu=39 % a.cpus, busy_pid=110)
        stop = threading.Event()

        def animate():
            nxt = int(time.time()) + 1.5
            while not stop.is_set():
                time.sleep(max(0, nxt - time.time()))
                anim.step()
                nxt += 1

        th = threading.Thread(target=animate, daemon=True)
        th.start()
        ns = [sys.executable, "-m", "nodesleuth", "record", "--quiet", "--duration", f"{a.seconds}s"]
        runs = {
            "nodesleuth_fixture": Measured(ns + ["--root", fx, "--store", os.path.join(work, "st-fx")]),
            "nodesleuth_live": Measured(ns + ["--root", "/", "--store", os.path.join(work, "st-live")]),
        }
        if os.path.exists(SADC):
            runs["sadc_live"] = Measured([SADC, "-S", "XALL", "1", str(a.seconds), os.path.join(work, "sa.data")])
        if shutil.which("mpstat"):
            runs["mpstat_live"] = Measured(["mpstat", "-P", "ALL", "1", str(a.seconds)])
        res = {k: m.finish() for k, m in runs.items()}
        stop.set()
        th.join()
        for k in ("nodesleuth_fixture", "nodesleuth_live"):
            r = res[k]
            r["store_bytes"] = store_bytes(os.path.join(work, "st-fx" if k.endswith("fixture") else "st-live"))
            r.update(steady_state(os.path.join(work, "st-fx" if k.endswith("fixture") else "st-live")))
        for r in res.values():
            r["cpu_pct_of_core"] = round(100 * r["cpu_s"] / a.seconds, 3)
            r["cpu_s_per_hour"] = round(r["cpu_s"] / a.seconds * 3600, 2)
        if "sadc_live" in res:
            res["sadc_live"]["store_bytes"] = os.path.getsize(os.path.join(work, "sa.data"))
        fxr = res["nodesleuth_fixture"]
        ratios = {}
        for other in ("sadc_live", "mpstat_live"):
            if other in res and res[other]["cpu_s"] > 0:
                ratios[f"nodesleuth_live_cpu_vs_{other}"] = round(res["nodesleuth_live"]["cpu_s"] / res[other]["cpu_s"], 2)
                ratios[f"nodesleuth_fixture96_cpu_vs_{other}"] = round(fxr["cpu_s"] / res[other]["cpu_s"], 2)
                ratios[f"nodesleuth_live_steady_cpu_vs_{other}"] = round(
                    res["nodesleuth_live"]["steady_cpu_pct_of_core"] / res[other]["cpu_pct_of_core"], 2)
        budget = {"cpu_pct_of_core_max": 1.0, "rss_mb_max": 60, "mb_per_day_max": 150,
                  "cpu_ok": fxr["steady_cpu_pct_of_core"] <= 1.0, "rss_ok": fxr["max_rss_mb"] <= 60,
                  "size_ok": fxr["steady_mb_per_day"] <= 150}
        return emit({"benchmark": "recorder_overhead", "seconds": a.seconds,
                     "fixture": {"cpus": a.cpus, "procs": a.procs, "tracked_memcgs": a.tracked, "live_memcgs": 240},
                     "runs": res, "ratios": ratios, "budget": budget,
                     "note": "sadc/mpstat read this 2-CPU host; nodesleuth_live reads the same host; "
                             "nodesleuth_fixture reads the animated 96-CPU fixture"})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
