"""Per-CPU figures against the real mpstat, row by row: `python -m benchmarks.mpstat_agreement [N]`.

Live: N reads of this machine's /proc/stat, 0.25 s apart, while a loop pinned to CPU 0 runs; the
installed mpstat replays them (tests/mpreplay/mpreplay_shim.c: the real binary reads the very same
counters) and nodesleuth computes them; every printed row is compared, intervals, Average and since
boot. Stored: sysstat's regression data and the replayed corpus of tests/data/proctrees.
Prints one JSON object: rows compared and mismatches per corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
sys.path.insert(0, TESTS)

import test_procfs as tp  # noqa: E402  (the comparison helpers the tests use)

from nodesleuth.node.children import spawn

SPIN = "import os; os.sched_setaffinity(0, {0})\nwhile True: pass\n"


def live(n: int) -> dict:
    if not shutil.which("mpstat") or not shutil.which("gcc"):
        return {"skipped": "needs mpstat and gcc"}
    work = tempfile.mkdtemp(prefix="mpstat-agree.")
    try:
        shim = os.path.join(work, "shim.so")
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", shim,
                        os.path.join(TESTS, "mpreplay", "mpreplay_shim.c"), "-ldl"], check=True)
        spin = spawn([sys.executable, "-c", SPIN])
        snaps = []
        try:
            for k in range(n):
                p = os.path.join(work, f"live.{k}")
                shutil.copy("/proc/stat", p)
                snaps.append(p)
                time.sleep(0.25)
        finally:
            spin.kill()
            spin.wait()
        ncpu = sum(1 for x in os.listdir("/sys/devices/system/cpu") if x[3:].isdigit() and x.startswith("cpu"))
        rows, bad = tp.compare(tp.real_mpstat(shim, snaps, ncpu, os.path.join(work, "iv")), tp.stats(snaps), ncpu)
        sb_rows, sb_bad = 0, []
        for k, p in enumerate(snaps):
            r, b = tp.compare(tp.real_mpstat(shim, [p], ncpu, os.path.join(work, f"sb{k}")), tp.stats([p]), ncpu)
            sb_rows, sb_bad = sb_rows + r, sb_bad + b
        return {"snapshots": n, "cpus": ncpu, "interval_and_average_rows": rows, "interval_mismatches": len(bad),
                "since_boot_rows": sb_rows, "since_boot_mismatches": len(sb_bad), "examples": (bad + sb_bad)[:5]}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def stored() -> dict:
    D = tp.D
    out = {}
    r1, b1 = tp.compare(tp.read(os.path.join(D, "sysstat", "expected.mpstat")), tp.stats(tp.SYSSTAT_ROOTS[:1]), 9)
    r2, b2 = tp.compare(tp.read(os.path.join(D, "sysstat", "expected.mpstat-A")), tp.stats(tp.SYSSTAT_ROOTS[:3]), 9)
    r3, b3 = tp.compare(tp.read(os.path.join(D, "sysstat", "expected.mpstat-H")), tp.stats(tp.SYSSTAT_ROOTS), None)
    out["sysstat_expected"] = {"rows": r1 + r2 + r3, "mismatches": len(b1 + b2 + b3)}
    rows, bad = 0, 0
    for case in tp.ORACLE_CASES:
        r, b = tp.compare(tp.read(os.path.join(case, "mpstat-P_ALL.expected")), tp.stats(tp._snaps(case)),
                          int(tp.read(os.path.join(case, "NCPU"))))
        rows, bad = rows + r, bad + len(b)
    for case in tp.ORACLE_NAMED:
        s = tp.stats(tp._snaps(case))
        for name, sn in (("interval", s), ("since-boot", s[:1])):
            r, b = tp.compare(tp.read(os.path.join(case, f"mpstat-P_ALL.{name}.expected")), sn, None)
            rows, bad = rows + r, bad + len(b)
    out["mpstat_12.6.1_replayed_sequences"] = {"rows": rows, "mismatches": bad}
    rows, bad = 0, 0
    for tree in ("node_exporter", "procfs"):
        r, b = tp.compare(tp.read(os.path.join(D, "mpstat-replays", f"{tree}.since-boot.txt")),
                          tp.stats([os.path.join(D, tree, "proc", "stat")]), None)
        rows, bad = rows + r, bad + len(b)
    h = os.path.join(D, "here-20261203")
    s = tp.stats([os.path.join(h, f"snap{k}", "proc", "stat") for k in (0, 1)])
    r, b = tp.compare(tp.read(os.path.join(h, "mpstat-replay-P_ALL-snap0-snap1.txt")), s, 2)
    out["fixture_and_recorded_trees"] = {"rows": rows + r, "mismatches": bad + len(b)}
    return out


def main() -> dict:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    return {"benchmark": "mpstat_agreement", "mpstat": subprocess.run(["mpstat", "-V"], capture_output=True,
                                                                     text=True).stdout.split("\n")[0]
            if shutil.which("mpstat") else None, "live": live(n), **stored()}


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
