"""Store schema 3: packed ticks (store/pack.py, store/codec.py), segment heads with trained
dictionaries and the codec's context, and the frame index (store/segment.py).

Material: the golden stores (tests/golden/store-v1, store-v2: real recordings of this machine, see
tests/golden/make_golden.py), the 96-CPU fixture node (fixtures/trees.py, animated), and JSON values
made up by hypothesis for the packer alone."""

from __future__ import annotations

import dataclasses
import os
import shutil

import orjson
import pytest
from hypothesis import example, given, settings, strategies as st

from nodesleuth.store import codec, pack, query
from nodesleuth.store.catalog import TICKS
from nodesleuth.store.segment import INDEX, SegmentReader, index_path, sidecar
from nodesleuth.store.store import StoreReader, StoreWriter

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 64) - 1),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
                        st.sampled_from([0.1, 0.25, 1.5, 2.125, -0.001, 3.0, 0.0]))
json_value = st.recursive(json_scalar, lambda kids: st.one_of(
    st.lists(kids, max_size=6), st.dictionaries(st.text(max_size=6), kids, max_size=6),
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=2, max_size=40),
    st.lists(st.lists(st.integers(-300, 1 << 40), max_size=8), min_size=2, max_size=8),
    st.lists(st.sampled_from([0, 0, 0, 0, 7, 1 << 20]), min_size=2, max_size=40),
    st.dictionaries(st.integers(-5, 200).map(str), st.integers(-9, 1 << 33), min_size=4, max_size=12),
    st.dictionaries(st.text(max_size=5), st.sampled_from([0.0, 1.5, 2.25, 7.125, 0.001]), min_size=4, max_size=8),
    st.builds(lambda names, n: {"f": names, "r": [[i * k for k in range(len(names))] for i in range(n)]},
              st.lists(st.text(max_size=4), min_size=1, max_size=4), st.integers(0, 5))), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=6), json_value, max_size=8))
@example({"a": [-0.0, 1.0], "b": {"x": -0.0, "y": 2.5}})  # hypothesis found it: -0.0 came back 0.0 (scaled ints)
def test_pack_gives_back_every_json_record(rec):
    if any(k in ("\x01", "\x02", "\x03", "\x04") for k in _keys(rec)):
        with pytest.raises(ValueError):
            pack.pack(rec)
        return
    # what a JSON store gave back (orjson's own round trip) is what a packed one gives back
    want = orjson.loads(orjson.dumps(rec))
    assert pack.unpack(pack.pack(rec)) == want
    assert orjson.dumps(pack.unpack(pack.pack(rec))) == orjson.dumps(want)  # same floats, ints, key order


def _keys(x):
    if isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from _keys(v)
    elif isinstance(x, list):
        for v in x:
            yield from _keys(v)


def test_pack_refuses_garbage_in_one_line():
    good = pack.pack({"a": list(range(50))})
    for bad in (good[:-3], good + b"\x00", b"\x01\x7f{", b"\x02abc"):
        with pytest.raises(ValueError, match="packed record"):
            pack.unpack(bad)


def _golden_ticks(version: str) -> list:
    r = StoreReader(os.path.join(GOLDEN, f"store-{version}"))
    return list(query.ticks(r, None, None, carry=False))


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_schema_3_ticks_equal_schema_2_ticks(tmp_path, version):
    """Real ticks written in schema 3 read back field by field as their schema-2 records do: per-CPU
    jiffies (idle rebuilt from the row totals), processes (names from the segment's context), events,
    units, NIC counters, starvation; eager and lazy."""
    ticks = _golden_ticks(version)
    e2, e3 = codec.Encoder(2), codec.Encoder(3)
    d = str(tmp_path / "st")
    w = StoreWriter(d, segment_seconds=3.0)  # several segments: the context of each comes from the one before
    for tk in ticks:
        if w.rolls(TICKS, tk.time):
            e3.refresh()
        w.append(TICKS, tk.time, e3.encode(tk), e3.ctx)
    w.close()
    r = StoreReader(d)
    assert len(r.segments(TICKS)) >= 3
    got = list(query.ticks(r, None, None, carry=False))
    lazy = list(query.ticks(StoreReader(d), None, None, carry=False, lazy=True))
    assert not r.problems and len(got) == len(ticks) == len(lazy)
    assert any(b'"comm":{' in _context(s) for s in r.segments(TICKS))
    for tk, a, b in zip(ticks, got, lazy):
        want = codec.decode(e2.encode(tk))
        for f in dataclasses.fields(want):
            if f.name in ("nics", "units"):  # a new segment starts with a keyframe: schema 3 stores them again
                continue
            assert getattr(a, f.name) == getattr(want, f.name), f.name
            assert getattr(b, f.name) == getattr(want, f.name), f.name
        if a.nics is not None and want.nics is not None:
            assert a.nics == want.nics


def _context(seg: str) -> bytes:
    sr = SegmentReader(seg)
    next(sr.frames(), None)
    return sr.context


def test_a_schema_3_record_needs_its_frame_time():
    tk = _golden_ticks("v2")[0]
    payload = codec.Encoder(3).encode(tk)
    with pytest.raises(Exception, match="frame's time"):
        codec.decode(payload)
    assert codec.decode(payload, t=tk.time).cpu == tk.cpu


