"""Runs INSIDE the VM (pure cgroup v2): make real dying memcgs and a pinned busy loop, run nodesleuth
on them, and print what the kernel says beside what nodesleuth says, as one JSON object.

usage: python census_scenario.py ZOMBIES BUSY_CPU WORKDIR

The zombies are made the way a crash-looping unit makes them: a child cgroup, a process in it that
writes a file to tmpfs (the page cache charged to that memcg pins it after rmdir), the process exits,
the cgroup is removed. A live sibling stays, so the parent that holds them is a live cgroup.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CG = "/sys/fs/cgroup"


def stat(path: str) -> dict[str, int]:
    out = {}
    for line in open(os.path.join(path, "cgroup.stat")):
        k, v = line.split()
        out[k] = int(v)
    return out


def meminfo() -> dict[str, int]:
    out = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        out[k] = int(v.split()[0]) * 1024
    return out


def make_zombies(parent: str, n: int, tmp: str) -> None:
    for i in range(n):
        d = os.path.join(parent, f"job-{i}")
        os.mkdir(d)
        pid = os.fork()
        if pid == 0:
            try:
                with open(os.path.join(d, "cgroup.procs"), "w") as f:
                    f.write("0")
                with open(os.path.join(tmp, f"job-{i}"), "wb") as f:
                    f.write(b"x" * 4096)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        os.rmdir(d)


def busy(cpu: int) -> subprocess.Popen:
    code = ("import ctypes, os\n"
            "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
            "ctypes.CDLL(None).prctl(15, b'ns-vmloop', 0, 0, 0)\n"
            f"os.sched_setaffinity(0, {{{cpu}}})\n"
            "while True: pass\n")
    return subprocess.Popen([sys.executable, "-c", code])


def ns(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodesleuth", *args], capture_output=True, text=True,
                          timeout=timeout)


def main() -> None:
    n, cpu, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.makedirs(work, exist_ok=True)
    out: dict = {"cpus_online": os.cpu_count(), "kernel": os.uname().release}
    out["controllers"] = open(f"{CG}/cgroup.controllers").read().split()
    with open(f"{CG}/cgroup.subtree_control", "w") as f:
        f.write("+memory +pids")
    parent = f"{CG}/jobs.slice"
    os.mkdir(parent)
    with open(f"{parent}/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    os.mkdir(f"{parent}/live-job")
    mem0 = meminfo()
    t = time.monotonic()
    make_zombies(parent, n, work)
    out["make_seconds"] = round(time.monotonic() - t, 1)
    mem1 = meminfo()
    out["percpu_per_zombie_bytes"] = (mem1["Percpu"] - mem0["Percpu"]) / n
    out["slab_per_zombie_bytes"] = (mem1["Slab"] - mem0["Slab"]) / n
    out["kernel_root_stat"] = stat(CG)
    out["kernel_parent_stat"] = stat(parent)
    loop = busy(cpu)
    try:
        time.sleep(1)
        p = ns("check", "--json", "--seconds", "5", "--no-trace-churn", "--probe")  # the probes run on request
        out["check_rc"], out["check_err"] = p.returncode, p.stderr[-2000:]
        out["check"] = json.loads(p.stdout) if p.stdout.strip() else None
        # check's Percpu probe made and removed empty memcgs: the kernel frees them asynchronously (seconds
        # under software emulation), so the recording starts once only the zombies are dying again
        t = time.monotonic()
        while stat(CG).get("nr_dying_subsys_memory") != n and time.monotonic() - t < 60:
            time.sleep(0.2)
        out["probe_freed_seconds"] = round(time.monotonic() - t, 1)
        store = os.path.join(work, "store")
        # 15 s: on a busy host a tick of 16 emulated CPUs took 5.9 s (CI of 2026-12-04: one row in 6 s)
        p = ns("record", "--store", store, "--duration", "15s", "--quiet", "--live-every", "2")
        out["record_rc"], out["record_err"] = p.returncode, p.stderr[-2000:]
        p = ns("dump", "--store", store, "--format", "json")
        out["dump_rc"], out["dump_err"] = p.returncode, p.stderr[-2000:]
        out["dump"] = [json.loads(x) for x in p.stdout.splitlines() if x.strip()] if p.returncode == 0 else None
    finally:
        loop.kill()
        loop.wait()
    out["kernel_root_stat_after"] = stat(CG)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
