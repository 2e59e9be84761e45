"""Explain's fast read path equals the plain one: lazily built ticks (store/codec.py LazyTick), busy
per CPU without CpuUtil rows, the store's end found without decompressing a segment.

Material: the golden stores (tests/golden/store-v1, store-v2: real 8 s recordings of this machine
made by tests/golden/make_golden.py, with starvation, NIC IRQ rows, units, ENA kernel-log lines),
and records derived from them the way other versions or damage would write them."""

from __future__ import annotations

import dataclasses
import os
import shutil

import orjson
import pytest

from nodesleuth.model.mpstat import FIELDS
from nodesleuth.detect.incidents import episodes
from nodesleuth.store import codec, query
from nodesleuth.store.segment import KIND_DATA, SegmentReader, encode_frame
from nodesleuth.store.catalog import TICKS
from nodesleuth.store.store import StoreReader

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def _payloads(version: str) -> list[bytes]:
    return [p for _, p in StoreReader(os.path.join(GOLDEN, f"store-{version}")).read(TICKS)]


def _same_tick(lazy, eager) -> None:
    for f in dataclasses.fields(eager):
        assert getattr(lazy, f.name) == getattr(eager, f.name), f.name


def _variants(payload: bytes) -> list[bytes]:
    """The record as stored, and as other writers could have stored the same second: CPUs listed
    (not counted), CPUs missing, columns in another order, a counter that went back."""
    r = orjson.loads(payload)
    out = [payload]
    if "c" not in r:
        return out
    n = len(r["c"])
    listed = dict(r, ci=list(range(n)))
    out.append(orjson.dumps(listed))
    out.append(orjson.dumps(dict(r, ci=list(range(1, 2 * n, 2)))))  # CPUs 1, 3, 5...: others offline
    order = list(reversed(r.get("cf") or FIELDS))
    out.append(orjson.dumps(dict(r, cf=order, c=[list(reversed(v + [0] * (10 - len(v)))) for v in r["c"]],
                                 ca=list(reversed(r["ca"])))))
    back = [list(v) for v in r["c"]]
    back[0][0] = -5  # user went back: mpstat's rules, not plain arithmetic
    out.append(orjson.dumps(dict(r, c=back)))
    return out


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_lazy_ticks_equal_eager_ticks_field_by_field(version):
    pays = _payloads(version)
    assert len(pays) == 9
    for p in pays:
        for v in _variants(p):
            eager = codec.decode(v)
            # read in an order unlike explain's: every field alone first, then all
            for name in [f.name for f in dataclasses.fields(eager)]:
                lazy = codec.decode_lazy(v)
                assert getattr(lazy, name) == getattr(eager, name), name
            lazy = codec.decode_lazy(v)
            cpus, busy = lazy.cpu_busy()
            want = [c for c in eager.cpu if c >= 0]
            assert cpus == want and busy == [eager.cpu[c].busy for c in want]  # equal floats, not close
            for c in [-2, -1, *want, max(want, default=0) + 1]:
                assert codec.decode_lazy(v).cpu_of(c) == eager.cpu.get(c)
            _same_tick(lazy, eager)
            assert lazy == eager


def test_lazy_nic_irq_rows_without_the_cpu_columns():
    """NIC IRQ rows are as long as the record's CPU list: the lazy path counts it without the rows."""
    seen = 0
    for p in _payloads("v2"):
        r = orjson.loads(p)
        if "ni" not in r:
            continue
        for v in _variants(p):
            lazy = codec.decode_lazy(v)
            assert lazy.nic_irqs == codec.decode(v).nic_irqs
            assert "cpu_raw" not in lazy.__dict__  # answered without building the columns
            seen += 1
    assert seen  # the golden recording has the ENA-like IRQ lines of this host's NIC


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_lazy_query_and_hot_core_rule_equal_eager(version):
    reader = StoreReader(os.path.join(GOLDEN, f"store-{version}"))
    eager = list(query.ticks(reader, None, None))
    lazy = list(query.ticks(reader, None, None, lazy=True))
    assert lazy == eager and len(eager) == 9
    found = episodes(eager, busy_min=30.0, min_seconds=2.0, others_max=101.0)  # the pinned loop's CPU
    assert found and found == episodes(lazy, busy_min=30.0, min_seconds=2.0, others_max=101.0)
    assert found[0].top  # the processes on it came through the lazy path too


def test_store_end_without_decompressing_and_past_damage(tmp_path):
    store = str(tmp_path / "st")
    shutil.copytree(os.path.join(GOLDEN, "store-v2"), store)
    seg = StoreReader(store).segments(TICKS)[-1]
    times = [t for t, _ in SegmentReader(seg).frames()]
    assert SegmentReader(seg).last_time() == times[-1]
    assert StoreReader(store).span() == (times[0], times[-1])
    # a frame whose checksum holds but whose payload zstd cannot decode: frames() skips it, so does the end
    with open(seg, "ab") as f:
        f.write(encode_frame(times[-1] + 1, KIND_DATA, b"not zstd at all"))
    r = SegmentReader(seg)
    assert r.last_time() == times[-1] and "undecodable frame" in r.problems[0].what
    assert [t for t, _ in SegmentReader(seg).frames()] == times
    # a torn tail: the last whole frame is the end
    with open(seg, "ab") as f:
        f.write(encode_frame(times[-1] + 2, KIND_DATA, b"x" * 50)[:30])
    assert SegmentReader(seg).last_time() == times[-1] == StoreReader(store).span()[1]
