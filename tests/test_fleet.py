"""Fleet: exporters on fixture roots scraped by a real Prometheus; alert rules; drift analysis."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import free_port, nodesleuth
from fixtures.fleetgen import CAUSE, DECOYS, build_tsdb, make_fleet, serve_tsdb, write_fleet, write_openmetrics
from fixtures.trees import Animator, make_v1_node, make_v2_node

HERE = os.path.dirname(__file__)
PROM = f"http://127.0.0.1:{os.environ.get('NODESLEUTH_PROM_PORT', '19090')}"
TARGETS = "/var/tmp/nodesleuth-prom-targets"  # tests/prometheus/prometheus.yml reads targets from here



def promql(q: str) -> list[dict]:
    url = f"{PROM}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def test_alert_rules_pass_promtool():
    p = subprocess.run(["promtool", "test", "rules", "rules_test.yml"], cwd=os.path.join(HERE, "prometheus"),
                       capture_output=True, text=True)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


@pytest.fixture(scope="module")
def prometheus():
    subprocess.run(["bash", os.path.join(HERE, "..", "scripts", "start-prometheus.sh")], check=True)
    return PROM


@pytest.fixture(scope="module")
def exporters(tmp_path_factory, prometheus):
    base = tmp_path_factory.mktemp("fleet")
    a = make_v1_node(str(base / "a"))  # the incident's node: 68,680 tracked vs 240 live, ENA resets
    b = make_v1_node(str(base / "b"), tracked=300, live=240, nic_resets=0)
    c = make_v2_node(str(base / "c"), dying=5000)
    anim = Animator(a, busy_cpu=39, busy_pid=110)
    stop = threading.Event()
    units = os.path.join(a, "run", "nodesleuth", "systemctl-show")  # what `systemctl show` printed there

    def show(n: int) -> None:
        with open(units + ".tmp", "w") as f:
            f.write(f"Id=ecs.service\nNRestarts={n}\nActiveState=activating\nSubState=auto-restart\n"
                    "UnitFileState=enabled\nResult=exit-code\nExecMainStatus=1\nMainPID=0\nRestart=on-failure\n"
                    "RestartUSec=10s\nFragmentPath=/lib/systemd/system/ecs.service\n"
                    "ControlGroup=/system.slice/ecs.service\n")
        os.replace(units + ".tmp", units)

    show(100)

    def animate():
        n = 100
        while not stop.wait(1.0):
            anim.step()
            n += 1
            show(n)  # the crash loop goes on

    th = threading.Thread(target=animate, daemon=True)
    th.start()
    procs = []
    ports = {}
    for root, zone in ((a, "us-east-1a"), (b, "us-east-1b"), (c, "us-east-1c")):
        port = ports[zone] = free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--root", root, "--listen",
                                       f"127.0.0.1:{port}", "--zone", zone], stderr=subprocess.DEVNULL))
    os.makedirs(TARGETS, exist_ok=True)
    sd = os.path.join(TARGETS, f"fleet-{os.getpid()}.json")
    with open(sd + ".tmp", "w") as f:
        json.dump([{"targets": [f"127.0.0.1:{p}"], "labels": {"zone": z}} for z, p in ports.items()], f)
    os.replace(sd + ".tmp", sd)
    deadline = time.time() + 60
    while time.time() < deadline:  # until Prometheus has scraped all three and CPU 39 is hot for >= 4 s
        try:
            up = promql('up{job="nodesleuth"} == 1')
            hot = promql("max(nodesleuth_hot_core_seconds)")
            if len(up) == 3 and hot and float(hot[0]["value"][1]) >= 4:
                break
        except OSError:
            pass
        time.sleep(0.5)
    yield {"a": a, "b": b, "c": c, "ports": ports}
    stop.set()
    os.unlink(sd)
    for p in procs:
        p.terminate()
        p.wait()


def test_prometheus_scrapes_exporters_per_zone(exporters):
    dying = {r["metric"]["zone"]: float(r["value"][1])
             for r in promql('nodesleuth_cgroups_dying{controller="memory"}')}
    assert dying == {"us-east-1a": 68440.0, "us-east-1b": 60.0, "us-east-1c": 5000.0}
    # the info metric carries the zone too, node_exporter style, for joins
    joined = promql('sum by (zone) (nodesleuth_cgroups_dying{controller="memory"} '
                    '* on (instance) group_left nodesleuth_node_info{zone="us-east-1a"})')
    assert [float(r["value"][1]) for r in joined] == [68440.0]
    hot = promql("max by (zone, cpu) (nodesleuth_hot_core_seconds) >= 3")
    assert [(r["metric"]["zone"], r["metric"]["cpu"]) for r in hot] == [("us-east-1a", "39")]
    busy = promql('nodesleuth_cpu_busy_ratio{zone="us-east-1a",cpu="39"}')
    assert float(busy[0]["value"][1]) >= 0.9
    assert len(promql('nodesleuth_cpu_busy_ratio{zone="us-east-1a"}')) == 96
    resets = promql('nodesleuth_nic_driver_resets_total{counter="total_resets"}')
    # every NIC whose driver counts resets is exported, 0 included (read and zero, not unread)
    assert sorted((r["metric"]["zone"], r["metric"]["device"], float(r["value"][1])) for r in resets) == \
        [("us-east-1a", "eth0", 3.0), ("us-east-1b", "eth0", 0.0), ("us-east-1c", "ens5", 0.0)]
    ev = promql('nodesleuth_nic_kernel_events_total{reason="ENASuspectedPollStarvation"}')
    assert ev and ev[0]["metric"]["zone"] == "us-east-1a"
    percpu = promql("nodesleuth_memory_percpu_bytes > 0")
    assert len(percpu) == 3


def test_grafana_dashboard_queries_run_against_prometheus(exporters):
    with open(os.path.join(HERE, "..", "deploy", "grafana", "nodesleuth-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"].replace("$instance", ".*") for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    fleet = [p for p in dash["panels"] if "zone" in p["title"] and "Affected hosts" in p["title"]]
    assert fleet and any("separating features" in p["title"] for p in dash["panels"])
    empty = [e for e in exprs if not promql(e)]  # every query parses, runs and returns data
    deadline = time.time() + 40
    while empty and time.time() < deadline:  # rates need a few scrapes
        time.sleep(2)
        empty = [e for e in empty if not promql(e)]
    assert not empty, empty


def test_kubernetes_manifests_are_well_formed():
    with open(os.path.join(HERE, "..", "deploy", "kubernetes", "daemonset.yaml")) as f:
        ds = yaml.safe_load(f)
    spec = ds["spec"]["template"]["spec"]
    assert ds["kind"] == "DaemonSet" and spec["hostPID"] is True
    for c in spec["containers"]:
        assert c["securityContext"]["privileged"] is True
        assert c["resources"]["limits"]["memory"] and c["resources"]["limits"]["cpu"]
        # the host's whole / read-only at /host (its /proc, /sys, /dev/kmsg, /run/systemd, dpkg database)
        assert {"mountPath": "/host", "readOnly": True, "mountPropagation": "HostToContainer"}.items() <= \
            next(m for m in c["volumeMounts"] if m["mountPath"] == "/host").items()
    with open(os.path.join(HERE, "..", "deploy", "npd", "nodesleuth-plugin-monitor.json")) as f:
        npd = json.load(f)
    assert npd["plugin"] == "custom"
    assert [r["args"] for r in npd["rules"]] == [["check", "--npd", "--seconds", "10", "--root", "/host",
                                                   "--systemd-pid", "1"]] * len(npd["rules"])
    # every command line shipped is one the CLI accepts, option by option (click parses, nothing runs)
    from nodesleuth.cli import main

    argvs = [c["args"] for c in spec["containers"]] + [r["args"] for r in npd["rules"]]
    for argv in argvs:
        ctx = main.make_context("nodesleuth", list(argv), resilient_parsing=False)
        sub = main.get_command(ctx, argv[0])
        sub.make_context(argv[0], list(argv[1:]), parent=ctx)  # raises on an unknown or malformed option
    assert any(a[0] == "record" and "--store" in a for a in argvs) and any(a[0] == "exporter" for a in argvs)


def test_fleet_finds_the_unit_enabled_in_one_zone(tmp_path):
    d = str(tmp_path / "fleet")
    write_fleet(d, 400)
    truth = make_fleet(400)
    p = nodesleuth("fleet", d, "--group-by", "zone", "--json", "--top", "30")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    na = sum(s["health"]["problem"] for s in truth)
    assert (doc["hosts"], doc["affected"], doc["healthy"]) == (400, na, 400 - na)
    assert doc["groups"]["us-east-1a"]["affected"] > 0.7 * doc["groups"]["us-east-1a"]["total"]
    top = doc["ranked"][0]
    assert top["feature"] == CAUSE and top["significant"] and top["p_value"] < 1e-30
    assert top["affected_hosts"] == sum(s["health"]["problem"] and CAUSE.split()[1] in s["health"]["crash_looping_units"]
                                        for s in truth)
    ranked = {r["feature"]: r for r in doc["ranked"]}
    # decoys that follow the zone are significant too, but separate less: they rank below
    for f in DECOYS:
        assert ranked[f]["significant"] and abs(ranked[f]["score"]) < top["score"], f
    # facts that follow nothing: tested, not significant once corrected for the number of features tested
    noise = [r for f, r in ranked.items() if f.startswith(("sysctl", "package nvidia", "cloud instance_type"))]
    assert noise and not any(r["significant"] for r in noise)
    text = nodesleuth("fleet", d).stdout
    assert f"{CAUSE}: on {top['affected_share']:.0%} of affected hosts ({top['affected_hosts']}/{na})" in text
    assert "not significant" in text


def test_fleet_refuses_without_both_groups(tmp_path):
    truth = make_fleet(200)
    for which, keep in (("healthy", True), ("affected", False)):
        d = tmp_path / which
        d.mkdir()
        for s in truth:
            if s["health"]["problem"] == keep:
                (d / f"{s['host']}.json").write_text(json.dumps(s))
        p = nodesleuth("fleet", str(d))
        assert p.returncode == 2 and f"no {which} host among" in p.stderr and "+1.00" not in p.stdout, p.stderr


def test_three_affected_hosts_of_10000_prove_nothing():
    """Three hosts with unrelated incidents in a zone without the cause: whatever facts they happen to
    share (on 100% of the affected) is no evidence once the 10,000 hosts and the features tested are
    counted: nothing is significant."""
    from nodesleuth.fleet import drift

    snaps = make_fleet(10000)
    for s in snaps:
        s["health"]["problem"] = False
    for s in [s for s in snaps if s["cloud"]["zone"] == "us-east-1c"][100:103]:
        s["health"]["problem"] = True
    ranked, na, nh = drift.rank(snaps, 50)
    assert (na, nh) == (3, 9997)
    shared = [r for r in ranked if r.affected_share == 1.0 and r.score > 0.3]
    assert shared  # chance does give the three some common facts...
    assert not any(r.significant for r in ranked), [(r.feature, r.q_value) for r in ranked if r.significant]


def test_info_metric_bounds():
    """Label values and series per host stay bounded whatever a host has (fleet/facts.py)."""
    from nodesleuth.fleet.facts import MAX_UNITS, MAX_VALUE, info_series

    s = make_fleet(4)[0]
    s["units"] += [{"unit": f"svc{i:03d}.service", "enabled": "enabled", "active": "active", "sub": "running",
                    "n_restarts": 0, "crash_looping": False} for i in range(200)]
    s["units"].append({"unit": "zz-loop.service", "enabled": "disabled", "active": "activating",
                       "sub": "auto-restart", "n_restarts": 40, "crash_looping": True})
    s["sysctls"]["net.core.rps_sock_flow_entries"] = "9" * 300
    series = list(info_series(s))
    units = [v for n, v in series if n == "nodesleuth_unit"]
    assert len(units) == MAX_UNITS and ("zz-loop.service", "disabled", "crash-looping") in units
    assert max(len(x) for _, v in series for x in v) == MAX_VALUE
    assert [v[0] for n, v in series if n == "nodesleuth_node"] == ["us-east-1a"]


def test_exporter_info_metrics(exporters):
    """Configuration facts as info metrics, scraped by the real Prometheus, joinable on instance."""
    node = promql('nodesleuth_node_info{zone="us-east-1a"}')
    assert len(node) == 1 and node[0]["metric"]["cgroup"] in ("v1", "v1+v2")
    units = promql("nodesleuth_unit_info")
    assert [(u["metric"]["zone"], u["metric"]["unit"], u["metric"]["unit_file_state"], u["metric"]["state"])
            for u in units] == [("us-east-1a", "ecs.service", "enabled", "crash-looping")]
    joined = promql('count by (zone) (nodesleuth_unit_info{state="crash-looping"} '
                    '* on (instance) group_left nodesleuth_node_info)')
    assert [r["metric"]["zone"] for r in joined] == ["us-east-1a"]


def test_fleet_over_the_scraping_prometheus(exporters):
    """The default affected-hosts expression over the exporters' own incident counters: the node with
    ENA resets in its kernel log; one affected host of three is no significant evidence, and says so."""
    for _ in range(10):  # 1 s scrapes on a busy machine: a late scrape leaves a host out for a moment
        p = nodesleuth("fleet", "--prometheus", PROM, "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        if doc["hosts"] == 3:
            break
        time.sleep(1)
    port = exporters["ports"]["us-east-1a"]
    assert (doc["hosts"], doc["affected"], doc["healthy"]) == (3, 1, 2)
    # of this fixture's three, only the one with resets; a Prometheus kept across runs (a developer's) may
    # still hold an earlier run's exporters' incidents for 24 h: listed too, and said to have no facts
    ours = {f"127.0.0.1:{p}" for p in exporters["ports"].values()}
    assert [h for h in doc["affected_hosts"] if h in ours] == [f"127.0.0.1:{port}"]
    others = len(doc["affected_hosts"]) - 1
    assert not others or any(f"{others} affected hosts export no nodesleuth_node_info" in n for n in doc["notes"]), doc
    assert doc["groups"] == {"us-east-1a": {"affected": 1, "total": 1}, "us-east-1b": {"affected": 0, "total": 1},
                             "us-east-1c": {"affected": 0, "total": 1}}
    ones = {r["feature"] for r in doc["ranked"] if r["score"] == 1.0}
    assert "unit ecs.service enabled+crash-looping" in ones  # the crash loop is only on the affected host...
    assert all(round(r["p_value"], 4) == round(1 / 3, 4) and not r["significant"]  # ...which proves nothing
               for r in doc["ranked"] if r["feature"] in ones)
    text = nodesleuth("fleet", "--prometheus", PROM)
    assert text.returncode == 0 and "affected by max by (instance) ((increase(nodesleuth_incidents_total" in text.stdout
    assert re.search(rf"\): (.*, )?127\.0\.0\.1:{port}(, |\n)", text.stdout) and "not significant" in text.stdout
    none = nodesleuth("fleet", "--prometheus", PROM, "--affected", 'nodesleuth_node_info{zone="nowhere"}')
    assert none.returncode == 2 and "no affected host among" in none.stderr, none.stderr
    every = nodesleuth("fleet", "--prometheus", PROM, "--affected", "max by (instance) (nodesleuth_node_info)")
    assert every.returncode == 2 and "no healthy host among" in every.stderr, every.stderr
    bad = nodesleuth("fleet", "--prometheus", PROM, "--affected", "sum(")
    assert bad.returncode == 2 and "refused the query" in bad.stderr and len(bad.stderr.splitlines()) == 1
    down = nodesleuth("fleet", "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 2 and "cannot query Prometheus" in down.stderr


def test_direct_collection_concurrent_with_unreachable_hosts(exporters):
    """Snapshots fetched from the exporters at once; a host that does not answer is listed (exit 3),
    the others analysed; the exporter serves /snapshot from its cache after the first."""
    urls = [f"http://127.0.0.1:{p}/snapshot" for p in exporters["ports"].values()]
    first = [urllib.request.urlopen(u, timeout=60) for u in urls]
    docs = [json.loads(r.read()) for r in first]
    again = urllib.request.urlopen(urls[0], timeout=10)
    assert json.loads(again.read())["time"] == docs[0]["time"] and again.headers["Age"] is not None
    dead = f"http://127.0.0.1:{free_port()}/snapshot"
    import socket

    with socket.socket() as stalled:  # accepts connections (the kernel does), never answers
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        hung = f"http://127.0.0.1:{stalled.getsockname()[1]}/snapshot"
        p = nodesleuth("fleet", *urls, dead, hung, "--json", "--timeout", "2", "--retries", "1")
    assert p.returncode == 3, p.stderr
    doc = json.loads(p.stdout)
    assert doc["hosts"] == 3 and sorted(u["url"] for u in doc["unreachable"]) == sorted([dead, hung])
    assert "timed out" in {u["url"]: u["error"] for u in doc["unreachable"]}[hung]
    assert doc["notes"] == [f"2 hosts unreachable: {dead}, {hung}"]
    assert doc["affected"] == sum(d["health"]["problem"] for d in docs) >= 1
    text = nodesleuth("fleet", *urls, dead, "--timeout", "2", "--retries", "0")
    assert text.returncode == 3 and f"unreachable: {dead}" in text.stderr


@pytest.fixture(scope="module")
def synthetic_prometheus(tmp_path_factory):
    """10,000 hosts' info metrics and incident counters written into a real TSDB by promtool, served
    by a real Prometheus of its own (temp dir, free port), stopped at the end."""
    d = tmp_path_factory.mktemp("tsdb")
    at = float(int(time.time()) - 7200)  # two hours back: blocks only, nothing near the head
    snaps = make_fleet(10000)
    write_openmetrics(str(d / "fleet.om"), snaps, at)
    build_tsdb(str(d / "fleet.om"), str(d / "data"))
    port = free_port()
    proc = serve_tsdb(str(d / "data"), port)
    yield {"url": f"http://127.0.0.1:{port}", "at": at, "snaps": snaps}
    proc.terminate()
    proc.wait()


def test_fleet_of_10000_hosts_from_a_real_tsdb(synthetic_prometheus):
    sp = synthetic_prometheus
    p = nodesleuth("fleet", "--prometheus", sp["url"], "--time", str(sp["at"]), "--json", "--top", "40")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    snaps = sp["snaps"]
    na = sum(s["health"]["problem"] for s in snaps)
    assert (doc["hosts"], doc["affected"], doc["healthy"]) == (10000, na, 10000 - na)
    assert doc["queries"] == 5 and doc["deduplicated"] and not doc["notes"]  # hosts scraped twice count once
    assert doc["groups"]["us-east-1a"]["affected"] > 10 * doc["groups"]["us-east-1b"]["affected"] > 0
    top = doc["ranked"][0]
    assert top["feature"] == CAUSE and top["significant"] and top["p_value"] < 1e-100 and top["log10_p"] < -1000
    ranked = {r["feature"]: (i, r) for i, r in enumerate(doc["ranked"])}
    for f in DECOYS:  # significant (they do follow the zone) but less separating and less surely so
        i, r = ranked[f]
        assert i > 0 and r["significant"] and r["score"] < top["score"] - 0.1 and r["log10_p"] > top["log10_p"] + 100
    assert not any(r["significant"] for f, (i, r) in ranked.items() if f.startswith("sysctl"))
    # the same counts as the snapshot path over the same hosts
    from nodesleuth.fleet import drift

    direct, dna, dnh = drift.rank(snaps, 40)
    assert (dna, dnh) == (doc["affected"], doc["healthy"])
    assert [(r.feature, r.affected_hosts, r.healthy_hosts) for r in direct] == \
        [(r["feature"], r["affected_hosts"], r["healthy_hosts"]) for r in doc["ranked"]]


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_snapshot_of_this_host_and_fleet_over_urls(tmp_path):
    p = nodesleuth("snapshot", "--seconds", "1", "--zone", "lab-zone")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["schema"] == "nodesleuth.snapshot/v1" and s["cloud"]["zone"] == "lab-zone"
    assert s["kernel"] == os.uname().release and "v1" in s["cgroup_versions"]
    assert "vm.swappiness" in s["sysctls"] and isinstance(s["health"]["problem"], bool)
    port = free_port()
    exp = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", f"127.0.0.1:{port}",
                            "--zone", "z1"], stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/snapshot"
        for _ in range(60):
            try:
                urllib.request.urlopen(url, timeout=10).read()
                break
            except OSError:
                time.sleep(0.5)
        # this host's facts as info metrics, with the values the kernel shows
        from prometheus_client.parser import text_string_to_metric_families

        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        sysctl = {s.labels["sysctl"]: s.labels["value"] for s in fams["nodesleuth_sysctl_info"].samples}
        assert sysctl["vm.swappiness"] == open("/proc/sys/vm/swappiness").read().strip()
        node = fams["nodesleuth_node_info"].samples[0].labels
        assert node["kernel"] == os.uname().release and node["zone"] == "z1" and "v1" in node["cgroup"].split("+")
        f = nodesleuth("fleet", url, str(tmp_path / "nothing.json"))
        assert f.returncode == 2 and "nothing.json" in f.stderr  # a bad source is named in one line
        f = nodesleuth("fleet", url, "--json")  # one host: nothing to compare it with
        assert f.returncode == 2 and "host among 1: fleet analysis compares affected with healthy" in f.stderr, f.stderr
    finally:
        exp.terminate()
        exp.wait()


def test_one_metric_vocabulary_promtool_clean_and_backfillable(exporters, tmp_path):
    """The exporter's /metrics passes `promtool check metrics`; `dump --format openmetrics` uses the
    same names and labels and backfills with `promtool tsdb create-blocks-from openmetrics`; the alert
    rules only use names that exist; unknown paths are 404."""
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{exporters['ports']['us-east-1a']}/metrics", timeout=10).read().decode()
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
    assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint.stdout + lint.stderr
    served = {f.name: f for f in text_string_to_metric_families(body)}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{exporters['ports']['us-east-1a']}/nonexistent", timeout=10)
    assert e.value.code == 404
    store = str(tmp_path / "st")
    p = nodesleuth("record", "--root", exporters["a"], "--store", store, "--duration", "3s", "--quiet")
    assert p.returncode == 0, p.stderr
    om = str(tmp_path / "dump.om")
    d = nodesleuth("dump", "--store", store, "--format", "openmetrics", "-o", om)
    assert d.returncode == 0, d.stderr
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

    dumped = {f.name: f for f in om_families(open(om).read())}
    assert {"nodesleuth_cpu_busy_ratio", "nodesleuth_cgroups_dying", "nodesleuth_memory_percpu_bytes"} <= set(dumped)
    from nodesleuth.model.metrics import METRICS

    # the same names and labels as the exporter: both come from model/metrics.py. A family the dump holds
    # may be absent from one scrape (the hot-core gauges exist only while a CPU is hot at that instant: the
    # CI of 2026-12-05 scraped between two of the animator's steps), so names are checked against the one
    # vocabulary, and against the scrape wherever it serves them.
    assert {"nodesleuth_cpu_busy_ratio", "nodesleuth_cgroups_dying"} <= set(served)
    for name, fam in dumped.items():
        base = name[:-len("_total")] if name.endswith("_total") and name[:-len("_total")] in METRICS else name
        assert base in METRICS, name
        assert {k for s in fam.samples for k in s.labels} <= set(METRICS[base].labels), (name, fam.samples[:2])
        if name in served:
            assert {frozenset(s.labels) for s in fam.samples} <= {frozenset(s.labels) for s in served[name].samples}
    cpu = [s for s in dumped["nodesleuth_cpu_busy_ratio"].samples]
    assert all(0.0 <= s.value <= 1.0 for s in cpu)  # ...and the same units (ratio, not percent)
    blocks = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", om, str(tmp_path / "tsdb")],
                            capture_output=True, text=True)
    assert blocks.returncode == 0, blocks.stderr
    assert any(os.path.isdir(os.path.join(tmp_path, "tsdb", x)) for x in os.listdir(tmp_path / "tsdb"))
    rules = open(os.path.join(HERE, "..", "deploy", "prometheus", "nodesleuth-rules.yml")).read()
    used = set(re.findall(r"nodesleuth_[a-z_]+", rules))
    known = set(METRICS) | {m + "_total" for m, x in METRICS.items() if x.type == "counter"}
    assert used and used <= known, used - known
