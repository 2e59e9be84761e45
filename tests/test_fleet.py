"""Fleet: exporters on fixture roots scraped by a real Prometheus; alert rules; drift analysis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from conftest import free_port, nodesleuth
from fixtures.trees import Animator, make_v1_node, make_v2_node
from nodesleuth.lab.fleetgen import write_fleet

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
    assert [(r["metric"]["zone"], r["metric"]["device"], float(r["value"][1])) for r in resets] == \
        [("us-east-1a", "eth0", 3.0)]
    ev = promql('nodesleuth_nic_kernel_events_total{reason="ENASuspectedPollStarvation"}')
    assert ev and ev[0]["metric"]["zone"] == "us-east-1a"
    percpu = promql("nodesleuth_memory_percpu_bytes > 0")
    assert len(percpu) == 3


def test_grafana_dashboard_queries_run_against_prometheus(exporters):
    with open(os.path.join(HERE, "..", "deploy", "grafana", "nodesleuth-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"].replace("$instance", ".*") for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 8
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
        assert {"/host/proc", "/host/sys"} <= {m["mountPath"] for m in c["volumeMounts"]}
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
    write_fleet(d, 300)
    p = nodesleuth("fleet", d, "--group-by", "zone", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["groups"] == {"us-east-1a": {"affected": 100, "total": 100},
                             "us-east-1b": {"affected": 0, "total": 100},
                             "us-east-1c": {"affected": 0, "total": 100}}
    top = doc["ranked"][0]
    assert top["feature"] == "unit ecs.service enabled+crash-looping"
    assert (top["affected_share"], top["healthy_share"]) == (1.0, 0.0)
    scores = {r["feature"]: r["score"] for r in doc["ranked"]}
    # noise: a kernel and a package skewed toward the zone, sysctls at random: all rank lower
    assert scores["kernel 5.15.0-1051-aws"] < 0.9
    assert scores["package cloud-utils installed"] < 0.9
    assert all(abs(v) < 0.3 for k, v in scores.items() if k.startswith("sysctl"))
    text = nodesleuth("fleet", d).stdout
    assert "unit ecs.service enabled+crash-looping: on 100% of affected hosts, 0% of healthy ones" in text


def test_snapshot_of_this_host_and_fleet_over_urls(tmp_path):
    p = nodesleuth("snapshot", "--seconds", "1", "--zone", "lab-zone")
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["schema"] == "nodesleuth.snapshot/v1" and s["cloud"]["zone"] == "lab-zone"
    assert s["kernel"] == os.uname().release and "v1" in s["cgroup_versions"]
    assert "vm.swappiness" in s["sysctls"] and isinstance(s["health"]["problem"], bool)
    exp = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", "127.0.0.1:19210",
                            "--zone", "z1"], stderr=subprocess.DEVNULL)
    try:
        url = "http://127.0.0.1:19210/snapshot"
        for _ in range(60):
            try:
                urllib.request.urlopen(url, timeout=10).read()
                break
            except OSError:
                time.sleep(0.5)
        f = nodesleuth("fleet", url, str(tmp_path / "nothing.json"))
        assert f.returncode == 2 and "nothing.json" in f.stderr  # a bad source is named in one line
        f = nodesleuth("fleet", url, "--json")
        assert f.returncode == 0 and json.loads(f.stdout)["hosts"] == 1
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
    for name, fam in dumped.items():
        assert name in served, name  # the same names as the exporter...
        assert {frozenset(s.labels) for s in fam.samples} <= {frozenset(s.labels) for s in served[name].samples}
    cpu = [s for s in dumped["nodesleuth_cpu_busy_ratio"].samples]
    assert all(0.0 <= s.value <= 1.0 for s in cpu)  # ...and the same units (ratio, not percent)
    blocks = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", om, str(tmp_path / "tsdb")],
                            capture_output=True, text=True)
    assert blocks.returncode == 0, blocks.stderr
    assert any(os.path.isdir(os.path.join(tmp_path, "tsdb", x)) for x in os.listdir(tmp_path / "tsdb"))
    rules = open(os.path.join(HERE, "..", "deploy", "prometheus", "nodesleuth-rules.yml")).read()
    import re

    from nodesleuth.metrics import METRICS

    used = set(re.findall(r"nodesleuth_[a-z_]+", rules))
    known = set(METRICS) | {m + "_total" for m, x in METRICS.items() if x.type == "counter"}
    assert used and used <= known, used - known
