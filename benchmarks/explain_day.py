"""`nodesleuth explain --store S --json` over one day of a 96-CPU recording: a baseline tree and this
one side by side on the same store, in pairs (baseline then this tree), each output compared byte
for byte. Wall and CPU seconds and peak RSS from wait4. The store is benchmarks/scale.py's
(`write_recording`: a quiet 96-CPU node from the fixture, a 10-minute hot core on CPU 39 every 6
hours); give --store to reuse one (it is kept), else one is written to a temporary directory.

usage: python -m benchmarks.explain_day --baseline-src /path/to/baseline/src [--store DIR] [--pairs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import BASE_ENV
from benchmarks.common import emit

TARGET_WALL_S = 5.0
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def run(src: str, store: str) -> tuple[dict, bytes]:
    env = dict(BASE_ENV, PYTHONPATH=src)
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "explain", "--store", store, "--json"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    return ({"wall_s": round(time.time() - t0, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
             "max_rss_mb": round(ru.ru_maxrss / 1024, 1), "rc": os.waitstatus_to_exitcode(status),
             "load1_after": round(os.getloadavg()[0], 2), "stderr": err.decode(errors="replace")[-200:]}, out)


def write_store(work: str) -> str:
    from benchmarks.scale import sample_ticks, write_recording

    quiet, hot = sample_ticks(work, False, 120), sample_ticks(work, True, 60)
    st = os.path.join(work, "day")
    write_recording(st, 86400, quiet, hot, float(int(time.time()) - 86400 - 3600))
    return st


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", required=True, help="the tree to compare with (its src/ directory)")
    ap.add_argument("--baseline-label", default="baseline")
    ap.add_argument("--store", help="an existing day store to reuse")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    work = None
    store = a.store
    if not store:
        work = tempfile.mkdtemp(prefix="ns-explain-day-", dir="/var/tmp")
        store = write_store(work)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(store) for f in fs)
    runs, same = [], True
    try:
        for i in range(a.pairs):
            b, bout = run(a.baseline_src, store)
            n, nout = run(HERE, store)
            same = same and bout == nout and b["rc"] == n["rc"] == 0
            runs += [{"pair": i + 1, "tree": a.baseline_label, **b}, {"pair": i + 1, "tree": "this", **n},
                     {"pair": i + 1, "json_identical": bout == nout, "json_bytes": len(nout)}]
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    base = [r for r in runs if r.get("tree") == a.baseline_label]
    new = [r for r in runs if r.get("tree") == "this"]
    return emit({"benchmark": "explain_day", "store": f"1 day of a 96-CPU node (benchmarks/scale.py write_recording), "
                 f"{size / 1e6:.1f} MB", "command": "nodesleuth explain --store S --json, baseline then this tree",
                 "json_output_identical": same, "runs": runs,
                 "wall_s": {"baseline": [r["wall_s"] for r in base], "this": [r["wall_s"] for r in new]},
                 "cpu_s": {"baseline": [r["cpu_s"] for r in base], "this": [r["cpu_s"] for r in new]},
                 "target_wall_s": TARGET_WALL_S, "met": same and max(r["wall_s"] for r in new) < TARGET_WALL_S},
                save=not a.no_save)


if __name__ == "__main__":
    main()
