"""Which configuration difference separates affected hosts from healthy ones, and how surely.

Every host becomes a set of features (fleet/facts.py: "unit ecs.service enabled+crash-looping",
"kernel 5.15.0-1051-aws", "sysctl vm.swappiness=60"...). For each feature we count the affected and
the healthy hosts that have it; the score is the difference of the shares (1.0 = on every affected
host and no healthy one). A share difference alone is not evidence (3 affected hosts out of 10,000
can share a feature by chance), so each feature also gets Fisher's exact test p-value on its 2x2
table and, because many features are tested at once, a Benjamini-Hochberg q-value (false discovery
rate). Significant features (q < ALPHA) rank first, by score. The ranking works on counts, so the
snapshot path (counts here) and the Prometheus path (counts done by the server) share it.

With no affected or no healthy host there is nothing to compare: `rank_counts` refuses.
"""

from __future__ import annotations

import math
import os
import time
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson

from ..model import stats
from ..model.errors import InputError
from .facts import host_features

ALPHA = 0.05


def features(s: dict) -> set[str]:
    return host_features(s)


def affected(s: dict) -> bool:
    return bool((s.get("health") or {}).get("problem"))


@dataclass
class Ranked:
    feature: str
    affected_hosts: int
    healthy_hosts: int
    affected_share: float
    healthy_share: float
    score: float
    p_value: float  # Fisher's exact test, two-sided (0.0 when below the smallest float)
    q_value: float  # Benjamini-Hochberg over all features tested
    significant: bool
    log10_p: float = 0.0  # one-sided hypergeometric tail in the score's direction: stays finite where p underflows


@dataclass
class Fetched:
    snapshots: list[dict]
    unreachable: list[tuple[str, str]] = field(default_factory=list)  # (url, last error)


def _fetch(url: str, timeout: float, retries: int) -> dict | list | str:
    err = ""
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return orjson.loads(r.read())
        except orjson.JSONDecodeError as e:
            return f"not a snapshot (invalid JSON: {e})"
        except (OSError, ValueError) as e:
            err = str(getattr(e, "reason", None) or e)
            if attempt < retries:
                time.sleep(min(2.0, 0.2 * 2 ** attempt))
    return err


def fetch(urls: list[str], workers: int = 32, timeout: float = 5.0, retries: int = 2) -> Fetched:
    """Snapshots from exporters' /snapshot URLs, `workers` at a time; a host that does not answer
    within timeout after `retries` retries is listed, never waited on longer or taken as healthy."""
    out = Fetched([])
    if not urls:
        return out
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(urls)))) as pool:
        for url, doc in zip(urls, pool.map(lambda u: _fetch(u, timeout, retries), urls)):
            if isinstance(doc, str):
                out.unreachable.append((url, doc))
            else:
                out.snapshots += doc if isinstance(doc, list) else [doc]
    return out


def load(sources: list[str], workers: int = 32, timeout: float = 5.0, retries: int = 2) -> Fetched:
    """Snapshots from directories of .json files, single files, or http(s) URLs (fetched concurrently).
    A bad file is an error naming it; unreachable URLs are listed in the result."""
    urls = [s for s in sources if s.startswith(("http://", "https://"))]
    out = fetch(urls, workers, timeout, retries)
    for src in sources:
        if src in urls:
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
            out.snapshots += doc if isinstance(doc, list) else [doc]
    for s in out.snapshots:
        if not isinstance(s, dict) or "health" not in s:
            raise InputError(str(s)[:40], "not a nodesleuth snapshot (no health section)")
    if urls and len(out.unreachable) == len(urls) and not out.snapshots:
        url, err = out.unreachable[0]
        raise InputError(url, f"no host answered ({len(urls)} tried; this one: {err})")
    return out


def count(snaps: list[dict]) -> tuple[Counter, Counter, int, int]:
    """(features of affected hosts, of healthy hosts, n affected, n healthy)."""
    aff, hea = Counter(), Counter()
    na = nh = 0
    for s in snaps:
        fs = features(s)
        if affected(s):
            aff.update(fs)
            na += 1
        else:
            hea.update(fs)
            nh += 1
    return aff, hea, na, nh


def refuse_if_one_sided(na: int, nh: int, source: str, how: str) -> None:
    if na and nh:
        return
    which = "affected" if not na else "healthy"
    raise InputError(source, f"no {which} host among {na + nh}: fleet analysis compares affected with healthy "
                             f"hosts and needs both; {how}")


def rank_counts(aff: Counter, hea: Counter, na: int, nh: int, top: int = 15) -> list[Ranked]:
    """Features ranked: significant ones (BH q < ALPHA) first, then by |score|, then by p (one-sided
    log10 p where both underflow)."""
    rows = []
    for f in set(aff) | set(hea):
        a, h = aff[f], hea[f]
        pa, ph = a / na, h / nh
        if a == h == 0 or pa == ph:
            continue
        p = stats.fisher_exact([[a, na - a], [h, nh - h]])
        tail = (stats.hypergeom_log_sf(a - 1, na + nh, a + h, na) if pa > ph
                else stats.hypergeom_log_cdf(a, na + nh, a + h, na))
        rows.append(Ranked(f, a, h, pa, ph, pa - ph, p, 1.0, False, round(float(tail) / math.log(10), 2)))
    if rows:
        qs = stats.bh([r.p_value for r in rows])
        for r, q in zip(rows, qs):
            r.q_value = float(q)
            r.significant = r.q_value < ALPHA
    rows.sort(key=lambda r: (not r.significant, -abs(r.score), r.p_value, r.log10_p, r.feature))
    return rows[:top]


def rank(snaps: list[dict], top: int = 15) -> tuple[list[Ranked], int, int]:
    aff, hea, na, nh = count(snaps)
    refuse_if_one_sided(na, nh, "snapshots", "pass snapshots of healthy and of affected hosts")
    return rank_counts(aff, hea, na, nh, top), na, nh


def groups(snaps: list[dict], by: str) -> dict[str, tuple[int, int]]:
    """group value -> (affected, total)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in snaps:
        v = (s.get("cloud") or {}).get(by) if by in ("zone", "instance_type") else s.get(by)
        g = out[str(v or "?")]
        g[0] += affected(s)
        g[1] += 1
    return {k: (a, t) for k, (a, t) in sorted(out.items())}
