"""The CPUs' jiffies as a registered section (model/records.py CpuJiffies, collect/cpu.py CpuStat): stored over the
record's own keys as before (cf, ci, c, ca, right before the processes), so every golden store decodes them and
encodes them again byte for byte; Tick.cpu is their view, never stored; the 10 s tier sums them and the minute keeps
none of them (its busy/sys per CPU instead); the sampler reads them first, the recorder's ticks without percentages."""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict

import orjson
import pytest

from fixtures.trees import Animator, make_v1_node
from nodesleuth.collect.sampler import CHECK, RECORD, Sampler
from nodesleuth.model.mpstat import from_deltas
from nodesleuth.model.records import CpuJiffies, Tick
from nodesleuth.node.root import Root
from nodesleuth.store import codec, rollup, tier
from test_golden import golden_ticks

PARTS = ("cf", "ci", "c", "ca")


@pytest.mark.parametrize("name", ["store-v1", "store-v2", "store-v3", "store-sections"])
def test_jiffies_of_the_golden_stores_read_and_reencode_as_stored(name):
    """Every 1 s and 10 s record: eager and lazy ticks hold the same jiffies and `cpu` is mpstat's view of them; a
    lazy tick answers cpu_busy() and cpu_of() from the record without building either field; the record made again
    holds the stored parts byte for byte (the hash of every record's parts), in their place before the processes."""
    n = 0
    stored, again = defaultdict(hashlib.sha256), defaultdict(hashlib.sha256)
    for stream, raw, tk, lazy in golden_ticks(name):
        assert isinstance(tk.cpu_raw, CpuJiffies) and len(tk.cpu_raw) >= 2 and -1 in tk.cpu_raw
        assert tk.cpu == {c: from_deltas(c, v) for c, v in tk.cpu_raw.items()}  # the view of the jiffies
        if raw.get("v", 1) == 1:  # schema 1 decodes eagerly
            assert lazy == tk
            continue
        assert lazy.cpu_busy() == tk.cpu_busy() and [lazy.cpu_of(c) for c in (-1, 0, 1, 7)] == [
            tk.cpu.get(c) for c in (-1, 0, 1, 7)]
        assert "cpu" not in lazy.__dict__ and "cpu_raw" not in lazy.__dict__  # answered from the record
        assert lazy.cpu == tk.cpu and lazy.cpu_raw == tk.cpu_raw and lazy == tk
        rec = codec.Encoder(2).record(tk)
        assert list(rec)[:8] == ["v", "t", "iv", *PARTS, "p"]
        stored[stream].update(orjson.dumps({k: raw[k] for k in PARTS}))
        again[stream].update(orjson.dumps({k: rec[k] for k in PARTS}))
        assert orjson.dumps(tk.cpu_raw.stored()) == orjson.dumps({k: raw[k] for k in PARTS})
        n += 1
    for stream in stored:
        assert stored[stream].hexdigest() == again[stream].hexdigest(), stream
    assert n or name == "store-v1"


def test_the_10s_tier_sums_the_jiffies_and_the_minute_keeps_none(tmp_path):
    """Ticks as callers build them (cpu_raw a plain mapping) carry the section; ten seconds aggregate to each CPU's
    columns summed, which the 10 s record stores and reads back; the minute stores busy/sys per CPU and no jiffies;
    the dump shows `cpu` under "cpus" and no key of its own for the jiffies."""
    t0 = 1_800_000_000.0
    ticks = [Tick(time=t0 + s + 0.5, interval=1.0, cpu={}, procs=[],
                  cpu_raw={0: (5, 0, 90 + s % 2, 5 - s % 2, 0), 1: (1, 0, 1, 98, 0), -1: (6, 0, 91 + s % 2, 103 - s % 2, 0)})
             for s in range(10)]
    assert all(isinstance(t.cpu_raw, CpuJiffies) for t in ticks)
    agg = tier.Aggregator()
    for t in ticks:
        assert agg.add(t) is None
    tk, extra = agg.flush()
    assert tk.cpu_raw == {0: (50, 0, 905, 45, 0), 1: (10, 0, 10, 980, 0), -1: (60, 0, 915, 1025, 0)}
    assert CpuJiffies.from_stored(orjson.loads(orjson.dumps(tk.cpu_raw.stored()))) == {
        c: v + (0,) * 5 for c, v in tk.cpu_raw.items()}  # its stored form read back: rows padded to mpstat's ten
    back = tier.from_record(codec.decode(codec.Encoder(2).encode(tk, extra)), extra)
    assert back.cpu_raw[0] == (50, 0, 905, 45, 0, 0, 0, 0, 0, 0) and back.hot[0] == 10 and back.tier == "10s"
    assert back.cpu[0].sys == pytest.approx(90.5) and back.cpu_busy() == ([0, 1], [96.0, 2.0])
    roll = rollup.Rollup()
    for t in ticks:
        roll.add(t)
    m = rollup.decode(rollup.encode(roll.flush()))
    assert "cpu_raw" not in (m.x or {}) and (m.busy, m.bmax, m.sys) == ([96, 2], [96, 2], [90, 1])
    d = back.to_dict()
    assert list(d)[:5] == ["time", "iso", "interval", "cpus", "procs"] and "cpu_raw" not in d
    assert d["cpus"]["0"]["sys"] == 90.5 and d["cpus"]["all"]["busy"] == round(back.cpu[-1].busy, 2)


def test_the_sampler_reads_the_jiffies_first_for_every_use(tmp_path):
    """The check's ticks carry mpstat's percentages of the interval, the recorder's only the jiffies (the store
    computes them on read, equal); an unreadable /proc/stat degrades the CPUs alone (said under "cpu") and the next
    read covers the time since the last good one; cpu_tick() starts from that baseline and keeps its own."""
    root = make_v1_node(str(tmp_path / "n"), ncpu=4, busy_cpu=3, nprocs=20, tracked=50, live=10)
    anim = Animator(root, busy_cpu=3, busy_pid=110)
    check, rec = Sampler.preset(Root(root), CHECK, kmsg=False), Sampler.preset(Root(root), RECORD, kmsg=False)
    try:
        check.prime(), rec.prime()
        anim.step()
        a, b = check.tick(), rec.tick()
        assert a.cpu_raw == b.cpu_raw and a.cpu_raw[3][2] == 94 and sorted(a.cpu_raw) == [-1, 0, 1, 2, 3]
        assert b.cpu == {} and a.cpu == a.cpu_raw.util() and a.cpu[3].busy >= 90
        assert codec.decode(codec.Encoder(2).encode(b)).cpu == a.cpu
        assert any(p.cpu == 3 and p.pid == 110 for p in a.procs)  # the processes' share came from the jiffies
        with open(os.path.join(root, "proc/stat"), "w") as f:
            f.write("not a stat\n")
        bad = check.tick()
        assert bad.cpu_raw is None and bad.cpu == {} and "cpu" in check.problems and bad.census.v1
        anim.step()
        anim.step()
        fast = check.cpu_tick()  # its first: from the tick()s' baseline, the last good read
        assert fast.cpu_raw[3][2] == 2 * 94 and fast.procs == [] and fast.cpu[3].busy >= 90
        again = check.tick()
        assert again.cpu_raw[3][2] == 2 * 94  # since the last good read
        anim.step()
        assert check.cpu_tick().cpu_raw[3][2] == 94 and check.tick().cpu_raw[3][2] == 94
    finally:
        check.close()
        rec.close()
