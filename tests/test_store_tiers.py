"""Retention tiers: 1 s ticks for days, 10 s aggregates for a month, minutes for a year; every reader
takes the finest tier that covers what it reads and says which.

Material: the golden recording's seconds (tests/golden/store-v2, this machine, 2 CPUs) replayed
over two hours through the recorder's own writers (codec, 10 s aggregator, rollups, store), with a
hot core on CPU 1 (5 min at 95% sys) in the first hour; then the 1 s tier's retention (30 min)
applied, as `record --tier-1s 30m` does."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from conftest import nodesleuth
from nodesleuth.model.thresholds import HOT_BUSY
from nodesleuth.store import query, tier
from nodesleuth.store.catalog import ROLLUP, TICKS, TICKS10
from nodesleuth.store.rollup import Rollup
from nodesleuth.store.store import StoreReader, StoreWriter
from nodesleuth.store.tier import Aggregator, CoarseTick

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
T0 = 1_800_000_000.0
HOT = (T0 + 1200, T0 + 1500)  # CPU 1 at 95 % sys, the other idle


def _cpus(tk, hot: bool):
    """The second's jiffies set: CPU 1 at 95% sys when hot, both CPUs quiet otherwise (the golden
    recording had a loop pinned to CPU 1 throughout)."""
    raw = dict(tk.cpu_raw)
    raw[1] = (5, 0, 95, 0, 0, 0, 0, 0, 0, 0) if hot else (4, 0, 2, 94, 0, 0, 0, 0, 0, 0)
    raw[0] = (2, 0, 1, 97, 0, 0, 0, 0, 0, 0)
    raw[-1] = tuple(a + b for a, b in zip(raw[0], raw[1]))
    return dataclasses.replace(tk, cpu_raw=raw, cpu={})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = list(query.ticks(StoreReader(os.path.join(GOLDEN, "store-v2")), None, None))
    d = str(tmp_path_factory.mktemp("tiers") / "st")
    tiers = {"1s": (1800.0, None), "10s": (None, None), "1m": (None, None)}
    w = StoreWriter(d, segment_seconds=600.0, tiers=tiers)
    agg, roll = Aggregator(), Rollup()
    for i in range(7200):
        t = T0 + i + 1
        tk = _cpus(dataclasses.replace(src[i % len(src)], time=t, interval=1.0), HOT[0] < t <= HOT[1])
        w.write(TICKS, tk)
        done = agg.add(tk)
        if done is not None:
            a, extra = done
            w.write(TICKS10, a, extra=extra)
        m = roll.add(tk)
        if m is not None:
            w.write(ROLLUP, m)
    dropped = w.budget.enforce(now=T0 + 7200)
    w.close()
    assert dropped and all("/ticks/" in p for p in dropped)
    return d


def test_plan_takes_the_finest_tier_covering_each_part(store):
    r = StoreReader(store)
    f1 = r.first(TICKS)
    assert T0 + 5400 - 600 <= f1 <= T0 + 5400 + 1  # whole 10-minute segments older than 30 min went
    p = tier.plan(r, T0 + 600, T0 + 7000)
    assert p.tiers == ["10s", "1s"] and p.parts[0].t1 == p.parts[1].t0 == f1
    assert "10s" in p.say() and "lost" in p.say()
    assert tier.plan(r, f1 + 10, f1 + 20).tiers == ["1s"] and not tier.plan(r, f1 + 10, f1 + 20).coarse
    got = list(tier.ticks(r, T0 + 600, T0 + 7000))
    assert all(isinstance(t, CoarseTick) for t in got if t.time < f1)
    assert not any(isinstance(t, CoarseTick) for t in got if t.time > f1 + 10)
    assert all(b.time > a.time for a, b in zip(got, got[1:]))
    assert sum(t.interval for t in got) == pytest.approx(6400, abs=30)  # the range, no second twice


def test_a_10s_window_keeps_the_hot_core_evidence(store):
    r = StoreReader(store)
    tk, p = tier.at(r, HOT[0] + 100)
    assert isinstance(tk, CoarseTick) and tk.tier == "10s" and tk.n == 10 and tk.interval == 10.0
    assert tk.hot[1] == 10 and tk.bmax[1] >= HOT_BUSY and tk.cpu[1].sys == pytest.approx(95.0)
    assert tk.cpu_busy()[1][tk.cpu_busy()[0].index(1)] >= HOT_BUSY
    edge, _ = tier.at(r, HOT[1] + 5)  # the window after the episode: cold again
    assert edge.hot.get(1, 0) == 0 and edge.cpu_busy()[1][1] < HOT_BUSY
    d = tk.to_dict()
    assert d["tier"] == "10s" and d["seconds"] == 10 and d["hot_seconds"] == {"1": 10}


def test_explain_dump_replay_and_web_read_the_10s_tier_and_say_so(store):
    ex = nodesleuth("explain", "--store", store, "--at", str(HOT[0] + 100), "--json")
    assert ex.returncode == 0, ex.stderr
    doc = json.loads(ex.stdout)
    inc = [i for i in doc["incidents"] if i["kind"] == "hot_core"]
    assert inc and abs(inc[0]["start"] - HOT[0]) <= 10 and abs(inc[0]["end"] - HOT[1]) <= 10
    assert inc[0]["links"][0]["data"]["cpu"] == 1
    assert any("10s" in n and "lost" in n for n in doc["notes"])
    dump = nodesleuth("dump", "--store", store, "--at", str(HOT[0] + 100))
    assert dump.returncode == 0 and "tiers 10s" in dump.stderr
    assert json.loads(dump.stdout)["tier"] == "10s"
    recent = nodesleuth("dump", "--store", store, "--at", str(T0 + 7000))
    assert "tier 1s" in recent.stderr and "tier" not in json.loads(recent.stdout)
    rp = nodesleuth("replay", "--store", store, "--at", str(HOT[0] + 100), "--around", "30")
    assert rp.returncode == 0 and "10s" in rp.stderr and rp.stdout.count("CPU   1") >= 5
    from nodesleuth.web import data

    tl = data.timeline(StoreReader(store), HOT[0] - 300, HOT[1] + 300, cols=120)
    assert tl["resolution"] == 10 and tl["tier"] == "10 s aggregates" and "lost" in tl["tier_note"]
    assert max(tl["values"][1]) >= HOT_BUSY
    cell = data.cell(StoreReader(store), 1, HOT[0] + 100, 10)
    assert cell["tier"] == "10s" and cell["hot_seconds"] == 10 and cell["span"] == 10.0


def test_the_byte_bound_drops_the_finest_tier_first(tmp_path, store):
    import shutil

    d = str(tmp_path / "copy")
    shutil.copytree(store, d)
    w = StoreWriter(d, segment_seconds=600.0, tiers={"1s": (None, None), "10s": (None, None), "1m": (None, None)})
    size = w.budget.segments()
    total = sum(s[2] for s in size)
    ticks = sum(s[2] for s in size if "/ticks/" in s[1])
    w.budget.max_bytes = total - ticks // 2
    dropped = w.enforce(now=T0 + 7200)
    w.close()
    assert dropped and all("/ticks/" in p for p in dropped)
    r = StoreReader(d)
    assert r.segments(TICKS10) and r.segments(ROLLUP)
    assert tier.plan(r, T0, T0 + 7200).tiers[:1] == ["10s"]
