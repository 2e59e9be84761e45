"""A generated fleet for the drift analysis (tests and benchmarks only, not shipped).

The planted cause is the incident's: one unit (ecs.service) enabled in one zone's bootstrap, crash-
looping because that zone's hosts cannot reach a cluster. Noise as fleets have it: the cause is on
97% of that zone's hosts, 85% of those had incidents (the rest were not loaded enough), 1.5% of all
other hosts had unrelated incidents, 10% of another zone run the same unit healthily; decoys follow the
zone (a kernel rolled out to that zone first and half of another, a package on that zone and most
of a third) and random facts (instance type, sysctls, a driver version) follow nothing.

Two renderings of the same hosts: snapshots (the direct path) and OpenMetrics with the exporter's
info metrics and incident counters over 25 h, for `promtool tsdb create-blocks-from openmetrics`
and a real Prometheus (the --prometheus path). The info series come from nodesleuth.fleet.facts,
the exporter's own code, so the TSDB holds exactly what exporters would have exposed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
import urllib.request

from nodesleuth.node.children import spawn
from nodesleuth.fleet.facts import info_series, labels_of

ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
CAUSE = "unit ecs.service enabled+crash-looping"
DECOYS = ["kernel 5.15.0-1051-aws", "package cloud-utils installed", "package cloud-utils=0.32-18"]


def host(i: int, zone: str, rng: random.Random, ecs: str, problem: bool) -> dict:
    """ecs: 'looping' (enabled, cannot reach a cluster), 'working' (enabled, healthy), 'absent'."""
    kernel = "5.15.0-1051-aws" if zone == "us-east-1a" or (zone == "us-east-1b" and rng.random() < 0.5) \
        else "5.15.0-1049-aws"
    pk = {"containerd": "1.7.2-0ubuntu1~20.04.1", "kubelet": "1.29.4-1.1", "systemd": "245.4-4ubuntu3.23",
          "nvidia-driver-535": rng.choice(["535.161.08-0ubuntu1", "535.183.01-0ubuntu1"])}
    if zone == "us-east-1a" or (zone == "us-east-1c" and rng.random() < 0.6):
        pk["cloud-utils"] = "0.32-18"
    units = [{"unit": "kubelet.service", "enabled": "enabled", "active": "active", "sub": "running",
              "n_restarts": rng.randrange(0, 2), "crash_looping": False},
             {"unit": "containerd.service", "enabled": "enabled", "active": "active", "sub": "running",
              "n_restarts": 0, "crash_looping": False}]
    if ecs == "looping":
        units.append({"unit": "ecs.service", "enabled": "enabled", "active": "activating", "sub": "auto-restart",
                      "n_restarts": rng.randrange(2000, 9000), "crash_looping": True})
    elif ecs == "working":
        units.append({"unit": "ecs.service", "enabled": "enabled", "active": "active", "sub": "running",
                      "n_restarts": 0, "crash_looping": False})
    dying = rng.randrange(40000, 70000) if ecs == "looping" else rng.randrange(0, 300)
    nic = rng.randrange(1, 4) if problem else 0
    return {"schema": "nodesleuth.snapshot/v1", "time": 1796000000 + i, "host": f"ip-10-{i // 62500}-{i // 250 % 250}-{i % 250}",
            "kernel": kernel, "os_image": "Ubuntu 20.04.6 LTS",
            "cloud": {"zone": zone, "instance_type": rng.choice(["p4d.24xlarge", "p5.48xlarge"])},
            "cgroup_versions": ["v1"],
            "sysctls": {"vm.swappiness": rng.choice(["60", "10"]), "kernel.numa_balancing": "0",
                        "net.core.netdev_budget": rng.choice(["300", "600"])},
            "packages": pk, "units": units,
            "health": {"problem": problem, "dying_memcgs": dying,
                       "findings": ([{"kind": "nic_reset", "severity": "critical",
                                      "title": f"{nic} ENA resets"}] if problem else []),
                       "crash_looping_units": ["ecs.service"] if ecs == "looping" else [],
                       "nic_resets": nic, "hot_cores": int(problem and rng.random() < 0.5)}}


def make_fleet(n: int = 300, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        zone = ZONES[i % len(ZONES)]
        if zone == "us-east-1a":
            ecs = "looping" if rng.random() < 0.97 else "absent"
        else:
            ecs = "working" if zone == "us-east-1b" and rng.random() < 0.1 else "absent"
        problem = rng.random() < (0.85 if ecs == "looping" else 0.015)
        out.append(host(i, zone, rng, ecs, problem))
    return out


def write_fleet(directory: str, n: int = 300, seed: int = 1) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    paths = []
    for s in make_fleet(n, seed):
        p = os.path.join(directory, f"{s['host']}.json")
        with open(p, "w") as f:
            json.dump(s, f)
        paths.append(p)
    return paths


def _labels(d: dict) -> str:
    return ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                    for k, v in d.items())


def write_openmetrics(path: str, snaps: list[dict], at: float, seed: int = 2, twice_every: int = 200) -> None:
    """The fleet as its exporters would have been scraped, ending 60 s before `at`: info metrics at
    the last scrape, incident counters at at-24h-2m, at-12h, at-60s. An affected host's counter moved
    in the last 24 h (80%) or is a series younger than 24 h that is above zero (20%: host added
    today); 10% of healthy hosts carry old incidents that did not move; one host in `twice_every` is
