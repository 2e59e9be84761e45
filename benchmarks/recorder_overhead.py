"""Recorder overhead: CPU and RSS of `nodesleuth record` at 1 Hz on a 96-CPU / 1,000-process /
70,000-tracked-memcg fixture node (animated like a live kernel, one ksoftirqd per CPU), and, side by
side on this live host over the same seconds, nodesleuth record vs sysstat's `sadc -S XALL 1`,
`atop -w FILE 1` and `mpstat -P ALL 1`.

Two figures per tool: the whole run (wait4: start-up included; a Python process pays ~0.25 s of
interpreter and import start-up once, which a 60 s run does not amortise) and the steady state,
measured from outside for every tool alike: utime+stime+cutime+cstime of /proc/PID/stat (children
such as `ethtool -S` included) read a few seconds after start and again just before the end.

Bytes per day (issue 31): every stream the recorder writes (1 s ticks, 10 s aggregates, rollups),
data frames with their headers and index entries per record times records a day, plus each
segment's head (trained dictionary, codec context, its .dict copy) times segments a day; measured
on the segments after the first (`--segment 60s`: the first hour after a start compresses against
its first record, later ones against a dictionary trained on the hour before). The CPU budget is
the run with the default 1 h segments (`nodesleuth_fixture_1h`: with 60 s ones a dictionary is
trained every minute); the live host's runs use 1 h segments too (their bytes are a first hour's). sadc's and atop's
files of the same seconds at 1 s, per day, side by side (their header amortised, uncompressed as
they write them).

Budget (issues 3, 17, 31): steady CPU <= 1% of one core on the fixture with 20% margin (<= 0.8%),
<= 1.5x sadc's steady CPU on this host, RSS <= 60 MB, store <= 100 MB/day.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

from benchmarks import BASE_ENV
from benchmarks.common import Measured, emit
from fixtures.nodes import make_node
from fixtures.trees import Animator

SADC = "/usr/lib/sysstat/sadc"
HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int | None:
    """utime+stime+cutime+cstime of a running process, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in rest[11:15])


class Steady:
    """Samples every tool's CPU at `warm` seconds and `seconds - 2`: the steady per-second cost."""

    def __init__(self, runs: dict, warm: float, seconds: float):
        self.runs, self.warm, self.end = runs, warm, seconds - 2
        self.marks: dict[str, list[tuple[float, int]]] = {k: [] for k in runs}
        self.th = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.time()
        self.th.start()

    def _run(self):
        for at in (self.warm, self.end):
            time.sleep(max(0.0, self.t0 + at - time.time()))
            for k, m in self.runs.items():
                c = cpu_ticks(m.p.pid)
                if c is not None:
                    self.marks[k].append((time.time(), c))

    def result(self) -> dict[str, float | None]:
        self.th.join()
        out = {}
        for k, ms in self.marks.items():
            if len(ms) == 2 and ms[1][0] > ms[0][0]:
                out[k] = round(100 * (ms[1][1] - ms[0][1]) / HZ / (ms[1][0] - ms[0][0]), 3)
            else:
                out[k] = None
        return out


def store_bytes(d: str) -> int:
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(d) for f in fs if f.endswith(".seg"))


# records a day and segments a day of each stream as `record` writes them by default (1 h segments;
# the 10 s tier's are 6 h, the minutes' a day: store/catalog.py SEGMENT_FACTOR)
PER_DAY = {"ticks": (86400, 24), "ticks10s": (8640, 4), "rollup": (1440, 1)}


def _segment_costs(p: str) -> tuple[int, int, int]:
    """(head frame bytes incl. its .dict copy, data bytes incl. frame headers and index, data frames)."""
    import os as _os

    from nodesleuth.store.segment import HEADER, index_path, sidecar

    with open(p, "rb") as f:
        head = HEADER.size + HEADER.unpack(f.read(HEADER.size))[1]
    side = _os.path.getsize(sidecar(p)) if _os.path.exists(sidecar(p)) else 0
    idx = _os.path.getsize(index_path(p)) if _os.path.exists(index_path(p)) else 0
    n = 0
    with open(p, "rb") as f:
        data = f.read()
    off = 0
    while off + HEADER.size <= len(data):
        length = HEADER.unpack_from(data, off)[1]
        off += HEADER.size + length
        n += 1
    return head + side, _os.path.getsize(p) - head + idx, n - 1


