"""Bad input: a one-line error naming the file, exit 2 (NPD 'unknown'), never a traceback.

A /proc or /sys file that `check` cannot read or parse degrades only its section: a note naming the
file and the reason, the rest is still checked, and the exit code is never 0 (tests/test_procfs.py
runs the same over real trees)."""

from __future__ import annotations

import json
import os

import pytest

from conftest import nodesleuth
from fixtures.trees import make_v2_node


@pytest.fixture
def node(tmp_path):
    return make_v2_node(str(tmp_path / "node"))


def _one_line_error(p, must_name: str, problem: str):
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert must_name in lines[0] and problem in lines[0], lines[0]


def _degraded(p, must_name: str, problem: str):
    """The check went on: JSON out, the file and the reason in a note, not 'ok'."""
    assert "Traceback" not in p.stderr and p.returncode in (1, 2), p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] != "ok" and doc["exit_code"] == p.returncode
    notes = [n for n in doc["notes"] if must_name in n and problem in n]
    assert notes, doc["notes"]
    assert any(must_name in u["problem"] for u in doc["unread"]), doc["unread"]
    return doc


def test_malformed_proc_stat(node):
    with open(os.path.join(node, "proc/stat"), "w") as f:
        f.write("cpu  12 abc 3 4\n")
    _degraded(nodesleuth("check", "--root", node, "--seconds", "1", "--json"), "proc/stat", "malformed")


def test_missing_proc_cgroups(node):
    os.unlink(os.path.join(node, "proc/cgroups"))
    _degraded(nodesleuth("check", "--root", node, "--seconds", "1", "--json"), "proc/cgroups", "No such file")


def test_unreadable_meminfo(node):
    p = os.path.join(node, "proc/meminfo")
    os.unlink(p)
    os.mkdir(p)  # root reads anything chmod'ed, but not a directory
    _degraded(nodesleuth("check", "--root", node, "--seconds", "1", "--json"), "proc/meminfo", "Is a directory")


def test_malformed_cgroup_stat(node):
    with open(os.path.join(node, "sys/fs/cgroup/cgroup.stat"), "w") as f:
        f.write("nr_descendants seven\nnr_dying_descendants 3\n")
    _degraded(nodesleuth("check", "--root", node, "--seconds", "1", "--json"), "cgroup.stat", "nr_descendants")


def test_corrupt_kmsg_record(node):
    with open(os.path.join(node, "dev/kmsg"), "a") as f:
        f.write("garbage without a header\n")
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "dev/kmsg", "malformed kmsg")


def test_malformed_task_stat(node):
    with open(os.path.join(node, "proc/100/stat"), "w") as f:
        f.write("100 (kubelet) S 1\n")
    _degraded(nodesleuth("check", "--root", node, "--seconds", "1", "--json"), "100/stat", "malformed stat")


def test_bad_rules_file(node, tmp_path):
    r = tmp_path / "rules.json"
    r.write_text('{"rules": [{"reason": "X", "pattern": "(unclosed"}]}')
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1", "--rules", str(r)), "rules.json",
                    "bad pattern")
