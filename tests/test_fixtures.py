"""Fixture trees for what this machine cannot be: a 96-vCPU ENA node on cgroup v1, a v2 node."""

from __future__ import annotations

import json
import os

import pytest

from conftest import check_json, finding, nodesleuth
from nodesleuth.collect.cgroups import CgroupCensus
from nodesleuth.collect.cpu import read_stat
from nodesleuth.node.root import Root
from fixtures.trees import make_v1_node, make_v2_node


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


def test_healthy_node_exits_0_and_says_ok(tmp_path):
    from fixtures.trees import make_v1_node

    root = make_v1_node(str(tmp_path / "ok"), tracked=250, live=240, nic_resets=0, busy_cpu=None, nprocs=30)
    p = nodesleuth("check", "--root", root, "--no-trace-churn", "--seconds", "1", "--json")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "ok" and doc["exit_code"] == 0
    assert not [f for f in doc["findings"] if f["severity"] in ("warning", "critical")]
    npd = nodesleuth("check", "--root", root, "--no-trace-churn", "--seconds", "1", "--npd")
    assert npd.returncode == 0 and npd.stdout.strip() == "nodesleuth: OK"


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_hot_core_with_a_nic_reset_is_critical_and_npd_fits_80_bytes(tmp_path):
    """CPU 39 pinned on the 96-CPU fixture while ENA lines land in its kernel log: both findings,
    the hot core escalated to critical by the coincidence, and an NPD line within NPD's 80 bytes."""
    import threading
    import time

    from fixtures.trees import Animator, make_v1_node

    root = make_v1_node(str(tmp_path / "n"), nprocs=60, nic_resets=0)
    btime = next(int(ln.split()[1]) for ln in open(os.path.join(root, "proc/stat")) if ln.startswith("btime"))
    kmsg = str(tmp_path / "kmsg")
    usec = int((time.time() + 2 - btime) * 1e6)  # logged 2 s into the check
    with open(kmsg, "w") as f:
        f.write(f"4,1,{usec},-;ena 0000:00:05.0 eth0: TX q 3 is paused for too long (threshold 5000000). "
                "Time since last napi 6596000 usec. napi scheduled: 1\n")
        f.write(f"6,2,{usec + 900000},-;ena 0000:00:05.0: Device reset completed successfully, Driver info: "
                "Elastic Network Adapter (ENA) v2.11.0g\n")
    anim = Animator(root, busy_cpu=39, busy_pid=110)
    stop = threading.Event()
    th = threading.Thread(target=lambda: [anim.step() for _ in iter(lambda: stop.wait(1.0), True)], daemon=True)
    th.start()
    try:
        p = nodesleuth("check", "--root", root, "--kmsg", kmsg, "--no-trace-churn", "--seconds", "5", "--json")
        npd = nodesleuth("check", "--root", root, "--kmsg", kmsg, "--no-trace-churn", "--seconds", "5", "--npd")
    finally:
        stop.set()
        th.join()
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "problem" and doc["exit_code"] == 1
    hot = [f for f in doc["findings"] if f["kind"] == "hot_core"]
    nic = [f for f in doc["findings"] if f["kind"] == "nic_reset"]
    assert hot and nic, [f["title"] for f in doc["findings"]]
    assert hot[0]["data"]["cpu"] == 39 and hot[0]["severity"] == "critical"
    assert any("reset/timeout line" in e for e in hot[0]["evidence"])
    for f in (hot[0], nic[0]):  # every remedy line rendered from the finding's actions (model/actions.py)
        assert f["remediation"] and f["actions"], f
        _says_its_actions(f)
        assert f["remediation"] == list(dict.fromkeys(c.lstrip("# ") if c.startswith("#") else c
                                                      for a in f["actions"] for c in a["commands"])), f
    assert npd.returncode == 1
    line = npd.stdout.rstrip("\n")
    assert "\n" not in line and 0 < len(line.encode()) <= 80, line


def _says_its_actions(f: dict) -> None:
    """A finding's remediation holds every line its structured actions hold (a comment line said as prose):
    what it tells a person to run and what `remedy` plans are the same lines."""
    for a in f["actions"]:
        for c in a["commands"]:
            assert (c.lstrip("# ") if c.startswith("#") else c) in f["remediation"], (a["kind"], c, f["remediation"])


def test_remedy_text_and_actions_agree_for_each_kind(v1node, v2node):
    """Each remedy kind, as a detector proposes it: reclaim on v1 (the node's page cache) and on v2 (under the
    parent the zombies were removed from, as much as it holds: memory.current, never a fixed size), disabling a
    unit proven to make the zombies, and investigating a pod's containers proven to make them."""
    import dataclasses

    from nodesleuth.detect.zombies import findings
    from nodesleuth.model.records import ChurnSummary, Creator, Unit

    rc, doc = check_json("--root", v1node, "--seconds", "1")
    v1 = finding(doc, "zombie_cgroups", controller="memory", version="v1")
    assert [a["kind"] for a in v1["actions"]] == ["reclaim"] and v1["actions"][0]["target"] == ""
    assert v1["actions"][0]["commands"][0].startswith("sync; echo 3 > /proc/sys/vm/drop_caches")
    _says_its_actions(v1)
    rc, doc = check_json("--root", v2node, "--seconds", "1", "--zombie-crit", "4000")  # 5000 dying: critical
    v2 = finding(doc, "zombie_cgroups", version="v2")
    assert [a["kind"] for a in v2["actions"]] == ["reclaim"] and v2["actions"][0]["target"] == "/system.slice"
    assert v2["actions"][0]["commands"][0].startswith(
        'echo "$(cat /sys/fs/cgroup/system.slice/memory.current)" > /sys/fs/cgroup/system.slice/memory.reclaim')
    _says_its_actions(v2)
    assert not any("1G" in r for r in v2["remediation"]), v2["remediation"]

    # the v1 fixture's census, 100 fewer dying at the window's start: a creator that left 100 is proven
    last = CgroupCensus(Root(v1node)).sample(force_walk=True)
    first = dataclasses.replace(last, v1=tuple(dataclasses.replace(c, tracked=c.tracked - 100) if c.name == "memory"
                                               else c for c in last.v1))
    unit = Unit(id="ecs.service", n_restarts=40, active="activating", sub="auto-restart", enabled="enabled",
                result="exit-code", exit_status=1, main_pid=0, restart="always", restart_usec=5000000,
                fragment="/lib/systemd/system/ecs.service", cgroup="/system.slice/ecs.service")
    h = last.controller("memory").hierarchy
    pod = {"namespace": "batch", "pod": "agent-5f6c", "uid": "0c1d", "container": "agent"}
    agent = Creator(comm="agent", pattern="/ecs/*", hierarchy=h, mkdir=100, rmdir=100, pids={1}, unit="ecs.service",
                    still_dying=100)
    runc = Creator(comm="runc", pattern="/kubepods/*", hierarchy=h, mkdir=100, rmdir=100, pids={1}, still_dying=100,
                   pod=pod)
    for creator, kind in ((agent, "disable_unit"), (runc, "investigate")):
        churn = ChurnSummary(10.0, [creator], 0, 100, [], 200)
        f = next(x for x in findings(first, last, {}, 10.0, [unit], churn, restarts={"ecs.service": 3})
                 if x.data["controller"] == "memory")
        assert [a.kind for a in f.actions] == [kind, "reclaim"], f.actions
        _says_its_actions(f.to_dict())
