"""What nodesleuth's recurring and long-running parts cost on a big node with many dying memory cgroups,
side by side with Debian's prometheus-node-exporter on the same (virtual) machine, in one run.

A real Debian kernel under QEMU TCG (tests/vm/vmrun.py; 6.1, whose `-smp N,maxcpus=M` gives M possible
CPUs: the per-CPU memcg memory and the rstat flush of a memory.stat read scale with possible CPUs)
with pure cgroup v2. At each point (0 / 10k / 70k dying memcgs, made by tests/vm/zombie_tool.c: mkdir,
join, write a page, leave, rmdir) the guest measures:
- `nodesleuth check --npd --seconds 1 --no-probe` (the node-problem-detector plugin's command, without a
  probe): wall, CPU and peak RSS from wait4;
- `nodesleuth exporter` and `prometheus-node-exporter` running at once, each scraped every
  --scrape-every seconds (Prometheus' 15 s by default): scrape latency, the server's CPU during the
  scrape, and its CPU per scrape interval (the exporter samples every second between scrapes; node_exporter
  collects on scrape: the interval's CPU is the fair comparison), and RSS.
TCG runs the guest tens of times slower than hardware: the absolute numbers are TCG's; the ratios to
node_exporter are the claim.

`python -m benchmarks.self_cost [--points 0,10000,70000] [--cpus 4] [--maxcpus 96] [--maxcpus-70k 32]`
`python -m benchmarks.self_cost --exporter-only [--before COMMIT] [--host-scrapes 24]`: this host's exporters
only, this tree's (and COMMIT's) beside node_exporter, all at once (results/self_cost.json's host_exporter)
`python -m benchmarks.self_cost --host-npd [--points 0,10000,70000] [--host-checks 10]`: `check --npd --seconds 1
--no-probe` on this host (hardware timing, the memory controller as it is here) at each count of real dying
memcgs, made by node/cgroupfs.make_zombies under a parent of its own and freed after (results' host_npd)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


# ---- guest side (runs inside the VM, stdlib + the staged nodesleuth) ------------------------------------

def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return round(int(ln.split()[1]) / 1024, 1)
    return 0.0


def _dying() -> dict:
    out = {}
    try:
        with open("/sys/fs/cgroup/cgroup.stat") as f:  # cgroup v2 (the VM); absent on a v1 host
            for ln in f:
                k, v = ln.split()
                out[k] = int(v)
    except OSError:
        pass
    with open("/proc/cgroups") as f:
        for ln in f:
            p = ln.split()
            if p[0] == "memory":
                out["proc_cgroups_memory"] = int(p[2])
    return out


def _scrape(url: str) -> tuple[float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return (time.perf_counter() - t) * 1e3, len(body)


def _wait_up(url: str, proc: subprocess.Popen, timeout: float = 300) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({proc.returncode})")
        try:
            _scrape(url)
            return time.time() - t0
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{url} never answered")


def _free_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _cpu_with_children_s(pid: int) -> float:
    """utime + stime + the reaped children's (cutime + cstime): a server that forks pays for its children."""
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in st[11:15]) / os.sysconf("SC_CLK_TCK")


