"""Bad input: a one-line error naming the file, exit 2 (NPD 'unknown'), never a traceback."""

from __future__ import annotations

import os

import pytest

from conftest import nodesleuth
from nodesleuth.lab.fixture import make_v2_node


@pytest.fixture
def node(tmp_path):
    return make_v2_node(str(tmp_path / "node"))


def _one_line_error(p, must_name: str, problem: str):
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert must_name in lines[0] and problem in lines[0], lines[0]


def test_malformed_proc_stat(node):
    with open(os.path.join(node, "proc/stat"), "w") as f:
        f.write("cpu  12 abc 3 4\n")
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "proc/stat", "malformed")


def test_missing_proc_cgroups(node):
    os.unlink(os.path.join(node, "proc/cgroups"))
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "proc/cgroups", "No such file")


def test_unreadable_meminfo(node):
    p = os.path.join(node, "proc/meminfo")
    os.unlink(p)
    os.mkdir(p)  # root reads anything chmod'ed, but not a directory
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "proc/meminfo", "Is a directory")


def test_malformed_cgroup_stat(node):
    with open(os.path.join(node, "sys/fs/cgroup/cgroup.stat"), "w") as f:
        f.write("nr_descendants seven\nnr_dying_descendants 3\n")
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "cgroup.stat", "nr_descendants")


def test_corrupt_kmsg_record(node):
    with open(os.path.join(node, "dev/kmsg"), "a") as f:
        f.write("garbage without a header\n")
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "dev/kmsg", "malformed kmsg")


def test_malformed_task_stat(node):
    with open(os.path.join(node, "proc/100/stat"), "w") as f:
        f.write("100 (kubelet) S 1\n")
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1"), "100/stat", "malformed stat")


def test_bad_rules_file(node, tmp_path):
    r = tmp_path / "rules.json"
    r.write_text('{"rules": [{"reason": "X", "pattern": "(unclosed"}]}')
    _one_line_error(nodesleuth("check", "--root", node, "--seconds", "1", "--rules", str(r)), "rules.json",
                    "bad pattern")
