"""One home for the record types (model.py): every field of a recorded second reaches the dump,
the exporter's metrics and the web data, or is listed with the reason it does not. A collector
field added to model.Tick without a place in each view fails here."""

from __future__ import annotations

import dataclasses

import orjson

from conftest import nodesleuth
from nodesleuth.model import metrics
from nodesleuth.model import records as model
from nodesleuth.store import query as sq
from nodesleuth.store.store import StoreReader
from nodesleuth.web import data as wd

TICK_FIELDS = {f.name for f in dataclasses.fields(model.Tick)}
DUMP_KEY = {"time": "time", "interval": "interval", "cpu": "cpus", "cpu_raw": "cpus", "procs": "procs",
            "census": "cgroups", "meminfo": "meminfo", "events": "events", "nics": "nics", "units": "units",
            "softirqs": "softirqs", "nic_irqs": "nic_irqs", "starve": "starvation"}


def test_every_tick_field_has_a_place_in_each_view():
    assert set(DUMP_KEY) == TICK_FIELDS, "a Tick field without a dump key"
    for name, (shown, hidden) in {"exporter": (metrics.FROM_TICK, metrics.NOT_FROM_TICK),
                                  "web": (wd.FROM_TICK, wd.NOT_FROM_TICK)}.items():
        assert set(shown) | set(hidden) == TICK_FIELDS, (name, TICK_FIELDS ^ (set(shown) | set(hidden)))
        assert not set(shown) & set(hidden), name
        assert all(len(why) > 15 for why in hidden.values()), name
    for names in metrics.FROM_TICK.values():
        assert all(n in metrics.METRICS for n in names), names


def test_a_real_recording_shows_every_field_where_it_is_declared(tmp_path):
    store = str(tmp_path / "store")
    p = nodesleuth("record", "--store", store, "--duration", "4s", "--quiet", "--units-every", "1",
                   "--live-every", "2")
    assert p.returncode == 0, p.stderr
    reader = StoreReader(store)
    ticks = list(sq.ticks(reader, None, None))
    assert len(ticks) >= 3
    t = ticks[-1]
    # the dump: every field under its key, and the JSON is exactly the model's to_dict()
    d = t.to_dict()
    assert {DUMP_KEY[f] for f in TICK_FIELDS} <= set(d)
    assert orjson.loads(orjson.dumps(d))["cpus"]["all"]["busy"] == round(t.cpu[-1].busy, 2)
    dumped = nodesleuth("dump", "--store", store, "--format", "json")
    rows = [orjson.loads(x) for x in dumped.stdout.splitlines()]
    assert rows[-1] == orjson.loads(orjson.dumps(d))
    # the exporter: the gauges a second gives include every gauge declared for its fields
    got = {name for name, _, _ in metrics.tick_gauges(t, {0: (1.0, 5.0)})}
    for field, names in metrics.FROM_TICK.items():
        if field in ("cpu", "census", "meminfo") or (field == "starve" and t.starve):
            assert got & set(names), (field, names)
    # the web: every declared key present in the timeline's data
    tl = wd.timeline(reader, ticks[0].time - 1, t.time + 1)
    for field, key in wd.FROM_TICK.items():
        assert key in tl, (field, key)
    assert tl["values"] and len(tl["values"]) == len([c for c in t.cpu if c >= 0])
    assert tl["census"] and tl["memory"][-1]["percpu"] == t.meminfo["Percpu"]
