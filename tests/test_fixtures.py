"""Fixture trees for what this machine cannot be: a 96-vCPU ENA node on cgroup v1, a v2 node."""

from __future__ import annotations

import os

import pytest

from conftest import check_json, finding
from nodesleuth.collect.cgroups import CgroupCensus
from nodesleuth.collect.cpu import read_stat
from nodesleuth.collect.root import Root
from nodesleuth.lab.fixture import make_v1_node, make_v2_node


@pytest.fixture(scope="module")
def v1node(tmp_path_factory):
    return make_v1_node(str(tmp_path_factory.mktemp("v1node")))


@pytest.fixture(scope="module")
def v2node(tmp_path_factory):
    return make_v2_node(str(tmp_path_factory.mktemp("v2node")))


def test_v1_fixture_is_shaped_like_the_kernel(v1node):
    st = read_stat(Root(v1node))
    assert sorted(c for c in st.cpus if c >= 0) == list(range(96))
    with open(os.path.join(v1node, "proc/cgroups")) as f:
        head = f.readline()
    assert head == "#subsys_name\thierarchy\tnum_cgroups\tenabled\n"
    dirs = sum(len(d) for _, d, _ in os.walk(os.path.join(v1node, "sys/fs/cgroup/memory"))) + 1
    assert dirs == 240


def test_v1_node_zombies_and_ena_reset(v1node):
    rc, doc = check_json("--root", v1node, "--seconds", "1")
    assert rc == 1
    f = finding(doc, "zombie_cgroups", controller="memory", version="v1")
    assert (f["data"]["tracked"], f["data"]["live"], f["data"]["dying"]) == (68680, 240, 68440)
    assert f["data"]["ratio"] == 286.2
    assert f["severity"] == "critical"
    assert doc["findings"][0]["severity"] == "critical"
    n = finding(doc, "nic_reset", ifname="eth0")
    assert n["data"]["counters"]["total_resets"] == 3
    assert n["data"]["counters"]["suspected_poll_starvation"] == 3
    reasons = {e["reset_reason"] for e in n["data"]["events"]}
    assert "SUSPECTED_POLL_STARVATION" in reasons
    assert [e["kind"] for e in n["data"]["events"]] == ["tx_timeout", "starvation", "reset_start", "reset"]
    # other controllers have as many live dirs as tracked cgroups: no false zombies
    assert not finding(doc, "zombie_cgroups", controller="cpu")


def test_v2_node_dying_descendants_and_where(v2node):
    rc, doc = check_json("--root", v2node, "--seconds", "1")
    f = finding(doc, "zombie_cgroups", version="v2")
    assert f["data"]["dying"] == 5000
    assert f["data"]["controller"] == "memory"  # nr_dying_subsys_memory (6.12+) preferred
    assert f["data"]["dying_subtrees"][0] == {"path": "/system.slice", "dying": 4993}
    assert f["data"]["live"] == 8
    assert rc == 1


def test_census_walks_live_dirs_at_a_lower_rate(v1node):
    c = CgroupCensus(Root(v1node), live_every=60)
    a = c.sample(now=1000.0)
    os.makedirs(os.path.join(v1node, "sys/fs/cgroup/memory/new-one"))
    try:
        b = c.sample(now=1030.0)  # within live_every: the cached walk is reused
        assert b.controller("memory").live == a.controller("memory").live == 240
        d = c.sample(now=1061.0)  # stale: walked again
        assert d.controller("memory").live == 241
    finally:
        os.rmdir(os.path.join(v1node, "sys/fs/cgroup/memory/new-one"))