scraped by a second job too (its info series twice, with another job label)."""
    rng = random.Random(seed)
    t0, t1, t2 = at - 24 * 3600 - 120, at - 12 * 3600, at - 60  # t0: the scrape `offset 24h` finds
    fams: dict[str, list[str]] = {}
    counters = []
    for i, s in enumerate(snaps):
        base = {"instance": f"{s['host']}:9846", "job": "nodesleuth"}
        for job in ("nodesleuth", "kubernetes-pods")[:1 + (twice_every > 0 and i % twice_every == 0)]:
            for name, vals in info_series(s):
                fams.setdefault(name, []).append(
                    f"{name}_info{{{_labels({**base, 'job': job, **labels_of(name, vals)})}}} 1 {t2:.3f}")
        h = s["health"]
        for kind, now in (("nic_reset", h["nic_resets"]), ("hot_core", h["hot_cores"])):
            lab = _labels({**base, "kind": kind})
            if now and rng.random() < 0.2:  # a host added today: a young series, already above zero
                counters.append(f"nodesleuth_incidents_total{{{lab}}} {now} {t2:.3f}")
                continue
            old = rng.randrange(1, 5) if not h["problem"] and rng.random() < 0.1 else 0
            for t, v in ((t0, old), (t1, old), (t2, old + now)):
                counters.append(f"nodesleuth_incidents_total{{{lab}}} {v} {t:.3f}")
    with open(path, "w") as f:
        for name, lines in fams.items():
            f.write(f"# TYPE {name} info\n")
            f.write("\n".join(lines) + "\n")
        f.write("# TYPE nodesleuth_incidents counter\n")
        f.write("\n".join(counters) + "\n# EOF\n")


def build_tsdb(om: str, data: str) -> float:
    """promtool writes the blocks; returns seconds taken."""
    t = time.perf_counter()
    p = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", om, data],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"promtool: {p.stderr[-500:]}")
    return time.perf_counter() - t


def serve_tsdb(data: str, port: int, timeout: float = 120) -> subprocess.Popen:
    """A real Prometheus over the blocks in `data` (no scrape jobs), on 127.0.0.1:port, ready."""
    cfg = os.path.join(data, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
    log = open(os.path.join(data, "prometheus.log"), "w")
    p = spawn([shutil.which("prometheus"), f"--config.file={cfg}", f"--storage.tsdb.path={data}",
               f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
              stdout=log, stderr=log)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2).status == 200:
                return p
        except OSError:
            time.sleep(0.2)
        if p.poll() is not None:
            break
    p.kill()
    p.wait()
    raise RuntimeError(f"prometheus did not start: {open(os.path.join(data, 'prometheus.log')).read()[-800:]}")
