"""Which configuration difference separates affected hosts from healthy ones.

Every snapshot becomes a set of features ("unit ecs.service enabled", "unit ecs.service
crash-looping", "sysctl vm.swappiness=60", "kernel 5.15.0-1051-aws", "package containerd=1.7.2",
"cgroup v1"...). For each feature we count the share of affected and of healthy hosts that have it;
the score is the difference of the shares (1.0 = on every affected host and no healthy one;
negative = a feature the healthy hosts have and the affected lack). Counting is one pass over the
hosts with set/Counter operations, so 10,000 snapshots take about a second.
"""

from __future__ import annotations

import os
import urllib.request

import orjson
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..errors import InputError


def features(s: dict) -> set[str]:
    f = set()
    f.add(f"kernel {s.get('kernel', '')}")
    if s.get("os_image"):
        f.add(f"os_image {s['os_image']}")
    for v in s.get("cgroup_versions", []):
        f.add(f"cgroup {v}")
    for k, v in (s.get("sysctls") or {}).items():
        f.add(f"sysctl {k}={v}")
    for k, v in (s.get("packages") or {}).items():
        f.add(f"package {k}={v}")
        f.add(f"package {k} installed")
    for k, v in (s.get("cloud") or {}).items():
        if k not in ("zone",):
            f.add(f"cloud {k}={v}")
    for u in s.get("units") or []:
        if u.get("enabled") == "enabled":
            f.add(f"unit {u['unit']} enabled")
        if u.get("active") == "active" or u.get("sub") == "auto-restart":
            f.add(f"unit {u['unit']} running")
        if u.get("crash_looping"):
            f.add(f"unit {u['unit']} enabled+crash-looping" if u.get("enabled") == "enabled"
                  else f"unit {u['unit']} crash-looping")
    return f


def affected(s: dict) -> bool:
    return bool((s.get("health") or {}).get("problem"))


@dataclass
class Ranked:
    feature: str
    affected_share: float
    healthy_share: float
    score: float


def load(sources: list[str]) -> list[dict]:
    """Snapshots from directories of .json files, single files, or http(s) URLs."""
    out = []
    for src in sources:
        if src.startswith(("http://", "https://")):
            try:
                with urllib.request.urlopen(src, timeout=10) as r:
                    doc = orjson.loads(r.read())
            except (OSError, ValueError) as e:
                raise InputError(src, f"cannot fetch snapshot: {e}") from None
            out += doc if isinstance(doc, list) else [doc]
            continue
        paths = [os.path.join(src, n) for n in sorted(os.listdir(src)) if n.endswith(".json")] \
            if os.path.isdir(src) else [src]
        for p in paths:
            try:
                with open(p, "rb") as f:
                    doc = orjson.loads(f.read())
            except OSError as e:
                raise InputError(p, e.strerror or str(e)) from None
            except orjson.JSONDecodeError as e:
                raise InputError(p, f"not a snapshot (invalid JSON: {e})") from None
            out += doc if isinstance(doc, list) else [doc]
    for s in out:
        if not isinstance(s, dict) or "health" not in s:
            raise InputError(str(s)[:40], "not a nodesleuth snapshot (no health section)")
    return out


def rank(snaps: list[dict], top: int = 15) -> tuple[list[Ranked], int, int]:
    aff = Counter()
    hea = Counter()
    na = nh = 0
    for s in snaps:
        fs = features(s)
        if affected(s):
            aff.update(fs)
            na += 1
        else:
            hea.update(fs)
            nh += 1
    rows = []
    for f in set(aff) | set(hea):
        pa = aff[f] / na if na else 0.0
        ph = hea[f] / nh if nh else 0.0
        if pa != ph:
            rows.append(Ranked(f, pa, ph, pa - ph))
    rows.sort(key=lambda r: (-abs(r.score), -r.affected_share, r.feature))
    return rows[:top], na, nh


def groups(snaps: list[dict], by: str) -> dict[str, tuple[int, int]]:
    """group value -> (affected, total)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in snaps:
        v = (s.get("cloud") or {}).get(by) if by in ("zone", "instance_type") else s.get(by)
        g = out[str(v or "?")]
        g[0] += affected(s)
        g[1] += 1
    return {k: (a, t) for k, (a, t) in sorted(out.items())}
