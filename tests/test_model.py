"""One home for the record types (model/records.py): every field of a recorded second reaches the
dump, the exporter's metrics and the web data, or is listed with the reason it does not. A collector
field added to Tick without a place in each view fails here; a registered collector's section
(model/section.py) declares its places itself, and those declarations are checked too."""

from __future__ import annotations

import dataclasses

import orjson

import pytest

from conftest import nodesleuth
from nodesleuth.collect.registry import registered
from nodesleuth.model import metrics
from nodesleuth.model import records as model
from nodesleuth.model.section import SECTIONS, key_of
from nodesleuth.web.panels import panels
from nodesleuth.store import codec, query as sq
from nodesleuth.store.store import StoreReader
from nodesleuth.web import data as wd

TICK_FIELDS = {f.name for f in dataclasses.fields(model.Tick)}
DUMP_KEY = {"time": "time", "interval": "interval", "cpu": "cpus", **{n: key_of(c) for n, c in SECTIONS.items()}}


def test_every_tick_field_has_a_place_in_each_view():
    assert set(DUMP_KEY) == TICK_FIELDS, "a Tick field without a dump key"
    for name, (shown, hidden) in {"exporter": (metrics.FROM_TICK, metrics.NOT_FROM_TICK),
                                  "web": (wd.FROM_TICK, wd.NOT_FROM_TICK)}.items():
        assert set(shown) | set(hidden) == TICK_FIELDS, (name, TICK_FIELDS ^ (set(shown) | set(hidden)))
        assert not set(shown) & set(hidden), name
        assert all(len(why) > 15 for why in hidden.values()), name
    for names in metrics.FROM_TICK.values():
        assert all(n in metrics.METRICS for n in names), names


def test_every_section_declares_its_collector_metrics_and_panel():
    """A section is filled by exactly one registered collector, its metrics are in the vocabulary,
    and the panel it names exists and draws its field."""
    by_field = {r.field: r for r in registered()}
    drawn = {p.name: p for p in panels()}
    assert SECTIONS and set(SECTIONS) <= set(by_field), set(SECTIONS) - set(by_field)
    for name, cls in SECTIONS.items():
        assert name in TICK_FIELDS, name
        assert cls.METRICS or len(cls.NO_METRICS) > 15, name
        assert all(metrics.METRICS[m.name] is m for m in cls.METRICS), name
        assert cls.WEB.startswith(("panel:", "data:", "not shown: ")), (name, cls.WEB)
        assert "merge" in cls.__dict__, f"{name}: how a window of seconds folds into one (the 10 s tier)"
        if cls.WEB.startswith("panel:"):
            p = drawn[cls.WEB.split(":", 1)[1]]
            assert name in p.fields, (name, p.name)


