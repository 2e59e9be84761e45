"""Recordings outlive versions: stores written by earlier nodesleuth versions (tests/golden, made by
tests/golden/make_golden.py on this machine: a real recording with a crash-looping unit, a pinned
loop, ENA lines, the profile and the churn trace) read back with equal values, and what that version
printed for them is what this one prints."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import nodesleuth

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def golden_ticks(name: str):
    """Every 1 s and 10 s record of the golden store `name`: (stream, the record as stored, its tick decoded
    eagerly, its tick decoded lazily), for the sections' tests of reading and re-encoding as stored."""
    from nodesleuth.store import codec
    from nodesleuth.store.store import StoreReader

    reader = StoreReader(os.path.join(GOLDEN, name))
    for stream in ("ticks", "ticks10s"):
        if reader.has(stream):
            for t, p, ctx in reader.read(stream, with_context=True):
                yield (stream, codec._load(p, "tick", t, ctx), codec.decode(p, "tick", t, ctx),
                       codec.decode_lazy(p, "tick", t, ctx))


def _same(old, new, path="") -> None:
    """Every value the old version printed is in the new output, equal (new fields may be added)."""
    if isinstance(old, dict):
        assert isinstance(new, dict), path
        for k, v in old.items():
            assert k in new, f"{path}.{k} missing"
            _same(v, new[k], f"{path}.{k}")
    elif isinstance(old, list):
        assert isinstance(new, list) and len(old) == len(new), (path, old, new)
        for i, (a, b) in enumerate(zip(old, new)):
            _same(a, b, f"{path}[{i}]")
    elif isinstance(old, float):
        assert new == pytest.approx(old, abs=1e-6), (path, old, new)
    else:
        assert old == new, (path, old, new)


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_golden_store_reads_with_equal_values(tmp_path, version):
    store = str(tmp_path / "st")
    shutil.copytree(os.path.join(GOLDEN, f"store-{version}"), store)  # read a copy: never touch the golden
    out = nodesleuth("dump", "--store", store, "--format", "json")
    assert out.returncode == 0, out.stderr
    new = [json.loads(x) for x in out.stdout.splitlines()]
    old = [json.loads(x) for x in open(os.path.join(GOLDEN, f"golden-{version}.json"))]
    assert len(new) == len(old) == 9
    _same(old, new)
    assert sum(len(t["events"]) for t in new) == 3 and any(t["units"] for t in new)
    csv = nodesleuth("dump", "--store", store, "--format", "csv")
    assert csv.stdout == open(os.path.join(GOLDEN, f"golden-{version}.csv")).read()
    folded = nodesleuth("flame", "--store", store, "--format", "folded")
    assert folded.returncode == 0, folded.stderr
    assert sorted(folded.stdout.splitlines()) == sorted(open(os.path.join(GOLDEN, f"golden-{version}.folded"))
                                                        .read().splitlines())
    ex = nodesleuth("explain", "--store", store, "--json")
    assert ex.returncode == 0, ex.stderr
    doc = json.loads(ex.stdout)
    nic = [i for i in doc["incidents"] if i["kind"] == "nic_reset"]
    assert nic and "SUSPECTED_POLL_STARVATION" in nic[0]["links"][0]["data"]["reasons"]
    assert nic[0]["links"][0]["data"]["device"] == "eth0"
