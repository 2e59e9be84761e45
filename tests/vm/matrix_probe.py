"""Runs INSIDE the VM (stdlib only, any Python 3.9+): the kernel-matrix probes of tests/vm/matrix.py.
Prints one JSON object per line; the last line is the probe's summary.

usage: python matrix_probe.py TOOL PROBE [args]
  TOOL    path of the static zombie_tool binary (zombie_tool.c)
  symbols                       /proc/kallsyms: reparenting symbols, stat/walk functions; cgroup.stat keys
  pin N [T1,T2,...]             N memcgs each charging one page: written on tmpfs, written on the ext4
                                scratch disk, read (clean) from it; removed; dying count T s after the last
                                rmdir; then after sync (ext4 written), then files removed / caches dropped
  percpu N [socket]             Percpu / Slab from /proc/meminfo before and after N zombies (tmpfs pages;
                                "socket": pinned by a socket each instead, for kernels that reparent page cache)
  cost P1,P2,... [perf] [socket]
                                at each zombie count: kernel CPU of one stats read (root and pod cgroup:
                                memory.stat, memory.numa_stat) and the reclaim walk (a reader under a
                                memory-limited parent that holds the zombies); "perf": perf record -g at the
                                last point

Layout (v1 under /sys/fs/cgroup/memory, v2 under /sys/fs/cgroup):
    node/                     the memory-limited parent during the reclaim measurement
    node/docker/z<i>          zombies (what a crash-looping container runtime leaves)
    node/kubepods/pod1/ctr    a pod and its container: the stats reader's "pod cgroup" and the reclaim reader
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

TOOL = sys.argv[1]
HIER = os.environ.get("VMRUN_HIERARCHY") or ("v1" if os.path.isdir("/sys/fs/cgroup/memory") else "v2")
MEM = "/sys/fs/cgroup/memory" if HIER == "v1" else "/sys/fs/cgroup"
HOME = MEM + "/cgroup.procs"
T0 = time.monotonic()


def emit(d: dict) -> None:
    d.setdefault("t", round(time.monotonic() - T0, 1))
    print(json.dumps(d), flush=True)


def rd(path: str, default: str = "") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def wr(path: str, val: str) -> None:
    with open(path, "w") as f:
        f.write(val)


def kv(text: str) -> dict:
    out = {}
    for ln in text.splitlines():
        p = ln.split()
        if len(p) >= 2 and re.fullmatch(r"-?\d+", p[1]):
            out[p[0]] = int(p[1])
    return out


def meminfo() -> dict:
    return {k.rstrip(":"): v for k, v in kv(rd("/proc/meminfo")).items()}


def proc_cgroups_memory() -> int:
    for ln in rd("/proc/cgroups").splitlines():
        p = ln.split()
        if p and p[0] == "memory":
            return int(p[2])
    return -1


def ndirs(path: str) -> int:
    return sum(1 for _ in os.walk(path))


def dying(parent: str) -> dict:
    """Dying memcgs under `parent` (a memory-hierarchy path) by the kernel's own counters."""
    d = {"proc_cgroups_memory": proc_cgroups_memory()}
    if HIER == "v1":
        d["dirs"] = ndirs(MEM)
        d["dying"] = d["proc_cgroups_memory"] - d["dirs"]
    else:
        st = kv(rd(parent + "/cgroup.stat"))
        d.update({k: v for k, v in st.items() if "dying" in k})
        d["dying"] = st.get("nr_dying_subsys_memory", st.get("nr_dying_descendants", -1))
    return d


def _enable_memory(path: str) -> None:
    ctl = path + "/cgroup.subtree_control"
    if "memory" not in rd(ctl).split():
        wr(ctl, "+memory")


def mkcg(rel: str, parent_of_memcgs: bool = False) -> str:
    """mkdir -p under the memory hierarchy; on v2 enable +memory down the path (and in the last
    directory too when `parent_of_memcgs`: its children get a memory css)."""
    path = MEM
    for part in rel.strip("/").split("/"):
        if HIER == "v2":
            _enable_memory(path)
        path += "/" + part
        os.makedirs(path, exist_ok=True)
    if parent_of_memcgs and HIER == "v2":
        _enable_memory(path)
    return path


