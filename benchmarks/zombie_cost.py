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
from nodesleuth.model.errors import InputError
from nodesleuth.node.cgroupfs import Memcg, make_zombies


def _meminfo() -> dict[str, int]:
    out = {}
    with open("/proc/meminfo") as f:
        for ln in f:
            k, v = ln.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    return out


def _read_ms(path: str, reps: int = 5) -> float | None:
    """The cheapest of `reps` open+read+close of a file, in ms of this thread's CPU (the kernel's work)."""
    best = None
    for _ in range(reps):
        try:
            t = time.thread_time()
            with open(path, "rb") as f:
                while f.read(1 << 16):
                    pass
            d = (time.thread_time() - t) * 1e3
        except OSError:
            return None
        best = d if best is None else min(best, d)
    return round(best, 4)


def measure_costs(mc: Memcg, baseline: int) -> dict:
    """One point of the curve: memory cgroups the kernel holds above the baseline, Percpu and Slab,
    and what one read of the root memory.stat / memory.numa_stat costs."""
    m = _meminfo()
    return {"zombies": (mc.count() or 0) - baseline, "percpu_bytes": m.get("Percpu", 0), "slab_bytes": m.get("Slab", 0),
            "memory_stat_ms": _read_ms(mc.path("memory.stat")), "numa_stat_ms": _read_ms(mc.path("memory.numa_stat"))}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step", type=int, default=4000)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args(argv)
    try:
        mc = Memcg()
    except InputError as e:
        return emit({"benchmark": "zombie_cost", "skipped": str(e)})
    if os.geteuid() != 0:
        return emit({"benchmark": "zombie_cost", "skipped": "needs root (makes real memory cgroups)"})
    parent = mc.path(f"nodesleuth-bench-{os.getpid()}")
    data = tempfile.mkdtemp(prefix="ns-bench-zombies-", dir="/var/tmp")
    baseline = mc.count() or 0
    curve = [measure_costs(mc, baseline)]
    try:
        for i in range(a.steps):
            make_zombies(a.step, parent, data, prefix=f"s{i}-")
            curve.append(measure_costs(mc, baseline))
    finally:
        before = mc.count()
        t = time.perf_counter()
        zl.clear(parent, data)
        reclaim = time.perf_counter() - t
        shutil.rmtree(data, ignore_errors=True)
        after = mc.count()
    base = curve[0]
    last = curve[-1]
    per = max(1, last["zombies"] - base["zombies"])
    return emit({"benchmark": "zombie_cost", "kernel": os.uname().release, "curve": curve,
                 "percpu_bytes_per_zombie": round((last["percpu_bytes"] - base["percpu_bytes"]) / per),
                 "slab_bytes_per_zombie": round((last["slab_bytes"] - base["slab_bytes"]) / per),
                 "hierarchy": mc.name,
                 "memory_stat_ms_ratio_last_vs_first": round((last["memory_stat_ms"] or 0) / max(1e-6, base["memory_stat_ms"] or 0), 2),
                 "reclaim": {"seconds": round(reclaim, 3), "tracked_before": before, "tracked_after": after}})


if __name__ == "__main__":
    main()
