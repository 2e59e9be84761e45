"""Unit health against a real systemd booted as PID 1 of a new PID namespace."""

from __future__ import annotations

import pytest
import os


from conftest import check_json, finding, needs_root, nodesleuth, start_crasher, wait_ticks
from nodesleuth.lab.systemd import SystemdNamespace

pytestmark = needs_root


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_crash_looping_unit_is_found():
    with SystemdNamespace() as ns:
        start_crasher(ns, 1)
        rc, doc = check_json("--seconds", "2", "--no-trace-churn", "--systemd-pid", str(ns.pid))
    f = finding(doc, "crash_loop", unit="ecs.service")
    assert f is not None, [x["title"] for x in doc["findings"]]
    assert rc == 1
    assert f["data"]["n_restarts"] >= 3
    assert f["data"]["restarts_delta"] >= 2, f
    # ExecMainStatus is the running process's (0) when systemd is read between a start and its exit
    assert f["data"]["exit_status"] == 1 or f["data"]["sub"] in ("running", "start"), f["data"]
    assert f["data"]["enabled"] == "enabled"
    assert not finding(doc, "crash_loop", unit="dbus.service")


def _record_through_a_freeze(store: str, duration: str, *extra: str) -> tuple[int, str, float, float]:
    """`record` with units read every tick from a real systemd (PID 1 of a namespace, a unit
    crash-looping) that is frozen with SIGSTOP 4 s after its first tick, for 6 s: (exit code, stderr, frozen at,
    thawed at)."""
    import signal
    import subprocess
    import sys
    import time

    from nodesleuth.node.children import spawn

    with SystemdNamespace() as ns:
        start_crasher(ns, 1)
        rec = spawn([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--duration", duration,
                     "--units-every", "1", *extra, "--systemd-pid", str(ns.pid), "--quiet"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_ticks(store, rec)  # a loaded host takes seconds to start it
            time.sleep(4)
            frozen = time.time()
            os.kill(ns.pid, signal.SIGSTOP)
            time.sleep(6)
            thawed = time.time()
            os.kill(ns.pid, signal.SIGCONT)
            _, err = rec.communicate(timeout=120)
        finally:
            os.kill(ns.pid, signal.SIGCONT)
            if rec.poll() is None:
                rec.kill()
    return rec.returncode, err, frozen, thawed


@pytest.mark.slow
def test_systemd_that_does_not_answer_stalls_no_tick(tmp_path):
    """A crash loop keeps PID 1 busy; a systemd that cannot answer (here frozen with SIGSTOP for 6 s,
    the real daemon) must cost the recording its unit reads for that time, not its ticks: units are
    read on their own thread and the answer lands in the tick after it comes."""
    import json

    store = str(tmp_path / "store")
    rc, err, frozen, thawed = _record_through_a_freeze(store, "16s")
    assert rc == 0, err
    d = nodesleuth("dump", "--store", store, "--format", "json")
    rows = [json.loads(x) for x in d.stdout.splitlines() if x.strip()]
    times = [r["time"] for r in rows]
    during = [r for r in rows if frozen + 1 < r["time"] < thawed]
    # every second of the freeze has its tick (a blocked read would have left one 6 s gap)
    assert len(during) >= 4, times
    assert max(b - a for a, b in zip(times, times[1:])) < 3.5, times
    def restarts(r) -> int:  # the store carries the last answer forward into every tick
        return next((u["n_restarts"] for u in r.get("units") or [] if u["unit"] == "ecs.service"), -1)

    frozen_n = {restarts(r) for r in during}
    assert len(frozen_n) == 1 and min(frozen_n) >= 1, frozen_n  # one answer from before the freeze
    assert restarts(rows[-1]) > max(frozen_n), [restarts(r) for r in rows]  # answers came again after it


@pytest.mark.slow
def test_units_read_that_times_out_is_said_and_so_is_its_recovery(tmp_path):
    """With --units-timeout 2, a systemd frozen for 6 s makes a units read fail: the recorder says so
    once ("could not read units", naming systemctl and the timeout), keeps its ticks, and says when
    systemd answers again (a note that stayed up would claim units are unread for the rest of the run)."""
    rc, err, _, _ = _record_through_a_freeze(str(tmp_path / "store"), "18s", "--units-timeout", "2")
    assert rc == 0, err
    lines = err.splitlines()
    failed = [i for i, ln in enumerate(lines) if "could not read units" in ln]
    back = [i for i, ln in enumerate(lines) if "units read again" in ln]
    assert len(failed) == 1 and "systemctl" in lines[failed[0]] and "timed out after 2" in lines[failed[0]], err
    assert len(back) == 1 and back[0] > failed[0], err
