"""The store: crash safety, bounds, checksums, concurrent reads; and record/dump on the live host."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import needs_root, nodesleuth, wait_ticks
from nodesleuth.model.errors import InputError
from nodesleuth.store.segment import HEADER
from nodesleuth.store.store import StoreReader, StoreWriter
from nodesleuth.model.timeparse import parse_time


def payload(i: int) -> bytes:
    return json.dumps({"i": i, "pad": "x" * (i % 7)}).encode()


def written(tmp_path, n: int) -> str:
    """A closed store holding records 0..n-1 at t = 1000 + i."""
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    for i in range(n):
        w.append("ticks", 1000.0 + i, payload(i))
    w.close()
    return d


def read_all(d: str) -> tuple[list[int], StoreReader]:
    r = StoreReader(d)
    return [json.loads(p)["i"] for _, p in r.read("ticks")], r


def test_roundtrip_and_concurrent_reader(tmp_path):
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    for i in range(50):
        w.append("ticks", 1000.0 + i, payload(i))
        if i == 24:  # a reader in the middle of writing sees what is written so far
            got, r = read_all(d)
            assert got == list(range(25)) and not r.problems
    w.close()
    got, r = read_all(d)
    assert got == list(range(50))
    assert [json.loads(p)["i"] for _, p in r.read("ticks", 1010.0, 1012.0)] == [10, 11, 12]


def test_second_writer_is_refused(tmp_path):
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    with pytest.raises(InputError, match="another nodesleuth record"):
        StoreWriter(d)
    w.close()
    StoreWriter(d).close()  # the lock dies with its holder


def test_torn_tail_frame_loses_only_that_frame(tmp_path):
    d = written(tmp_path, 10)
    seg = StoreReader(d).segments("ticks")[0]
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:  # cut the last frame in the middle, as a power cut would
        f.truncate(size - 5)
    got, r = read_all(d)
    assert got == list(range(9))
    # no writer holds the store: the second that was being written is lost, and said so
    assert [p.what for p in r.problems] == ["last frame cut short; skipped"]
    import fcntl

    fd = os.open(os.path.join(d, "LOCK"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer appending now: a short tail is "not yet written"
    try:
        got, r = read_all(d)
        assert got == list(range(9)) and r.problems == []
    finally:
        os.close(fd)


def test_corrupt_frame_is_reported_and_skipped(tmp_path):
    d = written(tmp_path, 20)
    seg = StoreReader(d).segments("ticks")[0]
    offsets = []
    with open(seg, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        offsets.append(off)
        off += HEADER.size + HEADER.unpack_from(data, off)[1]
    victim = offsets[8]  # frame 8 = record 7 (frame 0 is the dictionary)
    with open(seg, "r+b") as f:
        f.seek(victim + HEADER.size + 2)
        b = f.read(1)
        f.seek(victim + HEADER.size + 2)
        f.write(bytes([b[0] ^ 0xFF]))
    got, r = read_all(d)
    assert got == [i for i in range(20) if i != 7]
    assert len(r.problems) == 1
    assert r.problems[0].path == seg and "checksum mismatch" in r.problems[0].what
    # a damaged header: the reader resynchronises on the next frame
    with open(seg, "r+b") as f:
        f.seek(offsets[12])
        f.write(b"JUNK")
    got, r = read_all(d)
    assert got == [i for i in range(20) if i not in (7, 11)]
    assert any("bad frame header" in p.what for p in r.problems)


def test_retention_and_size_drop_whole_oldest_segments(tmp_path):
    d = str(tmp_path / "st")
    now = 100000.0
    w = StoreWriter(d, retention=300.0, segment_seconds=60.0)
    w.budget.retention = None  # fill first, then apply the bound
    for i in range(0, 1200, 5):  # 20 minutes of records, one segment per minute
        w.append("ticks", now - 1200 + i, payload(i))
    segs_before = StoreReader(d).segments("ticks")
    assert len(segs_before) == 20
    w.budget.retention = 300.0
    dropped = w.enforce(now)
    segs = StoreReader(d).segments("ticks")
    assert len(dropped) == 20 - len(segs) and dropped == segs_before[:len(dropped)]
    first_t = next(StoreReader(d).read("ticks"))[0]
    assert now - 300 - 60 <= first_t <= now - 300  # whole segments: at most one segment over
    w.budget.retention = None
    total = sum(os.path.getsize(p) for p in segs)
    w.budget.max_bytes = total // 2
    w.enforce(now)
    left = StoreReader(d).segments("ticks")
    assert sum(os.path.getsize(p) for p in left) <= total // 2
    assert left[-1] == segs[-1]  # the newest (active) segment is never dropped
    w.close()


def test_time_forms():
    now = 1_800_000_000.0
    assert parse_time("now", now) == now
    assert parse_time("1700000000", now) == 1700000000.0
    assert parse_time("10m ago", now) == now - 600
    assert parse_time("1h30m ago", now) == now - 5400
    assert parse_time("-90s", now) == now - 90
    assert parse_time("2026-12-02T15:00:00Z", now) == 1796223600.0
    assert parse_time("2026-12-02T16:00:00+01:00", now) == 1796223600.0
    with pytest.raises(InputError, match="not a time"):
        parse_time("yesterday-ish", now)


@needs_root
def test_record_then_dump_on_the_live_host(tmp_path, busy_loop):
    d = str(tmp_path / "st")
    loop = busy_loop(cpu=1, comm="ns-recloop")
    p = nodesleuth("record", "--store", d, "--duration", "5s", "--quiet")
    assert p.returncode == 0, p.stderr
    out = nodesleuth("dump", "--store", d, "--format", "json", "--from", "5m ago")
    assert out.returncode == 0, out.stderr
    ticks = [json.loads(x) for x in out.stdout.splitlines()]
    assert 4 <= len(ticks) <= 6
    for t in ticks[1:]:
        assert set(t["cpus"]) >= {"all", "0", "1"}
        assert t["cpus"]["1"]["busy"] >= 90
        assert any(pr["pid"] == loop.pid and pr["comm"] == "ns-recloop" and pr["cpu"] == 1 for pr in t["procs"])
        mem = next(c for c in t["cgroups"]["v1"] if c["controller"] == "memory")
        assert mem["tracked"] >= mem["live"] >= 1
        assert t["meminfo"]["Percpu"] > 0
        assert "NET_RX" in t["softirqs"] and len(t["softirqs"]["NET_RX"]) == os.cpu_count()
    csv_out = nodesleuth("dump", "--store", d, "--format", "csv").stdout.splitlines()
    assert csv_out[0].startswith("time,iso,cpu,usr,nice,sys,iowait,irq,soft,steal,guest,gnice,idle,busy")
    assert len(csv_out) - 1 == len(ticks) * (os.cpu_count() + 1)
    om = nodesleuth("dump", "--store", d, "--format", "openmetrics").stdout
    fams = {f.name: f for f in text_string_to_metric_families(om)}
    busy = [s for s in fams["nodesleuth_cpu_busy_ratio"].samples if s.labels["cpu"] == "1"]
    assert len(busy) == len(ticks) and all(s.timestamp is not None for s in busy)
    rp = nodesleuth("replay", "--store", d, "--from", "5m ago", "--all-cpus")
    assert rp.returncode == 0, rp.stderr
    lines = rp.stdout.splitlines()
    assert len(lines) == len(ticks)
    assert all(re.search(r"CPU +1 +\d+\.\d% \(sys +\d+%\): [^|]*ns-recloop", ln) for ln in lines[1:]), lines


@needs_root
def test_kill_9_mid_recording_keeps_all_but_the_last_second(tmp_path):
    d = str(tmp_path / "st")
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", d, "--quiet"])
    try:
        wait_ticks(d, p, 4)  # a loaded host may take seconds to start the recorder; then mid-second
        time.sleep(0.3)
    finally:  # killed whatever happened before: no recorder outlives the test
        p.send_signal(signal.SIGKILL)
        p.wait()
    first = StoreReader(d)
    got = list(first.read("ticks"))
    assert len(got) >= 3 and first.problems == []
    # the lock died with the process: a new recorder appends a new segment to the same store
    p2 = nodesleuth("record", "--store", d, "--duration", "2s", "--quiet")
    assert p2.returncode == 0, p2.stderr
    r = StoreReader(d)
    all_t = [t for t, _ in r.read("ticks")]
    assert len(all_t) >= len(got) + 1 and all_t == sorted(all_t) and r.problems == []
    assert len(r.segments("ticks")) == 2


def test_dump_reports_damage_in_one_line_per_problem(tmp_path):
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    from fixtures.trees import Animator, make_v2_node
    from nodesleuth.node.root import Root
    from nodesleuth.collect.sampler import Sampler
    from nodesleuth.store.codec import Encoder

    node = make_v2_node(str(tmp_path / "node"))
    s = Sampler(Root(node), irqs=True, util=False)
    s.prime()
    enc = Encoder()
    anim = Animator(node)
    for i in range(5):
        anim.step()
        tk = s.tick()
        w.append("ticks", tk.time + i, enc.encode(tk))
    s.close()
    w.close()
    seg = StoreReader(d).segments("ticks")[0]
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) - 10)
        f.write(b"\x00\x01")
    out = nodesleuth("dump", "--store", d, "--format", "csv")
    assert out.returncode == 2  # the answer is missing a second: said in the exit code too
    warn = [ln for ln in out.stderr.splitlines() if "warning" in ln]
    assert len(warn) == 1 and seg in warn[0] and "checksum mismatch" in warn[0]
    assert len(out.stdout.splitlines()) == 1 + 4 * 9  # 4 good ticks x (8 CPUs + all)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_record_max_size_through_the_cli(tmp_path):
    """--max-size bounds the store on disk (whole oldest segments go; the ones being written stay)."""
    d = str(tmp_path / "st")
    start = time.time()
    p = nodesleuth("record", "--store", d, "--duration", "14s", "--segment", "2s", "--max-size", "12K", "--quiet",
                   timeout=120)
    assert p.returncode == 0, p.stderr
    files = [os.path.join(dp, f) for dp, _, fs in os.walk(d) for f in fs if f.endswith((".seg", ".dict"))]
    total = sum(os.path.getsize(f) for f in files)
    newest = {}
    for f in files:
        if f.endswith(".seg"):
            s = os.path.dirname(f)
            newest[s] = max(newest.get(s, ""), f)
    active = sum(os.path.getsize(f) + os.path.getsize(f[:-4] + ".dict") for f in newest.values())
    assert total <= 12 * 1024 + active, (total, active)
    first = next(StoreReader(d).read("ticks"))[0]
    assert first > start + 3  # the oldest seconds were dropped
    out = nodesleuth("dump", "--store", d, "--format", "csv")
    assert out.returncode == 0 and len(out.stdout.splitlines()) > 1
