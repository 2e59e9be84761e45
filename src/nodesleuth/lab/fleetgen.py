"""A generated fleet of snapshots for the drift analysis: the cause is one unit enabled in one zone
(the bootstrap difference of the incident), mixed with noise differences that must rank lower."""

from __future__ import annotations

import json
import os
import random


def host(i: int, zone: str, rng: random.Random, ecs: str) -> dict:
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
    problem = ecs == "looping"
    return {"schema": "nodesleuth.snapshot/v1", "time": 1796000000 + i, "host": f"ip-10-0-{i // 250}-{i % 250}",
            "kernel": kernel, "os_image": "Ubuntu 20.04.6 LTS",
            "cloud": {"zone": zone, "instance_type": rng.choice(["p4d.24xlarge", "p5.48xlarge"])},
            "cgroup_versions": ["v1"],
            "sysctls": {"vm.swappiness": rng.choice(["60", "10"]), "kernel.numa_balancing": "0",
                        "net.core.netdev_budget": rng.choice(["300", "600"])},
            "packages": pk, "units": units,
            "health": {"problem": problem, "dying_memcgs": dying,
                       "findings": ([{"kind": "zombie_cgroups", "severity": "critical",
                                      "title": f"{dying} zombie memory cgroups"}] if problem else []),
                       "crash_looping_units": ["ecs.service"] if problem else [],
                       "nic_resets": rng.randrange(0, 4) if problem else 0, "hot_cores": 0}}


def make_fleet(n: int = 300, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    zones = ["us-east-1a", "us-east-1b", "us-east-1c"]
    out = []
    for i in range(n):
        zone = zones[i % 3]
        ecs = "looping" if zone == "us-east-1a" else ("working" if zone == "us-east-1b" and rng.random() < 0.1
                                                      else "absent")
        out.append(host(i, zone, rng, ecs))
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
