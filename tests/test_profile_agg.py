"""Write-time profile aggregates (profile/agg.py) answer exactly as the raw samples do: flame graphs,
top functions and subsecond heatmaps of aligned and unaligned ranges, with CPU / pid / comm / cgroup
filters, from the library, the CLI and the web API (the real server).

Inputs: perf script text recorded on this VM (tests/data/perf-script/corpus.tar.xz, recorded/, each
with its .cmd sidecar naming the perf record/script commands) and the 96-CPU capture fixture
(fixtures/perfscript.py), each shifted so that it straddles minute and hour boundaries."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest

from conftest import free_port, missing, nodesleuth
from fixtures.perfscript import make_capture
from nodesleuth.store.catalog import HEAT, HEAT_ALL
from nodesleuth.profile.agg import Aggregator
from nodesleuth.profile.codec import encode
from nodesleuth.profile.parse import parse_file, pick_event
from nodesleuth.profile.fastload import load_fast
from nodesleuth.profile.folded import folded
from nodesleuth.profile.heatmap import heatmap, heatmap_fast
from nodesleuth.profile.load import load
from nodesleuth.profile.samples import Filter
from nodesleuth.profile.top import top_functions
from nodesleuth.store.store import StoreReader, StoreWriter

HERE = os.path.dirname(__file__)
# recorded here with perf 6.1 (see each .cmd): -a cpu-clock on 2 CPUs with kernel and idle stacks
# (mix), one process's cpu-clock without a CPU column (c-busy F-comm-tid-time-nocpu), a JIT (java)
RECORDED = ["mix-cpuclock.default.txt", "kernel-default-event.default.txt", "java.default.txt",
            "c-busy.F-comm-tid-time-nocpu.txt"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("perf-corpus")
    with tarfile.open(os.path.join(HERE, "data", "perf-script", "corpus.tar.xz")) as t:
        t.extractall(d, filter="data")
    return d / "recorded"


def store_batches(st: str, b, offset: float, size: int) -> None:
    """As the profiler stores them: raw batches of `size` samples, each fed to the aggregator."""
    w = StoreWriter(st)
    agg = Aggregator(w.write)
    for lo in range(0, len(b), size):
        part = b.only(b.events[0]) if b.events else b
        for col in ("times", "cpus", "pids", "tids", "comm_ids", "stack_ids", "periods", "event_ids"):
            setattr(part, col, getattr(part, col)[lo:lo + size])
        w.append("profile", *encode(part, offset))
        agg.add(part, offset)
    agg.flush()
    w.close()


def shifted(b, into: float) -> float:
    """The offset that puts the first sample `into` seconds before an hour boundary."""
    first = min(b.times)
    return (first // 3600 + 1000) * 3600 - into - first


def same_heatmap(r, lo, hi, f) -> dict:
    fast = heatmap_fast(r, f, start=lo, end=hi)
    assert fast is not None
    raw = heatmap(load(r, lo, hi), f, start=lo, end=hi)
    a, b = dataclasses.asdict(fast), dataclasses.asdict(raw)
    assert a == b
    return a


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_profiles_aggregated_equal_raw(corpus, tmp_path, name):
    b, _ = pick_event(parse_file(str(corpus / name)))
    span = max(b.times) - min(b.times)
    off = shifted(b, span / 2)  # half before the hour boundary, half after
    st = str(tmp_path / "st")
    store_batches(st, b, off, max(1, len(b) // 5))
    r = StoreReader(st)
    assert r.segments(HEAT) and r.segments(HEAT_ALL)
    t = min(b.times) + off
    pids = sorted(set(b.pids))
    comm = b.comms[b.comm_ids[len(b) // 2]]
    cpus = sorted(set(b.cpus))
    ranges = [(None, None), (t - 120, t + 120), (t + 0.37, t + span - 0.41), (t - 3600, t + 7200)]
    filters = [Filter(), Filter(cpus={cpus[-1]}), Filter(pids={pids[-1]}), Filter(comms={comm}),
               Filter(cgroup_pids=set(pids[:1])), Filter(keep_idle=True)]
    nonempty = 0
    for lo, hi in ranges:
        for f in filters:
            raw, fast = load(r, lo, hi), load_fast(r, lo, hi, f.cpus)
            assert fast.count is not None or (lo is not None and hi - lo < 60)  # aggregates were read
            assert folded(fast, f) == folded(raw, f)
            assert top_functions(fast, f, n=8, kernel_only=False) == top_functions(raw, f, n=8, kernel_only=False)
            nonempty += sum(folded(raw, f).values()) > 0
        lo_s = None if lo is None else float(int(lo))
        hi_s = None if hi is None else float(int(hi) + 1)
        for f in (Filter(), Filter(cpus={cpus[0]}), Filter(cpus={cpus[-1], 77})):
            same_heatmap(r, lo_s, hi_s, f)
    assert nonempty >= len(ranges) * 3
    # what the aggregates cannot answer exactly is said, and read raw by the caller
    assert heatmap_fast(r, Filter(pids={pids[0]})) is None and heatmap_fast(r, Filter(), rows=20) is None
    assert heatmap_fast(r, Filter(), start=t + 0.5) is None


def test_96cpu_heatmap_and_flame_of_aggregates_equal_raw(tmp_path):
    """The 96-CPU capture (one core pinned in the kernel for 5 s) across an hour boundary: per-CPU and
    all-CPU heatmaps (cells and hot-core marks) and flame graphs agree, edges and all."""
    path = str(tmp_path / "cap.txt")
    facts = make_capture(path)
    b = parse_file(path)
    off = shifted(b, 10)
    st = str(tmp_path / "st")
    store_batches(st, b, off, 7000)
    r = StoreReader(st)
    t = min(b.times) + off
    h0 = float(int(t))
    hm = same_heatmap(r, h0, h0 + 20, Filter())
    assert [c for c, hc in enumerate(hm["hot_cpus"]) if hc] == [8, 9, 10, 11, 12]
    h39 = same_heatmap(r, h0 - 30, h0 + 50, Filter(cpus={facts["hot_cpu"]}))
    # columns of 7 s (a long range's view): cells summed, hot CPUs of any second of the column
    for f in (Filter(), Filter(cpus={facts["hot_cpu"]})):
        raw = heatmap(load(r, h0 - 30, h0 + 50), f, start=h0 - 30, end=h0 + 50)
        fast = heatmap_fast(r, f, start=h0 - 30, end=h0 + 50, step=7)
        assert fast.step == 7 and len(fast.values) == len(fast.hot_cpus) == 12  # 80 s: 11 x 7 s and 3 s
        for c in range(12):
            assert fast.values[c] == [sum(v[i] for v in raw.values[7 * c:7 * c + 7]) for i in range(50)]
            assert fast.hot_cpus[c] == sorted(set().union(*raw.hot_cpus[7 * c:7 * c + 7]))
        assert fast.maxvalue == max(map(max, fast.values))
    assert [c for c, hc in enumerate(fast.hot_cpus) if hc] == [5, 6]  # seconds 38..42 of the range
    assert sum(sum(c) for c in h39["values"][38:43]) >= 5 * 45
    for f in (Filter(cpus={39}), Filter(comms={"kworker/39:1"}), Filter()):
        lo, hi = t + 3.3, t + 17.9
        assert folded(load_fast(r, lo, hi, f.cpus), f) == folded(load(r, lo, hi), f)


def _parents(root, node):
    """The ancestors of `node` in a d3 tree."""
    def walk(n, path):
        if n is node:
            return path
        for k in n["children"]:
            p = walk(k, path + [n])
            if p is not None:
                return p
        return None
    return walk(root, [])


def _get(url: str):
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.loads(resp.read())


def test_cli_and_web_api_serve_ranges_from_the_aggregates(corpus, tmp_path):
    """`heatmap`/`flame` on the CLI and /api/heatmap, /api/flame of the real server give what the raw
    samples give, with filters, over ranges that cut minutes."""
    b, _ = pick_event(parse_file(str(corpus / "mix-cpuclock.default.txt")))
    off = shifted(b, 3)
    st = str(tmp_path / "st")
    store_batches(st, b, off, 100)
    r = StoreReader(st)
    t = min(b.times) + off
    lo, hi = float(int(t)) - 61, float(int(t)) + 70
    raw = load(r, lo, hi)
    cli = json.loads(nodesleuth("heatmap", "--store", st, "--cpu", "1", "--json", "--from", str(lo + 0.4),
                                "--to", str(hi - 0.6)).stdout)
    want = heatmap(raw, Filter(cpus={1}), start=lo, end=hi)
    assert cli["values"] == want.values and cli["hot_cpus"] == want.hot_cpus and cli["start"] == lo
    pid = b.pids[0] if b.pids[0] >= 0 else b.tids[0]  # perf's default -a fields print only the tid
    fl = nodesleuth("flame", "--store", st, "--format", "folded", "--pid", str(pid), "--from",
                    str(t - 61.5), "--to", str(t + 4.25)).stdout
    f = Filter(pids={pid})
    want_fc = folded(load(r, t - 61.5, t + 4.25), f)
    assert fl == "".join(f"{k} {want_fc[k]}\n" for k in sorted(want_fc, key=lambda k: k.encode())) and want_fc
    comm = b.comms[b.comm_ids[0]]
    hc = json.loads(nodesleuth("heatmap", "--store", st, "--comm", comm, "--json", "--from", str(lo),
                               "--to", str(hi)).stdout)  # a comm filter: read from the raw samples
    assert hc["values"] == heatmap(raw, Filter(comms={comm}), start=lo, end=hi).values
    top = json.loads(nodesleuth("top-functions", "--store", st, "--comm", comm, "--json", "--from", str(t - 61.5),
                                "--to", str(t + 4.25)).stdout)
    assert top == top_functions(load(r, t - 61.5, t + 4.25), Filter(comms={comm}), kernel_only=False, n=15) and top
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", st, "--listen", f"127.0.0.1:{port}"],
                           stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/api"
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        h = _get(f"{base}/heatmap?from={lo}&to={hi}&cpu=0")
        want = heatmap(raw, Filter(cpus={0}), start=lo, end=hi)
        assert h["values"] == want.values and h["hot_cpus"] == want.hot_cpus and sum(map(sum, h["values"])) > 0
        assert h["step"] == 1
        hs = _get(f"{base}/heatmap?from={lo}&to={hi}&cpu=0&cols=10")  # 131 s in at most 10 columns: 14 s each
        assert hs["step"] == 14 and len(hs["values"]) == 10
        assert hs["values"][3] == [sum(v[i] for v in want.values[42:56]) for i in range(50)]
        assert sum(map(sum, hs["values"])) == sum(map(sum, want.values))
        for q, f in (("cpu=1", Filter(cpus={1})), (f"comm={comm}", Filter(comms={comm})),
                     (f"pid={pid}", Filter(pids={pid}))):
            doc = _get(f"{base}/flame?from={t - 61.5}&to={t + 4.25}&{q}")
            assert doc["samples"] == sum(folded(load(r, t - 61.5, t + 4.25), f).values()) > 0
        # frames under min_share of the graph are not sent; their samples are reported, widths kept
        whole = _get(f"{base}/flame?from={t - 61.5}&to={t + 4.25}&min_share=0")
        part = _get(f"{base}/flame?from={t - 61.5}&to={t + 4.25}&min_share=0.05")
        total = whole["samples"]
        assert whole["pruned"] == 0 and part["samples"] == total == whole["tree"]["value"] == part["tree"]["value"]

        def nodes(n):
            yield n
            for k in n["children"]:
                yield from nodes(k)

        def leaves_self(n):  # samples ending at each node (its width minus its children's)
            return sum(x["value"] - sum(k["value"] for k in x["children"]) for x in nodes(n))

        small = [x for x in nodes(whole["tree"]) if x["value"] < 0.05 * total]
        assert small and all(x["value"] >= 0.05 * total for x in nodes(part["tree"]))
        assert 0 < part["pruned"] < total and leaves_self(part["tree"]) == leaves_self(whole["tree"]) == total
        assert part["pruned"] == sum(x["value"] for x in nodes(whole["tree"]) if x["value"] < 0.05 * total
                                     and all(p["value"] >= 0.05 * total for p in _parents(whole["tree"], x)))
        # a cgroup: the processes now in it (this test's own cgroup, resolved as the server does)
        from nodesleuth.node.cgroupfs import pids_in_cgroup
        from nodesleuth.node.root import Root

        with open("/proc/self/cgroup") as fh:
            mine = fh.read().strip().splitlines()[-1].split(":", 2)[2] or "/"
        doc = _get(f"{base}/flame?from={t - 61.5}&to={t + 4.25}&cgroup={mine}")
        assert doc["samples"] == sum(folded(load(r, t - 61.5, t + 4.25),
                                            Filter(cgroup_pids=pids_in_cgroup(Root("/"), mine))).values())
    finally:
        srv.terminate()
        srv.wait()


def test_records_of_the_first_format_still_read(cap96, tmp_path):
    """Aggregate records written before the stack hashes and trailer (7b28abc's layout: header and
    columns only) read as before, and a store mixing both answers as the raw samples do."""
    from nodesleuth.store.aggregates import AggRecord
    from nodesleuth.store.catalog import agg as stream

    _, store, path = cap96
    b = parse_file(path)
    st = str(tmp_path / "st")
    store_batches(st, b, 0.0, 7000)
    r = StoreReader(st)
    old = str(tmp_path / "old")
    w = StoreWriter(old)
    for t, p in r.read("profile"):
        w.append("profile", t, p)
    for name in [stream(lv, al) for lv in (60, 600, 3600) for al in (False, True)]:
        for i, (t, p) in enumerate(r.read(name)):
            new = AggRecord(p)
            assert new.hashes is not None and new._head is None  # frame tables not parsed
            hl = int.from_bytes(p[:4], "little")
            cut = p[:4 + hl + len(new.cols[0]) * 18] if i % 2 else p  # every other record in the old layout
            rec = AggRecord(cut)
            assert (rec.hashes is None) == bool(i % 2)
            assert all((x == y).all() for x, y in zip(rec.cols, new.cols)) and rec.frames == new.frames
            w.append(name, t, cut)
    w.close()
    ro = StoreReader(old)
    t0 = min(b.times)
    for lo, hi, f in ((t0 - 20.5, t0 + 60.5, Filter()), (t0 + 2.5, t0 + 17.5, Filter(cpus={39})),
                      (t0 - 600, t0 + 600, Filter()), (t0 - 20.5, t0 + 60.5, Filter(cpus={39}))):
        fo = load_fast(ro, lo, hi, f.cpus)
        assert fo.count is not None or hi - lo < 60  # the aggregates were read
        assert folded(fo, f) == folded(load(ro, lo, hi), f) == folded(load_fast(r, lo, hi, f.cpus), f)


@pytest.fixture(scope="module")
def cap96(tmp_path_factory):
    d = tmp_path_factory.mktemp("cap96")
    path = str(d / "cap.txt")
    facts = make_capture(path)
    return facts, None, path


def _reference_tree(fc, base=None):
    """The flame graph tree built the plain way (a nested dict per frame, summed per stack, judged
    after; nodesleuth's web/data.py before its one-pass build): the reference the one-pass build must
    equal, children compared in name order."""
    root = {"name": "all", "value": 0, "children": {}}
    scale = sum(fc.values()) / max(1, sum(base.values())) if base is not None else 1.0

    def add(stack, v, key):
        node = root
        node[key] = node.get(key, 0) + v
        for fr in stack:
            node = node["children"].setdefault(fr, {"name": fr, "value": 0, "children": {}})
            node[key] = node.get(key, 0) + v

    for st, v in fc.items():
        add(st, v, "value")
    for st, v in (base or {}).items():
        add(st, v, "base")

    def fin(n):
        kids = [fin(c) for _, c in sorted(n["children"].items())]
        n["children"] = kids
        if base is not None:
            b = n["base"] = round(n.get("base", 0) * scale, 2)  # baseline samples, normalised once
            v = n["samples"] = n["value"]
            if v <= 0:
                n["status"], n["value"] = "gone", b
            elif b <= 0:
                n["status"] = "new"
            else:
                d = (v - b) / max(v, b)
                n["status"] = "same" if abs(d) < 0.02 else "more" if d > 0 else "less"
                n["change"] = round(d, 3)
            n["value"] = max(n["value"], round(sum(k["value"] for k in kids), 2))
        return n

    return fin(root)


def _reference_prune(node, least):
    kids, gone = [], 0
    for k in node["children"]:
        if k["value"] < least:
            gone += k["value"]
        else:
            gone += _reference_prune(k, least)
            kids.append(k)
    node["children"] = kids
    return gone


def test_flame_tree_one_pass_equals_the_plain_build(corpus):
    """recording/flametree.py builds the d3 tree in one pass over sorted stacks and prunes while building: on real
    recordings (this VM's -a capture with kernel and idle stacks, a JIT, the default event) and the
    96-CPU fixture, plain and against a baseline, pruned at 0, 1/5000 and 2%, it equals the nested-dict
    build pruned afterwards, node for node, with the same pruned samples."""
    from nodesleuth.profile.codec import Decoded, encode
    from nodesleuth.profile.folded import folded_frames
    from nodesleuth.profile.load import assemble
    from nodesleuth.recording.flametree import _cap, flame

    def samples(b):
        return assemble([Decoded(encode(b)[1])])

    runs = [samples(pick_event(parse_file(str(corpus / n)))[0]) for n in RECORDED[:3]]
    cap = os.path.join(str(corpus), "cap96.txt")
    make_capture(cap)
    runs.append(samples(parse_file(cap)))
    checked, pruned, diffs = 0, 0, 0
    for k, s in enumerate(runs):
        half = s.masked(s.t < s.t[len(s) // 2])  # a baseline: the first half of the same recording
        for f in (Filter(), Filter(cpus={int(s.cpu[0])})):
            for base in (None, half):
                for share in (0.0, 1 / 5000, 0.02):
                    got = flame(s, base, f, 8 if k == 0 else 64, share)
                    fc, cut = _cap(folded_frames(s, f), 8 if k == 0 else 64)
                    bc = _cap(folded_frames(base, f), 8 if k == 0 else 64)[0] if base is not None else None
                    want = _reference_tree(fc, bc)
                    gone = _reference_prune(want, share * want["value"]) if share > 0 else 0
                    assert got["tree"] == want, (k, f, base is not None, share)
                    assert got["pruned"] == round(gone, 2) and got["cut"] == cut and got["samples"] == sum(fc.values())
                    checked += 1
                    pruned += got["pruned"] > 0
                    diffs += base is not None and got["tree"]["status"] in ("more", "less", "same")
    assert checked == len(runs) * 12 and pruned >= 8 and diffs >= 8


def test_distinct_is_np_unique_and_profiles_never_load_numpy_ma(corpus, tmp_path):
    """numpy 2's plain np.unique imports numpy.ma on first use (16-27 ms of CPU here, once per
    process): storing a recorded profile and answering a flame query must not pay it."""
    import numpy as np

    from nodesleuth.profile.arrays import distinct

    rng = np.random.default_rng(7)
    for a in (np.zeros(0, np.int64), np.array([5]), np.array([3, 1, 3, 2, 1, 1]), rng.integers(-9, 50, 1000),
              np.floor(rng.random(500) * 1e6 / 60).astype(np.int64)):
        assert np.array_equal(distinct(a), np.unique(a)) and distinct(a).dtype == np.unique(a).dtype
    st = tmp_path / "st"
    code = f"""
import sys
sys.path[:0] = {[HERE, os.path.dirname(HERE)]!r}
from test_profile_agg import store_batches
from nodesleuth.profile.parse import parse_file, pick_event
from nodesleuth.profile.fastload import load_fast
from nodesleuth.profile.folded import folded
from nodesleuth.profile.samples import Filter
from nodesleuth.store.store import StoreReader
b, _ = pick_event(parse_file({str(corpus / "mix-cpuclock.default.txt")!r}))
store_batches({str(st)!r}, b, 1e9, 200)
r = StoreReader({str(st)!r})
t = min(b.times) + 1e9
fast = load_fast(r, t - 3600, t + 7200)
assert fast.count is not None and sum(folded(fast, Filter(keep_idle=True)).values()) == len(b)
print("numpy.ma" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_profiler_imports_numpy_without_a_thread_pool():
    """numpy's OpenBLAS starts a worker per CPU at import that spins while it settles (0.15 vs 0.05
    CPU s for the import on this 2-CPU machine): importing nodesleuth first keeps it at one thread,
    unless the user set OPENBLAS_NUM_THREADS. Measured in a clean environment, before and after."""
    if (os.cpu_count() or 1) < 2:
        missing("a second CPU: on one, OpenBLAS starts no workers, so nothing could fail here")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    count = "import os, sys; {}; import numpy; print(len(os.listdir('/proc/self/task')))"
    plain = subprocess.run([sys.executable, "-c", count.format("pass")], capture_output=True, text=True, env=env)
    ours = subprocess.run([sys.executable, "-c", count.format("import nodesleuth.profile.runner")],
                          capture_output=True, text=True, env=env)
    mine = subprocess.run([sys.executable, "-c", count.format("import nodesleuth")], capture_output=True, text=True,
                          env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert int(plain.stdout) >= 2, plain.stdout + plain.stderr  # what the setting prevents (so this test can fail)
    assert int(ours.stdout) == 1, ours.stderr[-2000:]
    assert int(mine.stdout) == 2  # the user's own setting is kept
