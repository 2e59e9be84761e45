"""Cost of the per-connection socket view and of the per-netns TCP counters, side by side with ss.

`python -m benchmarks.socket_view [N ...]` (default 1000 10000 100000; root: it makes network namespaces).

1. Socket view: N TCP sockets held open in a throwaway netns (benchmarks/socket_holder.py); in the same
   run, alternating, median of REPS: nodesleuth's inet_diag walk of every socket (collect/inetdiag.scan,
   tcp_info decoded for the retransmit fields) untruncated; the collector's own scan as it runs on a
   spike (SocketView.scan: time box, owner lookup of the worst few); the owner lookup of 20 inodes by
   itself; `ss -tinOH` (the same tcp_info, text) and `ss -tinpOH` (plus owners: every /proc/*/fd) in that
   netns through nsenter. CPU from the process's own clock / the child's wait4 rusage.
2. TCP counters: TcpReader.read() per tick with M other network namespaces (each held by a sleeping
   process), M in 0, 10, 50: what reading every pod's /proc/PID/net/{snmp,netstat} costs a second.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import emit, run_measured

REPS = int(os.environ.get("REPS", "5"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _netns(name: str) -> str:
    subprocess.run(["ip", "netns", "add", name], check=True)
    return f"/run/netns/{name}"


def _hold(path: str, n: int, tmp: str) -> subprocess.Popen:
    ready = os.path.join(tmp, f"ready-{n}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "src"),
                                                          os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-m", "benchmarks.socket_holder", path, str(n), ready, "1200"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 600
    while not os.path.exists(ready):
        if p.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"socket holder: {p.stderr.read().decode()[-300:]}")
        time.sleep(0.2)
    return p


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def sockets(n: int, tmp: str) -> dict:
    from nodesleuth.collect import inetdiag
    from nodesleuth.collect.tcp import SocketView
    from nodesleuth.node.pread import Preader
    from nodesleuth.node.root import Root

    name = f"nsl-bench-{os.getpid()}-{n}"
    path = _netns(name)
    holder = None
    try:
        holder = _hold(path, n, tmp)
        ino = int(os.readlink(f"/proc/{holder.pid}/ns/net")[5:-1])
        view = SocketView(Root("/"), Preader())
        rows: dict[str, list] = {k: [] for k in ("scan_cpu_ms", "scan_wall_ms", "view_cpu_ms", "view_wall_ms",
                                                   "owners_ms", "ss_cpu_ms", "ss_wall_ms", "ssp_cpu_ms",
                                                   "ssp_wall_ms")}
        walked = truncated = None
        sample = []
        for _ in range(REPS):
            sock = inetdiag.diag_socket(path)
            try:
                c0, t0 = time.process_time(), time.perf_counter()
                sc = inetdiag.scan(sock, time_box=600, max_sockets=10 ** 9, interesting=lambda c, t: True)
                rows["scan_cpu_ms"].append(1000 * (time.process_time() - c0))
                rows["scan_wall_ms"].append(1000 * (time.perf_counter() - t0))
            finally:
                sock.close()
            walked = sc.walked
            sample = random.Random(1).sample([c.inode for c in sc.conns if c.inode], min(20, len(sc.conns)))
            view.last.clear()
            view.prev.clear()
            t0 = time.perf_counter()
            v = view.scan(ino, holder.pid, ["benchmark"])
            rows["view_wall_ms"].append(1000 * (time.perf_counter() - t0))
            rows["view_cpu_ms"].append(v["cpu_ms"])
            truncated = v["truncated"]
            t0 = time.perf_counter()
            inetdiag.owners(set(sample), "/proc", os.readlink(f"/proc/{holder.pid}/ns/net"), time_box=600)
            rows["owners_ms"].append(1000 * (time.perf_counter() - t0))
            for key, args in (("ss", "-tinOH"), ("ssp", "-tinpOH")):
                m = run_measured(["nsenter", f"--net={path}", "ss", args])
                rows[f"{key}_cpu_ms"].append(1000 * m["cpu_s"])
                rows[f"{key}_wall_ms"].append(1000 * m["wall_s"])
        med = {k: _median(v) for k, v in rows.items()}
        return {"sockets": n, "walked": walked, "collector_truncated": truncated, **med,
                "us_per_socket_scan_cpu": round(1000 * med["scan_cpu_ms"] / max(1, walked), 3),
                "ratio_scan_cpu_vs_ss_tinOH": round(med["scan_cpu_ms"] / max(med["ss_cpu_ms"], 1e-3), 3),
                "ratio_scan_cpu_vs_ss_tinpOH": round(med["scan_cpu_ms"] / max(med["ssp_cpu_ms"], 1e-3), 3)}
    finally:
        if holder is not None:
            holder.terminate()
            try:
                holder.wait(timeout=60)
            except subprocess.TimeoutExpired:
                holder.kill()
        subprocess.run(["ip", "netns", "del", name])


def counters(m: int) -> dict:
    from nodesleuth.collect.tcp import TcpReader
    from nodesleuth.node.pread import Preader
    from nodesleuth.node.root import Root

    procs = [subprocess.Popen(["unshare", "--net", "sleep", "600"]) for _ in range(m)]
    try:
        time.sleep(0.5 + m * 0.01)
        r = TcpReader(Root("/"), Preader())
        c0 = time.process_time()
        r.enumerate()
        enum_ms = 1000 * (time.process_time() - c0)
        r.prime()
        cpu = []
        for _ in range(20):
            time.sleep(0.05)
            c0 = time.process_time()
            t = r.read(0.05)
            cpu.append(1000 * (time.process_time() - c0))
        return {"netns": m, "known": t.known, "read_per_tick": t.read, "tick_cpu_ms": _median(cpu),
                "enumerate_cpu_ms": round(enum_ms, 2), "processes": len([p for p in os.listdir("/proc") if p.isdigit()])}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main(argv: list[str]) -> dict:
    if os.geteuid() != 0 or not shutil.which("ss") or not shutil.which("nsenter"):
        return emit({"benchmark": "socket_view", "skipped": "needs root, ss and nsenter"})
    sizes = [int(a) for a in argv] or [1000, 10000, 100000]
    tmp = tempfile.mkdtemp(prefix="nodesleuth-socket-bench-")
    try:
        res = {"benchmark": "socket_view", "reps": REPS, "sockets": [sockets(n, tmp) for n in sizes],
               "counters": [counters(m) for m in (0, 10, 50)]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return emit(res)


if __name__ == "__main__":
    main(sys.argv[1:])
