"""perf-script ingest speed, side by side in one run on the same text: nodesleuth's parser vs
FlameScope's algorithm (heatmap pass and flame-graph pass, re-implemented: FlameScope is a web app) and
stackcollapse-perf.pl's algorithm (benchmarks/reference/stackcollapse.py, a labelled Python
re-implementation). The real Perl script is not installable from this machine's registries and is not kept
in this repository: it is timed too when its path is given (--stackcollapse PATH or
NODESLEUTH_STACKCOLLAPSE=PATH).

Prints samples/s for each (best of 3 runs each) and the ratios. Issue 4's bar: nodesleuth's parse
>= 5x FlameScope's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
import time

from benchmarks.common import emit
from benchmarks.reference import flamescope, stackcollapse
from fixtures.perfscript import make_capture
from nodesleuth.profile.parse import parse_file
from nodesleuth.profile.folded import folded
from nodesleuth.profile.heatmap import heatmap
from nodesleuth.profile.samples import Filter, Samples

NOT_INSTALLABLE = ("stackcollapse-perf.pl is not installable from this machine's registries (PyPI, Debian, npm); "
                   "pass --stackcollapse PATH to time the real script")


def timed(fn, *a, repeat: int = 3):
    """Best of `repeat` runs (as timeit does), the same for every contender: this VM is noisy."""
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        c = time.process_time()
        r = fn(*a)
        w, cp = time.perf_counter() - t, time.process_time() - c
        if best is None or w < best[1]:
            best = (r, w, cp)
    return best


def as_samples(b) -> Samples:
    import numpy as np

    from nodesleuth.profile.parse import is_idle

    return Samples(np.asarray(b.times), np.asarray(b.cpus), np.asarray(b.pids), np.asarray(b.tids),
                   np.asarray(b.comm_ids), np.asarray(b.stack_ids), b.comms, b.stacks,
                   np.array([is_idle(0, s) for s in b.stacks], dtype=bool))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--file", help="an existing perf script text file instead of the synthetic capture")
    ap.add_argument("--stackcollapse", metavar="PATH", default=os.environ.get("NODESLEUTH_STACKCOLLAPSE") or None,
                    help="FlameGraph's stackcollapse-perf.pl, to time the real script too "
                         "(default: $NODESLEUTH_STACKCOLLAPSE)")
    a = ap.parse_args(argv)
    if a.stackcollapse and not os.path.isfile(a.stackcollapse):
        ap.error(f"--stackcollapse {a.stackcollapse}: no such file")
    with tempfile.TemporaryDirectory() as d:
        path = a.file or os.path.join(d, "cap.txt")
        if not a.file:
            make_capture(path, cpus=a.cpus, seconds=a.seconds)
        size = os.path.getsize(path)
        (st, en, offs), fs_heat_wall, fs_heat_cpu = timed(flamescope.read_offsets, path)
        fs_tree, fs_fg_wall, fs_fg_cpu = timed(flamescope.generate_flame_graph, path, None, None)
        sc, sc_wall, sc_cpu = timed(stackcollapse.collapse_file, path)
        b, ns_wall, ns_cpu = timed(parse_file, path)
        pl_wall = None
        if a.stackcollapse:
            _, pl_wall, _ = timed(lambda: subprocess.run(["perl", a.stackcollapse, "--kernel", path],
                                                         capture_output=True, check=True), repeat=1)
        n = len(b)
        s = as_samples(b)
        _, ns_q_wall, _ = timed(lambda: (heatmap(s, Filter()), folded(s, Filter())))
    r = {
        "benchmark": "perf_parse", "file_mb": round(size / 1e6, 1), "samples": n,
        "flamescope_heatmap_pass": {"seconds": round(fs_heat_wall, 3), "samples_per_s": round(n / fs_heat_wall)},
        "flamescope_flamegraph_pass": {"seconds": round(fs_fg_wall, 3), "samples_per_s": round(n / fs_fg_wall)},
        "stackcollapse_perf_pl_reimplemented": {
            "seconds": round(sc_wall, 3), "samples_per_s": round(n / sc_wall),
            "what": "stackcollapse-perf.pl's algorithm re-implemented in Python (benchmarks/reference/stackcollapse.py), "
                    "not the Perl script"},
        "nodesleuth_parse": {"seconds": round(ns_wall, 3), "samples_per_s": round(n / ns_wall)},
        "stackcollapse_perf_pl_real_perl": {
            "seconds": round(pl_wall, 3), "samples_per_s": round(n / pl_wall), "script": a.stackcollapse,
            "script_sha256": hashlib.sha256(open(a.stackcollapse, "rb").read()).hexdigest(), "options": ["--kernel"],
            "repeat": 1} if pl_wall else {"skipped": NOT_INSTALLABLE},
        "nodesleuth_heatmap_and_flame_after_parse": {"seconds": round(ns_q_wall, 3)},
        "ratios": {
            "vs_flamescope_heatmap_pass": round(fs_heat_wall / ns_wall, 2),
            "vs_flamescope_heatmap_plus_flamegraph": round((fs_heat_wall + fs_fg_wall) / (ns_wall + ns_q_wall), 2),
            "vs_stackcollapse_perf_pl_reimplemented": round(sc_wall / ns_wall, 2),
            **({"vs_real_stackcollapse_perf_pl": round(pl_wall / ns_wall, 2)} if pl_wall else {}),
        },
        "checks": {"flamescope_nonidle": len(offs), "flamescope_tree_total": fs_tree["v"],
                   "stackcollapse_total": sum(sc.values())},
        "note": "one parse gives nodesleuth every later query (any range, CPU, pid) without re-reading text; "
                "FlameScope re-reads the file for each flame graph",
    }
    return emit(r)


if __name__ == "__main__":
    main()
