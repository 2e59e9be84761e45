"""The memory cgroup ID space (issue 38 part 4): the per-kernel rule, the finding on fixture trees shaped like
the kernel's /proc/cgroups, and the failure-line matcher on real lines from public reports."""

from __future__ import annotations

import json
import os

import pytest

from conftest import check_json, finding, nodesleuth
from fixtures.trees import make_v1_node
from nodesleuth.model.memcg_ids import ID_MAX, id_use, mkdir_errno, mkdir_failure, release, rule_for

HERE = os.path.dirname(__file__)


def test_rule_per_kernel():
    assert rule_for(release("3.10.0-1160.el7.x86_64")).dying_hold == "all"
    assert rule_for(release("4.6.3-040603-generic")).dying_hold == "all"
    for k in ("4.8.0", "5.10.0-32-amd64", "6.1.0-50-amd64", "6.12.95+deb12-amd64", "7.2.13+deb14-amd64"):
        assert rule_for(release(k)).dying_hold == "swap", k
    assert rule_for(release("")) is None
    assert [mkdir_errno(release(k)) for k in ("3.10.0", "5.10.0", "6.1.0", "6.12.95", "7.2.13")] == \
        ["ENOSPC", "ENOSPC", "ENOSPC", "EBUSY", "EBUSY"]
    r = rule_for(release("6.1.0"))
    assert id_use(300, 60000, r, 0).high == 300  # no swap: dying memcgs hold no ID
    assert (id_use(300, 60000, r, 1 << 20).low, id_use(300, 60000, r, 1 << 20).high) == (300, 60300)
    assert id_use(300, 60000, rule_for((3, 10)), 0).low == 60300


def test_failure_lines_from_public_reports():
    doc = json.load(open(os.path.join(HERE, "data/memcg-ids/failures.json")))
    assert len(doc["lines"]) >= 8
    for x in doc["lines"]:
        assert x["url"].startswith("https://github.com/")
        m = mkdir_failure(x["line"])
        got = None if m is None else {"who": m.who, "errno": m.errno, "path": m.path}
        assert got == x["match"], x["url"]


def _node(tmp_path, release_: str, tracked: int, live: int, swap_kb: int | None, log: list[str] | None = None):
    root = make_v1_node(str(tmp_path / "node"), ncpu=4, tracked=tracked, live=live, nprocs=20, busy_cpu=None,
                        nic_resets=0)
    os.makedirs(os.path.join(root, "proc/sys/kernel"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as f:
        f.write(release_ + "\n")
    if swap_kb is not None:
        with open(os.path.join(root, "proc/meminfo"), "a") as f:
            f.write(f"SwapTotal:      {swap_kb:>8} kB\nSwapFree:       {swap_kb:>8} kB\n")
    return root


def test_runc_1725_node_on_3_10_is_critical_and_says_why_pods_fail(tmp_path):
    # /proc/cgroups of opencontainers/runc#1725 (via huzhengchuan/dailywork#58): memory 64734, on a 3.10 kernel
    root = _node(tmp_path, "3.10.0-693.el7.x86_64", 64734, 240, 0)
    rc, doc = check_json("--root", root, "--seconds", "1")
    f = finding(doc, "memcg_ids")
    assert rc == 1 and f is not None and f["severity"] == "critical"
    assert f["data"]["ids_held_low"] == f["data"]["ids_held_high"] == 64734
    assert f["data"]["live"] == 240 and f["data"]["dying"] == 64494 and f["data"]["dying_hold"] == "all"
    text = " ".join(f["evidence"])
    assert "mkdir of a new memory cgroup fails with ENOSPC" in text
    assert "240 live + 64494 dying on this kernel, which keeps dying memcgs' IDs" in text
    # what to do is rendered from actions (model/actions.py): the page-cache drop is the reclaim action's own line,
    # never a copy of its shell text that could drift from what `remedy` runs
    from nodesleuth.model.actions import Action

    reclaim = Action("reclaim", "", "").text()
    assert f["remediation"][1:3] == reclaim and reclaim[0].startswith("sync; echo 3 > /proc/sys/vm/drop_caches")
    assert all(a["kind"] == "investigate" for a in f["actions"])  # said, not performed: the zombie finding proposes
    for a in f["actions"]:
        assert all((c.lstrip("# ") if c.startswith("#") else c) in f["remediation"] for c in a["commands"])
    p = nodesleuth("check", "--npd", "--root", root, "--seconds", "1")
    assert p.returncode == 1 and "ID" in p.stdout, p.stdout


def test_same_zombies_on_6_1_without_swap_hold_no_ids(tmp_path):
    root = _node(tmp_path, "6.1.0-50-amd64", 64734, 240, 0)
    rc, doc = check_json("--root", root, "--seconds", "1")
    assert finding(doc, "memcg_ids") is None  # 240 of 65,535: far from the limit
    assert finding(doc, "zombie_cgroups") is not None  # the zombies are still a finding of their own


def test_same_zombies_on_6_1_with_swap_are_an_upper_bound(tmp_path):
    root = _node(tmp_path, "6.1.0-50-amd64", 64734, 240, 4 << 20)
    rc, doc = check_json("--root", root, "--seconds", "1")
    f = finding(doc, "memcg_ids")
    assert f is not None and f["severity"] == "critical"
    assert (f["data"]["ids_held_low"], f["data"]["ids_held_high"]) == (240, 64734)
    assert "up to 64494 dying (those with pages in swap)" in " ".join(f["evidence"])


def test_unknown_kernel_is_never_critical_on_an_upper_bound(tmp_path):
    root = _node(tmp_path, "not-a-release", 64734, 240, None)
    rc, doc = check_json("--root", root, "--seconds", "1")
    f = finding(doc, "memcg_ids")
    assert f is not None and f["severity"] == "warning"
    assert "kernel release unknown" in " ".join(f["evidence"])


@pytest.mark.parametrize("live", [59500])
def test_live_memcgs_near_the_limit_on_6_12(tmp_path, live):
    root = _node(tmp_path, "6.12.95+deb12-amd64", live, live, 0)
    rc, doc = check_json("--root", root, "--seconds", "1", timeout=300)
    f = finding(doc, "memcg_ids")
    assert f is not None and f["severity"] == "critical"
    assert f["data"]["ids_held_high"] == live and f["data"]["ratio"] == round(live / ID_MAX, 4)
    # 6.12 allocates the IDs from an xarray: a full one makes mkdir fail with EBUSY (measured in the VM)
    assert 'fails with EBUSY ("device or resource busy" on kernel 6.12)' in " ".join(f["evidence"])


def test_exporter_serves_ids_used_with_the_kernel_rule(tmp_path):
    import subprocess
    import sys
    import time
    import urllib.request

    from conftest import free_port
    from prometheus_client.parser import text_string_to_metric_families

    root = _node(tmp_path, "3.10.0-693.el7.x86_64", 64734, 240, 0)
    port = free_port()
    exp = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--root", root, "--listen",
                            f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    try:
        fams = {}
        for _ in range(120):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                fams = {f.name: f for f in text_string_to_metric_families(body)}
                if "nodesleuth_memcg_ids_used" in fams:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert fams["nodesleuth_memcg_ids_used"].samples[0].value == 64734
        assert fams["nodesleuth_memcg_ids_used_ratio"].samples[0].value == round(64734 / ID_MAX, 4)
    finally:
        exp.terminate()
        exp.wait()
