"""What the Spawns section (collect/spawns.py) adds to a recorder's second, side by side in one run with
the rest of that second (the record sampler's whole tick: /proc/stat, every process's stat, the
registered sections) and with sysstat's pidstat reading every process once (`pidstat -p ALL`).

Two paths, each timed as CPU time (process_time) of this process over N reads on this live host:
- quiet: fewer than MIN_FORKS started in the second: the counter only (one more line of /proc/stat);
- storm: the listing of /proc and a stat read of each process new since the last listing, measured
  while a pinned `sh -c 'while :; do /bin/true; done'` runs (an exec storm of ~1,000 processes a second
  on this host) and with MIN_FORKS forced to 0 for the quiet baseline's listing cost.

`python -m benchmarks.spawns_cost [--reads 30]` (results in benchmarks/results/spawns_cost.json)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time


def _cpu(fn, n: int, pause: float = 0.0) -> float:
    """Mean CPU seconds of fn() over n calls."""
    tot = 0.0
    for _ in range(n):
        if pause:
            time.sleep(pause)
        t = time.process_time()
        fn()
        tot += time.process_time() - t
    return tot / n


def _pidstat_cpu() -> float | None:
    """CPU seconds (user + sys, from wait4) of one `pidstat -p ALL` (every process's stat read once)."""
    exe = shutil.which("pidstat")
    if exe is None:
        return None
    p = subprocess.Popen([exe, "-p", "ALL"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=30)
    a = ap.parse_args(argv)
    from benchmarks.common import emit
    from nodesleuth.collect import spawns
    from nodesleuth.collect.sampler import Sampler
    from nodesleuth.node.root import Root

    nprocs = sum(1 for x in os.listdir("/proc") if x.isdigit())
    s = Sampler(Root("/"), use="record", kmsg=False)
    s.prime()
    sp = next(c for r, c in s.extra if r.field == "spawns")
    time.sleep(1)
    tick = _cpu(s.tick, a.reads, 0.2)
    keep = spawns.MIN_FORKS
    spawns.MIN_FORKS = 10 ** 9
    quiet = _cpu(lambda: sp.read(1.0), a.reads, 0.05)
    spawns.MIN_FORKS = 0
    sp.read(1.0)  # the baseline listing
    listing = _cpu(lambda: sp.read(1.0), a.reads, 0.05)
    storm = subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do /bin/true; done"])
    try:
        time.sleep(0.5)
        sp.read(1.0)
        during = _cpu(lambda: sp.read(1.0), a.reads, 0.2)
        rows = sp.read(1.0).rows
    finally:
        storm.kill()
        storm.wait()
        spawns.MIN_FORKS = keep
        s.close()
    pid = _pidstat_cpu()
    out = {"benchmark": "spawns_cost", "host_processes": nprocs, "reads": a.reads,
           "cpu_ms": {"sampler_tick": round(1000 * tick, 3), "spawns_quiet": round(1000 * quiet, 3),
                      "spawns_listing_quiet_node": round(1000 * listing, 3),
                      "spawns_listing_exec_storm": round(1000 * during, 3),
                      "pidstat_all_once": None if pid is None else round(1000 * pid, 3)},
           "ratios": {"quiet_to_tick": round(quiet / tick, 4), "listing_to_tick": round(listing / tick, 4),
                      "storm_to_tick": round(during / tick, 4),
                      "storm_to_pidstat": None if not pid else round(during / pid, 4)},
           "storm_rows_caught": len(rows),
           "note": "CPU time of this process; the tick includes the spawns read (record's sampler)"}
    return emit(out)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
