"""Fleet analysis at fleet scale, three paths, each beside a real tool doing the same transfer.

- prometheus: 10,000 and 100,000 synthetic hosts (fixtures/fleetgen.py) written into a real TSDB by
  `promtool tsdb create-blocks-from openmetrics`, served by a real `prometheus`; wall time of
  `nodesleuth fleet --prometheus URL` end to end (process start, queries, ranking), median of 3,
  beside `curl` running the same PromQL queries one after another (the server's own share).
- snapshots: `nodesleuth fleet DIR` over 10,000 snapshot files (load + rank).
- direct: 200 real exporters on fixture roots; `nodesleuth fleet URL...` fetching /snapshot from
  all of them concurrently (cached, after each exporter's first), beside `--concurrency 1` (the
  one-after-another fetch it replaced) and `curl --parallel` over the same URLs; plus /snapshot
  latency after the first.
Prints one JSON object. Usage: python -m benchmarks.fleet [--hosts 10000 100000] [--exporters 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.common import emit
from fixtures.fleetgen import CAUSE, build_tsdb, make_fleet, serve_tsdb, write_fleet, write_openmetrics
from nodesleuth.node.children import spawn


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t, p


def prometheus_path(n: int) -> dict:
    d = tempfile.mkdtemp(prefix="ns-bench-fleet-tsdb-")
    proc = None
    try:
        at = float(int(time.time()) - 7200)
        t = time.perf_counter()
        snaps = make_fleet(n)
        write_openmetrics(os.path.join(d, "fleet.om"), snaps, at)
        gen_s = time.perf_counter() - t
        promtool_s = build_tsdb(os.path.join(d, "fleet.om"), os.path.join(d, "data"))
        om_mb = os.path.getsize(os.path.join(d, "fleet.om")) / 2 ** 20
        os.unlink(os.path.join(d, "fleet.om"))
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        t = time.perf_counter()
        proc = serve_tsdb(os.path.join(d, "data"), port)
        start_s = time.perf_counter() - t
        cmd = [sys.executable, "-m", "nodesleuth", "fleet", "--prometheus", url, "--time", str(at), "--json"]
        runs, doc, load = [], None, [os.getloadavg()[0]]
        for _ in range(3):
            s, p = timed(cmd)
            runs.append(s)
            if p.returncode != 0:
                return {"hosts": n, "error": p.stderr[-400:]}
            doc = json.loads(p.stdout)
            load.append(os.getloadavg()[0])
        from nodesleuth.fleet import prom

        listed = doc["affected_hosts"] if len(doc["affected_hosts"]) <= prom.MAX_LISTED else None
        plan = prom.plan(prom.DEFAULT_AFFECTED.replace("{host}", "instance"), "instance", doc["deduplicated"], listed)
        qs = list(plan.values())
        curl = []
        for _ in range(3):
            t = time.perf_counter()
            for q in qs:
                subprocess.run(["curl", "-sf", "-o", "/dev/null", f"{url}/api/v1/query", "--data-urlencode", f"query={q}",
                                "--data-urlencode", f"time={at}"], check=True)
            curl.append(time.perf_counter() - t)
        top = doc["ranked"][0]
        decoys = [(i, r["feature"], round(r["score"], 3)) for i, r in enumerate(doc["ranked"][:8])]
        return {"hosts": n, "openmetrics_mb": round(om_mb, 1),
                "generate_s": round(gen_s, 2), "promtool_s": round(promtool_s, 2), "prometheus_start_s": round(start_s, 2),
                "fleet_s_median": round(statistics.median(runs), 3), "fleet_s_runs": [round(x, 3) for x in runs],
                "curl_same_queries_s_median": round(statistics.median(curl), 3),
                "ratio_fleet_vs_curl": round(statistics.median(runs) / statistics.median(curl), 2),
                "queries": doc["queries"], "affected": doc["affected"], "healthy": doc["healthy"],
                "top_feature": top["feature"], "top_score": round(top["score"], 3), "top_p": top["p_value"],
                "top_q": top["q_value"], "found_cause": top["feature"] == CAUSE and top["significant"],
                "ranking": decoys, "under_10s": statistics.median(runs) < 10,
                "loadavg_1m_during": [round(x, 1) for x in load]}
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def snapshot_path(n: int) -> dict:
    d = tempfile.mkdtemp(prefix="ns-bench-fleet-")
    try:
        write_fleet(d, n)
        s, p = timed([sys.executable, "-m", "nodesleuth", "fleet", d, "--json"])
        doc = json.loads(p.stdout) if p.returncode == 0 else {}
        return {"hosts": n, "cli_s": round(s, 3), "top_feature": doc.get("ranked", [{}])[0].get("feature"),
                "found_cause": doc.get("ranked", [{}])[0].get("feature") == CAUSE}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def direct_path(n: int) -> dict:
    from fixtures.trees import make_v1_node

    d = tempfile.mkdtemp(prefix="ns-bench-fleet-exp-")
    procs = []
    try:
        roots = [make_v1_node(os.path.join(d, "sick")),
                 make_v1_node(os.path.join(d, "well"), tracked=300, live=240, nic_resets=0)]
        with open(os.path.join(roots[0], "run", "nodesleuth", "systemctl-show"), "w") as f:  # as test_fleet.py does
            f.write("Id=ecs.service\nNRestarts=100\nActiveState=activating\nSubState=auto-restart\n"
                    "UnitFileState=enabled\nResult=exit-code\nExecMainStatus=1\nMainPID=0\nRestart=on-failure\n"
                    "RestartUSec=10s\nFragmentPath=/lib/systemd/system/ecs.service\n"
                    "ControlGroup=/system.slice/ecs.service\n")
        ports = [free_port() for _ in range(n)]
        t = time.perf_counter()
        for i, port in enumerate(ports):  # one sick host in ten
            procs.append(spawn([sys.executable, "-m", "nodesleuth", "exporter", "--root", roots[i % 10 != 0],
                                "--listen", f"127.0.0.1:{port}", "--interval", "300", "--zone", f"z{i % 3}"],
                               stderr=subprocess.DEVNULL))
        urls = [f"http://127.0.0.1:{p}/snapshot" for p in ports]
        pending = set(urls)
        while pending and time.perf_counter() - t < 900:  # every exporter up and its first snapshot taken
            for u in list(pending):
                try:
                    urllib.request.urlopen(u, timeout=60).read()
                    pending.discard(u)
                except OSError:
                    pass
            time.sleep(1)
        ready_s = time.perf_counter() - t
        lat = []
        for u in urls[:50]:
            t = time.perf_counter()
            urllib.request.urlopen(u, timeout=10).read()
            lat.append((time.perf_counter() - t) * 1000)
        from nodesleuth.fleet import drift

        t = time.perf_counter()
        drift.fetch(urls, workers=32)
        fetch_conc = time.perf_counter() - t
        t = time.perf_counter()
        drift.fetch(urls, workers=1)
        fetch_seq = time.perf_counter() - t
        fleet = [sys.executable, "-m", "nodesleuth", "fleet", *urls, "--json"]
        conc_s, p = timed(fleet)
        doc = json.loads(p.stdout) if p.returncode in (0, 3) else {}
        seq_s, _ = timed(fleet + ["--concurrency", "1"])
        curl_s, _ = timed(["curl", "-s", "--parallel", "--parallel-max", "32", *[x for u in urls for x in (u, "-o", "/dev/null")]])
        return {"exporters": n, "not_ready": len(pending), "startup_and_first_snapshots_s": round(ready_s, 1),
                "snapshot_cached_ms_median": round(statistics.median(lat), 2),
                "snapshot_cached_ms_max": round(max(lat), 2),
                "fleet_concurrent_s": round(conc_s, 3), "fleet_sequential_s": round(seq_s, 3),
                "curl_parallel_s": round(curl_s, 3), "fetch_only_concurrent_s": round(fetch_conc, 3),
                "fetch_only_sequential_s": round(fetch_seq, 3), "ratio_sequential_vs_concurrent": round(seq_s / conc_s, 2),
                "ratio_fleet_vs_curl": round(conc_s / curl_s, 2), "hosts": doc.get("hosts"),
                "affected": doc.get("affected"), "unreachable": len(doc.get("unreachable", [])),
                "top_feature": (doc.get("ranked") or [{}])[0].get("feature")}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def stalled_path(n: int) -> dict:
    """n hosts that accept a connection and never answer (a hung node): fetched at once vs one by one."""
    import socket

    from nodesleuth.fleet import drift

    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(4)
            socks.append(s)
        urls = [f"http://127.0.0.1:{s.getsockname()[1]}/snapshot" for s in socks]
        t = time.perf_counter()
        conc = drift.fetch(urls, workers=32, timeout=2.0, retries=0)
        conc_s = time.perf_counter() - t
        t = time.perf_counter()
        seq = drift.fetch(urls, workers=1, timeout=2.0, retries=0)
        seq_s = time.perf_counter() - t
        return {"stalled_hosts": n, "timeout_s": 2.0, "concurrent_s": round(conc_s, 2), "sequential_s": round(seq_s, 2),
                "ratio_sequential_vs_concurrent": round(seq_s / conc_s, 1),
                "listed_unreachable": [len(conc.unreachable), len(seq.unreachable)]}
    finally:
        for s in socks:
            s.close()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=[10000, 100000])
    ap.add_argument("--snapshots", type=int, default=10000)
    ap.add_argument("--exporters", type=int, default=200)
    ap.add_argument("--stalled", type=int, default=20)
    a = ap.parse_args(argv)
    out = {"benchmark": "fleet", "prometheus": [prometheus_path(n) for n in a.hosts if n],
           "stalled": stalled_path(a.stalled) if a.stalled else None,
           "snapshots": snapshot_path(a.snapshots) if a.snapshots else None,
           "direct": direct_path(a.exporters) if a.exporters else None}
    return emit(out)


if __name__ == "__main__":
    main()
