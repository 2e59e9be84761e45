"""Runs INSIDE the VM (pure cgroup v2, nothing else making cgroups): N x `check --npd --seconds 1` as NPD
runs it, then M x `check --probe --seconds 1` (both probes each time: the cost probe's batches and the
posture probe's 2 x 50 on tmpfs and on the ext4 scratch disk), and the root's cgroup.stat before and
after: every probe tree is made under the root, so its dying descendants are exact here.

usage: python probe_zombies.py N M STATE_DIR      prints one JSON object
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CG = "/sys/fs/cgroup"


def stat() -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in open(os.path.join(CG, "cgroup.stat")))}


def settle(base: dict, limit: float = 60.0) -> tuple[dict, float]:
    """Freeing is asynchronous: the count once it is back to the baseline, or after `limit` s."""
    t0 = time.monotonic()
    while True:
        s = stat()
        if s["nr_dying_descendants"] <= base["nr_dying_descendants"] or time.monotonic() - t0 > limit:
            return s, round(time.monotonic() - t0, 1)
        time.sleep(0.5)


def runs(n: int, args: list[str]) -> dict:
    walls, codes = [], []
    for _ in range(n):
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "nodesleuth", "check", *args], capture_output=True, text=True)
        walls.append(round(time.monotonic() - t0, 2))
        codes.append(p.returncode)
        if "Traceback" in p.stderr:
            return {"error": p.stderr[-2000:]}
    return {"n": n, "walls": walls, "codes": codes, "last_stdout": p.stdout[-4000:] if n else ""}


def main() -> None:
    n, m, state = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.environ["NODESLEUTH_PROBE_DIR"] = os.environ.get("VMRUN_DISK", "/run/disk")
    base = stat()
    npd = runs(n, ["--npd", "--seconds", "1", "--no-trace-churn", "--state-dir", state])
    after_npd, npd["settle_s"] = settle(base)
    probe = runs(m, ["--json", "--probe", "--seconds", "1", "--no-trace-churn", "--state-dir", state])
    after_probe, probe["settle_s"] = settle(base)
    left = sorted(x for x in os.listdir(CG) if x.startswith("nodesleuth-"))
    doc = json.load(open(os.path.join(state, "probes.json"))) if os.path.exists(os.path.join(state, "probes.json")) else None
    print(json.dumps({"kernel": os.uname().release, "before": base, "after_npd": after_npd, "after_probe": after_probe,
                      "npd": npd, "probe": probe, "trees_left": left, "state": doc,
                      "pins_left": sorted(x for d in ("/dev/shm", os.environ["NODESLEUTH_PROBE_DIR"]) if os.path.isdir(d)
                                          for x in os.listdir(d) if x.startswith("nodesleuth-"))}))


if __name__ == "__main__":
    main()
