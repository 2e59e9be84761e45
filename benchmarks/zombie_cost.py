"""What zombie memory cgroups cost on this kernel, as a curve: root memory.stat and memory.numa_stat
read time, Percpu and Slab, against the number of zombies (made for real, then reclaimed)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from benchmarks.common import emit
from nodesleuth.lab import zombies as zl
from nodesleuth.node.cgroupfs import make_zombies
from nodesleuth.lab.run import measure_costs


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args(argv)
    if os.geteuid() != 0 or not os.path.isdir(zl.V1_MEMORY):
        return emit({"benchmark": "zombie_cost", "skipped": "needs root and the cgroup v1 memory controller"})
    parent = f"{zl.V1_MEMORY}/nodesleuth-bench-{os.getpid()}"
    data = tempfile.mkdtemp(prefix="ns-bench-zombies-", dir="/var/tmp")
    curve = [measure_costs()]
    try:
        for i in range(a.steps):
            make_zombies(a.step, parent, data, prefix=f"s{i}-")
            curve.append(measure_costs())
    finally:
        before = zl.memory_num_cgroups()
        t = time.perf_counter()
        zl.clear(parent, data)
        reclaim = time.perf_counter() - t
        shutil.rmtree(data, ignore_errors=True)
        after = zl.memory_num_cgroups()
    base = curve[0]
    last = curve[-1]
    per = max(1, last["zombies"] - base["zombies"])
    return emit({"benchmark": "zombie_cost", "kernel": os.uname().release, "curve": curve,
                 "percpu_bytes_per_zombie": round((last["percpu_bytes"] - base["percpu_bytes"]) / per),
                 "slab_bytes_per_zombie": round((last["slab_bytes"] - base["slab_bytes"]) / per),
                 "memory_stat_ms_ratio_last_vs_first": round(last["memory_stat_ms"] / max(1e-6, base["memory_stat_ms"]), 2),
                 "reclaim": {"seconds": round(reclaim, 3), "tracked_before": before, "tracked_after": after}})


if __name__ == "__main__":
    main()
