"""An upgrade just works: a store written before the collectors became one pattern (tests/golden/store-sections,
a real 75 s recording of this host by main's code at the commit named in tests/golden/README.md) reads
back, from every tier, with the values that code's own `dump --format json` printed for it (captured then
into tests/golden/golden-sections-TIER.json). Each coarser tier is read alone by dropping the finer streams
from a copy, as retention does."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import nodesleuth
from test_golden import GOLDEN, _same

FINER = {"1s": (), "10s": ("ticks",), "1min": ("ticks", "ticks10s")}


@pytest.mark.parametrize("tier", ["1s", "10s", "1min"])
def test_store_from_before_sections_reads_every_tier_equal(tmp_path, tier):
    store = str(tmp_path / "st")
    shutil.copytree(os.path.join(GOLDEN, "store-sections"), store)  # read a copy: never touch the golden
    for d in FINER[tier]:
        shutil.rmtree(os.path.join(store, d))
    out = nodesleuth("dump", "--store", store, "--format", "json")
    assert out.returncode == 0, out.stderr
    new = [json.loads(x) for x in out.stdout.splitlines()]
    old = [json.loads(x) for x in open(os.path.join(GOLDEN, f"golden-sections-{tier}.json"))]
    assert len(new) == len(old) > 0
    _same(old, new)
    if tier != "1s":
        assert {t["tier"] for t in new} == {tier}
    else:  # the recording holds every hand-wired and registered part of a second
        assert any(t["starvation"] for t in new) and any(t["softirqs"] for t in new)
        assert any(t["softnet"] for t in new) and any(t["tcp"] for t in new) and any(t["vmstat"] for t in new)


def test_nics_of_a_store_from_before_sections_read_as_stored():
    """The NIC counters (a section since, still under "nic", kept when they change): every record of the old
    store that holds them reads back as the interface, driver, bus and counters it stored, and the ticks between
    carry them forward."""
    from nodesleuth.store import codec, query
    from nodesleuth.store.store import StoreReader

    reader = StoreReader(os.path.join(GOLDEN, "store-sections"))
    raw = [codec._load(p, "tick", t, ctx) for t, p, ctx in reader.read("ticks", with_context=True)]
    ticks = list(query.ticks(reader, None, None))
    assert len(ticks) == len(raw) and sum("nic" in r for r in raw) >= 2
    for r, tk in zip(raw, ticks):
        if "nic" in r:
            assert tk.nics.stored() == r["nic"]
            assert [(n.ifname, n.driver, n.bus, n.stats["rx_packets"]) for n in tk.nics] == \
                [(k, v["driver"], v["bus"], v["stats"]["rx_packets"]) for k, v in r["nic"].items()]
        assert tk.nics and tk.nics[0].stats["rx_packets"] > 0


@pytest.mark.parametrize("name", ["store-v1", "store-v2", "store-v3", "store-sections"])
def test_census_of_stores_from_before_sections_reads_and_reencodes_as_stored(name):
    """The cgroup census (a section since, still under the record's own keys cg, c2, ds): every 1 s and 10 s record
    of the golden stores decodes (eagerly and lazily) to the census it stored and encodes it again byte for byte
    (the hash of the census parts of every record, as stored and as re-encoded); schema 1's positional rows read
    as the names say."""
    import hashlib
    from collections import defaultdict

    import orjson

    from nodesleuth.store import codec
    from test_golden import golden_ticks

    n = 0
    stored, again = defaultdict(hashlib.sha256), defaultdict(hashlib.sha256)
    for stream, raw, tk, lazy in golden_ticks(name):
        assert tk.census == lazy.census and tk.census.time == raw["t"]
        if raw.get("v", 1) == 1:  # [name, hierarchy, tracked, live] rows, c2 [mount, nr, nr dying, subsys]
            assert [[c.name, c.hierarchy, c.tracked, c.live] for c in tk.census.v1] == raw["cg"]
            assert tk.census.v2.nr_dying_descendants == raw["c2"][2] if "c2" in raw else tk.census.v2 is None
            continue
        rec = codec.Encoder(2).record(tk)
        stored[stream].update(orjson.dumps({k: raw[k] for k in ("cg", "c2", "ds") if k in raw}))
        again[stream].update(orjson.dumps({k: rec[k] for k in ("cg", "c2", "ds") if k in rec}))
        assert tk.census.stored() == {k: raw[k] for k in ("cg", "c2", "ds") if k in raw}
        assert tk.census.memory_dying() is not None
        n += 1
    for stream in stored:
        assert stored[stream].hexdigest() == again[stream].hexdigest(), stream
    assert n or name == "store-v1"
