"""perf-script ingest speed, side by side in one run on the same text: nodesleuth's parser vs
FlameScope's algorithm (heatmap pass and flame-graph pass, re-implemented: FlameScope is a web app) and
stackcollapse-perf.pl, both its re-implementation and the real Perl script (tests/vendor/flamegraph).

Prints samples/s for each (best of 3 runs each) and the ratios. Issue 4's bar: nodesleuth's parse
>= 5x FlameScope's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

from benchmarks.common import emit
from benchmarks.reference import flamescope, stackcollapse
from fixtures.perfscript import make_capture
from nodesleuth.profile.parse import parse_file
from nodesleuth.profile.query import Filter, Samples, folded, heatmap


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
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        path = a.file or os.path.join(d, "cap.txt")
        if not a.file:
            make_capture(path, cpus=a.cpus, seconds=a.seconds)
        size = os.path.getsize(path)
        (st, en, offs), fs_heat_wall, fs_heat_cpu = timed(flamescope.read_offsets, path)
        fs_tree, fs_fg_wall, fs_fg_cpu = timed(flamescope.generate_flame_graph, path, None, None)
        sc, sc_wall, sc_cpu = timed(stackcollapse.collapse_file, path)
        b, ns_wall, ns_cpu = timed(parse_file, path)
        real = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "vendor",
                            "flamegraph", "stackcollapse-perf.pl")
        _, pl_wall, _ = timed(lambda: subprocess.run(["perl", real, "--kernel", path], capture_output=True,
                                                     check=True), repeat=1)
        n = len(b)
        s = as_samples(b)
        _, ns_q_wall, _ = timed(lambda: (heatmap(s, Filter()), folded(s, Filter())))
    r = {
        "benchmark": "perf_parse", "file_mb": round(size / 1e6, 1), "samples": n,
        "flamescope_heatmap_pass": {"seconds": round(fs_heat_wall, 3), "samples_per_s": round(n / fs_heat_wall)},
        "flamescope_flamegraph_pass": {"seconds": round(fs_fg_wall, 3), "samples_per_s": round(n / fs_fg_wall)},
        "stackcollapse_perf": {"seconds": round(sc_wall, 3), "samples_per_s": round(n / sc_wall)},
        "nodesleuth_parse": {"seconds": round(ns_wall, 3), "samples_per_s": round(n / ns_wall)},
        "stackcollapse_perf_pl_real_perl": {"seconds": round(pl_wall, 3), "samples_per_s": round(n / pl_wall)},
        "nodesleuth_heatmap_and_flame_after_parse": {"seconds": round(ns_q_wall, 3)},
        "ratios": {
            "vs_flamescope_heatmap_pass": round(fs_heat_wall / ns_wall, 2),
            "vs_flamescope_heatmap_plus_flamegraph": round((fs_heat_wall + fs_fg_wall) / (ns_wall + ns_q_wall), 2),
            "vs_stackcollapse_perf": round(sc_wall / ns_wall, 2),
            "vs_real_stackcollapse_perf_pl": round(pl_wall / ns_wall, 2),
        },
        "checks": {"flamescope_nonidle": len(offs), "flamescope_tree_total": fs_tree["v"],
                   "stackcollapse_total": sum(sc.values())},
        "note": "one parse gives nodesleuth every later query (any range, CPU, pid) without re-reading text; "
                "FlameScope re-reads the file for each flame graph",
    }
    return emit(r)


if __name__ == "__main__":
    main()