def side_by_side(cmds: dict, scrapes: int, every: float) -> dict:
    """Start every server of `cmds` (name -> (argv without its listen option, env or None); a name starting
    with node_exporter gets --web.listen-address, the others --listen), scrape each every `every` s after a
    warm-up scrape, all at once: {name: figures, "ratios_..._over_node_exporter": ..., "loadavg_1m": [...]},
    or {"error": ...}."""
    servers = {}
    logs = []
    for name, (argv, env) in cmds.items():
        port = _free_port()
        ne = name.startswith("node_exporter")
        errlog = open(f"/tmp/self-cost-{name}-{os.getpid()}.log", "w+")
        logs.append(errlog)
        listen = [f"--web.listen-address=127.0.0.1:{port}"] if ne else ["--listen", f"127.0.0.1:{port}"]
        p = subprocess.Popen(argv + listen, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if ne else errlog,
                             env=env)
        servers[name] = (p, f"http://127.0.0.1:{port}/metrics")
    res: dict = {}
    try:
        for name, (p, url) in servers.items():
            res[name] = {"startup_s": round(_wait_up(url, p), 2), "scrapes": []}
        time.sleep(every)  # the first scrape above was the warm-up one
        c0 = {n: _cpu_s(p.pid) for n, (p, _) in servers.items()}
        k0 = {n: _cpu_with_children_s(p.pid) for n, (p, _) in servers.items()}
        loads = [os.getloadavg()[0]]
        t0 = time.time()
        for i in range(scrapes):
            for name, (p, url) in servers.items():
                c = _cpu_s(p.pid)
                ms, size = _scrape(url)
                res[name]["scrapes"].append({"latency_ms": round(ms, 1), "cpu_during_s": round(_cpu_s(p.pid) - c, 3),
                                             "bytes": size})
            loads.append(os.getloadavg()[0])
            time.sleep(max(0.0, t0 + (i + 1) * every - time.time()))
        span = time.time() - t0
        for name, (p, _) in servers.items():
            r = res[name]
            lat = sorted(s["latency_ms"] for s in r["scrapes"])
            r["latency_ms_median"] = lat[len(lat) // 2]
            r["cpu_during_scrape_s_mean"] = round(sum(s["cpu_during_s"] for s in r["scrapes"]) / scrapes, 4)
            r["cpu_per_interval_s"] = round((_cpu_s(p.pid) - c0[name]) / scrapes, 4)
            r["cpu_per_interval_with_children_s"] = round((_cpu_with_children_s(p.pid) - k0[name]) / scrapes, 4)
            r["cpu_pct_of_core"] = round((_cpu_s(p.pid) - c0[name]) / span * 100, 2)
            r["rss_mb"] = _rss_mb(p.pid)
            r["bytes"] = r["scrapes"][-1]["bytes"]
        b = res.get("node_exporter")
        for name in [n for n in res if n != "node_exporter"]:
            a = res[name]
            key = "ratios_nodesleuth_over_node_exporter" if name == "nodesleuth" else f"ratios_{name}_over_node_exporter"
            if b:
                res[key] = {k: round(a[k] / b[k], 2) if b[k] else None
                            for k in ("latency_ms_median", "cpu_during_scrape_s_mean", "cpu_per_interval_s", "rss_mb")}
        res["span_s"], res["scrapes_each"] = round(span, 1), scrapes
        res["loadavg_1m_min_max_mean"] = [round(min(loads), 2), round(max(loads), 2), round(sum(loads) / len(loads), 2)]
    except RuntimeError as e:
        text = ""
        for f in logs:
            f.seek(0)
            text += f.read()[-400:]
        return {"error": f"{e}: {text}"}
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(30)
    return res


def measure_point(py: str, scrapes: int, every: float, checks: int) -> dict:
    sys.path.insert(0, REPO)
    from benchmarks.common import run_measured

    env = dict(os.environ)
    out = {"dying_before": _dying()}
    out["check_npd"] = [run_measured([py, "-m", "nodesleuth", "check", "--npd", "--seconds", "1", "--no-probe"], env=env)
                        for _ in range(checks)]
    cmds = {"nodesleuth": ([py, "-m", "nodesleuth", "exporter"], env), "node_exporter": ([NODE_EXPORTER], None)}
    res = side_by_side(cmds, scrapes, every)
    if "error" in res:
        out["exporters_error"] = res["error"]
    else:
        out["exporters"] = res
    out["dying_after"] = _dying()
    return out


def guest(a) -> None:
    tool, py = a.tool, sys.executable
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False)  # -net none: loopback is down at boot
    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
        f.write("+memory")
    parent = "/sys/fs/cgroup/zparent"
    os.makedirs(parent, exist_ok=True)
    with open(parent + "/cgroup.subtree_control", "w") as f:  # else the children share the parent's memcg
        f.write("+memory")
    files = "/run/zfiles"
    os.makedirs(files, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "zfiles", files], check=True)
    made = 0
    for target in [int(x) for x in a.points.split(",")]:
        point = {"target_dying": target, "cpus_online": os.cpu_count()}
        if target > made:
            t = time.time()
            r = subprocess.run([tool, "make", parent, str(made), str(target - made), files, "/sys/fs/cgroup/cgroup.procs", "1"],
                               capture_output=True, text=True)
            point["make"] = {"seconds": round(time.time() - t, 1), "out": r.stdout.strip()[-200:], "err": r.stderr.strip()[-200:]}
            made = target
        with open("/proc/meminfo") as f:
            point["percpu_kb"] = next(int(ln.split()[1]) for ln in f if ln.startswith("Percpu:"))
        point.update(measure_point(py, a.scrapes, a.scrape_every, a.checks))
        print("SELFCOST " + json.dumps(point), flush=True)
        if "exporters_error" in point:
            print(point["exporters_error"], file=sys.stderr, flush=True)


# ---- host side ----------------------------------------------------------------------------------------

