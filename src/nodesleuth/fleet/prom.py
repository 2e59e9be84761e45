"""`fleet --prometheus URL`: the fleet question asked of the Prometheus that already scrapes the exporters.

Affected hosts are whatever a PromQL expression selects (default: nodesleuth's own incident counters
moved in the last 24 h). The counting is done by the server, in five instant queries (`plan`): the
hosts, their node_info series (to see whether some host is exported twice), then at once the
affected hosts and two counts of hosts per info label set, over all hosts and over the affected. What comes back is per-feature
counts (hundreds of rows), not the fleet's series. Works against any server with the Prometheus
HTTP API (Thanos, Mimir, VictoriaMetrics).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import orjson

from ..model.errors import InputError
from ..model.metrics import METRICS
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
    deduplicated: bool  # some host was exported twice and counted once
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
        except TimeoutError:
            raise InputError(self.url, f"Prometheus did not answer in {self.timeout:g} s (fleet --timeout)") from None
        except OSError as e:
            why = getattr(e, "reason", None) or e
            if isinstance(why, TimeoutError):
                raise InputError(self.url, f"Prometheus did not answer in {self.timeout:g} s (fleet --timeout)") from None
            raise InputError(self.url, f"cannot query Prometheus: {why}") from None
        except ValueError as e:
            raise InputError(self.url, f"not a Prometheus HTTP API answer (expected JSON from /api/v1/query: {e})") from None
        if doc.get("status") != "success":
            raise InputError(q, f"Prometheus at {self.url}: {doc.get('error', doc)}")
        if doc["data"]["resultType"] != "vector":
            raise InputError(q, f"expected an instant vector, got a {doc['data']['resultType']}")
        return doc["data"]["result"]


MAX_LISTED = 5000  # affected hosts named in a label matcher; more are joined with `and on` instead


def plan(aff_expr: str, host: str = "instance", dedup: bool = False, listed: list[str] | None = None) -> dict[str, str]:
    """The instant queries. Two do the heavy work, each one count over every info metric (grouped by
    __name__ too): for all hosts, and for the affected ones. With `dedup`, each host counts once per
    label set first. (One query joining an affected/healthy label onto every series instead measured
    twice as slow: the join costs more than expanding the series twice.) With `listed`, the affected
    hosts (from the affected query) are named in a matcher, which Prometheus answers from its index
    with their series only, instead of evaluating the expression again and joining every series."""
    labels = ", ".join(dict.fromkeys(lab for m in INFO for lab in METRICS[m].labels))
    names = "|".join(m + "_info" for m in INFO)

    def every(extra: str = "") -> str:
        sel = f'{{__name__=~"{names}"{extra}}}'
        return f"count by ({host}, __name__, {labels}) ({sel})" if dedup else sel

    by = f"count by (__name__, {labels})"
    if listed:
        alt = "|".join(re.escape(h) for h in listed).replace("\\", "\\\\").replace('"', '\\"')
        aff_counts = f'{by} ({every(f", {host}=~" + chr(34) + alt + chr(34))})'
    else:
        aff_counts = f"{by} ({every()} and on ({host}) ({aff_expr}))"
    return {"hosts": f"count(count by ({host}) (nodesleuth_node_info))",
            "node_series": "count(nodesleuth_node_info)",
            "affected": aff_expr,
            "all": f"{by} ({every()})",
            "affected_counts": aff_counts}


def analyse(url: str, affected_expr: str | None = None, host: str = "instance", group_by: str = "zone",
            top: int = 15, at: float | None = None, workers: int = 4, timeout: float = 130.0) -> PromResult:
    prom = Prometheus(url, timeout=timeout, at=at)
    aff_expr = (affected_expr or DEFAULT_AFFECTED).replace("{host}", host)
    node_labels = METRICS["nodesleuth_node"].labels
    if group_by not in node_labels:
        raise InputError(group_by, f"cannot group by it: use one of {', '.join(node_labels)}")
    queries = plan(aff_expr, host)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        res = dict(zip(("hosts", "node_series"), pool.map(prom.query, (queries["hosts"], queries["node_series"]))))
        # a host exported twice (two jobs, two relabelings) has two node_info series: count it once
        dedup = bool(res["hosts"]) and res["node_series"][0]["value"][1] != res["hosts"][0]["value"][1]
        q = plan(aff_expr, host, dedup)
        all_counts = pool.submit(prom.query, q["all"])
        res["affected"] = prom.query(q["affected"])
        missing_host = [r["metric"] for r in res["affected"] if host not in r["metric"]]
        if missing_host:
            all_counts.cancel()
            if affected_expr is None:  # ours groups by the host label: the series do not carry it
                raise InputError(f"--host-label {host}", f"the affected hosts' series at {url} carry no {host!r} "
                                 f"label (a series came back as {missing_host[0]}): pass --host-label with the label "
                                 "that names a host there")
            raise InputError(aff_expr, f"the affected-hosts expression must keep the {host!r} label "
                                       f"(e.g. max by ({host}) (...)), or pass --host-label with the label that names "
                                       f"a host; a series came back as {missing_host[0]}")
        listed = sorted({r["metric"][host] for r in res["affected"]})
        if len(listed) <= MAX_LISTED:
            q = plan(aff_expr, host, dedup, listed) if listed else {"affected_counts": None}
        res["affected_counts"] = prom.query(q["affected_counts"]) if q["affected_counts"] else []
        res["all"] = all_counts.result()
    affected_hosts = listed
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

    aff, g_aff, na = tally(res["affected_counts"])
    total, g_all, nodes_all = tally(res["all"])
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
                      prom.n, dedup, notes)