def steady_state(d: str) -> dict:
    """Per-second cost after start-up, from the recorder's own CPU figure stored in each tick, and
    bytes per day in the steady state: per stream, the data frames (with their headers and index
    entries) of the segments after the first (whose dictionary is trained on the one before: the
    first hour after a start uses its first record), per record times records a day, plus each
    segment's head (dictionary, context, and its .dict copy) times segments a day."""
    from nodesleuth.store import query
    from nodesleuth.store.store import StoreReader

    r = StoreReader(d)
    ticks = list(query.ticks(r, None, None, carry=False))
    recs = [(t.time, t) for t in ticks]
    self_cpu = []
    for t, p, ctx in r.read("ticks", with_context=True):
        from nodesleuth.store.codec import _load

        rec = _load(p, "tick", t, ctx)
        if "self" in rec:
            self_cpu.append((t, rec["self"]))
    (t0, a), (t1, b) = self_cpu[1], self_cpu[-1]
    cpu_per_s = (b[0] - a[0]) / (t1 - t0)
    per_day = 0.0
    streams = {}
    for name, (n_day, segs_day) in PER_DAY.items():
        segs = r.segments(name)
        if not segs:
            continue
        costs = [_segment_costs(p) for p in segs]
        steady = costs[1:] or costs  # trained segments when there are any
        frames = sum(c[2] for c in steady)
        per_rec = sum(c[1] for c in steady) / max(1, frames)
        head = sum(c[0] for c in steady) / len(steady)
        day = per_rec * n_day + head * segs_day
        per_day += day
        first = costs[0]
        streams[name] = {"segments": len(segs), "trained_segments": len(costs) - 1, "records_measured": frames,
                         "bytes_per_record": round(per_rec, 1), "head_bytes": round(head),
                         "first_segment_bytes_per_record": round(first[1] / max(1, first[2]), 1),
                         "mb_per_day": round(day / 1e6, 2)}
    return {"steady_cpu_pct_of_core": round(100 * cpu_per_s, 3), "ticks": len(recs),
            "bytes_per_tick": streams.get("ticks", {}).get("bytes_per_record"), "streams": streams,
            "steady_mb_per_day": round(per_day / 1e6, 1), "rss_mb_last_tick": round(b[1] / 1024, 1)}


def steady_state_v2(d: str) -> dict:
    """The same for a schema-2 store (a --baseline-src tree older than schema 3): JSON ticks, each
    segment compressed against its first record."""
    import orjson

    from nodesleuth.store.segment import HEADER
    from nodesleuth.store.store import StoreReader

    r = StoreReader(d)
    recs = [(t, orjson.loads(p)) for t, p in r.read()]
    (t0, a), (t1, b) = recs[1], recs[-1]
    cpu_per_s = (b["self"][0] - a["self"][0]) / (t1 - t0)
    per_day = 0.0
    streams = {}
    for name, (n_day, segs_day) in PER_DAY.items():
        segs = r.segments(name)
        if not segs:
            continue
        total = sum(os.path.getsize(p) for p in segs)
        heads, n = 0, 0
        for p in segs:
            with open(p, "rb") as f:
                data = f.read()
            heads += HEADER.size + HEADER.unpack_from(data, 0)[1]
            off = 0
            while off + HEADER.size <= len(data):
                off += HEADER.size + HEADER.unpack_from(data, off)[1]
                n += 1
            n -= 1
        per_rec = (total - heads) / max(1, n)
        head = 2 * heads / len(segs)
        day = per_rec * n_day + head * (24 if name != "rollup" else 24)
        per_day += day
        streams[name] = {"bytes_per_record": round(per_rec, 1), "head_bytes": round(head), "mb_per_day": round(day / 1e6, 2)}
    return {"steady_cpu_pct_of_core": round(100 * cpu_per_s, 3), "ticks": len(recs),
            "bytes_per_tick": streams.get("ticks", {}).get("bytes_per_record"), "streams": streams,
            "steady_mb_per_day": round(per_day / 1e6, 1), "rss_mb_last_tick": round(b["self"][1] / 1024, 1)}


