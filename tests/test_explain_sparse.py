"""explain over a long range decodes only the minutes the rollups mark, and finds exactly the
incidents that reading every tick finds. Ticks come from the recorder's own sampler on an animated
fixture node (collect -> encode -> store, as `record` writes them), replayed over three hours."""

from __future__ import annotations

import dataclasses
import os

from nodesleuth.detect.incidents import find_incidents
from nodesleuth.explain import load
from fixtures.trees import Animator, make_v1_node
from nodesleuth.record.recorder import Recorder, RecordOptions
from nodesleuth.store import query
from nodesleuth.store.catalog import ROLLUP
from nodesleuth.store.rollup import Rollup
from nodesleuth.store.catalog import TICKS
from nodesleuth.store.store import StoreReader, StoreWriter


def _sampled(tmp_path, name: str, hot: bool, n: int) -> list:
    fx = make_v1_node(str(tmp_path / name), ncpu=4, nprocs=40, tracked=500, live=20, busy_cpu=1)
    anim = Animator(fx, busy_cpu=1 if hot else None, busy_pid=110 if hot else None)
    r = Recorder(RecordOptions(store=str(tmp_path / f"st-{name}"), root=fx, kmsg=None))
    r.sampler.prime()
    out = []
    try:
        for _ in range(n):
            anim.step()
            out.append(r.sampler.tick())
    finally:
        r.sampler.close()
        r.store.close()
    return out


def _write(store: str, seconds: int, quiet: list, hot: list, hot_at: list[tuple[int, int]], t0: float) -> None:
    from nodesleuth.store.codec import Encoder

    w = StoreWriter(store, retention=None, max_bytes=None, fsync_every=1 << 30)
    enc, roll = Encoder(), Rollup()
    try:
        for i in range(seconds):
            t = t0 + i
            src = hot[i % len(hot)] if any(a <= i < b for a, b in hot_at) else quiet[i % len(quiet)]
            tk = dataclasses.replace(src, time=t, interval=1.0, census=dataclasses.replace(src.census, time=t))
            w.append(TICKS, t, enc.encode(tk))
            done = roll.add(tk)
            if done is not None:
                w.write(ROLLUP, done)
    finally:
        w.close()


def test_long_range_reads_the_marked_minutes_and_finds_the_same_incidents(tmp_path):
    quiet = _sampled(tmp_path, "quiet", False, 30)
    hot = _sampled(tmp_path, "hot", True, 15)
    t0 = 1_790_000_000.0
    # a 20 s episode across a minute boundary, a 5 s one, and 2 hot seconds that are no episode
    hot_at = [(3590, 3610), (7000, 7005), (9000, 9002)]
    store = str(tmp_path / "rec")
    _write(store, 3 * 3600, quiet, hot, hot_at, t0)

    reader = StoreReader(store)
    wins = load.windows(reader, None, None)
    assert wins is not None
    read = sum(b - a for a, b in wins)
    assert read < 0.2 * 3 * 3600, wins
    for a, b in hot_at:  # every hot second lies inside a window, with room before it
        assert any(w0 <= t0 + a - 60 and t0 + b <= w1 for w0, w1 in wins), (a, wins)

    everything = list(query.ticks(StoreReader(store), None, None))
    assert max(t.cpu[1].busy for t in everything if t.time - t0 < 3000) < 50
    assert min(t.cpu[1].busy for t in everything if 3590 <= t.time - t0 < 3610) >= 90
    sparse = load._ticks(StoreReader(store), None, None)
    assert len(sparse) < len(everything) / 4
    full_inc, full_eps = find_incidents(everything)
    sparse_inc, sparse_eps = find_incidents(sparse)
    assert [e.to_dict() for e in sparse_eps] == [e.to_dict() for e in full_eps]
    assert [(i.kind, i.start, i.end) for i in sparse_inc] == [(i.kind, i.start, i.end) for i in full_inc]
    assert sorted(round(e.seconds) for e in full_eps) == [5, 20]
    rec, problems = load.recording(store, None, None)
    assert not problems
    assert rec.start == everything[0].time and rec.end == everything[-1].time


def test_a_minute_without_rollup_is_read_tick_by_tick(tmp_path):
    """The minute being written has no rollup yet (and a lost one has none): its ticks are read."""
    quiet = _sampled(tmp_path, "quiet", False, 20)
    hot = _sampled(tmp_path, "hot", True, 10)
    t0 = 1_790_000_000.0
    store = str(tmp_path / "rec")
    _write(store, 3 * 3600, quiet, hot, [(5000, 5010)], t0)
    # drop the rollups of the hour holding the episode: nothing tells that minute was hot
    seg = sorted(os.listdir(os.path.join(store, ROLLUP)))
    assert len(seg) >= 2
    for name in seg:
        if name.endswith((".seg", ".dict")) and 3600 <= int(name.split(".")[0]) / 1000 - t0 < 7200:
            os.unlink(os.path.join(store, ROLLUP, name))
    sparse = load._ticks(StoreReader(store), None, None)
    assert [round(e.seconds) for e in find_incidents(sparse)[1]] == [10]