def test_a_real_recording_shows_every_field_where_it_is_declared(tmp_path):
    store = str(tmp_path / "store")
    p = nodesleuth("record", "--store", store, "--duration", "4s", "--quiet", "--units-every", "1",
                   "--live-every", "2")
    assert p.returncode == 0, p.stderr
    reader = StoreReader(store)
    ticks = list(sq.ticks(reader, None, None))
    assert len(ticks) >= 3
    t = ticks[-1]
    # the dump: every field under its key, with the values of the stored record itself, read here
    # from the raw frame (not through the decoder the dump uses): mpstat's arithmetic on its jiffies
    d = t.to_dict()
    assert {DUMP_KEY[f] for f in TICK_FIELDS} <= set(d)
    dumped = nodesleuth("dump", "--store", store, "--format", "json")
    rows = [orjson.loads(x) for x in dumped.stdout.splitlines()]
    # schema 3 packs the numbers (store/pack.py): the record as stored, numbers unpacked and idle rebuilt
    # from its row total (store/codec.py _load), not the Tick the dump's decoder makes of it
    t_raw, payload, ctx = list(reader.read("ticks", with_context=True))[-1]
    raw = codec._load(payload, "tick", t_raw, ctx)
    last = rows[-1]
    assert last["time"] == raw["t"] and {DUMP_KEY[f] for f in TICK_FIELDS} <= set(last)
    for c, jiffies in zip(raw["ci"] if isinstance(raw["ci"], list) else range(raw["ci"]), raw["c"]):
        j = list(jiffies) + [0] * (10 - len(jiffies))
        total = sum(j[:8])
        busy = 100.0 * (total - j[3] - j[4]) / total if total else 0.0
        assert abs(last["cpus"][str(c)]["busy"] - busy) <= 0.01, (c, last["cpus"][str(c)], j)
    sn = raw["x"]["softnet"]
    assert last["softnet"]["cpus"] == (list(range(sn["cpus"])) if isinstance(sn["cpus"], int) else sn["cpus"])
    for row in sn["r"]:  # the CPUs whose counters moved, each column under its name
        i = last["softnet"]["cpus"].index(row[0])
        assert [last["softnet"][k][i] for k in sn["f"]] == row[1:]
    # the exporter: the gauges a second gives include every gauge declared for its fields
    got = {name for name, _, _ in metrics.tick_gauges(t, {0: (1.0, 5.0)})}
    for field, names in metrics.FROM_TICK.items():
        if field in ("cpu", "census", "meminfo") or (field == "starve" and t.starve):
            assert got & set(names), (field, names)
    # the web: every declared key present in the timeline's data
    tl = wd.timeline(reader, ticks[0].time - 1, t.time + 1)
    for field, key in wd.FROM_TICK.items():
        assert key.split(":", 1)[1] in tl["panels"] if key.startswith("panel:") else key in tl, (field, key)
    assert tl["values"] and len(tl["values"]) == len([c for c in t.cpu if c >= 0])
    assert tl["panels"]["census"]["points"] and tl["panels"]["memory"]["points"][-1]["percpu"] == t.meminfo["Percpu"]
    assert len(tl["panels"]["softnet"]["points"]) == len(ticks)  # every second (the prime read is the baseline)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_sections_fold_a_window_of_real_seconds(tmp_path):
    """What the 10 s tier stores of a registered section (store/tier.py calls each class's merge_over): a real
    recording's seconds folded, counters summed as the kernel counted them, the result storable."""
    store = str(tmp_path / "store")
    p = nodesleuth("record", "--store", store, "--duration", "7s", "--quiet", "--live-every", "1")
    assert p.returncode == 0, p.stderr
    ticks = list(sq.ticks(StoreReader(store), None, None))
    seen = set()
    for name, cls in SECTIONS.items():
        vals = [getattr(t, name) for t in ticks if getattr(t, name) is not None]
        if len(vals) < 2:
            continue
        seen.add(name)
        secs = [t.interval for t in ticks if getattr(t, name) is not None]
        m = cls.merge_over(vals, secs)
        back = type(m).from_stored(orjson.loads(orjson.dumps(m.stored())))
        if name != "procs":
            assert back.to_dict() == m.to_dict(), name
        if name == "procs":
            assert back.stored() == m.stored()  # kept in tenths of a percent (Procs.stored): that form round-trips
            # each process's mean over the window, its seconds weighted by their intervals
            want: dict = {}
            total = sum(secs)
            for v, s in zip(vals, secs):
                for q in v:
                    want[(q.pid, q.cpu)] = want.get((q.pid, q.cpu), 0.0) + q.pct * s / total
            for p in m:
                assert abs(p.pct - want[(p.pid, p.cpu)]) < 1e-9, p
            top = {c: sorted((x for k, x in want.items() if k[1] == c and x >= 0.5), reverse=True)[:5]
                   for c in {k[1] for k in want}}
            assert sorted((p.cpu, round(p.pct, 9)) for p in m) == sorted((c, round(x, 9)) for c, xs in top.items()
                                                                         for x in xs)
        elif name == "vmstat":
            assert m.deltas == {k: sum(v.deltas.get(k, 0) for v in vals) for k in m.deltas}
        elif name == "softnet":
            for c in m.cpus:
                assert m.of(c)["processed"] == sum(v.of(c).get("processed", 0) for v in vals)
        elif name == "tcp":
            for k in m.init:
                assert m.sum(k) == sum(v.sum(k) for v in vals), k
        elif name == "kernel_log":
            assert (m.read, m.dropped) == (sum(v.read for v in vals), sum(v.dropped for v in vals))
    assert {"procs", "softnet", "vmstat", "tcp", "kernel_log"} <= seen, seen
