"""Runs INSIDE a VM of the kernel matrix (cgroup v2): does a dying memory cgroup hold one of the 65,535
memcg IDs (MEM_CGROUP_ID_MAX, include/linux/memcontrol.h), and does one pinned by swap?

usage: python memcg_ids.py DISK_DIR [--swap] [--hold SECONDS_CMD]

1. fill: mkdir live memory cgroups under /sys/fs/cgroup/idt until mkdir fails; the errno and how many
   fit are the kernel's answer for live ones (nothing assumed: every mkdir is a real one).
2. dying: at the limit, rmdir K empty live ones (their IDs go back), mkdir K new ones, charge each
   a 4 KiB file on the ext4 scratch disk (DISK_DIR, page cache + a dirtied inode: what keeps a removed
   memcg dying on every kernel of the matrix, 7.2 included) and a tmpfs page, rmdir them, wait until
   the kernel says they are dying (cgroup.stat), then count how many mkdirs fit again: 0 -> a dying
   memcg keeps its ID; K -> its ID was released at offline.
3. swap (--swap, needs a swap file on DISK_DIR): the same with K memcgs whose tmpfs pages were pushed
   to swap (memory.max below the file's size), so each swap entry records the memcg's ID.
4. --hold CMD: at the limit (step 1's state), run CMD with sh and put its exit code and output in the
   JSON (the VM test runs `nodesleuth check` there), then clean up.
Prints one JSON object.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

V2 = "/sys/fs/cgroup"
TOP = f"{V2}/idt"
K = 200
CAP = 70000


T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[memcg_ids {time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def memory_line() -> dict:
    for line in open("/proc/cgroups"):
        f = line.split()
        if f and f[0] == "memory":
            return {"hierarchy": int(f[1]), "num_cgroups": int(f[2]), "enabled": int(f[3])}
    return {}


def stat(path: str) -> dict[str, int]:
    out = {}
    for line in open(f"{path}/cgroup.stat"):
        k, v = line.split()
        out[k] = int(v)
    return out


def dying_memory(path: str) -> int:
    s = stat(path)
    return s.get("nr_dying_subsys_memory", s["nr_dying_descendants"])


def mkdir_until_fail(prefix: str, limit: int) -> tuple[int, str | None]:
    n = 0
    while n < limit:
        try:
            os.mkdir(f"{TOP}/{prefix}{n}")
        except OSError as e:
            return n, errno.errorcode.get(e.errno, str(e.errno))
        n += 1
        if n % 10000 == 0:
            log(f"{n} mkdirs of {prefix}")
    return n, None


def settle_mkdir(prefix: str, want: int, tries: int = 20) -> tuple[int, str | None]:
    """mkdir up to `want` under prefix, retrying a failed one (an rmdir'd memcg's ID goes back at its
    offline, which runs after an RCU grace period)."""
    n, err = 0, None
    for _ in range(tries):
        m, err = mkdir_until_fail_from(prefix, n, want)
        n = m
        if n >= want:
            return n, None
        time.sleep(0.5)
    return n, err


def mkdir_until_fail_from(prefix: str, start: int, want: int) -> tuple[int, str | None]:
    n = start
    while n < want:
        try:
            os.mkdir(f"{TOP}/{prefix}{n}")
        except OSError as e:
            return n, errno.errorcode.get(e.errno, str(e.errno))
        n += 1
    return n, None


def charge(path: str, disk: str, tag: str, tmpfs_kib: int = 4, limit: int | None = None) -> None:
    """Move this process into `path`, write the files that keep it dying, come back."""
    if limit is not None:  # a child charges the tmpfs pages under the limit (this Python would be OOM-killed)
        open(f"{path}/memory.max", "w").write(str(limit))
        subprocess.run(["sh", "-c", f"echo $$ > {path}/cgroup.procs && exec dd if=/dev/urandom "
                        f"of=/dev/shm/{tag} bs=64k count={tmpfs_kib // 64}"], check=True, capture_output=True)
        return
    open(f"{path}/cgroup.procs", "w").write(str(os.getpid()))
    try:
        with open(f"{disk}/{tag}", "wb") as f:
            f.write(b"x" * 4096)
        with open(f"/dev/shm/{tag}", "wb") as f:
            chunk = os.urandom(4096)
            for _ in range(tmpfs_kib // 4):
                f.write(chunk)
    finally:
        open(f"{TOP}/self/cgroup.procs", "w").write(str(os.getpid()))


def rmdir_all(prefix: str, n: int, start: int = 0) -> None:
    for i in range(start, n):
        try:
            os.rmdir(f"{TOP}/{prefix}{i}")
        except FileNotFoundError:
            pass


def wait_dying(want: int, seconds: float = 30) -> int:
    t = time.monotonic() + seconds
    d = dying_memory(TOP)
    while d < want and time.monotonic() < t:
        time.sleep(0.5)
        d = dying_memory(TOP)
    return d


def probe_ids(prefix: str, k: int, disk: str, out: dict, key: str, tmpfs_kib: int = 4,
              limit: int | None = None) -> None:
    """At the limit: free K IDs, make K memcgs that stay dying, rmdir them, count the mkdirs that fit."""
    rmdir_all("l", out["live_filled"], out["live_filled"] - k)
    out["live_filled"] -= k
    made, err = settle_mkdir(prefix, k)
    r = {"freed_live": k, "made": made, "made_error": err}
    t0 = time.monotonic()
    for i in range(made):
        charge(f"{TOP}/{prefix}{i}", disk, f"{prefix}{i}", tmpfs_kib, limit)
    if limit is not None:
        r["swap_used_kib"] = swap_used()
    rmdir_all(prefix, made)
    r["dying_after"] = wait_dying(out["dying_before"] + made)
    time.sleep(3)  # offline runs after an RCU grace period: give any ID release time to happen
    r["dying_settled"] = dying_memory(TOP)
    fit, err = mkdir_until_fail(prefix + "p", k + 10)
    r["mkdir_fit_after"] = fit
    r["mkdir_error"] = err
    r["tracked"] = memory_line().get("num_cgroups")
    r["cgroup_stat"] = stat(V2)
    r["seconds"] = round(time.monotonic() - t0, 1)
    r["dying_hold_id"] = fit < made // 2
    log(f"{key}: {r}")
    out[key] = r
    # back to the limit for the next probe: the probe's own mkdirs stay, and more fill what is free
    more, _ = mkdir_until_fail(prefix + "f", CAP)
    out.setdefault("refill", []).append((prefix, fit, more))


def swap_used() -> int:
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        m[k] = int(v.split()[0])
    return m["SwapTotal"] - m["SwapFree"]


def swapon(disk: str) -> str | None:
    sw = f"{disk}/swapfile"
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={sw}", "bs=1M", "count=128"], check=True,
                       capture_output=True)
        os.chmod(sw, 0o600)
        subprocess.run(["mkswap", sw], check=True, capture_output=True)
        subprocess.run(["swapon", sw], check=True, capture_output=True, text=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        return f"swap not available: {getattr(e, 'stderr', '') or e}".strip()
    return None


def main() -> int:
    disk = sys.argv[1]
    want_swap = "--swap" in sys.argv
    hold = sys.argv[sys.argv.index("--hold") + 1] if "--hold" in sys.argv else None
    out: dict = {"kernel": os.uname().release}
    open(f"{V2}/cgroup.subtree_control", "w").write("+memory")
    os.makedirs(TOP, exist_ok=True)
    open(f"{TOP}/cgroup.procs", "w").write(str(os.getpid()))
    os.makedirs(f"{TOP}/self", exist_ok=True)
    open(f"{TOP}/self/cgroup.procs", "w").write(str(os.getpid()))
    open(f"{TOP}/cgroup.subtree_control", "w").write("+memory")
    out["before"] = memory_line()
    out["dying_before"] = dying_memory(V2)
    t0 = time.monotonic()
    n, err = mkdir_until_fail("l", CAP)
    out["live_filled"] = n  # the probes below take theirs off this count (the live ones they rmdir)
    out["filled"] = n
    out["fill_error"] = err
    out["fill_seconds"] = round(time.monotonic() - t0, 1)
    out["at_limit"] = memory_line()
    st = stat(V2)  # 6.12+: the memory csses themselves (7.2's /proc/cgroups has no num_cgroups)
    out["at_limit_cgroup_stat"] = st
    out["ids_used_at_limit"] = (st["nr_subsys_memory"] if "nr_subsys_memory" in st  # the root's own included
                                else out["at_limit"].get("num_cgroups"))
    log(f"filled: {n} live, {err}")
    if hold:
        p = subprocess.run(hold, shell=True, capture_output=True, text=True)
        out["hold"] = {"rc": p.returncode, "stdout": p.stdout[-20000:], "stderr": p.stderr[-4000:]}
    else:
        probe_ids("d", K, disk, out, "dying_pagecache")
        if want_swap:
            why = swapon(disk)
            if why:
                out["swap"] = why
            else:
                # 1 MiB of tmpfs per memcg under a 512 KiB memory.max: most of it goes to swap
                probe_ids("s", K // 4, disk, out, "dying_swap", tmpfs_kib=1024, limit=524288)
    t0 = time.monotonic()
    for prefix, fit, more in out.get("refill", []):
        rmdir_all(prefix + "p", fit)
        rmdir_all(prefix + "f", more)
    rmdir_all("l", out["live_filled"])
    out["cleanup_seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
