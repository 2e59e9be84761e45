"""End to end: the incident reproduced for real, explained from the recording, remedied, cleaned."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from conftest import start_crasher, needs_root, nodesleuth
from nodesleuth.lab.systemd import SystemdNamespace

pytestmark = needs_root

WORKDIR = "/var/lib/nodesleuth-lab-test"


def _leftovers() -> list[str]:
    out = subprocess.run(["pgrep", "-af", f"{WORKDIR}|lab-hog|ecs-agent"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "pgrep" not in ln]


@pytest.fixture
def lab():
    nodesleuth("lab", "clean", "--workdir", WORKDIR)  # a previous failed run
    yield WORKDIR
    res = nodesleuth("lab", "clean", "--workdir", WORKDIR)  # always, even when the test failed
    assert res.returncode == 0, res.stderr
    assert not _leftovers()
    assert not os.path.exists("/sys/fs/cgroup/memory/nodesleuth-lab")


def test_lab_reproduces_and_explain_names_the_chain(lab, tmp_path):
    run = nodesleuth("lab", "run", "--workdir", lab, "--seconds", "32", timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ENA reset lines written" in run.stderr
    assert "zombie cost on this kernel" in run.stdout
    curve = [ln.split() for ln in run.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert len(curve) >= 4 and int(curve[-1][0]) > int(curve[0][0]) + 200  # zombies accumulated
    store = os.path.join(lab, "store")
    md, html = str(tmp_path / "r.md"), str(tmp_path / "r.html")
    ex = nodesleuth("explain", "--store", store, "--json", "--markdown", md, "--html", html, timeout=300)
    assert ex.returncode == 0, ex.stderr
    incs = json.loads(ex.stdout)["incidents"]
    nic = [i for i in incs if i["kind"] == "nic_reset"]
    assert nic, [i["title"] for i in incs]
    inc = nic[0]
    links = {lk["name"]: lk for lk in inc["links"]}
    assert inc["root_cause"] == "ecs.service"
    assert "SUSPECTED_POLL_STARVATION" in links["event"]["data"]["reasons"]
    assert links["saturated_core"]["status"] == "found" and links["saturated_core"]["data"]["cpu"] == 1
    comms = {p["comm"] for p in links["processes"]["data"]["top"]}
    assert {"lab-hog", "kubelet"} <= comms
    assert links["resource"]["status"] == "found" and "kubelet" in links["resource"]["summary"]
    assert links["resource"]["data"]["dying"] >= 100
    assert links["resource"]["data"]["tracked"] - links["resource"]["data"]["live"] == links["resource"]["data"]["dying"]
    assert links["creator"]["data"]["comm"] == "ecs-agent" and links["creator"]["data"]["unit"] == "ecs.service"
    assert links["creator"]["confidence"] == "high"
    assert links["unit_loop"]["data"]["restarts"] >= 5 and links["unit_loop"]["data"]["exit_status"] == 1
    assert "systemctl disable --now ecs.service" in links["remediation"]["data"]["commands"]
    assert "root cause: ecs.service" in open(md).read() and "ecs.service" in open(html).read()
    dry = nodesleuth("remedy", "--store", store)
    assert dry.returncode == 0 and "would run" in dry.stdout and "systemctl mask ecs.service" in dry.stdout



def test_remedy_apply_disables_and_masks_the_looping_unit():
    with SystemdNamespace() as ns:
        start_crasher(ns, 3)
        dry = nodesleuth("remedy", "--systemd-pid", str(ns.pid), "--seconds", "2")
        assert f"nsenter -t {ns.pid} -m -p -- systemctl disable --now ecs.service" in dry.stdout
        assert ns.systemctl("is-enabled", "ecs.service", check=False).stdout.strip() == "enabled"  # dry run
        p = nodesleuth("remedy", "--systemd-pid", str(ns.pid), "--seconds", "2", "--apply")
        assert p.returncode == 0, p.stderr
        time.sleep(1.0)
        assert ns.systemctl("is-enabled", "ecs.service", check=False).stdout.strip() == "masked"
        assert ns.systemctl("is-active", "ecs.service", check=False).stdout.strip() in ("inactive", "failed")
        n1 = int(ns.systemctl("show", "-p", "NRestarts", "--value", "ecs.service").stdout)
        time.sleep(1.0)
        assert int(ns.systemctl("show", "-p", "NRestarts", "--value", "ecs.service").stdout) == n1
