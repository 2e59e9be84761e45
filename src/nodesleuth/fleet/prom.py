"""`fleet --prometheus URL`: the fleet question asked of the Prometheus that already scrapes the exporters.

Affected hosts are whatever a PromQL expression selects (default: nodesleuth's own incident counters
moved in the last 24 h). The counting is done by the server: per info metric, one instant query
counts hosts per label set over all hosts and one over the affected hosts only, so the answer that
comes back is per-feature counts (hundreds of rows), not 10,000 hosts' series. When a host is
exported twice (node_info series outnumber hosts), the counts first collapse duplicates
(`count by (HOST, labels)`), so a host scraped by two jobs counts once. Works against any server with the Prometheus HTTP API (Thanos, Mimir, VictoriaMetrics).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson

from ..errors import InputError
from ..metrics import METRICS
from .drift import Ranked, rank_counts, refuse_if_one_sided
from .facts import INFO, features_of

INCIDENT_KINDS = 'kind=~"nic_reset|hot_core"'
# moved in the last 24 h, or a series younger than 24 h that is non-zero (the exporter counts what the
# kernel ring still held at its start, so a new series starts above zero and increase() misses it)
DEFAULT_AFFECTED = (f"max by ({{host}}) ((increase(nodesleuth_incidents_total{{{INCIDENT_KINDS}}}[24h]) > 0) "
                    f"or (nodesleuth_incidents_total{{{INCIDENT_KINDS}}} > 0 "
                    f"unless nodesleuth_incidents_total{{{INCIDENT_KINDS}}} offset 24h))")


@dataclass
class PromResult:
    hosts: int  # hosts exporting nodesleuth_node_info
    affected: int  # of those, selected by the expression
    healthy: int
    ranked: list[Ranked]
    groups: dict[str, tuple[int, int]]
    affected_hosts: list[str]  # host label values the expression selected
    expression: str
    queries: int
    notes: list[str] = field(default_factory=list)


class Prometheus:
    def __init__(self, url: str, timeout: float = 130.0, at: float | None = None):  # server default: 2 min
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.at = at
        self.n = 0

    def query(self, q: str) -> list[dict]:
        """One instant query (POST, so long expressions fit); an error names the server or the query."""
        form = {"query": q}
        if self.at is not None:
            form["time"] = f"{self.at:.3f}"
        req = urllib.request.Request(f"{self.url}/api/v1/query", data=urllib.parse.urlencode(form).encode(),
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.n += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                doc = orjson.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                msg = orjson.loads(e.read()).get("error", str(e))
            except (ValueError, OSError):
                msg = str(e)
            raise InputError(q, f"Prometheus at {self.url} refused the query: {msg}") from None
        except (OSError, ValueError) as e:
            raise InputError(self.url, f"cannot query Prometheus: {getattr(e, 'reason', None) or e}") from None
        if doc.get("status") != "success":
            raise InputError(q, f"Prometheus at {self.url}: {doc.get('error', doc)}")
        if doc["data"]["resultType"] != "vector":
            raise InputError(q, f"expected an instant vector, got a {doc['data']['resultType']}")
        return doc["data"]["result"]


def plan(aff_expr: str, host: str = "instance", dedup: bool = False) -> dict[str, str]:
    """The instant queries: one count over every info metric (grouped by __name__ too) for all hosts
    and one for the affected, so the affected-hosts expression is evaluated twice in all."""
    labels = ", ".join(dict.fromkeys(lab for m in INFO for lab in METRICS[m].labels))
    every = f'{{__name__=~"{"|".join(m + "_info" for m in INFO)}"}}'
    if dedup:
        every = f"count by ({host}, __name__, {labels}) ({every})"
    by = f"count by (__name__, {labels})"
    aff_join = f"and on ({host}) ({aff_expr})"
    return {"affected": aff_expr, "hosts": f"count(count by ({host}) (nodesleuth_node_info))",
            "node_series": "count(nodesleuth_node_info)",
            "all": f"{by} ({every})", "affected_counts": f"{by} ({every} {aff_join})"}


def analyse(url: str, affected_expr: str | None = None, host: str = "instance", group_by: str = "zone",
            top: int = 15, at: float | None = None, workers: int = 8) -> PromResult:
    prom = Prometheus(url, at=at)
    aff_expr = (affected_expr or DEFAULT_AFFECTED).replace("{host}", host)
    node_labels = METRICS["nodesleuth_node"].labels
    if group_by not in node_labels:
        raise InputError(group_by, f"cannot group by it: use one of {', '.join(node_labels)}")
    queries = plan(aff_expr, host)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        res = dict(zip(queries, pool.map(prom.query, queries.values())))
        if res["hosts"] and res["node_series"][0]["value"][1] != res["hosts"][0]["value"][1]:
            # some host is exported twice (two jobs, two relabelings): count each host once per label set
            counts = {k: v for k, v in plan(aff_expr, host, dedup=True).items() if k in ("all", "affected_counts")}
            res.update(zip(counts, pool.map(prom.query, counts.values())))
    sel = res["affected"]
    missing_host = [r["metric"] for r in sel if host not in r["metric"]]
    if missing_host:
        raise InputError(aff_expr, f"the affected-hosts expression must keep the {host!r} label "
                                   f"(e.g. max by ({host}) (...)); a series came back as {missing_host[0]}")
    affected_hosts = sorted({r["metric"][host] for r in sel})
    n_hosts = int(float(res["hosts"][0]["value"][1])) if res["hosts"] else 0
    if not n_hosts:
        raise InputError(url, "no host exports nodesleuth_node_info: is the nodesleuth exporter scraped?")

    def tally(rows) -> tuple[Counter, dict[str, int], int]:
        feats, grp, nodes = Counter(), Counter(), 0
        for r in rows:
            m, n = r["metric"], int(float(r["value"][1]))
            name = m.get("__name__", "")[:-len("_info")]
            for f in features_of(name, m):
                feats[f] += n
            if name == "nodesleuth_node":
                grp[m.get(group_by) or "?"] += n
                nodes += n
        return feats, grp, nodes

    total, g_all, nodes_all = tally(res["all"])
    aff, g_aff, na = tally(res["affected_counts"])
    nh = n_hosts - na
    notes = []
    if nodes_all > n_hosts:
        notes.append(f"{nodes_all - n_hosts} hosts export nodesleuth_node_info with two label sets (changed "
                     "facts, or two jobs relabelling differently): counted under each")
    if len(affected_hosts) > na:
        notes.append(f"{len(affected_hosts) - na} affected hosts export no nodesleuth_node_info "
                     "(exporter too old or facts unreadable): left out of the comparison")
    refuse_if_one_sided(na, nh, aff_expr,
                        "it selects every host; pass --affected EXPR that selects some hosts, not all" if na else
                        "no host matches it; pass --affected EXPR, or --time T for when the incident was")
    hea = Counter({f: n - aff[f] for f, n in total.items()})
    groups = {k: (g_aff.get(k, 0), t) for k, t in sorted(g_all.items())}
    return PromResult(n_hosts, na, nh, rank_counts(aff, hea, na, nh, top), groups, affected_hosts, aff_expr,
                      prom.n, notes)
