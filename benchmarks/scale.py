"""Scale: the cost of `check`, `record` (per tick) and `explain` as a function of CPUs, processes,
memory cgroups and recording length, on fixture nodes from fixtures/nodes.py (tmpfs, like
/proc and /sys), and whether anything grows faster than linearly (log-log slope per dimension).

- record: CPU seconds of one 1 Hz tick (collect + encode + compress + append), in process, mean over
  `--ticks` ticks of a node animated like a live kernel between ticks.
- check: CPU seconds of `nodesleuth check --seconds 1 --json --no-trace` (wait4), and the same minus
  the interpreter's start-up (`nodesleuth --version`, measured in the same run).
- explain: wall and CPU seconds of `nodesleuth explain --store S --json` over recordings of
  600 s .. 1 day of a 96-CPU node, written by the recorder's own encoder and store from ticks
  sampled off the animated fixture (a quiet node; a 10-minute hot core on CPU 39 every 6 hours),
  replayed with a few jiffies moved between user and idle on every CPU so no two seconds are alike.

Memory cgroups: the kernel counts dying ones in /proc/cgroups and the recorder reads only that
count each second (the directory walk, over live cgroups, runs once a minute); the fixture keeps
240 live directories and varies the tracked count, as on the incident's node (68,680 vs 240).
Reference tools: sadc/atop read the same kinds of files and are compared in recorder_overhead.py;
there is no reference tool for check/explain, so this benchmark reports absolute costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import os
import shutil
import sys
import tempfile
import time

from benchmarks.common import emit, run_measured
from fixtures.nodes import make_node
from fixtures.trees import Animator

SIZES = {
    "cpus": [2, 16, 96, 256],
    "procs": [100, 1000, 10000, 50000],
    "memcgs": [100, 10000, 70000, 200000],
    "seconds": [600, 3600, 21600, 86400],
}
QUICK = {"cpus": [2, 16, 96], "procs": [100, 1000, 10000], "memcgs": [100, 10000, 200000],
         "seconds": [600, 3600, 21600]}
BASE = {"cpus": 96, "procs": 1000, "memcgs": 70000}
NS = [sys.executable, "-m", "nodesleuth"]


def _recorder(fx: str, store: str):
    from nodesleuth.record.recorder import Recorder, RecordOptions

    return Recorder(RecordOptions(store=store, root=fx, kmsg=None))


def record_cost(work: str, cpus: int, procs: int, memcgs: int, ticks: int) -> dict:
    from nodesleuth.store.catalog import TICKS

    fx = make_node(os.path.join(work, "node"), cpus=cpus, procs=procs, memcgs=memcgs)
    anim = Animator(fx, busy_cpu=39 % cpus, busy_pid=110)
    r = _recorder(fx, os.path.join(work, "st"))
    r.sampler.prime()
    spent = 0.0
    try:
        for _ in range(ticks):
            anim.step()
            a = time.process_time()
            tick = r.sampler.tick()
            r.store.write(TICKS, tick, extra={"self": [0.0, 0]})
            r.rollup.add(tick)
            spent += time.process_time() - a
    finally:
        r.sampler.close()
        r.store.close()
    c = run_measured(NS + ["check", "--root", fx, "--seconds", "1", "--json", "--no-trace"])
    shutil.rmtree(os.path.join(work, "node"), ignore_errors=True)
    shutil.rmtree(os.path.join(work, "st"), ignore_errors=True)
    return {"record_tick_ms": round(1000 * spent / ticks, 3), "check_cpu_s": c["cpu_s"], "check_rc": c["rc"],
            "check_stderr": c["stderr"][-120:] if c["rc"] not in (0, 1) else ""}


def sample_ticks(work: str, hot: bool, n: int) -> list:
    """n consecutive ticks of the 96-CPU fixture, with or without a hog pinning CPU 39."""
    fx = make_node(os.path.join(work, "node-t"), cpus=96, procs=1000, memcgs=70000)
    anim = Animator(fx, busy_cpu=39 if hot else None, busy_pid=110 if hot else None)
    if not hot:  # the generator's /proc/stat starts CPU 39 busy; a quiet node has no such core
        anim.busy_cpu = None
    r = _recorder(fx, os.path.join(work, "st-t"))
    r.sampler.prime()
    out = []
    try:
        for _ in range(n):
            anim.step()
            out.append(r.sampler.tick())
    finally:
        r.sampler.close()
        r.store.close()
        shutil.rmtree(fx, ignore_errors=True)
        shutil.rmtree(os.path.join(work, "st-t"), ignore_errors=True)
    return out


def _jitter(v: tuple, rng: random.Random) -> tuple:
    k = rng.randint(-3, 3)
    if v[0] + k < 0 or v[3] - k < 0:
        return v
    return (v[0] + k,) + v[1:3] + (v[3] - k,) + v[4:]


def write_recording(store: str, seconds: int, quiet: list, hot: list, t0: float) -> int:
    """`seconds` ticks at 1 Hz: quiet ones, with 600 hot seconds starting every 6 hours."""
    from nodesleuth.store.codec import Encoder
    from nodesleuth.store.catalog import ROLLUP
    from nodesleuth.store.rollup import Rollup
    from nodesleuth.store.catalog import TICKS
    from nodesleuth.store.store import StoreWriter

    w = StoreWriter(store, retention=None, max_bytes=None, fsync_every=1 << 30)
    enc, roll = Encoder(), Rollup()
    rng = random.Random(5)
    try:
        for i in range(seconds):
            t = t0 + i
            in_hot = (i % 21600) >= 300 and (i % 21600) < 900
            src = hot[i % len(hot)] if in_hot else quiet[i % len(quiet)]
            raw = src.cpu_raw
            if raw:  # no two replayed seconds alike: move a few jiffies between user and idle per CPU
                raw = {c: _jitter(v, rng) for c, v in raw.items()}
            tk = dataclasses.replace(src, time=t, interval=1.0, cpu_raw=raw,
                                     census=dataclasses.replace(src.census, time=t))
            w.append(TICKS, t, enc.encode(tk, {"self": [0.0, 0]}))
            done = roll.add(tk)
            if done is not None:
                w.write(ROLLUP, done)
    finally:
        w.close()
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(store) for f in fs)


def explain_cost(work: str, lengths: list[int]) -> list[dict]:
    quiet = sample_ticks(work, False, 120)
    hot = sample_ticks(work, True, 60)
    out = []
    t0 = float(int(time.time()) - max(lengths) - 3600)
    for n in lengths:
        st = os.path.join(work, f"rec-{n}")
        a = time.time()
        size = write_recording(st, n, quiet, hot, t0)
        gen = time.time() - a
        e = run_measured(NS + ["explain", "--store", st, "--json"])
        out.append({"seconds": n, "cpus": 96, "store_mb": round(size / 1e6, 1), "write_s": round(gen, 1),
                    "explain_wall_s": e["wall_s"], "explain_cpu_s": e["cpu_s"], "explain_rss_mb": e["max_rss_mb"],
                    "explain_rc": e["rc"], "explain_stderr": e["stderr"][-160:] if e["rc"] not in (0, 1) else ""})
        shutil.rmtree(st, ignore_errors=True)
    return out


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares exponent k of y ~ x^k (log-log)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / den, 3) if den else None


def local_max(xs: list[float], ys: list[float], floor: float) -> float | None:
    """The steepest exponent between neighbouring sizes (a late knee hides in a global fit); steps
    that add less than `floor` (noise on a shared machine) are not counted."""
    ks = [math.log(ys[i + 1] / ys[i]) / math.log(xs[i + 1] / xs[i]) for i in range(len(xs) - 1)
          if ys[i] > 0 and ys[i + 1] > 0 and xs[i + 1] != xs[i] and ys[i + 1] - ys[i] >= floor]
    return round(max(ks), 3) if ks else None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (no 256 CPUs, 50k procs or a day)")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--only", choices=["cpus", "procs", "memcgs", "seconds"], action="append")
    a = ap.parse_args(argv)
    sizes = QUICK if a.quick else SIZES
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="ns-bench-scale-", dir=shm)
    table: dict[str, list[dict]] = {}
    fits: dict[str, dict] = {}
    try:
        start = run_measured(NS + ["--version"])
        for dim in ("cpus", "procs", "memcgs"):
            if a.only and dim not in a.only:
                continue
            rows = []
            for v in sizes[dim]:
                p = {**BASE, dim: v}
                rows.append({**p, **record_cost(work, p["cpus"], p["procs"], p["memcgs"], a.ticks)})
                print(f"# {dim}={v}: {rows[-1]}", file=sys.stderr, flush=True)
            table[dim] = rows
            xs = [r[dim] for r in rows]
            for k in ("record_tick_ms", "check_cpu_s"):
                ys = [r[k] for r in rows]
                if k == "check_cpu_s":  # the cost beyond the interpreter's fixed start-up
                    ys = [max(1e-4, y - start["cpu_s"]) for y in ys]
                    k = "check_cpu_s_beyond_startup"
                floor = 1.0 if k == "record_tick_ms" else 0.1
                fits[f"{k}~{dim}"] = {"exponent": slope(xs, ys), "steepest_local": local_max(xs, ys, floor)}
        if not a.only or "seconds" in a.only:
            rows = explain_cost(work, sizes["seconds"])
            table["seconds"] = rows
            xs = [r["seconds"] for r in rows]
            for k in ("explain_cpu_s", "explain_wall_s"):
                ys = [max(1e-4, r[k] - start["cpu_s"]) for r in rows]
                fits[f"{k}_beyond_startup~seconds"] = {"exponent": slope(xs, ys),
                                                       "steepest_local": local_max(xs, ys, 0.1)}
        superlinear = sorted(k for k, f in fits.items() if f["exponent"] is not None and f["exponent"] > 1.1)
        knees = sorted(k for k, f in fits.items() if f["steepest_local"] is not None and f["steepest_local"] > 1.1)
        day = next((r for r in table.get("seconds", []) if r["seconds"] == 86400), None)
        return emit({"benchmark": "scale", "startup_cpu_s": start["cpu_s"], "load": os.getloadavg(),
                     "table": table, "exponents": fits,
                     "superlinear": superlinear, "nothing_superlinear": not superlinear,
                     "superlinear_between_neighbours": knees,
                     "explain_day_96cpu_wall_s": day["explain_wall_s"] if day else None,
                     "explain_day_ok": (day["explain_wall_s"] < 5.0) if day else None,
                     "note": "exponent > 1.1 counts as faster than linear (global fit; and between neighbouring "
                             "sizes where the step adds >= 1 ms a tick or >= 0.1 s); record cost per tick "
                             "measured in process (process_time), check/explain as child processes (wait4); "
                             "all on a 2-CPU machine shared with other jobs: load average in `load`"},
                    save=not a.quick and not a.only)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
