"""StoreWriter.write: the store encodes each stream's records itself (store/encoding.py), and what it
writes is byte for byte what a caller managing the codec's context (rolls, refresh, ctx) wrote."""

from __future__ import annotations

import dataclasses
import os

import pytest

from nodesleuth.store import query, rollup
from nodesleuth.store.catalog import ROLLUP, TICKS, TICKS10
from nodesleuth.store.codec import Encoder
from nodesleuth.store.store import StoreReader, StoreWriter
from nodesleuth.store.tier import Aggregator

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
T0 = 1_800_000_000.0


def _ticks(n: int):
    src = list(query.ticks(StoreReader(os.path.join(GOLDEN, "store-v2")), None, None))
    return [dataclasses.replace(src[i % len(src)], time=T0 + i + 1, interval=1.0) for i in range(n)]


def _by_hand(d: str, ticks) -> None:
    """The recorder's writing before the store owned its encoding."""
    w = StoreWriter(d, segment_seconds=120.0, background_sync=False)
    enc, enc10, agg, roll = Encoder(), Encoder(), Aggregator(), rollup.Rollup()
    for tk in ticks:
        if w.rolls(TICKS, tk.time):
            enc.refresh()
        w.append(TICKS, tk.time, enc.encode(tk, {"self": [1.0, 2]}), enc.ctx)
        done = agg.add(tk)
        if done is not None:
            a, extra = done
            if w.rolls(TICKS10, a.time):
                enc10.refresh()
            w.append(TICKS10, a.time, enc10.encode(a, extra), enc10.ctx)
        start = roll.start
        m = roll.add(tk)
        if m is not None:
            w.append(ROLLUP, start, rollup.encode(m))
    w.append(ROLLUP, roll.start, rollup.encode(roll.flush()))
    w.close()


def _written(d: str, ticks) -> None:
    w = StoreWriter(d, segment_seconds=120.0, background_sync=False)
    agg, roll = Aggregator(), rollup.Rollup()
    for tk in ticks:
        w.write(TICKS, tk, extra={"self": [1.0, 2]})
        done = agg.add(tk)
        if done is not None:
            w.write(TICKS10, done[0], extra=done[1])
        m = roll.add(tk)
        if m is not None:
            w.write(ROLLUP, m)
    w.write(ROLLUP, roll.flush())
    w.close()


def _files(d: str) -> dict[str, bytes]:
    out = {}
    for dp, _, names in os.walk(d):
        for n in names:
            if n.endswith((".seg", ".dict", ".idx")):
                with open(os.path.join(dp, n), "rb") as f:
                    out[os.path.relpath(os.path.join(dp, n), d)] = f.read()
    return out


def test_write_is_byte_identical_to_the_callers_codec(tmp_path):
    ticks = _ticks(1500)  # 13 tick segments, 3 of the 10 s tier, 25 minutes: contexts refreshed, dictionaries trained
    _by_hand(str(tmp_path / "a"), ticks)
    _written(str(tmp_path / "b"), ticks)
    a, b = _files(str(tmp_path / "a")), _files(str(tmp_path / "b"))
    assert len([p for p in a if p.startswith("ticks/") and p.endswith(".seg")]) > 10 and "rollup" in {
        p.split("/")[0] for p in a}
    assert a.keys() == b.keys() and a == b


def test_every_stream_has_a_codec_and_one_without_is_refused():
    from nodesleuth.store import encoding
    from nodesleuth.store.catalog import STREAMS, Stream

    assert {s.name for s in STREAMS.values() if s.codec not in encoding.CODECS} == set()
    with pytest.raises(ValueError, match="no codec"):
        encoding.codec(Stream("x", "bytes", "as given", "event"))


