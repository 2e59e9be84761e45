"""The long-running parts left on for a while, as the DaemonSet runs them: `nodesleuth record` (with its
--profile, as deploy/kubernetes/daemonset.yaml) and `nodesleuth exporter`, the exporter scraped every 15 s
like Prometheus. Every 30 s each process tree's CPU seconds, RSS, open fds and threads and the store's
bytes are sampled; the verdict compares the last two thirds with the first third (no growth allowed: the
slopes are reported as measured, whatever they are).

`python -m benchmarks.soak [--seconds 3600] [--out FILE]`"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.common import emit


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """The process and all its descendants, now."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += _children(p)
    return seen


def _proc(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            status = dict(ln.split(":", 1) for ln in f if ":" in ln)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    tck = os.sysconf("SC_CLK_TCK")
    # utime, stime, cutime, cstime (fields 14-17): children already reaped count too
    cpu = sum(int(x) for x in st[11:15]) / tck
    rss = int(status.get("VmRSS", "0 kB").split()[0]) * 1024
    return {"cpu_s": cpu, "rss": rss, "fds": fds, "threads": int(status.get("Threads", "0").strip())}


def sample_tree(pid: int) -> dict:
    procs = [s for s in (_proc(p) for p in tree(pid)) if s]
    return {"procs": len(procs), "cpu_s": round(sum(s["cpu_s"] for s in procs), 2),
            "rss_mb": round(sum(s["rss"] for s in procs) / 2 ** 20, 2), "fds": sum(s["fds"] for s in procs),
            "threads": sum(s["threads"] for s in procs)}


def du(path: str) -> int:
    n = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(d, f)).st_blocks * 512
            except OSError:
                pass
    return n


def slope_per_h(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope, units per hour (xs in seconds)."""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den * 3600, 3) if den else None


def growth(series: list[dict], key: str) -> dict:
    """The first third (warm-up: caches, the first segment) against the last two thirds."""
    t = [s["t"] for s in series]
    v = [s[key] for s in series]
    n = len(v)
    if n < 6:
        return {"samples": n}
    a, b = n // 3, n - n // 3
    first, rest = v[:a], v[a:]
    return {"first_third_mean": round(sum(first) / len(first), 2), "last_two_thirds_mean": round(sum(rest) / len(rest), 2),
            "last_two_thirds_min": min(rest), "last_two_thirds_max": max(rest), "last_third_mean": round(sum(v[b:]) / len(v[b:]), 2),
            "slope_per_h_last_two_thirds": slope_per_h(t[a:], rest), "slope_per_h_all": slope_per_h(t, v)}


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--scrape-every", type=float, default=15)
    ap.add_argument("--sample-every", type=float, default=30)
    ap.add_argument("--out", help="also write the JSON here (the result file is results/soak.json)")
    ap.add_argument("--no-profile", action="store_true", help="record without --profile")
    a = ap.parse_args(argv)
    exe = os.path.join(os.path.dirname(sys.executable), "nodesleuth")
    store = tempfile.mkdtemp(prefix="ns-soak-store-", dir="/var/tmp")
    port = free_port()
    sd = ["--systemd-pid", "1"] if open("/proc/1/comm").read().strip() == "systemd" else []
    rec_cmd = [exe, "record", "--root", "/", *sd, "--store", store, "--tier-1s", "3d", "--tier-10s", "30d",
               "--tier-1m", "365d", "--max-size", "2G", "--quiet", *([] if a.no_profile else ["--profile"])]
    exp_cmd = [exe, "exporter", "--root", "/", *sd, "--listen", f"127.0.0.1:{port}"]
    rec = subprocess.Popen(rec_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    exp = subprocess.Popen(exp_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    series, scrapes = [], []
    next_scrape = next_sample = t0 + 5
    try:
        while time.time() - t0 < a.seconds:
            now = time.time()
            if now >= next_scrape:
                next_scrape += a.scrape_every
                c0 = sample_tree(exp.pid)["cpu_s"]
                t = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                        body = r.read()
                    ok = r.status == 200
                except OSError as e:
                    body, ok = b"", False
                    scrapes.append({"t": round(now - t0, 1), "error": str(e)[:120]})
                if ok:
                    scrapes.append({"t": round(now - t0, 1), "latency_ms": round((time.perf_counter() - t) * 1e3, 1),
                                    "bytes": len(body), "series": body.count(b"\n") - body.count(b"\n#"),
                                    "tree_cpu_during_s": round(sample_tree(exp.pid)["cpu_s"] - c0, 2)})
            if now >= next_sample:
                next_sample += a.sample_every
                r, e = sample_tree(rec.pid), sample_tree(exp.pid)
                series.append({"t": round(now - t0, 1), "recorder": r, "exporter": e, "store_bytes": du(store)})
                if rec.poll() is not None or exp.poll() is not None:
                    break
            time.sleep(max(0.05, min(next_scrape, next_sample) - time.time()))
    finally:
        died = {"recorder": rec.poll(), "exporter": exp.poll()}
        for p in (rec, exp):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        errs = {}
        for name, p in (("recorder", rec), ("exporter", exp)):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            errs[name] = p.stderr.read().decode(errors="replace")[-400:]
        store_bytes = du(store)
        shutil.rmtree(store, ignore_errors=True)
    elapsed = time.time() - t0

    def flat(part):
        return [{"t": s["t"], **s[part]} for s in series]
    verdict = {}
    for part in ("recorder", "exporter"):
        fl = flat(part)
        verdict[part] = {k: growth(fl, k) for k in ("rss_mb", "fds", "threads")}
        if len(fl) >= 2:
            verdict[part]["cpu_pct_of_core"] = round((fl[-1]["cpu_s"] - fl[0]["cpu_s"]) / max(1e-9, fl[-1]["t"] - fl[0]["t"]) * 100, 2)
            third = len(fl) // 3
            if third >= 1:
                verdict[part]["cpu_pct_first_third"] = round((fl[third]["cpu_s"] - fl[0]["cpu_s"]) / max(1e-9, fl[third]["t"] - fl[0]["t"]) * 100, 2)
                verdict[part]["cpu_pct_last_third"] = round((fl[-1]["cpu_s"] - fl[-1 - third]["cpu_s"]) / max(1e-9, fl[-1]["t"] - fl[-1 - third]["t"]) * 100, 2)
    sb = [{"t": s["t"], "store_mb": s["store_bytes"] / 2 ** 20} for s in series]
    verdict["store"] = {"final_bytes": store_bytes, "mb_per_h": slope_per_h([s["t"] for s in sb], [s["store_mb"] for s in sb])}
    ok = [s for s in scrapes if "latency_ms" in s]
    lat = sorted(s["latency_ms"] for s in ok)
    verdict["scrapes"] = {"n": len(scrapes), "failed": len(scrapes) - len(ok),
                          "latency_ms_median": lat[len(lat) // 2] if lat else None,
                          "latency_ms_max": lat[-1] if lat else None,
                          "series_first": ok[0]["series"] if ok else None, "series_last": ok[-1]["series"] if ok else None}
    result = {"benchmark": "soak", "requested_s": a.seconds, "elapsed_s": round(elapsed, 1),
              "recorder_cmd": " ".join(rec_cmd[1:]), "exporter_cmd": " ".join(exp_cmd[1:]),
              "died_early": {k: v for k, v in died.items() if v is not None}, "stderr_tail": errs,
              "verdict": verdict, "series": series, "scrapes": scrapes}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return emit(result, save=not a.out)


if __name__ == "__main__":
    main()