def rmtree_cg(path: str) -> None:
    if not os.path.isdir(path):
        return
    for dp, dns, _ in os.walk(path, topdown=False):
        for d in dns:
            try:
                os.rmdir(os.path.join(dp, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def setup() -> dict:
    info = {"hierarchy": HIER, "kernel": os.uname().release, "cpus_online": os.cpu_count(),
            "cpus_possible": rd("/sys/devices/system/cpu/possible").strip(),
            "lru_gen": rd("/sys/kernel/mm/lru_gen/enabled").strip() or None}
    if HIER == "v1":
        try:  # before any child exists; 5.10 defaults to 0 at the root (deprecated and forced to 1 in 5.11+)
            wr(MEM + "/memory.use_hierarchy", "1")
        except OSError as e:
            info["use_hierarchy_error"] = str(e)
        info["use_hierarchy"] = rd(MEM + "/memory.use_hierarchy").strip()
    return info


def make_zombies(parent: str, first: int, n: int, filedir: str, pages: int = 1, socket: bool = False,
                 read: bool = False):
    """Run zombie_tool make; with socket=True the tool stays alive holding the pins: returns (result, proc).
    read=True: each zombie reads its (existing) file instead of writing it."""
    if n <= 0:
        return {"made": 0, "seconds": 0.0, "failed": 0}, None
    os.makedirs(filedir, exist_ok=True)
    argv = [TOOL, "make", parent, str(first), str(n), filedir, HOME, str(pages)] + (
        ["socket"] if socket else ["read"] if read else [])
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not socket:
        _, err = p.communicate()
    else:
        err = ""
    try:
        res = json.loads(line)
    except ValueError:
        res = {"made": 0, "error": (line + err)[-500:]}
    if err.strip():
        res["stderr"] = err.strip()[-300:]
    return res, (p if socket else None)


def fresh_tmpfs(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "ztmp", path], check=True)
    return path


def drop_caches() -> None:
    subprocess.run(["sync"])
    wr("/proc/sys/vm/drop_caches", "3")


# ----------------------------------------------------------------------------- probes

KEY_SYMBOLS = [
    # the "Eliminate Dying Memory Cgroup" series (LRU folios charged via obj_cgroup, reparented on offline)
    "lru_reparent_memcg", "lru_gen_reparent_memcg", "memcg_reparent_objcgs", "__memcg_reparent_objcgs",
    "reparent_memcg_lruvec_state_local", "reparent_memcg_state_local", "folio_memcg_charge_objcg",
    # older reparenting: kmem/slab objcg (5.9+), list_lru (4.0+), shrinker deferred (5.13+)
    "memcg_reparent_list_lrus", "reparent_shrinker_deferred", "obj_cgroup_release",
    # stat readers and walkers
    "memcg_stat_show", "memcg1_stat_format", "memory_stat_show", "memory_stat_format", "memcg_numa_stat_show",
    "mem_cgroup_nr_lru_pages", "mem_cgroup_node_nr_lru_pages", "mem_cgroup_flush_stats",
    "do_flush_stats", "cgroup_rstat_flush", "css_rstat_flush", "mem_cgroup_iter", "shrink_node_memcgs",
    "lru_gen_shrink_node", "shrink_many",
]


def probe_symbols() -> None:
    syms = {}
    reparent = set()
    for ln in open("/proc/kallsyms"):
        p = ln.split()
        if len(p) < 3:
            continue
        name = p[2]
        if "reparent" in name:
            reparent.add(name)
        if name in KEY_SYMBOLS:
            syms[name] = True
    objcg = sorted({ln.split()[2] for ln in open("/proc/kallsyms") if "objcg" in ln or "obj_cgroup" in ln})
    root_stat = kv(rd(MEM + "/cgroup.stat")) if HIER == "v2" else kv(rd("/sys/fs/cgroup/unified/cgroup.stat"))
    emit({"probe": "symbols", **setup(), "present": {s: s in syms for s in KEY_SYMBOLS},
          "reparent_symbols": sorted(reparent), "objcg_symbols_count": len(objcg),
          "objcg_symbols": objcg[:80], "cgroup_stat_keys": sorted(root_stat),
          "has_nr_dying_subsys_memory": "nr_dying_subsys_memory" in root_stat,
          "memcg_v1_files": sorted(os.listdir(MEM))[:80] if HIER == "v1" else None})


def probe_pin(n: int, times: list[float]) -> None:
    """Does page cache still pin removed memcgs? Three ways to charge one page each:
    tmpfs-write (shmem page), ext4-write (dirty page cache, and the inode joins the memcg's cgroup
    writeback), ext4-read (clean page cache of files written, synced and dropped beforehand, as a
    container reading its image; the read updates atime, which dirties the inode from inside the memcg),
    ext4-read-noatime (the same with the disk remounted noatime). Dying count T s after the last rmdir, then after sync (ext4-write),
    then after the pins go (tmpfs: files removed; ext4: drop_caches)."""
    info = setup()
    disk = os.environ.get("VMRUN_DISK")
    variants = [("tmpfs-write", fresh_tmpfs("/run/ztmp"), False)]
    if disk:
        variants += [("ext4-write", disk + "/zfiles-w", False), ("ext4-read", disk + "/zfiles-r", True),
                     ("ext4-read-noatime", disk + "/zfiles-r", True)]
        os.makedirs(disk + "/zfiles-r", exist_ok=True)
        for i in range(n):
            with open(f"{disk}/zfiles-r/f{i}", "wb") as f:
                f.write(b"r" * 4096)
        drop_caches()
    rows = []
    for fs, fdir, read in variants:
        if fs == "ext4-read-noatime":
            # the same clean files, but reading them does not update atime: the inode is not dirtied
            # from inside the memcg (a dirtied inode is attached to the memcg's cgroup writeback)
            drop_caches()
            subprocess.run(["mount", "-o", "remount,noatime", disk])
        parent = mkcg(f"pin-{fs}", True)
        before = dying(parent)
        res, _ = make_zombies(parent, 0, n, fdir, read=read)
        t_end = time.monotonic()
        row = {"fs": fs, "n": n, "make": res, "before": before["dying"], "after": {}}
        for t in times:
            time.sleep(max(0.0, t_end + t - time.monotonic()))
            row["after"][str(t)] = dying(parent)["dying"] - before["dying"]
        if fs == "ext4-write":
            subprocess.run(["sync"])
            t_s = time.monotonic()
            row["after_sync"] = {}
            for t in (2, 10):
                time.sleep(max(0.0, t_s + t - time.monotonic()))
                row["after_sync"][str(t)] = dying(parent)["dying"] - before["dying"]
        # then release the pins: delete the files (tmpfs) / drop the page cache (ext4)
        if fs.startswith("tmpfs"):
            shutil.rmtree(fdir, ignore_errors=True)
            os.makedirs(fdir, exist_ok=True)
        else:
            drop_caches()
        t_rel = time.monotonic()
        row["after_release"] = {}
        for t in (1, 5):
            time.sleep(max(0.0, t_rel + t - time.monotonic()))
            row["after_release"][str(t)] = dying(parent)["dying"] - before["dying"]
        row["detail"] = dying(parent)
        if fs == "ext4-read-noatime":
            subprocess.run(["mount", "-o", "remount,relatime", disk])
        rows.append(row)
        emit({"probe": "pin", **row})
        rmtree_cg(parent)
    last = str(times[-1])
    emit({"probe": "pin", "summary": True, **info, "n": n, "times": times,
          "dying_fraction": {r["fs"]: round(r["after"][last] / max(1, r["n"]), 3) for r in rows},
          "rows": rows})


def probe_percpu(n: int, socket: bool) -> None:
    info = setup()
    fdir = fresh_tmpfs("/run/ztmp")
    parent = mkcg("node/docker", True)
    time.sleep(1)
    m0, d0 = meminfo(), dying(parent)
    res, holder = make_zombies(parent, 0, n, fdir, pages=0 if socket else 1, socket=socket)
    time.sleep(3)
    m1, d1 = meminfo(), dying(parent)
    z = d1["dying"] - d0["dying"]
    delta = {k: m1.get(k, 0) - m0.get(k, 0) for k in ("Percpu", "Slab", "SUnreclaim", "SReclaimable", "MemFree",
                                                      "Shmem", "KernelStack")}
    out = {"probe": "percpu", **info, "n": n, "pin": "socket" if socket else "tmpfs page", "make": res,
           "zombies": z, "before": {k: m0.get(k) for k in delta}, "after": {k: m1.get(k) for k in delta},
           "delta_kB": delta,
           "percpu_kB_per_zombie": round(delta["Percpu"] / z, 3) if z > 0 else None,
           "slab_kB_per_zombie": round(delta["Slab"] / z, 3) if z > 0 else None,
           "percpu_kB_per_memcg_made": round(delta["Percpu"] / max(1, n), 3)}
    if holder:
        holder.kill()
        holder.wait()
    emit(out)


def read_cost(path: str, budget_s: float = 1.0, rounds: int = 3) -> dict:
    """Kernel CPU per read of `path`: a few reads to size the run, then `rounds` runs of ~budget_s each;
    sys_us is the median round (guest time under TCG is host time: other load inflates single rounds)."""
    def run(k: int) -> dict:
        p = subprocess.run([TOOL, "read", path, str(k)], capture_output=True, text=True)
        return json.loads(p.stdout)
    r = run(5)
    per = max(r["wall_us"], 1.0) / 1e6
    k = int(min(5000, max(5, budget_s / per)))
    rs = sorted((run(k) for _ in range(rounds)), key=lambda x: x["sys_us"])
    med = rs[len(rs) // 2]
    return {"reads": k, "rounds": rounds, "sys_us": med["sys_us"], "sys_us_min": rs[0]["sys_us"],
            "sys_us_max": rs[-1]["sys_us"], "user_us": med["user_us"], "wall_us": med["wall_us"],
            "bytes": med["bytes"]}


def perf_report(data: str, children: bool) -> list[str]:
    p = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-demangle", "--sort", "sym",
                        "--children" if children else "--no-children", "-g", "none", "--percent-limit", "1"],
                       capture_output=True, text=True)
    lines = [ln.rstrip() for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[:40] if lines else [p.stderr[-400:]]


def perf_record(argv: list[str], out: str, system_wide: bool = False, seconds: float = 0) -> dict:
    cmd = ["perf", "record", "-q", "-g", "-o", out]
    cmd += (["-a", "--", "sleep", str(seconds)] if system_wide else ["--"] + argv)
    p = subprocess.run(cmd, capture_output=True, text=True)
    return {"rc": p.returncode, "err": p.stderr[-300:],
            "self": perf_report(out, False), "children": perf_report(out, True)}


def cpu_busy() -> tuple[int, int]:
    p = rd("/proc/stat").splitlines()[0].split()[1:]
    v = [int(x) for x in p]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def settle(max_s: float = 90, busy_max: float = 0.05) -> float:
    """Wait until the guest is idle (busy < busy_max of all CPUs over 1 s): under single-threaded TCG
    every vCPU shares one host thread, so background kernel work (css offlining after a burst of
    rmdirs, RCU frees) slows the measured vCPU in guest time and inflates its CPU figures."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        b0, a0 = cpu_busy()
        time.sleep(1)
        b1, a1 = cpu_busy()
        if a1 > a0 and (b1 - b0) / (a1 - a0) < busy_max:
            break
    return round(time.monotonic() - t0, 1)


def limit_file() -> str:
    return "memory.limit_in_bytes" if HIER == "v1" else "memory.max"


def usage(path: str) -> int:
    return int(rd(path + ("/memory.usage_in_bytes" if HIER == "v1" else "/memory.current"), "0") or 0)


def set_limit(path: str, val: int | None) -> None:
    wr(path + "/" + limit_file(), str(val) if val is not None else ("-1" if HIER == "v1" else "max"))


def in_cgroup(cg: str, argv: list[str]) -> list[str]:
    return ["/bin/sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh"] + argv


def reclaim_cost(node: str, ctr: str, data: str, warm_s: float, secs: float, perf_out: str | None) -> dict:
    """A reader in ctr streams a file on ext4 while node is limited to its other charge + 48 MB: every
    page read has to be reclaimed from under node, whose subtree holds the zombies."""
    drop_caches()
    set_limit(node, None)
    base = usage(node)
    lim = base + (48 << 20)
    set_limit(node, lim)
    st = node + "/memory.stat"
    s0 = kv(rd(st))
    w = subprocess.run(in_cgroup(ctr, [TOOL, "stream", data, str(warm_s)]), capture_output=True, text=True)
    s1 = kv(rd(st))
    # perf takes seconds to start under TCG: profile the reader itself (-p), which runs long enough
    # for perf to attach (the cost is a rate: the longer window does not change it)
    m_secs = secs + (20 if perf_out else 0)
    mp_ = subprocess.Popen(in_cgroup(ctr, [TOOL, "stream", data, str(m_secs)]), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    pr = None
    if perf_out:
        time.sleep(1)
        pr = subprocess.run(["perf", "record", "-q", "-g", "-p", str(mp_.pid), "-o", perf_out, "--",
                             "sleep", str(secs)], capture_output=True, text=True)
    mo, me = mp_.communicate()
    m = subprocess.CompletedProcess([], mp_.returncode, mo, me)
    s2 = kv(rd(st))
    out = {"limit_mb": round(lim / 2**20, 1), "base_mb": round(base / 2**20, 1)}
    try:
        out["warm"] = json.loads(w.stdout)
        out["measured"] = json.loads(m.stdout)
    except ValueError:
        out["error"] = (w.stdout + w.stderr + m.stdout + m.stderr)[-600:]
    out["sys_ms_per_mb"] = out.get("measured", {}).get("sys_ms_per_mb")
    keys = [k for k in s2 if re.search(r"pgscan|pgsteal|pgpgin|pgpgout|pgmajfault", k)]
    out["stat_delta_warm"] = {k: s1.get(k, 0) - s0.get(k, 0) for k in keys}
    out["stat_delta_measured"] = {k: s2.get(k, 0) - s1.get(k, 0) for k in keys}
    out["ctr_usage_mb"] = round(usage(ctr) / 2**20, 1)
    if pr is not None:
        out["perf"] = {"rc": pr.returncode, "err": pr.stderr[-300:],
                       "self": perf_report(perf_out, False), "children": perf_report(perf_out, True)}
    set_limit(node, None)
    return out


def probe_cost(points: list[int], perf: bool, socket: bool) -> None:
    info = setup()
    emit({"probe": "cost", "setup": info})
    disk = os.environ.get("VMRUN_DISK")
    fdir = fresh_tmpfs("/run/ztmp")
    node = mkcg("node")
    zparent = mkcg("node/docker", True)
    pod = mkcg("node/kubepods/pod1")
    ctr = mkcg("node/kubepods/pod1/ctr")
    data = None
    if disk:
        data = disk + "/data.bin"
        with open(data, "wb") as f:
            f.truncate(256 << 20)  # sparse: ext4 reads holes into charged page cache
    # some real charge in the pod (as a live container has): 8 MB of page cache in its tmpfs
    subprocess.run(in_cgroup(ctr, ["/bin/sh", "-c", f"dd if=/dev/zero of={fdir}/podfile bs=1M count=8 2>/dev/null"]))
    files = {"root memory.stat": MEM + "/memory.stat", "root memory.numa_stat": MEM + "/memory.numa_stat",
             "pod memory.stat": pod + "/memory.stat", "pod memory.numa_stat": pod + "/memory.numa_stat"}
    files = {k: v for k, v in files.items() if os.path.exists(v)}
    for path in files.values():  # warm: the first reads after boot are slower (caches, dentries)
        subprocess.run([TOOL, "read", path, "200"], capture_output=True)
    made, holders, rows = 0, [], []
    for i, n in enumerate(points):
        res, h = make_zombies(zparent, made, n - made, fdir, pages=0 if socket else 1, socket=socket)
        if h:
            holders.append(h)
        made = n
        waited = settle()
        row = {"zombies_target": n, "make": res, "settle_s": waited, "dying": dying(zparent)["dying"],
               "meminfo": {k: meminfo().get(k) for k in ("Percpu", "Slab", "MemFree")}, "reads": {}}
        for name, path in files.items():
            row["reads"][name] = read_cost(path)
        last = i == len(points) - 1
        if perf and last:
            row["perf_reads"] = {}
            for name in ("root memory.stat", "root memory.numa_stat"):
                if name in files:
                    row["perf_reads"][name] = perf_record([TOOL, "read", files[name], "2000"], "/run/perf-read.data")
        if data:
            settle(30)
            row["reclaim"] = reclaim_cost(node, ctr, data, 8, 5, "/run/perf-reclaim.data" if perf and last else None)
        row["dying_after_reclaim"] = dying(zparent)["dying"]
        rows.append(row)
        emit({"probe": "cost", **row})
    for h in holders:
        h.kill()
        h.wait()
    emit({"probe": "cost", "summary": True, **info, "points": points, "pin": "socket" if socket else "tmpfs page",
          "table": [{"zombies": r["dying"], "read_sys_us": {k: v["sys_us"] for k, v in r["reads"].items()},
                     "reclaim_sys_ms_per_mb": (r.get("reclaim") or {}).get("sys_ms_per_mb")} for r in rows]})


def main() -> None:
    probe = sys.argv[2]
    args = sys.argv[3:]
    if probe == "symbols":
        probe_symbols()
    elif probe == "pin":
        probe_pin(int(args[0]), [float(x) for x in (args[1] if len(args) > 1 else "1,5,15").split(",")])
    elif probe == "percpu":
        probe_percpu(int(args[0]), "socket" in args[1:])
    elif probe == "cost":
        probe_cost([int(x) for x in args[0].split(",")], "perf" in args[1:], "socket" in args[1:])
    else:
        raise SystemExit(f"unknown probe {probe}")


if __name__ == "__main__":
    main()
