"""The cgroup census as a registered section (model/records.py Census, collect/cgroups.py): what the minute tier
keeps of it (Census.fold: the memory counts the census chart draws) on a cgroup v2 node, and minutes stored before
it was a section (RollupMinute's mem and dying fields) read into the same form."""

from __future__ import annotations

import os

import orjson

from fixtures.trees import make_v2_node
from nodesleuth.collect.sampler import Sampler
from nodesleuth.model.metrics import tick_gauges
from nodesleuth.node.root import Root
from nodesleuth.store import rollup, tier
from nodesleuth.store.store import StoreReader
from nodesleuth.web.panels import panels
from test_golden import GOLDEN

CHART = {p.name: p for p in panels()}["census"]


def _point(m):
    """The census chart's point for a stored minute, as the web's day view makes it (web/data.py)."""
    return CHART.from_tick(tier.minute_sections(m, CHART.fields))


def test_a_v2_minute_keeps_the_memory_counts_the_chart_draws(tmp_path):
    root = make_v2_node(str(tmp_path / "n"), dying=5000)
    s = Sampler(Root(root), kmsg=False)
    try:
        s.prime()
        assert s.primed["census"].memory_dying() == 5000  # prime() walks: the census a check opens with
        ticks = [s.tick(), s.tick(force_walk=True)]
    finally:
        s.close()
    last = ticks[-1].census
    assert last.v2 is not None and last.dying_subtrees and last.memory_dying() == 5000
    roll = rollup.Rollup()
    for t in ticks:
        roll.add(t)
    m = rollup.decode(rollup.encode(roll.flush()))
    kept = m.x["census"]  # the v2 root's counts with its memory ones: no subtree paths, no other controller
    assert set(kept) == {"cg", "c2"} and set(kept["c2"]["subsys"]) == {"memory"} and not kept["cg"]["r"]
    c = tier.from_minute(m).census
    assert (c.memory_dying(), c.memory_live()) == (last.memory_dying(), last.memory_live())
    assert _point(m) == {"t": m.t + 60, "tracked": None, "live": None, "dying": 5000}
    got = {(name, labels): v for name, labels, v in tick_gauges(tier.from_minute(m))}
    assert got[("nodesleuth_cgroups_dying", ("memory", "v2"))] == 5000


def test_minutes_stored_before_census_was_a_section_read_the_same():
    """store-sections' minutes (written with RollupMinute.mem = [tracked, live, dying] and .dying): the chart's
    points and the minute's census hold those numbers; the same minute as a v2 node's wrote it (mem None, dying
    alone) reads its dying count, its live count unknown."""
    reader = StoreReader(os.path.join(GOLDEN, "store-sections"))
    raws = [orjson.loads(p) for _, p in reader.read("rollup")]
    assert len(raws) == 2 and all(r["mem"] and r["dying"] == r["mem"][2] for r in raws)
    for raw in raws:
        m = rollup.decode(orjson.dumps(raw))
        mem = tier.from_minute(m).census.controller("memory")
        assert (mem.tracked, mem.live, mem.dying) == tuple(raw["mem"])
        assert _point(m) == {"t": raw["t"] + 60, "tracked": raw["mem"][0], "live": raw["mem"][1], "dying": raw["dying"]}
        v2 = rollup.decode(orjson.dumps({**raw, "mem": None}))
        c = tier.from_minute(v2).census
        assert (c.memory_dying(), c.memory_live(), c.v1) == (raw["dying"], None, ())
        assert _point(v2) == {"t": raw["t"] + 60, "tracked": None, "live": None, "dying": raw["dying"]}
        gauges = list(tick_gauges(tier.from_minute(v2)))
        assert ("nodesleuth_cgroups_dying", ("memory", "v2"), raw["dying"]) in gauges
        assert all(v is not None for _, _, v in gauges)


def test_a_minute_without_memory_counts_keeps_no_census(tmp_path):
    """A node whose census counts no memory cgroup (the v2 fixture without its mount table: no cgroup2 mount, no
    v1 controller mounted) folds to no census: nothing is stored for it and the chart's point holds no count."""
    root = make_v2_node(str(tmp_path / "n"), dying=10)
    os.remove(os.path.join(root, "proc/self/mountinfo"))  # no mount table: nothing mounted, nothing counted
    s = Sampler(Root(root), kmsg=False)
    try:
        tk = s.tick()
    finally:
        s.close()
    assert tk.census.memory_dying() is None and "cgroup mounts" in s.problems
    roll = rollup.Rollup()
    roll.add(tk)
    m = rollup.decode(rollup.encode(roll.flush()))
    assert "census" not in m.x and _point(m) == {"t": m.t + 60, "tracked": None, "live": None, "dying": None}
