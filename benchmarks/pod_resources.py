"""What the DaemonSet's recorder container needs: its CPU and memory, measured, then sized for 96 CPUs.

Runs the recorder exactly as deploy/kubernetes/daemonset.yaml does (`record --root / --systemd-pid 1
... --profile`, the churn trace on) in a memory cgroup of its own, as a container would be, beside
`perf record -a -g -F 49` (the profiler users compare with) and `sadc 1` in cgroups of their own, in
the same run. Memory is the cgroup's peak (v1 memory.max_usage_in_bytes, v2 memory.peak): what a
container limit is checked against, page cache of the store included. CPU is the process tree's
user+sys (wait4).

The 96-CPU figures are derived, each from a measurement and said how: the recorder's steady CPU at
96 CPUs from benchmarks/results/recorder_overhead.json (the 96-CPU / 70k-memcg fixture), the
profiler's from benchmarks/results/profile_cost.json's µs per sample at 96 x 49 Hz, the per-CPU ring buffers from
profile/ringbuf.ring_pages (allocated per CPU), the rest as measured here.

    python -m benchmarks.pod_resources [--seconds 120]
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

from benchmarks.common import emit
from nodesleuth.node.cgroupfs import Memcg, remove_cgroup_tree
from nodesleuth.profile.ringbuf import ring_pages

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def _peak(mc: Memcg, path: str) -> int | None:
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        try:
            with open(os.path.join(path, name)) as f:
                return int(f.read())
        except OSError:
            continue
    return None


class InCgroup:
    """A command in a fresh memory cgroup of its own (as a container is), measured at finish()."""

    def __init__(self, mc: Memcg, name: str, cmd: list[str], env: dict | None = None):
        self.mc, self.cmd = mc, cmd
        self.path = mc.make(f"nodesleuth-bench-pod-{os.getpid()}/{name}")
        procs = os.path.join(self.path, "cgroup.procs")
        self.t0 = time.time()
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env={**os.environ, **(env or {})},
                                  preexec_fn=lambda: open(procs, "w").write(str(os.getpid())))
        self.samples: list[int] = []
        self._stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        usage = os.path.join(self.path, "memory.current" if self.mc.version == 2 else "memory.usage_in_bytes")
        while not self._stop.wait(1.0):
            try:
                with open(usage) as f:
                    self.samples.append(int(f.read()))
            except OSError:
                pass

    def stop(self, sig: int = 15) -> dict:
        self.p.send_signal(sig)
        _, status, ru = os.wait4(self.p.pid, 0)
        self._stop.set()
        wall = time.time() - self.t0
        cpu = ru.ru_utime + ru.ru_stime
        s = sorted(self.samples[len(self.samples) // 4:]) or [0]  # steady: after the first quarter
        return {"cmd": " ".join(self.cmd[:10]), "wall_s": round(wall, 1), "cpu_s": round(cpu, 3),
                "cpu_pct_of_core": round(100 * cpu / wall, 3), "peak_mb": round((_peak(self.mc, self.path) or 0) / 2**20, 1),
                "steady_median_mb": round(s[len(s) // 2] / 2**20, 1), "rc": os.waitstatus_to_exitcode(status),
                "stderr": self.p.stderr.read().decode(errors="replace")[-300:]}


def _load(name: str) -> dict | None:
    try:
        with open(os.path.join(RESULTS, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0)
    a = ap.parse_args()
    mc = Memcg()
    work = tempfile.mkdtemp(prefix="ns-bench-pod-", dir="/var/tmp")
    top = mc.path(f"nodesleuth-bench-pod-{os.getpid()}")
    runs = {}
    try:
        ns = [sys.executable, "-m", "nodesleuth", "record", "--root", "/", "--systemd-pid", "1", "--store",
              os.path.join(work, "store"), "--tier-1s", "3d", "--tier-10s", "30d", "--tier-1m", "365d",
              "--max-size", "2G", "--quiet", "--profile"]
        procs = {"recorder": InCgroup(mc, "recorder", ns),
                 "perf_record": InCgroup(mc, "perf", ["perf", "record", "-a", "-g", "-F", "49", "-q", "-o",
                                                      os.path.join(work, "perf.data")]),
                 "sadc": InCgroup(mc, "sadc", ["/usr/lib/sysstat/sadc", "-S", "XALL", "1", os.path.join(work, "sa")])}
        time.sleep(a.seconds)
        for k, p in procs.items():
            runs[k] = p.stop(2 if k == "perf_record" else 15)
    finally:
        remove_cgroup_tree(top)
        shutil.rmtree(work, ignore_errors=True)

    cpus = os.cpu_count() or 1
    rec = runs["recorder"]
    # 96 CPUs, derived from measurements (module docstring)
    ro = (_load("recorder_overhead.json") or {}).get("runs", {}).get("nodesleuth_fixture", {})
    pc = (_load("profile_cost.json") or {}).get("us_per_sample", {}).get("nodesleuth_direct_after", {})
    fixture_pct, fixture_rss = ro.get("cpu_pct_of_core"), ro.get("max_rss_mb")
    us = pc.get("96cpu_rate_end_to_end")
    rings_mb = (96 - cpus) * (ring_pages(49) + 1) * 4096 / 2**20
    at96 = {"recorder_cpu_pct_fixture_96": fixture_pct, "recorder_rss_mb_fixture_96": fixture_rss,
            "profiler_us_per_sample_end_to_end": us,
            "profiler_cpu_pct_96": None if us is None else round(96 * 49 * us / 1e4, 2),
            "rings_extra_mb_96": round(rings_mb, 1)}
    if fixture_pct is not None and us is not None:
        at96["cpu_pct_96"] = round(fixture_pct + at96["profiler_cpu_pct_96"], 2)
    if fixture_rss is not None:
        # the container's peak here, with the recorder's own growth at 96 CPUs / 70k memcgs (fixture RSS less
        # this run's recorder RSS is not separable from a cgroup peak: the fixture's whole RSS is added as an
        # upper bound of that growth) and the rings of the 94 more CPUs
        at96["memory_peak_mb_96"] = round(rec["peak_mb"] + fixture_rss + rings_mb, 1)
    emit({"benchmark": "pod_resources", "seconds": a.seconds, "runs": runs, "at_96_cpus": at96,
          "ratios": {"recorder_cpu_vs_perf_record": _ratio(rec["cpu_s"], runs["perf_record"]["cpu_s"]),
                     "recorder_cpu_vs_sadc": _ratio(rec["cpu_s"], runs["sadc"]["cpu_s"]),
                     "recorder_peak_vs_perf_record": _ratio(rec["peak_mb"], runs["perf_record"]["peak_mb"])}})


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


if __name__ == "__main__":
    main()
