"""`replay`: the top N hot CPUs (or all of them) each second, ties broken by the second before, on the
96-CPU recorded store of the web fixture (CPU 39 pinned for 5 s)."""

from __future__ import annotations

import dataclasses

import pytest

from conftest import nodesleuth
from fixtures.webstore import build
from nodesleuth.report.replay import hottest
from nodesleuth.store import query as sq
from nodesleuth.store.store import StoreReader


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return build(str(tmp_path_factory.mktemp("replay")), seconds=120)


def test_top_n_and_all_cpus(recorded):
    h0 = recorded["hot_start"]
    p = nodesleuth("replay", "--store", recorded["store"], "--from", str(h0 + 1), "--to", str(h0 + 2.5), "--top", "3")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines and all(ln.count("CPU ") == 3 for ln in lines)
    assert all(ln.split(" | ")[2].startswith("CPU  39  9") for ln in lines), lines  # hottest first
    allc = nodesleuth("replay", "--store", recorded["store"], "--from", str(h0 + 1), "--to", str(h0 + 2.5),
                      "--all-cpus").stdout.splitlines()
    assert allc and all(ln.count("CPU ") == 96 for ln in allc)


def test_ties_go_to_the_cpu_busier_the_second_before(recorded):
    """Two real consecutive ticks; CPUs 3 and 7 set to the same busy % this second, 7 busier the
    second before: 7 comes first, and without a previous second the lower number does."""
    h0 = recorded["hot_start"]
    prev, cur = list(sq.ticks(StoreReader(recorded["store"]), h0 + 10, h0 + 12, carry=False))[:2]

    def with_busy(t, busy: dict):
        cpu = dict(t.cpu)
        for c, b in busy.items():
            u = cpu[c]
            cpu[c] = dataclasses.replace(u, usr=b, nice=0.0, sys=0.0, iowait=0.0, irq=0.0, soft=0.0, steal=0.0,
                                         guest=0.0, gnice=0.0, idle=100.0 - b)
        return dataclasses.replace(t, cpu=cpu)

    cur = with_busy(cur, {3: 100.0, 7: 100.0})
    prev = with_busy(prev, {3: 20.0, 7: 80.0})
    assert [u.cpu for u in hottest(cur, prev, 2)] == [7, 3]
    assert [u.cpu for u in hottest(cur, None, 2)] == [3, 7]
