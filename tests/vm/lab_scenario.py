"""Runs INSIDE the VM (pure cgroup v2): `nodesleuth lab run` with a real systemd in a PID namespace,
then `explain` on its recording, then `lab clean`; prints one JSON object with all of it.

usage: python lab_scenario.py ZOMBIES CURVE RATE SECONDS CPU [WORKDIR]

WORKDIR must be on a disk filesystem (the VM's ext4 scratch disk): holes of a sparse file on the guest's
tmpfs-backed overlays are read as the zero page, charge nothing and never go through reclaim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from nodesleuth.node.cgroupfs import Memcg

WORK = "/run/disk/nodesleuth-lab"  # not /tmp: the namespace's systemd has a private /tmp


T0 = time.monotonic()


def ns(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """nodesleuth ARGS; its stderr is also passed through, stamped with the guest's seconds since start
    (the host reads the guest's stderr file while the VM runs: where a slow run spends its time)."""
    print(f"[{time.monotonic() - T0:6.0f}s] nodesleuth {' '.join(args[:2])}", file=sys.stderr, flush=True)
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    err: list[str] = []

    def tee() -> None:
        for line in p.stderr:
            err.append(line)
            print(f"[{time.monotonic() - T0:6.0f}s]   {line.rstrip()}", file=sys.stderr, flush=True)

    import threading

    th = threading.Thread(target=tee, daemon=True)
    th.start()
    out = p.stdout.read()
    p.wait(timeout=timeout)
    th.join(10)
    return subprocess.CompletedProcess(p.args, p.returncode, out, "".join(err))


def profile_batches(store: str, cpu: int) -> list | str:
    """What the continuous profiler stored: per minute, samples in all and on the lab's CPU (so a test
    that finds no profile of the hot window can tell dropped chunks from a profiler that stopped)."""
    try:
        from nodesleuth.profile.load import load
        from nodesleuth.store.store import StoreReader

        s = load(StoreReader(store), None, None)
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"{type(e).__name__}: {e}"
    out: dict = {}
    for t, c in zip(s.t.tolist(), s.cpu.tolist()):
        m = out.setdefault(int(t // 10 * 10), [0, 0])
        m[0] += 1
        m[1] += c == cpu
    return sorted([k, *v] for k, v in out.items())


def incident_samples(store: str, doc) -> list | str:
    """Per incident: profile samples on its CPU within it, read as explain reads them."""
    try:
        from nodesleuth.profile.load import load
        from nodesleuth.store.store import StoreReader

        out = []
        for inc in (doc or {}).get("incidents", []):
            cpu = inc["links"][1]["data"].get("cpu")
            s = load(StoreReader(store), inc["start"] - 60, inc["end"] + 0.001)
            m = (s.t >= inc["start"]) & (s.t <= inc["end"])
            out.append([inc["start"], inc["end"], cpu, len(s), int(m.sum()), int((m & (s.cpu == cpu)).sum())])
        return out
    except Exception as e:  # noqa: BLE001 - diagnostics only
        return f"{type(e).__name__}: {e}"


def main() -> None:
    global WORK
    zombies, curve, rate, seconds, cpu = sys.argv[1:6]
    WORK = sys.argv[6] if len(sys.argv) > 6 else WORK
    out: dict = {"lru_gen": open("/sys/kernel/mm/lru_gen/enabled").read().strip(), "kernel": os.uname().release,
                 "memcgs_before": Memcg().count()}
    t = time.monotonic()
    p = ns("lab", "run", "--workdir", WORK, "--zombies", zombies, "--curve", curve, "--rate", rate,
           "--seconds", seconds, "--cpu", cpu, "--per-start", "500", "--restart-sec", "100ms", "--min-growth", os.environ.get("LAB_MIN_GROWTH", "3"))
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
    p = ns("dump", "--store", f"{WORK}/store", "--format", "json")  # per tick: every CPU's busy/sys %
    try:
        rows = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
        out["ticks"] = [{c: (v.get("busy"), v.get("sys")) for c, v in r["cpus"].items()} for r in rows]
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        out["ticks"] = f"dump rc {p.returncode}: {e}: {p.stderr[-300:]}"
    p = ns("explain", "--store", f"{WORK}/store")
    out["explain_text"] = p.stdout[-6000:]
    try:
        out["state"] = json.load(open(f"{WORK}/state.json"))
    except OSError:
        out["state"] = None
    try:  # the recorder's own warnings (it writes them there, not to a pipe)
        with open(f"{WORK}/recorder.log", errors="replace") as f:
            out["recorder_log"] = f.read()[-4000:]
    except OSError as e:
        out["recorder_log"] = f"({e})"
    out["profile_batches"] = profile_batches(f"{WORK}/store", int(cpu))
    out["incident_samples"] = incident_samples(f"{WORK}/store", out.get("explain"))
    if os.environ.get("LAB_KEEP_STORE"):  # for a look from the host (debugfs rdump of the VM's disk)
        subprocess.run(["cp", "-a", f"{WORK}/store", "/run/disk/kept-store"], check=False)
    p = ns("lab", "clean", "--workdir", WORK)
    out.update(clean_rc=p.returncode, clean_err=p.stderr[-2000:], memcgs_after=Memcg().count(),
               cgroups_after=sorted(os.path.relpath(dp, "/sys/fs/cgroup") for dp, _, _ in os.walk("/sys/fs/cgroup")
                                    if dp.count("/") <= 6))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