def _schema(d: str) -> int:
    try:
        with open(os.path.join(d, "nodesleuth-store.json")) as f:
            return int(__import__("json").load(f).get("schema", 2))
    except (OSError, ValueError):
        return 2


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=190)
    ap.add_argument("--segment", default="60s", help="segment length of the runs: the steady state's bytes come "
                    "from the segments after the first (trained on the one before)")
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--procs", type=int, default=1000)
    ap.add_argument("--tracked", type=int, default=70000)
    ap.add_argument("--warm", type=float, default=8.0, help="seconds before the steady-state window")
    ap.add_argument("--baseline-src", help="also run the recorder of this source tree (its src/ directory, "
                    "e.g. an older commit's `git archive`) on the same fixture and host, side by side")
    a = ap.parse_args(argv)
    # the fixture lives on tmpfs when there is one: /proc and /sys are memory-backed too
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="ns-bench-rec-", dir=shm)
    try:
        fx = make_node(os.path.join(work, "node"), cpus=a.cpus, procs=a.procs, memcgs=a.tracked)
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
        ns = [sys.executable, "-m", "nodesleuth", "record", "--quiet", "--duration", f"{a.seconds}s",
              "--segment", a.segment]
        ns1h = [x for x in ns if x not in ("--segment", a.segment)]
        runs = {
            "nodesleuth_fixture": Measured(ns + ["--root", fx, "--store", os.path.join(work, "st-fx")]),
            # the same with the default 1 h segments: its CPU is the recorder's as deployed (with 60 s
            # segments a dictionary is trained every minute, 60x as often)
            "nodesleuth_fixture_1h": Measured(ns1h + ["--root", fx, "--store", os.path.join(work, "st-fx1h")]),
            "nodesleuth_live": Measured(ns1h + ["--root", "/", "--store", os.path.join(work, "st-live")]),
        }
        if a.baseline_src:
            env = {**BASE_ENV, "PYTHONPATH": os.path.abspath(a.baseline_src)}
            runs["baseline_fixture"] = Measured(ns + ["--root", fx, "--store", os.path.join(work, "st-bfx")], env=env)
            runs["baseline_live"] = Measured(ns1h + ["--root", "/", "--store", os.path.join(work, "st-blive")], env=env)
        if os.path.exists(SADC):
            runs["sadc_live"] = Measured([SADC, "-S", "XALL", "1", str(a.seconds), os.path.join(work, "sa.data")])
        if shutil.which("atop"):
            runs["atop_live"] = Measured(["atop", "-w", os.path.join(work, "atop.raw"), "1", str(a.seconds)])
        if shutil.which("mpstat"):
            runs["mpstat_live"] = Measured(["mpstat", "-P", "ALL", "1", str(a.seconds)])
        steady = Steady(runs, a.warm, a.seconds)
        load0 = os.getloadavg()
        res = {k: m.finish() for k, m in runs.items()}
        for k, v in steady.result().items():
            res[k]["steady_ext_cpu_pct_of_core"] = v
        stop.set()
        th.join()
        stores = {"nodesleuth_fixture": "st-fx", "nodesleuth_live": "st-live", "baseline_fixture": "st-bfx",
                  "baseline_live": "st-blive", "nodesleuth_fixture_1h": "st-fx1h"}
        for k, d in stores.items():
            if k in res:
                res[k]["store_bytes"] = store_bytes(os.path.join(work, d))
                sd = os.path.join(work, d)
                res[k].update(steady_state(sd) if _schema(sd) >= 3 else steady_state_v2(sd))
        for r in res.values():
            r["cpu_pct_of_core"] = round(100 * r["cpu_s"] / a.seconds, 3)
            r["cpu_s_per_hour"] = round(r["cpu_s"] / a.seconds * 3600, 2)
        if "sadc_live" in res:
            res["sadc_live"]["store_bytes"] = os.path.getsize(os.path.join(work, "sa.data"))
        if "atop_live" in res and os.path.exists(os.path.join(work, "atop.raw")):
            res["atop_live"]["store_bytes"] = os.path.getsize(os.path.join(work, "atop.raw"))
        for k in ("sadc_live", "atop_live"):  # their files at 1 s for a day: the bytes of this run, per second
            if res.get(k, {}).get("store_bytes"):
                res[k]["mb_per_day"] = round(res[k]["store_bytes"] / a.seconds * 86400 / 1e6, 1)
        sizes = {k: res[k].get("steady_mb_per_day", res[k].get("mb_per_day")) for k in
                 ("nodesleuth_fixture", "nodesleuth_live", "baseline_fixture", "baseline_live", "sadc_live",
                  "atop_live") if k in res}
        fxr = res["nodesleuth_fixture"]
        ratios = {}
        live_ext = res["nodesleuth_live"].get("steady_ext_cpu_pct_of_core")
        for other in ("sadc_live", "atop_live", "mpstat_live", "baseline_live"):
            o = res.get(other, {}).get("steady_ext_cpu_pct_of_core")
            if live_ext is not None and o:
                ratios[f"nodesleuth_live_steady_ext_cpu_vs_{other}"] = round(live_ext / o, 2)
            b = res.get("baseline_live", {}).get("steady_ext_cpu_pct_of_core")
            if b is not None and o and other != "baseline_live":
                ratios[f"baseline_live_steady_ext_cpu_vs_{other}"] = round(b / o, 2)
        new_fx = res["nodesleuth_fixture"].get("steady_ext_cpu_pct_of_core")
        old_fx = res.get("baseline_fixture", {}).get("steady_ext_cpu_pct_of_core")
        if new_fx is not None and old_fx:
            ratios["nodesleuth_fixture_steady_ext_cpu_vs_baseline_fixture"] = round(new_fx / old_fx, 2)
        new_1h = res.get("nodesleuth_fixture_1h", {}).get("steady_ext_cpu_pct_of_core")
        if new_1h is not None and old_fx:
            ratios["nodesleuth_fixture_1h_steady_ext_cpu_vs_baseline_fixture"] = round(new_1h / old_fx, 2)
        for other in ("sadc_live", "atop_live", "mpstat_live"):
            if other in res and res[other]["cpu_s"] > 0:
                ratios[f"nodesleuth_live_cpu_vs_{other}"] = round(res["nodesleuth_live"]["cpu_s"] / res[other]["cpu_s"], 2)
                ratios[f"nodesleuth_fixture96_cpu_vs_{other}"] = round(fxr["cpu_s"] / res[other]["cpu_s"], 2)
                ratios[f"nodesleuth_live_steady_cpu_vs_{other}"] = round(
                    res["nodesleuth_live"]["steady_cpu_pct_of_core"] / res[other]["cpu_pct_of_core"], 2)
        fx_ext = res.get("nodesleuth_fixture_1h", fxr).get("steady_ext_cpu_pct_of_core")
        vs_sadc = ratios.get("nodesleuth_live_steady_ext_cpu_vs_sadc_live")
        for k in ("sadc_live", "atop_live", "baseline_live"):
            if sizes.get(k) and sizes.get("nodesleuth_live"):
                ratios[f"nodesleuth_live_mb_per_day_vs_{k}"] = round(sizes["nodesleuth_live"] / sizes[k], 3)
        if sizes.get("baseline_fixture") and sizes.get("nodesleuth_fixture"):
            ratios["nodesleuth_fixture_mb_per_day_vs_baseline_fixture"] = round(
                sizes["nodesleuth_fixture"] / sizes["baseline_fixture"], 3)
        budget = {"cpu_pct_of_core_max": 0.8, "vs_sadc_max": 1.5, "rss_mb_max": 60, "mb_per_day_max": 100,
                  "cpu_ok": fx_ext is not None and fx_ext <= 0.8,
                  "vs_sadc_ok": vs_sadc is not None and vs_sadc <= 1.5,
                  "rss_ok": fxr["max_rss_mb"] <= 60 and res["nodesleuth_live"]["max_rss_mb"] <= 60,
                  "size_ok": fxr["steady_mb_per_day"] <= 100}
        return emit({"benchmark": "recorder_overhead", "seconds": a.seconds, "load": [load0, os.getloadavg()],
                     "baseline_src": a.baseline_src,
                     "fixture": {"cpus": a.cpus, "procs": a.procs, "tracked_memcgs": a.tracked, "live_memcgs": 240},
                     "runs": res, "ratios": ratios, "budget": budget, "mb_per_day": sizes,
                     "note": "sadc/atop/mpstat read this 2-CPU host; nodesleuth_live reads the same host; "
                             "nodesleuth_fixture reads the animated 96-CPU fixture"})
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
