"""Runs INSIDE the VM: measures the lab's reclaim cost curve in two data directories and shows whether the
data loader's reads are really cached (charged) and reclaimed there: tmpfs (overlay upper) vs ext4.

usage: python lab_curve.py RATE POINTS DIR[,DIR...] [PERF_SECONDS [LRU_GEN]]

LRU_GEN: write it to /sys/kernel/mm/lru_gen/enabled first (0 = MGLRU off, to compare).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nodesleuth.lab import run as lr
from nodesleuth.lab.systemd import remove_cgroup_tree
from nodesleuth.node.cgroupfs import Memcg


def stat(path: str) -> dict:
    out = {}
    for ln in open(path):
        k, v = ln.split()
        out[k] = int(v)
    return out


def main() -> None:
    rate = float(sys.argv[1])
    points = [int(x) for x in sys.argv[2].split(",")]
    dirs = sys.argv[3].split(",")
    perf_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0
    if len(sys.argv) > 5:
        with open("/sys/kernel/mm/lru_gen/enabled", "w") as f:
            f.write(sys.argv[5])
    print(json.dumps({"lru_gen": open("/sys/kernel/mm/lru_gen/enabled").read().strip(),
                      "kernel": os.uname().release}), flush=True)
    mc = Memcg()
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        parent, rjob = "nl-cost", "nl-cost/kubepods/job"
        state = os.path.join(d, "state")
        data = os.path.join(d, "data.bin")
        lr._sparse(data)
        lr._mount_tmpfs(state)
        job = mc.make(rjob)
        mc.make(parent + "/docker", children=True)
        made = 0
        try:
            for n in points:
                mc.set_limit(parent, None)
                t = time.time()
                lr._make_zombies(parent, state, n - made)
                made = n
                build = time.time() - t
                lr._limit(mc, parent, rjob)
                p = lr._dataloader(job, 1, data, rate, 0, (points.index(n) + 1) * 20480)
                try:
                    lr._reading(p)
                    t0 = time.time()  # measure only once the limit is reached and reclaim runs
                    while stat(mc.path(parent) + "/memory.stat")["pgscan"] == 0 and time.time() - t0 < 40:
                        time.sleep(0.2)
                    m0 = stat(mc.path(parent) + "/memory.stat")
                    s0, r0 = lr._stime(p.pid), lr._rchar(p.pid)
                    time.sleep(3)
                    s1, r1 = lr._stime(p.pid), lr._rchar(p.pid)
                    m1 = stat(mc.path(parent) + "/memory.stat")
                    perf = ""
                    if perf_s and n == points[-1]:
                        subprocess.run(["perf", "record", "-q", "-a", "-g", "-o", "/root/perf.data", "--",
                                        "sleep", str(perf_s)], capture_output=True)
                        perf = subprocess.run(["perf", "report", "-i", "/root/perf.data", "--stdio", "--no-children",
                                               "--sort", "sym", "-g", "none", "--percent-limit", "1"],
                                              capture_output=True, text=True).stdout[-5000:]
                finally:
                    p.kill()
                    p.wait()
                mb = max(1.0, (r1 - r0) / (1 << 20))
                row = {"dir": d, "zombies": n, "build_s": round(build, 1), "mb": round(mb, 1),
                       "wait_s": round(time.time() - t0 - 3, 1), "sys_ms_per_mb": round(1000 * (s1 - s0) / mb, 3),
                       "job_current_mb": round(mc.usage(rjob) / (1 << 20), 1),
                       "delta": {k: m1.get(k, 0) - m0.get(k, 0) for k in ("pgscan", "pgsteal", "pgscan_direct",
                                                                          "pgsteal_direct", "pgfault", "file")}}
                print(json.dumps(row), flush=True)
                if perf:
                    print(perf, flush=True)
        finally:
            mc.set_limit(parent, None)
            lr._clear_tmpfs(state)
            remove_cgroup_tree(mc.path(parent))


if __name__ == "__main__":
    main()
