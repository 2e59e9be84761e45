#!/usr/bin/env python3
"""Exactly which of a command's memory cgroups stay dying, on any host (cgroup v1 too).

Runs CMD N times while `perf record` traces cgroup:cgroup_mkdir/rmdir/release, waits --settle s, and
pairs each memory cgroup created under a `nodesleuth-*-PID` tree of one of *these* runs (PID: the run's
process) with its release: a cgroup is released when the kernel frees it, so one removed and not
released is dying. Other jobs' cgroups (a shared host) are not counted. Also prints the node-wide
dying count (/proc/cgroups num_cgroups minus directories) before and after, for comparison.

usage: zombie_watch.py [-n N] [--settle S] -- CMD ...      (root; perf with tracepoints)
Used for docs/probes.md's zero-zombie evidence.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from nodesleuth.node.children import spawn

EV = re.compile(r"cgroup:cgroup_(mkdir|rmdir|release): root=(\d+) id=(\d+) level=\d+ path=(\S*)")


def memory_root() -> int:
    for line in open("/proc/cgroups"):
        p = line.split()
        if p and p[0] == "memory":
            return int(p[1])
    raise SystemExit("/proc/cgroups: no memory controller")


def dying_now(mount: str = "/sys/fs/cgroup/memory") -> int:
    n = next(int(line.split()[2]) for line in open("/proc/cgroups") if line.startswith("memory"))
    return n - sum(1 for _ in os.walk(mount))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1)
    ap.add_argument("--settle", type=float, default=45.0)
    ap.add_argument("--log", help="append each run's output here")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the text")
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    hier = memory_root()
    data = tempfile.mktemp(prefix="zombie-watch-", suffix=".data")
    # perf and the runs die with this script, SIGKILL included (node/children.spawn: PR_SET_PDEATHSIG)
    perf = spawn(["perf", "record", "-q", "-e", "cgroup:cgroup_mkdir,cgroup:cgroup_rmdir,"
                  "cgroup:cgroup_release", "-a", "-o", data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    before = dying_now()
    pids, t0 = [], time.monotonic()
    for _ in range(a.n):
        p = spawn(a.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pids.append(p.pid)
        out, _ = p.communicate()
        if a.log:
            with open(a.log, "a") as f:
                f.write(f"--- pid {p.pid} exit {p.returncode}\n{out}")
    wall = time.monotonic() - t0
    time.sleep(a.settle)
    after = dying_now()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    out = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True).stdout
    os.unlink(data)
    mine = tuple(f"-{p}" for p in pids)
    made, removed, released = {}, set(), set()
    for m in EV.finditer(out):
        ev, root, cid, path = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if root != hier:
            continue
        if ev == "mkdir":
            top = path.strip("/").split("/")[0]
            if top.startswith("nodesleuth-") and top.endswith(mine):
                made[cid] = path
        elif ev == "rmdir":
            removed.add(cid)
        else:
            released.add(cid)
    left = sorted(p for c, p in made.items() if c not in released)
    if a.json:
        import json

        print(json.dumps({"runs": a.n, "wall_s": round(wall, 2), "made": len(made),
                          "removed": len(removed & made.keys()), "released": len(released & made.keys()),
                          "still_dying": left, "settle_s": a.settle, "node_dying_before": before,
                          "node_dying_after": after, "pids": pids}))
        sys.exit(1 if left else 0)
    print(f"runs {a.n} of {' '.join(a.cmd)}: {wall:.1f} s wall ({wall / a.n:.2f} s a run); memory cgroups made "
          f"{len(made)}, removed {len(removed & made.keys())}, released {len(released & made.keys())}, "
          f"still dying after {a.settle:g} s: {len(left)}")
    for p in left[:20]:
        print("  dying:", p)
    print(f"node-wide dying (/proc/cgroups - dirs): before {before}, after {after} (delta {after - before}; other "
          "jobs' cgroups included)")
    sys.exit(1 if left else 0)


if __name__ == "__main__":
    main()