def boot(points: str, cpus: int, maxcpus: int, mem: str, a) -> dict:
    sys.path.insert(0, os.path.join(REPO, "tests", "vm"))
    import matrix
    import vmrun

    tool = matrix.build_tool()
    staged = vmrun.stage_source(REPO)
    # the guest sees the host's / read-only but not this checkout's benchmarks/ next to the staged src
    bdir = os.path.join(staged, "benchmarks")
    if not os.path.exists(os.path.join(bdir, "self_cost.py")) or open(os.path.join(bdir, "self_cost.py")).read() != open(__file__).read():
        shutil.rmtree(bdir, ignore_errors=True)
        shutil.copytree(HERE, bdir, ignore=shutil.ignore_patterns("results", "__pycache__", "reference"))
    # the guest runs with PYTHONDONTWRITEBYTECODE on a read-only share: compile here (same interpreter)
    subprocess.run([vmrun.host_python(), "-m", "compileall", "-q", os.path.join(staged, "src"), bdir], check=False)
    cmd = (f"cd {staged} && PYTHONPATH={staged}/src:{staged} $VMRUN_PYTHON -m benchmarks.self_cost --guest --tool {tool} "
           f"--points {points} --scrapes {a.scrapes} --scrape-every {a.scrape_every} --checks {a.checks}")
    r = vmrun.run_in_vm(cmd, cpus=cpus, maxcpus=maxcpus, mem=mem, timeout=a.timeout, kernel=a.kernel)
    pts = [json.loads(ln.split("SELFCOST ", 1)[1]) for ln in r[1].splitlines() if ln.startswith("SELFCOST ")]
    return {"kernel": r.kernel, "cpus_online": cpus, "cpus_possible": maxcpus, "mem": mem, "rc": r[0], "wall_s": round(r.wall, 1),
            "points": pts, "stderr_tail": (r[2] or "")[-600:] if r[0] else ""}


def summary(vms: list[dict]) -> list[dict]:
    rows = []
    for vm in vms:
        for p in vm["points"]:
            chk = p["check_npd"]
            e = p.get("exporters", {})
            rows.append({"cpus_possible": vm["cpus_possible"], "cpus_online": vm["cpus_online"],
                         "dying": p["dying_before"].get("nr_dying_descendants"),
                         "check_wall_s": min(c["wall_s"] for c in chk), "check_cpu_s": min(c["cpu_s"] for c in chk),
                         "check_max_rss_mb": max(c["max_rss_mb"] for c in chk), "check_rc": [c["rc"] for c in chk],
                         "nodesleuth_cpu_per_interval_s": e.get("nodesleuth", {}).get("cpu_per_interval_s"),
                         "node_exporter_cpu_per_interval_s": e.get("node_exporter", {}).get("cpu_per_interval_s"),
                         "nodesleuth_latency_ms": e.get("nodesleuth", {}).get("latency_ms_median"),
                         "node_exporter_latency_ms": e.get("node_exporter", {}).get("latency_ms_median"),
                         "nodesleuth_rss_mb": e.get("nodesleuth", {}).get("rss_mb"),
                         "node_exporter_rss_mb": e.get("node_exporter", {}).get("rss_mb"),
                         "ratios": e.get("ratios_nodesleuth_over_node_exporter")})
    return rows


def host_side_by_side(a) -> dict:
    """The same measures on this host (2 CPUs shared with other work, cgroup v1, hardware timing)."""
    with open("/proc/meminfo") as f:
        percpu = next(int(ln.split()[1]) for ln in f if ln.startswith("Percpu:"))
    return {"cpus": os.cpu_count(), "kernel": os.uname().release, "percpu_kb": percpu,
            **measure_point(sys.executable, a.host_scrapes, a.scrape_every, a.host_checks)}


def exporter_only(a) -> dict:
    """This tree's exporter (and --before's) beside node_exporter on this host, at once."""
    import tempfile

    py = sys.executable
    cmds = {"nodesleuth": ([py, "-m", "nodesleuth", "exporter"], dict(os.environ, PYTHONPATH=os.path.join(REPO, "src")))}
    tmp = None
    if a.before:
        tmp = tempfile.mkdtemp(prefix="self-cost-before-")
        arch = subprocess.run(["git", "-C", REPO, "archive", a.before, "src"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
        cmds["nodesleuth_before"] = ([py, "-m", "nodesleuth", "exporter"],
                                     dict(os.environ, PYTHONPATH=os.path.join(tmp, "src")))
    cmds["node_exporter"] = ([NODE_EXPORTER], None)
    try:
        res = side_by_side(cmds, a.host_scrapes, a.scrape_every)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", REPO, "status", "--porcelain", "src"], capture_output=True, text=True).stdout)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
             "kernel": os.uname().release, "commit": head + ("+dirty" if dirty else ""), "before_commit": a.before,
             "every_s": a.scrape_every, **res}
    path = a.out or os.path.join(HERE, "results", "self_cost.json")
    doc = {"benchmark": "self_cost"}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["host_exporter"] = entry
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)  # as the file is written with --out
    print(json.dumps(entry, indent=1))
    return entry


