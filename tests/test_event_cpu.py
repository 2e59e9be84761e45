"""Every NIC event names its CPU: the CPU that served the reporting queue's interrupts (the queue the
driver named, matched to the device's IRQ line by the number its name ends with), and that CPU's load
in the event's second, in explain's event link and in check's nic_reset finding."""

from __future__ import annotations

import dataclasses
import json

from conftest import nodesleuth
from fixtures.webstore import build
from nodesleuth.detect.incidents import event_cpu
from nodesleuth.model.records import KernelEvent


def test_explain_names_the_cpu_of_the_queue_that_stalled(tmp_path):
    facts = build(str(tmp_path / "w"))
    p = nodesleuth("explain", "--store", facts["store"], "--json")
    assert p.returncode == 0, p.stderr
    inc = next(i for i in json.loads(p.stdout)["incidents"] if i["kind"] == "nic_reset")
    ev = inc["links"][0]
    q0 = next(c for c in ev["data"]["cpus"] if c.get("queue") == 0)
    # the fixture's ENA queue 0 interrupts land on CPU 39, the core the memcg walk pinned
    assert q0["cpu"] == 39 and q0["irq_share"] == 1.0 and q0["busy"] >= 90, q0
    assert any(e.startswith("queue 0 of eth0 is served on CPU 39") for e in ev["evidence"]), ev["evidence"]
    assert "served on CPU 39" in ev["summary"]


def test_the_drivers_own_cpu_field_wins_and_no_counts_is_no_answer():
    e = KernelEvent(seq=1, time=100.0, usec=None, reason="X", kind="tx_timeout", severity="warning",
                    driver="mlx5_core", ifname="eth1", message="msg",
                    fields={"queue": "3", "cpu": "7", "bus": "0000:01:00.0"})
    got = event_cpu([], e, "eth1")
    assert got["cpu"] == 7 and got["how"] == "the driver's line names it" and got["queue"] == 3
    e2 = dataclasses.replace(e, fields={"queue": "3"})
    assert event_cpu([], e2, "eth1") is None  # no recorded interrupts of that queue: unknown, not guessed
