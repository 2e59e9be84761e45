"""The lab's network victims (lab/netvictim.py): real TCP streams between two network namespaces whose
receive processing RPS puts on one CPU, measured before and during a hot core; every setting undone,
even when the test fails half-way."""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import needs_root, nodesleuth

pytestmark = needs_root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[1].split()[0] != "Z"


def test_everything_is_undone_even_on_failure():
    from nodesleuth.lab.netvictim import NetLab

    budget = open("/proc/sys/net/core/netdev_budget").read()
    backlog = open("/proc/sys/net/core/netdev_max_backlog").read()
    with pytest.raises(RuntimeError, match="half-way"):
        with NetLab() as lab:
            lab.rps(1)
            lab.sysctl("net.core.netdev_budget", 16)
            lab.sysctl("net.core.netdev_max_backlog", 64)
            lab.loss(5301, 0.5)
            s = lab.streams(1, 10)
            pids = [p.pid for p in lab.procs]
            assert open("/proc/sys/net/core/netdev_budget").read().strip() == "16"
            raise RuntimeError("the test failed half-way")
    assert lab.left() == [], lab.left()
    assert open("/proc/sys/net/core/netdev_budget").read() == budget
    assert open("/proc/sys/net/core/netdev_max_backlog").read() == backlog
    assert not [p for p in pids if _alive(p)] and not _alive(s.pid)
    assert not os.path.exists(lab.dir)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_streams_before_and_during_a_hot_core(busy_loop):
    """4 paced streams, their receive processing on CPU 1; a spinner then holds CPU 1. The report says,
    with numbers from the kernel and the streams' own sockets, what that did to them (here a user-space
    spinner: softirqs preempt it, so usually nothing); the figures are the kernel's (softnet on CPU 1
    processed the streams' packets, the host's netns saw none of their segments)."""
    from nodesleuth.lab.netvictim import NetLab, describe, verdict

    with NetLab() as lab:
        lab.rps(1)
        s = lab.streams(4, 20, cpu=0)
        time.sleep(2)
        a = s.snapshot()
        time.sleep(5)
        b = s.snapshot()
        busy_loop(cpu=1, comm="ns-busyloop")
        time.sleep(5)
        c = s.snapshot()
        before, during = s.report(a, b, 1), s.report(b, c, 1)
    assert lab.left() == []
    print("before:", describe(before), "\nduring:", describe(during), "\n", verdict(before, during))
    for r in (before, during):
        assert r["streams"] == 4 and r["softnet"]["processed"] > 100
        assert all(15 <= v <= 25 for v in r["mbit_per_stream"].values()), r["mbit_per_stream"]
        assert r["max_gap_ms"] is not None and r["host_netns"]["Tcp_RetransSegs"] < 50
    assert verdict(before, during).startswith(("the hot core hurt", "the hot core did nothing"))


WORKDIR = "/var/lib/nodesleuth-lab-net-test"


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_lab_run_reports_what_its_hot_core_did_to_the_streams():
    """`nodesleuth lab run` with its network victims: the kernel makes the hot core (memcg reclaim over
    zombies, CPU 1) while 4 TCP streams' receive processing is on CPU 1. The lab reports both phases
    with numbers and a verdict, and leaves no namespace behind."""
    nodesleuth("lab", "clean", "--workdir", WORKDIR)
    try:
        run = nodesleuth("lab", "run", "--workdir", WORKDIR, "--seconds", "15", "--zombies", "5000", "--no-curve",
                         "--rate", "150", "--no-profile", timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        st = json.load(open(os.path.join(WORKDIR, "state.json")))
        lines = [ln for ln in run.stderr.splitlines() if "network victims" in ln or "the hot core" in ln]
        print("\n".join(lines))
        net = st["net"]
        assert net["before"]["seconds"] >= 9 and net["during"]["seconds"] >= 14
        for phase in ("before", "during"):
            r = net[phase]
            assert r["cpu"] == 1 and r["streams"] == 4 and r["softnet"]["processed"] > 0
            assert set(r["sender_netns"]) >= {"Tcp_RetransSegs", "TcpExt_TCPTimeouts"}
        assert net["verdict"].startswith(("the hot core hurt", "the hot core did nothing"))
        assert any(ln.startswith("lab: network victims during the hot core:") for ln in lines)
        assert not [n for n in st["netns"] if os.path.exists(f"/run/netns/{n}")]
    finally:
        res = nodesleuth("lab", "clean", "--workdir", WORKDIR)
        assert res.returncode == 0, res.stderr