def host_npd(a) -> dict:
    """check --npd at each dying count on this host: real zombies (a page of a file each, the file kept), the
    parent and files removed after each point."""
    import tempfile

    sys.path.insert(0, REPO)
    from benchmarks.common import run_measured
    from nodesleuth.lab.zombies import clear
    from nodesleuth.node.cgroupfs import Memcg, make_zombies

    mc = Memcg()
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "src"))
    points = []
    for n in (int(x) for x in a.points.split(",")):
        parent = os.path.join(mc.mount, f"nodesleuth-selfcost-{os.getpid()}")
        data = tempfile.mkdtemp(prefix="nodesleuth-selfcost-", dir="/var/tmp")
        try:
            made = make_zombies(n, parent, data) if n else 0
            time.sleep(2)
            pt = {"target_dying": n, "made": made, "dying_before": _dying(), "loadavg": os.getloadavg()[0],
                  "check_npd": [run_measured([sys.executable, "-m", "nodesleuth", "check", "--npd", "--seconds", "1",
                                              "--no-probe"], env=env) for _ in range(a.host_checks)]}
        finally:
            clear(parent, data)
        walls = sorted(c["wall_s"] for c in pt["check_npd"])
        cpus = sorted(c["cpu_s"] for c in pt["check_npd"])
        pt["wall_s_min_median_max"] = [walls[0], walls[len(walls) // 2], walls[-1]]
        pt["cpu_s_min_median_max"] = [cpus[0], cpus[len(cpus) // 2], cpus[-1]]
        points.append(pt)
        print(json.dumps({k: pt[k] for k in ("target_dying", "made", "wall_s_min_median_max", "cpu_s_min_median_max")}),
              file=sys.stderr)
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
             "kernel": os.uname().release, "cgroup": f"v{mc.version}", "commit": head, "points": points}
    path = a.out or os.path.join(HERE, "results", "self_cost.json")
    doc = {"benchmark": "self_cost"}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["host_npd"] = entry
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return entry


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--guest", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tool", help=argparse.SUPPRESS)
    ap.add_argument("--points", default="0,10000,70000")
    ap.add_argument("--cpus", type=int, default=4, help="online vCPUs (TCG on 2 host cores)")
    ap.add_argument("--maxcpus", type=int, default=96, help="possible CPUs for the points below 70k")
    ap.add_argument("--maxcpus-70k", type=int, default=32,
                    help="possible CPUs for the points >= 70k (70k x 96 CPUs of percpu memory is ~12 GB)")
    ap.add_argument("--mem-96", default="5G")
    ap.add_argument("--mem-70k", default="8G")
    ap.add_argument("--kernel", default="6.1")
    ap.add_argument("--scrapes", type=int, default=4)
    ap.add_argument("--scrape-every", type=float, default=15)
    ap.add_argument("--checks", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=2400)
    ap.add_argument("--host-only", action="store_true", help="only the host's side-by-side (no VM)")
    ap.add_argument("--no-host", action="store_true", help="no host side-by-side")
    ap.add_argument("--out", help="write the JSON here instead of results/self_cost.json")
    ap.add_argument("--host-scrapes", type=int, default=8)
    ap.add_argument("--host-checks", type=int, default=5)
    ap.add_argument("--exporter-only", action="store_true",
                    help="only this host's exporters side by side, no VM and no check: this tree's nodesleuth, "
                         "--before's and node_exporter at once, --host-scrapes scrapes each; kept under "
                         "host_exporter in results/self_cost.json (the rest of the file as it was)")
    ap.add_argument("--host-npd", action="store_true",
                    help="check --npd on this host at each of --points real dying memcgs (results' host_npd)")
    ap.add_argument("--before", help="with --exporter-only: a commit of this repository whose exporter runs beside")
    a = ap.parse_args(argv)
    if a.guest:
        return guest(a)
    if a.exporter_only:
        return exporter_only(a)
    if a.host_npd:
        return host_npd(a)
    from benchmarks.common import emit

    pts = [int(x) for x in a.points.split(",")]
    small = ",".join(str(p) for p in pts if p < 70000)
    big = ",".join(str(p) for p in pts if p >= 70000)
    vms = []
    if a.maxcpus == a.maxcpus_70k:  # one shape for all the points: one VM
        small, big = ",".join(str(p) for p in pts), ""
    if a.host_only:
        small = big = ""
    if small:
        vms.append(boot(small, a.cpus, a.maxcpus, a.mem_96, a))
    if big:
        vms.append(boot(big, a.cpus, a.maxcpus_70k, a.mem_70k, a))
    result = {"benchmark": "self_cost", "probe": "none: check --npd --no-probe (issue 38 part 1 not landed here)",
              "vms": vms, "table": summary(vms), "host": None if a.no_host else host_side_by_side(a)}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return emit(result, save=not a.out)


if __name__ == "__main__":
    main()
