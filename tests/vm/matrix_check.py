"""Runs INSIDE a VM of the kernel matrix (any kernel, cgroup v1 or v2): make real dying memcgs the way a
crash-looping job does, then put nodesleuth's census, recording and probes beside the kernel's own count.

usage: python matrix_check.py ZOMBIES DISK_DIR

Half the jobs charge a page of tmpfs (/dev/shm), half write a 4 KiB file on the ext4 scratch disk
(DISK_DIR): on 7.2 the kernel reparents the first kind at once and keeps the second dying (a dirtied
inode's writeback reference; tests/vm/README.md "Kernel matrix"), so the kernel's count is what it
says after it settles, never assumed from N. The kernel's own count: v1 = /proc/cgroups memory
num_cgroups minus the directories of the memory hierarchy; v2 = the root's cgroup.stat
nr_dying_subsys_memory (6.12+) or nr_dying_descendants (only memory is enabled below the root here).
Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

V2 = "/sys/fs/cgroup"


def memory_root() -> tuple[str, int]:
    if os.path.isdir(f"{V2}/memory") and os.path.exists(f"{V2}/memory/memory.usage_in_bytes"):
        return f"{V2}/memory", 1
    return V2, 2


def dirs(top: str) -> int:
    return sum(1 for _ in os.walk(top))


def kernel_dying(mroot: str, version: int) -> int:
    if version == 1:
        for line in open("/proc/cgroups"):
            f = line.split()
            if f and f[0] == "memory":
                return int(f[2]) - dirs(mroot)
        raise SystemExit("no memory line in /proc/cgroups")
    st = dict(line.split() for line in open(f"{V2}/cgroup.stat"))
    return int(st.get("nr_dying_subsys_memory", st["nr_dying_descendants"]))


def settled(mroot: str, version: int, quiet: float = 3.0, limit: float = 60.0) -> int:
    """The kernel's count once it has not moved for `quiet` seconds (freeing is asynchronous)."""
    t0 = time.monotonic()
    last, since = kernel_dying(mroot, version), time.monotonic()
    while time.monotonic() - t0 < limit:
        time.sleep(0.25)
        now = kernel_dying(mroot, version)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def meminfo() -> dict[str, int]:
    return {k: int(v.split()[0]) * 1024 for k, v in (line.split(":") for line in open("/proc/meminfo"))}


def make_zombies(parent: str, n: int, where: list[str]) -> None:
    for i in range(n):
        d = os.path.join(parent, f"job-{i}")
        os.mkdir(d)
        pid = os.fork()
        if pid == 0:
            try:
                with open(os.path.join(d, "cgroup.procs"), "w") as f:
                    f.write("0")
                with open(os.path.join(where[i % len(where)], f"job-{i}"), "wb") as f:
                    f.write(b"x" * 4096)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        os.rmdir(d)


def ns(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodesleuth", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def main() -> None:
    n, disk = int(sys.argv[1]), sys.argv[2]
    mroot, version = memory_root()
    out: dict = {"kernel": os.uname().release, "memory_version": version, "cpus_online": os.cpu_count(),
                 "kallsyms_lru_reparent_memcg": any(line.rstrip().endswith(" lru_reparent_memcg")
                                                    for line in open("/proc/kallsyms"))}
    if version == 2:
        with open(f"{V2}/cgroup.subtree_control", "w") as f:
            f.write("+memory")
    parent = f"{mroot}/jobs.slice"
    os.mkdir(parent)
    if version == 2:
        with open(f"{parent}/cgroup.subtree_control", "w") as f:
            f.write("+memory")
    os.mkdir(f"{parent}/live-job")
    shm, dsk = "/dev/shm/jobs", os.path.join(disk, "jobs")
    os.makedirs(shm), os.makedirs(dsk)
    out["before"] = settled(mroot, version)
    mem0 = meminfo()
    t = time.monotonic()
    make_zombies(parent, n, [shm, dsk])
    out["make_seconds"] = round(time.monotonic() - t, 1)
    out["kernel_dying"] = k = settled(mroot, version)
    mem1 = meminfo()
    kept = k - out["before"]
    out["percpu_per_zombie_bytes"] = (mem1["Percpu"] - mem0["Percpu"]) / kept if kept > 0 else None
    out["slab_per_zombie_bytes"] = (mem1["Slab"] - mem0["Slab"]) / kept if kept > 0 else None

    p = ns("check", "--json", "--seconds", "2", "--no-trace-churn", "--probe", env={"NODESLEUTH_PROBE_DIR": disk})
    out["check_rc"], out["check_err"] = p.returncode, p.stderr[-2000:]
    out["check"] = json.loads(p.stdout) if p.stdout.strip() else None
    out["kernel_dying_after_check"] = settled(mroot, version)  # the probes' own memcgs are gone again

    store = "/tmp/matrix-store"
    p = ns("record", "--store", store, "--duration", "8s", "--quiet")
    out["record_rc"], out["record_err"] = p.returncode, p.stderr[-2000:]
    p = ns("dump", "--store", store, "--format", "json")
    out["dump_rc"], out["dump_err"] = p.returncode, p.stderr[-2000:]
    out["dump"] = [json.loads(x) for x in p.stdout.splitlines() if x.strip()] if p.returncode == 0 else None
    out["kernel_dying_end"] = kernel_dying(mroot, version)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