def _store(tmp_path, n: int, seconds: float = 3600.0, pad: int = 11, t0: float = 1000.0) -> str:
    d = str(tmp_path / "st")
    w = StoreWriter(d, segment_seconds=seconds)
    for i in range(n):
        w.append(TICKS, t0 + i, orjson.dumps({"i": i, "pad": "x" * (i % pad)}))
    w.close()
    return d


def _ids(r: StoreReader, t0=None, t1=None) -> list[int]:
    return [orjson.loads(p)["i"] for _, p in r.read(TICKS, t0, t1)]


def test_index_reads_a_second_without_the_frames_before_it(tmp_path):
    d = _store(tmp_path, 3000)
    seg = StoreReader(d).segments(TICKS)[0]
    assert os.path.getsize(index_path(seg)) == 3000 * INDEX.size
    r = SegmentReader(seg)
    with open(seg, "rb") as f:
        data = f.read()
    off = r.seek(1000.0 + 2500)
    assert 0 < off < len(data)
    assert SegmentReader._frame(data, off)[1] == 3500.0
    for t0, t1 in ((1000.0, 1000.0), (3499.0, 3501.0), (3999.0, 5000.0), (2500.5, 2500.9), (None, 1002.0)):
        assert _ids(StoreReader(d), t0, t1) == [i for i in range(3000) if (t0 is None or 1000 + i >= t0)
                                                and 1000 + i <= t1]


def test_damaged_or_missing_index_costs_reads_not_records(tmp_path):
    """A damaged entry is passed over (the read starts at the good entry before it), a stale index
    (entries that name another file's frames) is not trusted, a missing one means a scan: the
    records read are the same every time."""
    d = _store(tmp_path, 500)
    seg = StoreReader(d).segments(TICKS)[0]
    idx = index_path(seg)
    want = _ids(StoreReader(d), 1200.0, 1210.0)
    assert want == list(range(200, 211))
    raw = bytearray(open(idx, "rb").read())
    for k in (199, 200, 201, 150):  # the entries around the second asked and one further back
        raw[k * INDEX.size + 2] ^= 0xFF
    open(idx, "wb").write(bytes(raw))
    r = StoreReader(d)
    assert _ids(r, 1200.0, 1210.0) == want and not r.problems
    sr = SegmentReader(seg)
    with open(seg, "rb") as f:
        data = f.read()
    assert SegmentReader._frame(data, sr.seek(1200.0, data))[1] <= 1199.0  # from a good entry before
    open(idx, "wb").write(bytes(raw[: 100 * INDEX.size]))  # a short index (a crash before the entries)
    assert _ids(StoreReader(d), 1200.0, 1210.0) == want
    for pad, t0 in ((37, 1000.0), (11, 1000.5)):  # the index of another segment: other offsets, other times
        other = _store(tmp_path / f"o{pad}", 500, pad=pad, t0=t0)
        shutil.copy(index_path(StoreReader(other).segments(TICKS)[0]), idx)
        assert _ids(StoreReader(d), 1200.0, 1210.0) == want
    os.unlink(idx)
    r = StoreReader(d)
    assert _ids(r, 1200.0, 1210.0) == want and r.span() == (1000.0, 1499.0) and not r.problems


def test_head_frame_damaged_uses_its_copy_and_says_so(tmp_path):
    d = _store(tmp_path, 200)
    seg = StoreReader(d).segments(TICKS)[0]
    with open(seg, "r+b") as f:
        f.seek(30)
        f.write(b"\xff\xff")
    r = StoreReader(d)
    assert _ids(r, 1100.0, 1102.0) == [100, 101, 102]
    assert r.problems and "dictionary" in r.problems[0].what
    os.unlink(sidecar(seg))
    r = StoreReader(d)
    assert _ids(r, 1100.0, 1102.0) == [] and any("dictionary lost" in p.what for p in r.problems)


def test_trained_dictionary_and_context_live_in_the_segment_head(tmp_path):
    """The second segment of ticks is compressed against a dictionary trained on the first one's
    records and names the processes the first one saw; losing the head frame loses nothing (the
    .dict copy), losing both loses the segment, said."""
    ticks = _golden_ticks("v2")
    enc = codec.Encoder(3)
    d = str(tmp_path / "st")
    w = StoreWriter(d, segment_seconds=120.0)
    t0 = 2_000_000_000.0
    for i in range(240):
        tk = dataclasses.replace(ticks[i % len(ticks)], time=t0 + i)
        if w.rolls(TICKS, tk.time):
            enc.refresh()
        w.append(TICKS, tk.time, enc.encode(tk), enc.ctx)
    w.close()
    r = StoreReader(d)
    segs = r.segments(TICKS)
    assert len(segs) == 2
    heads = [_context(s) for s in segs]
    assert heads[0] == b"" and b'"comm"' in heads[1]
    got = list(query.ticks(StoreReader(d), t0 + 200, t0 + 205))
    assert [round(t.time) for t in got] == [round(t0) + i for i in range(200, 206)]
    assert all(p.comm not in (None, "?") for t in got for p in t.procs)
