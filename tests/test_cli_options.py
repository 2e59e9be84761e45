"""Every command-line option is passed by some test that asserts what it does (tests/tools/option_coverage.py
lists them); this file holds the tests of the options no other test passed, each on real input: perf script
captures recorded on this machine (tests/data/perf-script/corpus.tar.xz), fixture trees, live recordings."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

import pytest

from conftest import Busy, free_port, missing, needs_root, nodesleuth, retry_when_busy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))

CORPUS = os.path.join(HERE, "data", "perf-script", "corpus.tar.xz")
# recorded here with `perf script -F comm,pid,tid,cpu,time,event,ip,sym,dso,trace` (its .cmd sidecar): 401 samples of
# busy C, C++ template, Java, Rust, find, dd ... processes on 2 CPUs over 7.6 s
MIX = "recorded/mix-cpuclock.F-stackcollapse-recommended.txt"


def test_every_option_is_exercised():
    """No option of any command is left that no test passes (a flag pair: its non-default side)."""
    import option_coverage

    opts = option_coverage.coverage()
    assert len(opts) > 100  # the walk found the command tree
    missing_ = [f"{o.command or 'nodesleuth'} {'/'.join(o.needs)}" for o in opts if not o.passed_by]
    assert not missing_, "options no test passes: " + ", ".join(missing_)


def test_the_walk_sees_invocations_through_helpers_and_unpacked_lists():
    """The coverage tool itself: it finds options passed through a helper's *args, a list unpacked into the call,
    and a parametrize list; and a flag pair only counts with its non-default side."""
    import option_coverage

    by = {(o.command, o.name): o for o in option_coverage.coverage()}
    assert any(w.startswith("tests/test_kernlog.py") for w in by[("check", "--lookback")].passed_by)  # _check(*extra)
    assert by[("check", "--trace-churn")].needs == ("--no-trace-churn",)
    assert by[("flame", "--from")].passed_by  # `*hot` / `*inc` lists


def _extract(name: str, dest) -> str:
    with tarfile.open(CORPUS) as t:
        data = t.extractfile(name).read()
    path = os.path.join(str(dest), os.path.basename(name))
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    """The capture ingested twice: as recorded, and with --offset 1000 (perf's clock + 1000 s)."""
    d = tmp_path_factory.mktemp("mix")
    path = _extract(MIX, d)
    from nodesleuth.profile.parse import parse_file

    b = parse_file(path)
    stores = {}
    for off in ("0", "1000"):
        st = str(d / f"st-{off}")
        p = nodesleuth("profile", "ingest", path, "--store", st, "--offset", off)
        assert p.returncode == 0 and "401 samples" in p.stderr, p.stderr
        stores[off] = st
    return {"path": path, "batch": b, "store": stores["0"], "shifted": stores["1000"], "dir": d}


def _folded(text: str) -> dict[str, int]:
    out = {}
    for ln in text.splitlines():
        st, _, n = ln.rpartition(" ")
        out[st] = out.get(st, 0) + int(n)
    return out


def test_version():
    from importlib.metadata import version

    p = nodesleuth("--version")
    assert p.returncode == 0 and p.stdout == f"nodesleuth, version {version('nodesleuth')}\n", p.stdout


def test_ingest_offset_moves_every_sample(mix):
    """--offset 1000: the same heatmap, 1000 s later (the capture's perf clock runs from 643.8 s to 651.5 s)."""
    a = json.loads(nodesleuth("heatmap", "--store", mix["store"], "--json").stdout)
    b = json.loads(nodesleuth("heatmap", "--store", mix["shifted"], "--json").stdout)
    assert a["start"] == 643.0 and b["start"] == 1643.0
    assert a["values"] == b["values"] and sum(map(sum, a["values"])) == 401 - 4  # swapper's 4 idle samples not drawn
    # a range in the shifted clock finds them; the same range in perf's own clock finds nothing
    inside = nodesleuth("flame", "--store", mix["shifted"], "--from", "1643.8", "--to", "1651.5")
    assert sum(_folded(inside.stdout).values()) == 397
    outside = nodesleuth("flame", "--store", mix["shifted"], "--from", "643.8", "--to", "651.5")
    assert outside.returncode == 2 and "no profile samples in" in outside.stderr


def test_flame_comm_keeps_only_that_command(mix):
    b = mix["batch"]
    want = sum(1 for c in b.comm_ids if b.comms[c] == "busy worker 1")
    f = _folded(nodesleuth("flame", "--store", mix["store"], "--comm", "busy worker 1").stdout)
    assert sum(f.values()) == want == 44
    assert all(st.startswith("busy_worker_1;") for st in f)  # the process frame, spaces as stackcollapse's `_`
    two = _folded(nodesleuth("flame", "--store", mix["store"], "--comm", "busy worker 1", "--comm", "tmpl").stdout)
    assert sum(two.values()) == 44 + 31


def test_flame_raw_names_keeps_what_perf_printed(mix):
    """C++ argument lists are cut by default (as stackcollapse-perf.pl's tidying); --raw-names keeps the symbol
    as perf printed it (an +0x offset would still be stripped). Same stacks, same counts."""
    sym = None
    with open(mix["path"]) as f:
        for ln in f:
            m = re.match(r"\s+[0-9a-f]+ (std::_Function_handler<.*_M_invoke)(\+0x[0-9a-f]+)? \(", ln)
            if m:
                sym = m[1]
                break
    assert sym and "(std::__cxx11::basic_string" in sym
    raw = _folded(nodesleuth("flame", "--store", mix["store"], "--comm", "tmpl", "--raw-names").stdout)
    tidy = _folded(nodesleuth("flame", "--store", mix["store"], "--comm", "tmpl").stdout)
    assert any(st.split(";")[-1] == sym for st in raw), list(raw)[:3]
    assert not any("(" in st for st in tidy)
    assert sum(raw.values()) == sum(tidy.values()) == 31 and len(raw) == len(tidy)


def test_flame_hz_sets_pprof_cpu_time(mix, tmp_path):
    """pprof's cpu sample type is samples x 1/hz: the same 397 samples drawn (swapper's 4 idle ones are left out) are 397/49 s at 49 Hz, 397/99 s at --hz 99,
    read back by Debian's `go tool pprof`."""
    if not shutil.which("go"):
        missing("Debian's golang-go is not installed (scripts/setup-tests.sh)")
    tot = {}
    for hz in ("49", "99"):
        out = str(tmp_path / f"p{hz}.pb.gz")
        args = ["--hz", hz] if hz != "49" else []
        assert nodesleuth("flame", "--store", mix["store"], "-o", out, *args).returncode == 0
        top = subprocess.run(["go", "tool", "pprof", "-top", out], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HOME": str(tmp_path)})
        assert top.returncode == 0, top.stderr
        m = re.search(r"of ([\d.]+)(ms|s) total", top.stdout)
        assert m, top.stdout
        tot[hz] = float(m[1]) / (1000 if m[2] == "ms" else 1)
    assert tot["49"] == pytest.approx(397 / 49, abs=0.01) and tot["99"] == pytest.approx(397 / 99, abs=0.01)


def test_heatmap_pid_and_step(mix):
    """--pid keeps one process's samples; --step 2 sums pairs of seconds into one column."""
    b = mix["batch"]
    find = sum(1 for p in b.pids if p == 22770)
    h = json.loads(nodesleuth("heatmap", "--store", mix["store"], "--pid", "22770", "--json").stdout)
    assert sum(map(sum, h["values"])) == find == 97
    one = json.loads(nodesleuth("heatmap", "--store", mix["store"], "--json").stdout)
    two = json.loads(nodesleuth("heatmap", "--store", mix["store"], "--json", "--step", "2").stdout)
    per_s = [sum(c) for c in one["values"]]
    assert two["step"] == 2 and two["start"] == one["start"]
    assert [sum(c) for c in two["values"]] == [sum(per_s[i:i + 2]) for i in range(0, len(per_s), 2)]


def test_top_functions_pid_and_the_kept_all_functions_flag(mix):
    top = json.loads(nodesleuth("top-functions", "--store", mix["store"], "--pid", "22770", "--json", "-n", "100").stdout)
    # the find process: every sample's stack has do_syscall_64 or not; totals are shares of its 97 samples
    assert max(r["total"] for r in top) <= 97 and sum(r["self"] for r in top) == 97
    assert not any(r["function"] in ("func_a", "func_b") for r in top)  # busy's functions are not find's
    everything = json.loads(nodesleuth("top-functions", "--store", mix["store"], "--json", "-n", "100").stdout)
    assert any(r["function"] == "func_b" for r in everything)
    # --all-functions (hidden, kept for old scripts) is the default: user and kernel functions
    old = json.loads(nodesleuth("top-functions", "--store", mix["store"], "--json", "-n", "100",
                                "--all-functions").stdout)
    assert old == everything and {r["kernel"] for r in old} == {True, False}


def test_check_zombie_thresholds(tmp_path):
    """A node with 5,000 dying memcgs: a warning by default (1,000 / 10,000), critical with --zombie-crit 4000,
    only info when both thresholds are above it."""
    from fixtures.trees import make_v2_node

    root = make_v2_node(str(tmp_path / "n"), dying=5000)

    def sev(*a):
        p = nodesleuth("check", "--root", root, "--seconds", "1", "--no-trace-churn", "--json", *a)
        doc = json.loads(p.stdout)
        f = next(f for f in doc["findings"] if f["kind"] == "zombie_cgroups")
        assert f["data"]["dying"] == 5000
        return f["severity"], p.returncode

    assert sev() == ("warning", 1)
    assert sev("--zombie-crit", "4000") == ("critical", 1)
    assert sev("--zombie-warn", "6000", "--zombie-crit", "9000") == ("info", 0)


def test_replay_at_and_around(tmp_path):
    """--at T --around 3: the seconds T-3 .. T+3, one line each."""
    from fixtures.webstore import build

    rec = build(str(tmp_path), seconds=60, hot_from=30)
    t = rec["hot_start"] + 1
    p = nodesleuth("replay", "--store", rec["store"], "--at", str(t), "--around", "3")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    stamps = [ln.split(" | ")[0].strip() for ln in lines]
    assert 6 <= len(lines) <= 7, lines
    from nodesleuth.model.timeparse import iso

    assert iso(t - 3)[11:19] in stamps[0] and iso(t + 3)[11:19] in stamps[-1], (stamps, iso(t))
    wide = nodesleuth("replay", "--store", rec["store"], "--at", str(t), "--around", "10").stdout.splitlines()
    assert 20 <= len(wide) <= 21
