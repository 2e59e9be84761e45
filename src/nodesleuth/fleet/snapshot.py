"""`nodesleuth snapshot`: a JSON host fingerprint plus health figures, the unit of fleet analysis."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import time

from ..node.cgroupfs import mounts
from ..node.children import run
from ..node.root import Root

SCHEMA = "nodesleuth.snapshot/v1"
SYSCTLS = ("kernel/osrelease", "kernel/pid_max", "kernel/numa_balancing", "vm/swappiness", "vm/overcommit_memory",
           "vm/min_free_kbytes", "vm/vfs_cache_pressure", "vm/dirty_ratio", "net/core/netdev_budget",
           "net/core/netdev_budget_usecs", "net/core/rps_sock_flow_entries", "net/core/somaxconn",
           "fs/inotify/max_user_instances", "user/max_cgroup_namespaces")
PACKAGES = ("linux-image-*", "systemd", "containerd*", "docker*", "kubelet", "kubeadm", "ecs-init",
            "amazon-ecs-init", "nvidia-driver*", "cuda-drivers*", "cloud-init", "irqbalance")


def kernel_release(root: Root) -> str:
    v = root.read_opt("/proc/sys/kernel/osrelease")
    return v.strip() if v else (platform.release() if root.live else "")


def os_image(root: Root) -> str:
    txt = root.read_opt("/etc/os-release") or ""
    for line in txt.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return ""


def cloud_facts(root: Root) -> dict[str, str]:
    """Zone and instance type when the host shows them (cloud-init's instance data, DMI)."""
    out = {}
    data = root.read_opt("/run/cloud-init/instance-data.json")
    if data:
        try:
            d = json.loads(data)
            v1 = d.get("v1", d)
            out["zone"] = v1.get("availability_zone") or v1.get("availability-zone") or ""
            out["instance_type"] = v1.get("instance_type", "") or d.get("ds", {}).get("meta_data", {}).get(
                "instance-type", "")
            out["cloud"] = v1.get("cloud_name", "")
        except (ValueError, AttributeError):
            pass
    for key, path in (("dmi_product", "/sys/class/dmi/id/product_name"), ("dmi_vendor", "/sys/class/dmi/id/sys_vendor")):
        v = root.read_opt(path)
        if v and v.strip():
            out[key] = v.strip()
    return {k: v for k, v in out.items() if v}


def sysctls(root: Root) -> dict[str, str]:
    out = {}
    for k in SYSCTLS:
        v = root.read_opt(f"/proc/sys/{k}")
        if v is not None:
            out[k.replace("/", ".")] = " ".join(v.split())
    return out


_PACKAGES_SEEN: dict[str, tuple[tuple, dict[str, str]]] = {}  # root path -> (database stamp, packages)


def _db_stamp(root: Root) -> tuple:
    """What changes when a package is installed or removed: the dpkg status file's or the rpm database
    files' (size, mtime), and whether the query tools are there."""
    out = []
    for d in ("/var/lib/dpkg/status", "/var/lib/dpkg/updates", "/var/lib/rpm", "/usr/lib/sysimage/rpm"):
        p = root.join(d)
        try:
            names = [""] if d.endswith("status") else sorted(os.listdir(p))
        except OSError:
            continue
        for n in names:
            try:
                st = os.stat(os.path.join(p, n) if n else p)
            except OSError:
                continue
            out.append((d, n, st.st_size, st.st_mtime_ns))
    return tuple(out) + (bool(shutil.which("dpkg-query")), bool(shutil.which("rpm")))


def packages(root: Root) -> dict[str, str]:
    """Selected installed packages of the root's own system: its dpkg database (ROOT/var/lib/dpkg,
    read with dpkg-query --admindir, so a container reads the host's) or its rpm database (rpm
    --root); a recorded tree keeps them in ROOT/run/nodesleuth/packages.json. The query's answer is
    kept until the database changes (the exporter asks every minute: a dpkg-query a minute cost it more
    CPU than all else it did in that minute but the 1 Hz sampling)."""
    if not root.live:
        rec = root.read_opt("/run/nodesleuth/packages.json")
        return json.loads(rec) if rec else {}
    stamp = _db_stamp(root)
    seen = _PACKAGES_SEEN.get(root.path)
    if seen is not None and seen[0] == stamp:
        return dict(seen[1])
    out = _query_packages(root)
    if out is not None:
        _PACKAGES_SEEN[root.path] = (stamp, dict(out))
    return out or {}


def _query_packages(root: Root) -> dict[str, str] | None:
    """dpkg-query or rpm; None when the query failed (not kept: asked again next time)."""
    out: dict[str, str] = {}
    if root.exists("/var/lib/dpkg/status") and shutil.which("dpkg-query"):
        try:
            p = run(["dpkg-query", f"--admindir={root.join('/var/lib/dpkg')}", "-W", "-f",
                     "${Package}\t${Version}\t${db:Status-Status}\n", *PACKAGES], timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        for line in p.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[2] == "installed":
                out[parts[0]] = parts[1]
    elif (root.exists("/var/lib/rpm") or root.exists("/usr/lib/sysimage/rpm")) and shutil.which("rpm"):
        try:
            p = run(["rpm", f"--root={root.path}", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n", *PACKAGES],
                    timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        for line in p.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) == 2 and " " not in parts[0]:
                out[parts[0]] = parts[1]
    return out


def cgroup_versions(root: Root) -> list[str]:
    ms = mounts(root)
    return sorted({"v1" if m.fstype == "cgroup" else "v2" for m in ms})


def unit_dicts(read, enabled: list[str]) -> list[dict]:
    """Units systemd reported (read_units) plus enabled services that are not running."""
    units = [{"unit": u.id, "enabled": u.enabled, "active": u.active, "sub": u.sub,
              "n_restarts": u.n_restarts, "crash_looping": u.crash_looping} for u in read or []]
    seen = {u["unit"] for u in units}
    units += [{"unit": n, "enabled": "enabled", "active": "inactive", "sub": "dead", "n_restarts": 0,
               "crash_looping": False} for n in enabled if n not in seen]
    return units


def host_facts(root: Root, zone: str | None, units: list[dict]) -> dict:
    """The configuration part of a snapshot (what fleet/facts.py turns into info metrics)."""
    facts = cloud_facts(root)
    if zone:
        facts["zone"] = zone
    return {"schema": SCHEMA, "time": time.time(),
            "host": root.hostname(),
            "kernel": kernel_release(root), "os_image": os_image(root), "cloud": facts,
            "cgroup_versions": cgroup_versions(root), "sysctls": sysctls(root), "packages": packages(root),
            "units": units}


def take(root: Root, seconds: float = 2.0, ns_pid: int | None = None, zone: str | None = None) -> dict:
    from ..node.systemd import enabled_services
    from ..check.run import CheckOptions, run_check

    res = run_check(CheckOptions(root=root.path, seconds=seconds, ns_pid=ns_pid, trace=False))
    doc = host_facts(root, zone, unit_dicts(res.units, enabled_services(root, ns_pid)))
    units = doc["units"]
    dying = res.ticks[-1].census.memory_dying() if res.ticks else None
    doc["health"] = {"problem": res.exit_code == 1, "dying_memcgs": dying,
                     "findings": [{"kind": f.kind, "severity": f.severity, "title": f.title} for f in res.findings],
                     "crash_looping_units": [u["unit"] for u in units if u["crash_looping"]],
                     "nic_resets": sum(1 for f in res.findings if f.kind == "nic_reset"),
                     "hot_cores": sum(1 for f in res.findings if f.kind == "hot_core")}
    return doc
