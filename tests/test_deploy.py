"""The deploy copies are their sources: NPD's kernel-log monitor is the rules file byte for byte, the
alert rules and the dashboard's thresholds are rendered from model/thresholds.py. A test that fails
when someone edits a copy by hand, or a threshold without regenerating (scripts/gen_deploy.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_deploy_copy_equals_its_source():
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_deploy.py"), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_npd_monitor_is_the_rules_file_and_loads_as_ours():
    from nodesleuth.model.rules import load_rules

    src = os.path.join(ROOT, "src/nodesleuth/rules/kernel-net.json")
    dep = os.path.join(ROOT, "deploy/npd/nodesleuth-kernel-net-monitor.json")
    with open(src, "rb") as a, open(dep, "rb") as b:
        assert a.read() == b.read()
    rules = load_rules(dep)
    doc = json.load(open(dep))
    assert len(rules) == len(doc["rules"]) >= 35
    assert doc["plugin"] == "kmsg" and doc["logPath"] == "/dev/kmsg"  # what NPD's kmsg watcher needs


def test_alert_thresholds_are_the_rules_thresholds():
    """Read back from the shipped YAML, not from the generator: the numbers a Prometheus evaluates."""
    from nodesleuth.model import thresholds as th

    doc = yaml.safe_load(open(os.path.join(ROOT, "deploy/prometheus/nodesleuth-rules.yml")))
    rules = {r["alert"]: r for r in doc["groups"][0]["rules"]}
    hot = rules["NodesleuthHotCoreSustained"]["expr"]
    assert float(re.search(r"nodesleuth_hot_core_seconds >= ([\d.]+)", hot).group(1)) == th.HOT_SECONDS
    assert float(re.search(r"nodesleuth_hot_core_others_busy_ratio < ([\d.]+)", hot).group(1)) == th.OTHERS_MAX / 100
    assert "node_busy_ratio" not in hot  # the node average is not the rule's "other CPUs"
    assert f">= {th.HOT_BUSY:g}%" in rules["NodesleuthHotCoreSustained"]["annotations"]["summary"]
    z = rules["NodesleuthZombieCgroupsHighAndGrowing"]["expr"]
    assert int(re.search(r"> (\d+)", z).group(1)) == th.ZOMBIE_WARN
    cl = rules["NodesleuthCrashLoopingUnit"]["expr"]
    assert int(re.search(r">= (\d+)", cl).group(1)) == th.CRASH_LOOP_RESTARTS


def test_npd_plugin_never_probes_and_the_exporter_keeps_the_probe_state_writable():
    """NPD runs `check --npd` every minute on every node: as shipped it must never make memcgs (--npd
    never probes, and no --probe is passed); the exporter, which probes once a boot, writes its result
    to --state-dir, so that path must be a writable hostPath (the host root stays read-only)."""
    from click.testing import CliRunner

    from nodesleuth.cli import main
    from nodesleuth.collect.probe_state import STATE_DIR

    doc = json.load(open(os.path.join(ROOT, "deploy/npd/nodesleuth-plugin-monitor.json")))
    for rule in doc["rules"]:
        assert rule["args"][:2] == ["check", "--npd"] and "--probe" not in rule["args"]
    ds = yaml.safe_load(open(os.path.join(ROOT, "deploy/kubernetes/daemonset.yaml")))
    spec = ds["spec"]["template"]["spec"]
    exp = next(c for c in spec["containers"] if c["name"] == "exporter")
    state_dir = exp["args"][exp["args"].index("--state-dir") + 1] if "--state-dir" in exp["args"] else STATE_DIR
    mount = next(m for m in exp["volumeMounts"] if m["mountPath"] == state_dir)
    assert not mount.get("readOnly")
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert vol["hostPath"]["path"] == state_dir  # survives the pod: measured once a boot, not once a start
    helps = CliRunner().invoke(main, ["exporter", "--help"]).output
    assert "--state-dir" in helps
