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
