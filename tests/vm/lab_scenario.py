"""Runs INSIDE the VM (pure cgroup v2): `nodesleuth lab run` with a real systemd in a PID namespace,
then `explain` on its recording, then `lab clean`; prints one JSON object with all of it.

usage: python lab_scenario.py ZOMBIES CURVE RATE SECONDS CPU
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

WORK = "/var/lib/nodesleuth-lab"  # the namespace's systemd has a private /tmp


def ns(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodesleuth", *args], capture_output=True, text=True,
                          timeout=timeout)


def main() -> None:
    zombies, curve, rate, seconds, cpu = sys.argv[1:6]
    out: dict = {}
    t = time.monotonic()
    p = ns("lab", "run", "--workdir", WORK, "--zombies", zombies, "--curve", curve, "--rate", rate,
           "--seconds", seconds, "--cpu", cpu, "--per-start", "250", "--restart-sec", "100ms")
    out.update(lab_rc=p.returncode, lab_out=p.stdout, lab_err=p.stderr[-6000:],
               lab_seconds=round(time.monotonic() - t, 1))
    t = time.monotonic()
    p = ns("explain", "--store", f"{WORK}/store", "--json")
    out.update(explain_rc=p.returncode, explain_err=p.stderr[-3000:], explain_seconds=round(time.monotonic() - t, 1))
    try:
        out["explain"] = json.loads(p.stdout)
    except ValueError:
        out["explain"] = None
        out["explain_out"] = p.stdout[-3000:]
    p = ns("explain", "--store", f"{WORK}/store")
    out["explain_text"] = p.stdout[-6000:]
    try:
        out["state"] = json.load(open(f"{WORK}/state.json"))
    except OSError:
        out["state"] = None
    p = ns("lab", "clean", "--workdir", WORK)
    out.update(clean_rc=p.returncode, clean_err=p.stderr[-2000:])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
