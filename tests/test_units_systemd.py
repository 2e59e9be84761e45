"""Unit health against a real systemd booted as PID 1 of a new PID namespace."""

from __future__ import annotations


from conftest import check_json, start_crasher, finding, needs_root
from nodesleuth.lab.systemd import SystemdNamespace

pytestmark = needs_root


def test_crash_looping_unit_is_found():
    with SystemdNamespace() as ns:
        start_crasher(ns, 1)
        rc, doc = check_json("--seconds", "2", "--no-trace", "--systemd-pid", str(ns.pid))
    f = finding(doc, "crash_loop", unit="ecs.service")
    assert f is not None, [x["title"] for x in doc["findings"]]
    assert rc == 1
    assert f["data"]["n_restarts"] >= 3
    assert f["data"]["restarts_delta"] >= 2, f
    # ExecMainStatus is the running process's (0) when systemd is read between a start and its exit
    assert f["data"]["exit_status"] == 1 or f["data"]["sub"] in ("running", "start"), f["data"]
    assert f["data"]["enabled"] == "enabled"
    assert not finding(doc, "crash_loop", unit="dbus.service")