def test_profile_batches_lost_counts_and_churn_as_the_runners_encoded_them(tmp_path):
    """The runners hand batches (in pieces of <= SPAN s), lost-sample rows and churn chunks; the frames are
    those they encoded themselves."""
    from fixtures.perfscript import make_capture
    from nodesleuth.model.records import CgEvent
    from nodesleuth.profile.parse import parse_file
    from nodesleuth.store import churn
    from nodesleuth.store.catalog import CHURN, PROFILE, PROFILE_LOST
    from nodesleuth.store.profile import encode_lost, encode_pieces

    cap = str(tmp_path / "cap.txt")
    make_capture(cap, cpus=4, seconds=25, t0=5000.0)
    b = parse_file(cap)
    offset = T0 - 5000.0
    lost = [(T0 + 3.5, 1, 12), (T0 + 4.0, -1, 3)]
    evs = [CgEvent(5001.25 + i, "mkdir" if i % 2 == 0 else "rmdir", "runc", 100 + i, 0, 7 + i, f"/kubepods/p{i}")
           for i in range(6)]
    assert len(encode_pieces(b, offset)) > 1
    a = StoreWriter(str(tmp_path / "a"), background_sync=False)
    for t, payload in encode_pieces(b, offset):
        a.append(PROFILE, t, payload)
    a.append(PROFILE_LOST, *encode_lost(lost))
    a.append(CHURN, *churn.encode(evs, offset))
    a.close()
    w = StoreWriter(str(tmp_path / "b"), background_sync=False)
    w.write(PROFILE, b, offset)
    w.write(PROFILE_LOST, lost)
    w.write(CHURN, evs, offset)
    w.close()
    got, want = _files(str(tmp_path / "b")), _files(str(tmp_path / "a"))
    assert {p.split("/")[0] for p in got} == {"profile", "profile_lost", "churn"} and got == want


# sha256 of (stream, time, payload) of every profile_agg* and profile_heat60* record main's aggregator
# encoded itself (a89e48a, before the store owned their encoding) for the two inputs below
AGG_PAYLOADS = "0426ae0524b3922415c185295a402e7bfb9c1f1b047953769cb8bc46697913e1"


def test_profile_aggregates_as_the_aggregator_encoded_them(tmp_path):
    """The aggregator hands window rows and heatmap minutes (profile/agg.py), the store encodes them
    (store/aggregates.py): the payloads are those the aggregator encoded itself, for a capture whose
    windows of every level it cuts, and two hours of batches with a new stack each (the ten-minute and
    hour levels merged from the records below)."""
    import hashlib

    import numpy as np

    from fixtures.perfscript import make_capture
    from nodesleuth.profile.agg import Aggregator as ProfileAggregator
    from nodesleuth.profile.parse import parse_file
    from nodesleuth.store.catalog import STREAMS

    cap = str(tmp_path / "cap.txt")
    make_capture(cap, cpus=4, seconds=25, t0=5000.0)
    b = parse_file(cap)
    w = StoreWriter(str(tmp_path / "st"), background_sync=False)
    agg = ProfileAggregator(w.write)
    for lo in range(0, len(b), 20000):
        part = b.only(b.events[0]) if b.events else b
        for col in ("times", "cpus", "pids", "tids", "comm_ids", "stack_ids", "periods", "event_ids"):
            setattr(part, col, getattr(part, col)[lo:lo + 20000])
        agg.add(part, T0 - 5000.0 - 17.0)
    agg.flush()
    rng = np.random.default_rng(38)
    agg = ProfileAggregator(w.write)
    base = [("main", f"f{i}", f"g{j}") for i in range(3) for j in range(4)]
    t = T0 + 3600 * 5 + 1234  # mid-hour, mid-ten-minutes
    for k in range(800):
        stacks = base + [("main", f"new{k}")]
        agg.add_arrays(np.sort(t + rng.uniform(0, 10, 40)), rng.integers(0, 4, 40), rng.integers(1, 30, 40),
                       rng.integers(0, 3, 40), rng.integers(0, len(stacks), 40), ["a", "b", f"c{k % 7}"], stacks)
        t += 10
    agg.flush()
    w.close()
    h, n = hashlib.sha256(), 0
    r = StoreReader(str(tmp_path / "st"))
    for name in sorted(STREAMS):
        if name.startswith(("profile_agg", "profile_heat")):
            for tt, payload in r.read(name):
                h.update(name.encode() + repr(tt).encode() + payload)
                n += 1
    assert n == 2194 and h.hexdigest() == AGG_PAYLOADS
