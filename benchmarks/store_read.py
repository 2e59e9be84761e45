"""Read one second out of stores of 1, 7 and 30 days of a 96-CPU node, side by side with sysstat's
`sar -f` reading one second (-s/-e) out of its own daily file of a day at 1 s.

Stores: benchmarks/storegen.py (real ticks of the animated 96-CPU fixture, the recorder's codec, 1 s
ticks over the whole store, 10 s aggregates and per-minute rollups beside them). The sar file: a
real `sadc -S XALL 1` recording of this host, its records repeated to a whole day at 1 s with their
times rewritten (86,400 records, as sa1 at 1 s would leave it; sar reads it sequentially).

Per store and per position (1 h before the end, the middle, the first hour), a second is read:
- in process, as `dump --at` reads it (StoreReader + store/tier.at: the segment by name, the frame by
  the index, its segment's head, one record decoded), cold (the store's files evicted from the page
  cache with posix_fadvise, the readers' caches emptied) and warm; median and max of `--reads`
  different seconds, in a fresh process whose import time is not counted (median, p90, max: on a
  shared machine the max is the neighbours' doing; the warm read's CPU time is given too);
- the same for `replay --at` (21 s), the web's second view (data.cell) and the 10 s tier (`at` on
  the 10 s aggregates);
- end to end: `nodesleuth dump --at T --format csv` and `nodesleuth explain --at T --json` (wall,
  interpreter start-up included), and `sar -f DAY -s T -e T+1 -P ALL -u ALL` cold and warm.
The ratio compares a whole `dump --at` command with a whole `sar` command, cold and warm.

usage: python -m benchmarks.store_read [--days 1,7,30] [--reads 20] [--work DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from benchmarks import BASE_ENV
from benchmarks.common import emit

SADC = "/usr/lib/sysstat/sadc"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_MS = 20.0


def evict(path: str) -> None:
    """Drop a file's (or a directory tree's) pages from the page cache (no other file is touched)."""
    paths = [path] if os.path.isfile(path) else [os.path.join(dp, f) for dp, _, fs in os.walk(path) for f in fs]
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sar_day(work: str, records: int = 20) -> tuple[str, float] | None:
    """A day of `sadc -S XALL 1` records (a real recording of `records` seconds, repeated and re-timed)."""
    if not os.path.exists(SADC):
        return None
    a, b = os.path.join(work, "sa-a"), os.path.join(work, "sa-b")
    pa = subprocess.Popen([SADC, "-S", "XALL", "1", str(records // 2), a])
    pb = subprocess.Popen([SADC, "-S", "XALL", "1", str(records), b])
    pa.wait(), pb.wait()
    da, db = open(a, "rb").read(), open(b, "rb").read()
    rec = (len(db) - len(da)) // (records - records // 2)
    head = len(da) - (records // 2) * rec
    up0, ust0 = struct.unpack_from("<QQ", db, head)
    day0 = ust0 - ust0 % 86400
    hdr = bytearray(db[:head])
    for k in range(0, head - 8):
        if struct.unpack_from("<Q", hdr, k)[0] == ust0:
            struct.pack_into("<Q", hdr, k, day0)
    recs = [db[head + i * rec: head + (i + 1) * rec] for i in range(records)]
    out = os.path.join(work, "sa-day")
    with open(out, "wb") as f:
        f.write(hdr)
        buf = bytearray()
        for s in range(86400):
            r = bytearray(recs[s % records])
            struct.pack_into("<QQ", r, 0, up0 + s * 100, day0 + s)
            r[21], r[22], r[23] = s // 3600, (s // 60) % 60, s % 60
            buf += r
            if len(buf) > 1 << 25:
                f.write(buf)
                buf = bytearray()
        f.write(buf)
    os.unlink(a), os.unlink(b)
    return out, float(day0)


def wall(cmd: list[str], env=None, evict_first: str | None = None, repeat: int = 3) -> dict:
    times, rc, err = [], 0, ""
    for _ in range(repeat):
        if evict_first:
            evict(evict_first)
        t = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append(time.perf_counter() - t)
        rc, err = p.returncode, p.stderr.decode(errors="replace")[-200:]
    return {"wall_ms_median": round(1000 * statistics.median(times), 1), "wall_ms_max": round(1000 * max(times), 1),
            "rc": rc, "stderr": err if rc else ""}


def worker(store: str, times: list[float]) -> dict:
    """In-process latencies of one-second reads (cold: evicted and caches emptied; warm: again)."""
    from nodesleuth.store import codec, segment, tier
    from nodesleuth.store.catalog import TICKS10
    from nodesleuth.store.store import StoreReader
    from nodesleuth.web import data

    def clear():
        segment._HEADS.clear()
        codec._CTX.clear()

    out: dict[str, list[float]] = {k: [] for k in ("dump_at_cold", "dump_at_warm", "replay_at_warm", "cell_warm",
                                                   "tier10_at_cold", "found", "dump_at_warm_cpu")}
    tier.at(StoreReader(store), times[0] - 7200)  # the readers' code paths once (first-call costs: imports inside)
    for t in times:
        evict(store)
        clear()
        a = time.perf_counter()
        tk, _ = tier.at(StoreReader(store), t)
        out["dump_at_cold"].append(time.perf_counter() - a)
        out["found"].append(1.0 if tk is not None and tk.time - tk.interval <= t <= tk.time else 0.0)
        a, c = time.perf_counter(), time.process_time()
        tier.at(StoreReader(store), t + 0.5)
        out["dump_at_warm"].append(time.perf_counter() - a)
        out["dump_at_warm_cpu"].append(time.process_time() - c)
        a = time.perf_counter()
        r = StoreReader(store)
        n = sum(1 for _ in tier.ticks(r, t - 10, t + 10))
        out["replay_at_warm"].append(time.perf_counter() - a)
        a = time.perf_counter()
        data.cell(StoreReader(store), 39, t, 1)
        out["cell_warm"].append(time.perf_counter() - a)
        evict(store)
        clear()
        a = time.perf_counter()
        r = StoreReader(store)
        from nodesleuth.store import query

        got = next((x for x in query.ticks_with(r, TICKS10, t, t + 10)), None)
        out["tier10_at_cold"].append(time.perf_counter() - a)
        assert n >= 20 and got is not None
    res = {}
    for k, v in out.items():
        if k == "found":
            res["found_all"] = all(v)
            continue
        ms = sorted(1000 * x for x in v)
        res[k] = {"median_ms": round(statistics.median(ms), 2), "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
                  "max_ms": round(max(ms), 2)}
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", default="1,7,30")
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--work", help="directory for the stores (default: a new one under /var/tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (and reuse them when present)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker[0], [float(x) for x in a.worker[1:]])))
        return {}
    from benchmarks import storegen

    work = a.work or tempfile.mkdtemp(prefix="ns-store-read-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    days = [int(x) for x in a.days.split(",")]
    env = dict(BASE_ENV, PYTHONPATH=os.path.join(HERE, "src"))
    ns = [sys.executable, "-m", "nodesleuth"]
    res: dict = {"stores": {}}
    try:
        t_gen = time.time()
        quiet, hot = storegen.sample(os.path.join(work, "sample"), 120, 60)
        p1, p10 = storegen.tick_pools(quiet, hot)
        end = float(int(time.time()) - 60)
        rng = random.Random(7)
        sar = sar_day(work)
        for d in days:
            st = os.path.join(work, f"store-{d}d")
            if not (a.keep and os.path.exists(st)):
                shutil.rmtree(st, ignore_errors=True)
                gen = storegen.generate(st, d * 86400, end, p1, p10, quiet, hot)
            else:
                gen = {"reused": True}
            size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(st) for f in fs)
            nseg = sum(len(fs) for dp, _, fs in os.walk(st) if dp.endswith("ticks")) // 3
            span = d * 86400
            where = {"1h_before_end": end - 3600, "middle": end - span / 2, "first_hour": end - span + 1800}
            per = {}
            for name, c in where.items():
                ts = [c + rng.uniform(-1800, 1800) for _ in range(a.reads)]
                p = subprocess.run([sys.executable, "-m", "benchmarks.store_read", "--worker", st, *map(str, ts)],
                                   capture_output=True, text=True, env=dict(env, PYTHONPATH=f"{HERE}/src:{HERE}"),
                                   cwd=HERE)
                if p.returncode:
                    per[name] = {"error": p.stderr[-400:]}
                    continue
                per[name] = json.loads(p.stdout)
                t = ts[0]
                per[name]["cli_dump_at_cold"] = wall(ns + ["dump", "--store", st, "--at", str(t), "--format", "csv"],
                                                     env, evict_first=st)
                per[name]["cli_dump_at_warm"] = wall(ns + ["dump", "--store", st, "--at", str(t), "--format", "csv"], env)
                per[name]["cli_explain_at_warm"] = wall(ns + ["explain", "--store", st, "--at", str(t), "--json"], env,
                                                        repeat=1)
            res["stores"][f"{d}d"] = {"generated": gen, "bytes": size, "tick_segments": nseg, "reads": per}
        res["write_s_total"] = round(time.time() - t_gen, 1)
        if sar:
            path, day0 = sar
            sr = {"file_bytes": os.path.getsize(path), "records": 86400}
            for name, s in (("end_of_day", 86398), ("middle", 43200), ("start_of_day", 5)):
                hh = time.strftime("%H:%M:%S", time.gmtime(day0 + s))
                hh1 = time.strftime("%H:%M:%S", time.gmtime(day0 + s + 1))
                cmd = ["sar", "-f", path, "-s", hh, "-e", hh1, "-P", "ALL", "-u", "ALL"]
                e = dict(os.environ, TZ="UTC", LC_ALL="C")
                sr[name] = {"cold": wall(cmd, e, evict_first=path), "warm": wall(cmd, e)}
            res["sar"] = sr
            ratios = {}
            for d, doc in res["stores"].items():
                for pos, r in doc["reads"].items():
                    if "error" in r:
                        continue
                    for mode in ("cold", "warm"):
                        sar_ms = sr["end_of_day"][mode]["wall_ms_median"]
                        ours = r[f"cli_dump_at_{mode}"]["wall_ms_median"]
                        ratios[f"{d}_{pos}_cli_dump_at_vs_sar_end_of_day_{mode}"] = round(ours / sar_ms, 3)
                        inproc = r["dump_at_cold" if mode == "cold" else "dump_at_warm"]["median_ms"]
                        ratios[f"{d}_{pos}_read_in_process_vs_sar_end_of_day_{mode}"] = round(inproc / sar_ms, 4)
            res["ratios"] = ratios
        def worst(stat):
            return max((r[k][stat] for doc in res["stores"].values() for r in doc["reads"].values() if "error" not in r
                        for k in ("dump_at_cold", "dump_at_warm", "cell_warm", "tier10_at_cold")), default=None)
        res["target_ms"] = TARGET_MS
        res["worst_one_second_read_ms"] = {"median": worst("median_ms"), "p90": worst("p90_ms"), "max": worst("max_ms")}
        res["met"] = worst("median_ms") is not None and worst("median_ms") <= TARGET_MS
        res["load_after"] = os.getloadavg()
        return emit({"benchmark": "store_read", "days": days, "reads_per_position": a.reads, **res,
                     "note": "stores: benchmarks/storegen.py (1 s ticks over the whole store); sar: this 2-CPU host's "
                             "sadc -S XALL records repeated to a day (a 96-CPU host's records are larger, so its "
                             "sar would read more); in-process reads exclude the interpreter's start-up, cli_* "
                             "include it"})
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
