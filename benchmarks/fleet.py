"""Fleet drift analysis over 10,000 snapshots: wall time of `nodesleuth fleet DIR` (load + rank),
and the in-process ranking alone. Issue 7's bar: 10,000 snapshots in seconds."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.common import emit
from nodesleuth.fleet import drift
from nodesleuth.lab.fleetgen import make_fleet, write_fleet


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=10000)
    a = ap.parse_args(argv)
    d = tempfile.mkdtemp(prefix="ns-bench-fleet-")
    try:
        write_fleet(d, a.hosts)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "nodesleuth", "fleet", d, "--json"], capture_output=True, text=True)
        cli = time.perf_counter() - t
        snaps = make_fleet(a.hosts)
        t = time.perf_counter()
        ranked, na, nh = drift.rank(snaps)
        rank_s = time.perf_counter() - t
        ok = p.returncode == 0 and '"unit ecs.service enabled+crash-looping"' in p.stdout
        return emit({"benchmark": "fleet", "hosts": a.hosts, "cli_seconds": round(cli, 3),
                     "rank_seconds": round(rank_s, 3), "hosts_per_s": round(a.hosts / cli),
                     "top_feature": ranked[0].feature, "found_cause": ok})
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
