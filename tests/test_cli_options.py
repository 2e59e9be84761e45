"""Every command-line option is passed by some test that asserts what it does (tests/tools/option_coverage.py
lists them); this file holds the tests of the options no other test passed, each on real input: perf script
captures recorded on this machine (tests/data/perf-script/corpus.tar.xz), fixture trees, live recordings."""

from __future__ import annotations

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

from conftest import Busy, cpu_ticks, free_port, missing, needs_root, nodesleuth, retry_when_busy

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


# --- live options: recorder, profiler, exporter, check, explain, snapshot ----------------------------------

SPIN_THREAD = r"""
import ctypes, os, sys, threading, time
libc = ctypes.CDLL(None)
libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG
libc.prctl(15, b"ns-spin", 0, 0, 0)
os.sched_setaffinity(0, {0})  # the main thread (field 39 of /proc/PID/stat) sleeps on CPU 0
# the worker owns CPU 1 even beside another job's loop pinned there: with autogroups, nice works only inside a
# session, and a nice-19 loop started in another session took half of CPU 1 (share 0.46 < 0.5); a session of
# its own at autogroup nice -20, and the thread at nice -20 where autogroups are off (root only: else as is)
os.setsid()
try:
    with open("/proc/self/autogroup", "w") as f:
        f.write("-20")
except OSError:
    pass
def spin():
    os.sched_setaffinity(0, {1})  # the worker spins on CPU 1
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -20)  # 0: this thread
    except OSError:
        pass
    x = 0
    while True:
        x += 1
threading.Thread(target=spin, daemon=True).start()
while True:
    time.sleep(1)
"""


@pytest.fixture
def spin_thread():
    p = subprocess.Popen([sys.executable, "-c", SPIN_THREAD])
    deadline = time.monotonic() + 30
    # its worker thread is there (on a busy machine 0.5 s was not always enough: StopIteration looking for it)
    while len(os.listdir(f"/proc/{p.pid}/task")) < 2 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    yield p
    p.kill()
    p.wait()


def _old_segments(store: str, stream: str, ages_h: list[float], size: int = 4096) -> list[str]:
    """Segments of `stream` started `ages_h` hours ago (one record each, `size` random bytes): what a store
    kept from earlier runs."""
    from nodesleuth.store.store import StoreReader, StoreWriter

    w = StoreWriter(store, None, None, 3600.0)
    now = time.time()
    for a in ages_h:
        w.append(stream, now - a * 3600, os.urandom(size))
    w.close()
    segs = StoreReader(store).segments(stream)
    assert len(segs) == len(ages_h)
    return segs


def _descendants_cmdlines(pid: int) -> list[list[str]]:
    """Command lines of a process's descendants (perf may be a grandchild, under the reaper of
    node/children.py spawn_reaped)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    for k in f.read().split():
                        todo.append(int(k))
                        with open(f"/proc/{k}/cmdline") as c:
                            out.append(c.read().split("\0"))
        except OSError:
            continue
    return out


def _perf_record_args(proc: subprocess.Popen, wait: float = 20.0) -> list[str]:
    """The `perf record` command line a nodesleuth process started (its child)."""
    deadline = time.time() + wait
    while time.time() < deadline:
        for c in _descendants_cmdlines(proc.pid):
            if len(c) > 1 and c[0].endswith("perf") and c[1] == "record":
                return c
        time.sleep(0.2)
    pytest.fail(f"no perf record child of {proc.args}")


def _opt(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _cpu_samples_per_s(store: str, cpu: int) -> list[int]:
    """Samples of one CPU per whole second (idle included: cpu-clock samples a CPU at the rate whatever runs)."""
    from nodesleuth.profile.load import load
    from nodesleuth.store.store import StoreReader

    s = load(StoreReader(store), None, None)
    import numpy as np

    t = np.asarray(s.t)[np.asarray(s.cpu) == cpu]
    secs = np.floor(t).astype(int)
    counts = np.bincount(secs - secs.min()) if len(secs) else np.array([])
    return counts[1:-1].tolist()  # whole seconds only (the first and last are cut by start and stop)


@needs_root
def test_profile_run_freq_buffer_duration_retention_and_cgroup_filters(busy_loop, tmp_path):
    """`profile run --duration 6s --freq 199 --buffer 1024 --retention 2h` with a busy loop on CPU 1 in a cgroup
    of its own: perf is asked for 199 Hz and a 256-page ring (1 MB), CPU 1 has ~199 samples each second, the run
    stops by itself, the store's 5-hour-old segment is dropped and the 4-hour-old one (the newest of its stream)
    kept; then heatmap and top-functions --cgroup see exactly the loop's samples."""
    if not shutil.which("perf"):
        missing("perf is not installed")
    from conftest import memcg

    store = str(tmp_path / "st")
    old = _old_segments(store, "ticks", [5, 4])
    loop = busy_loop(cpu=1, comm="ns-busyloop")
    mc = memcg()
    cg = f"nodesleuth-opt-{os.getpid()}"
    path = mc.make(cg)
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(loop.pid))
    try:
        t = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "profile", "run", "--store", store, "--duration", "6s",
                              "--freq", "199", "--buffer", "1024", "--retention", "2h", "--method", "perf"],
                             stderr=subprocess.PIPE, text=True)  # perf record's arguments show the options
        perf = _perf_record_args(p)
        err = p.communicate(timeout=120)[1]
        took = time.monotonic() - t
        assert p.returncode == 0, err
        assert _opt(perf, "-F") == "199" and _opt(perf, "-m") == "256", perf
        assert 6 <= took < 60 and " samples in " in err, (took, err)  # stopped by --duration, not by us
        per_s = _cpu_samples_per_s(store, 1)
        assert len(per_s) >= 3 and all(150 <= n <= 215 for n in per_s), per_s
        assert not os.path.exists(old[0]) and os.path.exists(old[1])
        # the loop's own samples, by pid, and the same through its cgroup (membership read now)
        by_pid = _folded(nodesleuth("flame", "--store", store, "--pid", str(loop.pid)).stdout)
        n = sum(by_pid.values())
        assert n > 100
        h = json.loads(nodesleuth("heatmap", "--store", store, "--cgroup", "/" + cg, "--json").stdout)
        assert sum(map(sum, h["values"])) == n
        tp = json.loads(nodesleuth("top-functions", "--store", store, "--pid", str(loop.pid), "--json").stdout)
        tc = json.loads(nodesleuth("top-functions", "--store", store, "--cgroup", "/" + cg, "--json").stdout)
        assert tc == tp and tc[0]["self"] > 0
        everyone = json.loads(nodesleuth("top-functions", "--store", store, "--json").stdout)
        assert everyone != tc
    finally:
        loop.kill()
        loop.wait()
        from nodesleuth.node.cgroupfs import remove_cgroup_tree

        time.sleep(0.2)
        remove_cgroup_tree(path)


@needs_root
def test_profile_run_chunked_and_max_size(tmp_path):
    """--chunked (hidden: the former pipeline) has perf write chunk files into the store's work directory instead
    of a pipe, and still stores the samples; --max-size 300K drops the oldest segments (three of ~150 KB kept from
    an earlier run) oldest first until the store fits, never the newest of a stream; with room, none."""
    if not shutil.which("perf"):
        missing("perf is not installed")
    store = str(tmp_path / "st")
    old = _old_segments(store, "ticks", [3, 2, 1], size=150_000)
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "profile", "run", "--store", store, "--duration", "4s",
                          "--chunked", "--rotate", "2", "--max-size", "300K"], stderr=subprocess.PIPE, text=True)
    perf = _perf_record_args(p)
    err = p.communicate(timeout=180)[1]
    assert p.returncode == 0, err
    out = _opt(perf, "-o")
    assert out.startswith(store + "/") and out != "-", perf  # chunk files in the store's work directory
    assert " samples in " in err and " 0 samples" not in err, err
    assert sum(_folded(nodesleuth("flame", "--store", store, "--idle").stdout).values()) > 0
    # oldest first, until the store fits or only each stream's newest segment is left (never dropped)
    assert [os.path.exists(s) for s in old] == [False, False, True]
    keep = _old_segments(str(tmp_path / "st2"), "ticks", [3, 2, 1], size=150_000)
    p = nodesleuth("profile", "run", "--store", str(tmp_path / "st2"), "--duration", "2s", "--chunked",
                   "--max-size", "100M")
    assert p.returncode == 0 and all(os.path.exists(s) for s in keep), p.stderr  # within its bound: nothing goes


def _dump(store: str) -> list[dict]:
    p = nodesleuth("dump", "--store", store, "--format", "json")
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()]


def test_record_interval(tmp_path):
    """--interval 0.25: four ticks a second, each on a quarter-second slot of the wall clock."""
    store = str(tmp_path / "st")
    p = nodesleuth("record", "--store", store, "--duration", "4s", "--interval", "0.25", "--quiet")
    assert p.returncode == 0, p.stderr
    ts = [d["time"] for d in _dump(store)]
    gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
    assert 12 <= len(ts) <= 17, ts
    assert 0.2 <= gaps[len(gaps) // 2] <= 0.3, gaps
    assert sum(1 for t in ts if (t % 0.25) < 0.1) >= 0.8 * len(ts)  # aligned to the slots (a late tick skips)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@retry_when_busy(attempts=2)
def test_record_retention(tmp_path):
    """--retention 2h: a store's segments older than that are dropped while recording (checked every 60 ticks):
    of two 5 and 4 hours old, the first goes; the second is the newest of its stream and stays."""
    store = str(tmp_path / "st")
    old = _old_segments(store, "profile", [5, 4])
    p = nodesleuth("record", "--store", store, "--duration", "9s", "--interval", "0.1", "--retention", "2h",
                   "--quiet")
    assert p.returncode == 0, p.stderr
    n = len(_dump(store))
    if n < 60:
        raise Busy(f"only {n} ticks of 0.1 s in 9 s: the retention check every 60 ticks never ran")
    assert not os.path.exists(old[0]) and os.path.exists(old[1])


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_record_no_threads(tmp_path, spin_thread):
    """A process whose main thread sleeps on CPU 0 while a worker thread spins on CPU 1: per thread, its CPU is on
    CPU 1 and certain; with --no-threads only the main thread's CPU (0) is known, and the split is an estimate."""
    pid = spin_thread.pid
    seen = {}
    for opt in ("--threads", "--no-threads"):
        store = str(tmp_path / opt)
        p = nodesleuth("record", "--store", store, "--duration", "4s", "--quiet", opt)
        assert p.returncode == 0, p.stderr
        seen[opt] = [[u for u in d.get("procs", []) if u["pid"] == pid] for d in _dump(store)[1:]]
    with_t = [u for tick in seen["--threads"] for u in tick]
    without = [u for tick in seen["--no-threads"] for u in tick]
    # per thread: mostly certain on CPU 1 (a second whose thread reference did not hold is estimated, as said)
    sure = [u for u in with_t if u["cpu"] == 1 and not u["estimate"]]
    assert len(sure) >= 2 and len(sure) >= 0.6 * len(with_t) and all(u["comm"] == "ns-spin" for u in with_t), with_t
    # per process only: never certain on CPU 1, where its main thread never ran
    assert without and not any(u["cpu"] == 1 and not u["estimate"] for u in without), without
    assert any(u["cpu"] == 0 for u in without), without


@needs_root
def test_record_profile_freq_and_buffer(tmp_path):
    """record --profile --profile-freq 199 --profile-buffer 512: perf asked for 199 Hz and a 128-page ring; about
    199 samples of each CPU each second."""
    if not shutil.which("perf"):
        missing("perf is not installed")
    store = str(tmp_path / "st")
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--duration", "6s", "--quiet",
                          "--profile", "--profile-freq", "199", "--profile-buffer", "512", "--profile-rotate", "2"],
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "NODESLEUTH_PROFILER": "perf"})
    perf = _perf_record_args(p)
    err = p.communicate(timeout=180)[1]
    assert p.returncode == 0, err
    assert _opt(perf, "-F") == "199" and _opt(perf, "-m") == "128", perf
    per_s = _cpu_samples_per_s(store, 0)
    assert len(per_s) >= 2 and all(150 <= n <= 215 for n in per_s), per_s


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            k, _, v = ln.rpartition(" ")
            out[k] = float(v)
    return out


def _exporter(*args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", f"127.0.0.1:{port}", *args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            _metrics(port)
            return p, port
        except OSError:
            time.sleep(0.2)
    p.kill()
    pytest.fail(f"exporter did not answer: {p.stderr.read()[-500:]}")


def _samples_in(ports: list[int], seconds: float = 8.0) -> tuple[list[float], float]:
    """How many samples each exporter took between two reads of its counter, and a span that holds both
    reads (from before the first request to after the last answer). A sampler waits its interval after each
    sample, so in that span it takes at most span / interval + 1: the counter read at two instants counts
    one sample more or less than the span's rate (a 4 s window saw 5 samples of the 1 s exporter: "1.25/s"
    on a busy machine), never more than that bound."""
    t0 = time.monotonic()
    a = [_metrics(p)["nodesleuth_samples_total"] for p in ports]
    time.sleep(seconds)
    b = [_metrics(p)["nodesleuth_samples_total"] for p in ports]
    return [y - x for x, y in zip(a, b)], time.monotonic() - t0


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_exporter_interval_and_kmsg(tmp_path):
    """--interval 0.25 samples about four times as often as the default 1 s; --kmsg FILE counts that file's ENA
    lines (a reset and its paused-queue line, as amzn-drivers logs them, dated now) per device and reason, and the
    reset as one nic_reset incident."""
    up = time.clock_gettime(time.CLOCK_MONOTONIC)
    log = tmp_path / "kmsg.txt"
    log.write_text(  # /dev/kmsg record form, the lines of the lab's ENA reset (generated from amzn-drivers' formats)
        f"4,1,{int((up - 5) * 1e6)},-;ena 0000:00:05.0 eth0: TX q 5 is paused for too long (threshold 5000000). "
        "Time since last napi 6596000 usec. napi scheduled: 1\n"
        f"6,2,{int((up - 4) * 1e6)},-;ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic "
        "Network Adapter (ENA) v2.11.0g\n")
    fast, fport = _exporter("--interval", "0.25", "--kmsg", str(log))
    slow, sport = _exporter()
    try:
        (nf, ns), span = _samples_in([fport, sport])
        # the default never samples more than once a second (no catch-up burst after a late tick), and it
        # samples; --interval 0.25 takes over 2.5 times as many in the same span
        assert 1 <= ns <= span / 1.0 + 1 and nf >= 2.5 * ns, (nf, ns, span)
        m = _metrics(fport)
        assert m['nodesleuth_nic_kernel_events_total{device="eth0",reason="ENATxQueuePaused"}'] == 1
        assert m['nodesleuth_nic_kernel_events_total{device="0000:00:05.0",reason="ENADeviceReset"}'] == 1
        assert m['nodesleuth_incidents_total{kind="nic_reset"}'] == 1
        # the file instead of /dev/kmsg: its two lines are all the kernel events this exporter counted
        assert {k for k in m if k.startswith("nodesleuth_nic_kernel_events_total{")} == {
            'nodesleuth_nic_kernel_events_total{device="eth0",reason="ENATxQueuePaused"}',
            'nodesleuth_nic_kernel_events_total{device="0000:00:05.0",reason="ENADeviceReset"}'}
    finally:
        for p in (fast, slow):
            p.terminate()
            p.wait(timeout=30)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_check_no_probe(tmp_path):
    """With --probe the check measures what one costs here (makes and removes empty memcgs); --no-probe (with no
    state of this boot kept) does not: no cost in the finding, and its evidence says the per-memcg cost was not
    measured (on this boot)."""
    from conftest import check_json, memcg, zombie_finding
    from nodesleuth.lab import zombies as zl
    from nodesleuth.node.cgroupfs import make_zombies

    parent = os.path.join(memcg().mount, f"nodesleuth-noprobe-{os.getpid()}")
    data = str(tmp_path / "pins")
    try:
        assert make_zombies(1200, parent, data) == 1200
        _, probed = check_json("--seconds", "1", "--no-trace-churn", "--probe", "--state-dir", str(tmp_path / "st"))
        _, plain = check_json("--seconds", "1", "--no-trace-churn", "--no-probe", "--state-dir", str(tmp_path / "none"))
    finally:
        zl.clear(parent, data)
    fp, fn = zombie_finding(probed), zombie_finding(plain)
    assert fp["data"]["memcg_cost"]["percpu_bytes_per_memcg"] > 0
    assert any("memory cost measured here" in e for e in fp["evidence"])
    assert fn["data"]["memcg_cost"] is None and fn["data"]["dying_percpu_bytes"] is None
    assert any("per-memcg cost not measured" in e for e in fn["evidence"]), fn["evidence"]
    assert any(e == "per-memcg cost: not measured on this boot" for e in fn["evidence"]), fn["evidence"]
    assert plain["probes"] is None and probed["probes"]["source"] == "measured"


def _thread_cpu(pid: int, tid: int) -> float:
    """CPU seconds one thread has run (utime + stime of /proc/PID/task/TID/stat): the test's own measure."""
    return cpu_ticks(f"/proc/{pid}/task/{tid}/stat") / os.sysconf("SC_CLK_TCK")


def _hot_core_expected(doc: dict, cpu: int) -> None:
    """Busy unless the window met the hot-core rule on `cpu` for certain: it >= 98% (so no second of it under
    HOT_BUSY, one run over the whole window) while the other CPU stayed under OTHERS_MAX (5 points of margin for
    the window's ends). Then a missing hot core is the check's failure, not the machine's."""
    from nodesleuth.model.thresholds import OTHERS_MAX

    other = 1 - cpu
    b, o = doc["cpus"][str(cpu)]["busy"], doc["cpus"][str(other)]["busy"]
    if b < 98 or o >= OTHERS_MAX - 5:
        raise Busy(f"no hot core rule to meet on CPU {cpu}: CPU {cpu} {b}%, CPU {other} {o}% (another job's load)")


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@retry_when_busy()
def test_check_no_threads(spin_thread):
    """The hot core of a thread: with per-thread attribution the check names the process on CPU 1 for certain;
    with --no-threads it can only place the process where its main thread was (CPU 0) and estimates."""
    from conftest import check_json, finding

    pid = spin_thread.pid
    tid = next(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)  # the worker on CPU 1
    c0, t0 = _thread_cpu(pid, tid), time.monotonic()
    _, doc = check_json("--seconds", "5", "--no-trace-churn")
    ran = (_thread_cpu(pid, tid) - c0) / (time.monotonic() - t0)
    hot = finding(doc, "hot_core", cpu=1)
    if hot is None:
        _hot_core_expected(doc, 1)
    assert hot is not None, doc["findings"]
    top = [p for p in hot["data"]["top"] if p["pid"] == pid]
    if ran < 0.6:
        # other jobs' loops pinned to CPU 1 (in cgroups of their own, or beyond the autogroup's weight) took a
        # share of it: the spinner is not the one process of that core that the share below asks for
        raise Busy(f"our spinner ran {100 * ran:.0f}% of CPU 1 (by its own /proc counters): others shared it "
                   f"({[(p['comm'], p['pct']) for p in hot['data']['top'][:4]]})")
    moved = [p for p in hot["data"]["top"] if p["pid"] != pid and p["estimate"] and "(exited children)" not in p["comm"]]
    if top and top[0]["estimate"] and moved:
        # another job's thread, last seen on CPU 1, ran partly elsewhere: the per-CPU fit scaled every
        # process on CPU 1 (collect/procs.fit_to_cpus), ours too; this attempt cannot show "for certain"
        raise Busy(f"other processes' threads migrated onto CPU 1 ({moved[0]['comm']} {moved[0]['pct']}%)")
    assert top and not top[0]["estimate"] and top[0]["share"] >= 0.5, (ran, hot["data"]["top"])
    _, doc = check_json("--seconds", "5", "--no-trace-churn", "--no-threads")
    hot = finding(doc, "hot_core", cpu=1)
    if hot is None:
        _hot_core_expected(doc, 1)
    assert hot is not None, doc["findings"]
    top = [p for p in hot["data"]["top"] if p["pid"] == pid]
    assert not top or all(p["estimate"] for p in top), hot["data"]["top"]


def test_explain_incidents_is_the_default_and_remedy_range(tmp_path):
    """explain --incidents explains every incident of the range, as explain does by default; remedy --from/--to plan
    from the incidents of that range only: the web fixture's one incident (CPU 39, its zombies proven to cost the
    core) proposes a reclaim inside the range, nothing outside it, and a reversed range is refused."""
    from fixtures.webstore import build

    rec = build(str(tmp_path), seconds=60, hot_from=30)  # 96 CPUs, 68,440 dying memcgs
    st = rec["store"]
    a = nodesleuth("explain", "--store", st, "--json")
    b = nodesleuth("explain", "--store", st, "--json", "--incidents")
    assert a.returncode == b.returncode == 0, b.stderr
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    assert da == db and len(db["incidents"]) == 1
    h0, h1 = rec["hot_start"], rec["hot_end"]
    inside = nodesleuth("remedy", "--store", st, "--from", str(h0 - 5), "--to", str(h1 + 5))
    assert inside.returncode == 0 and "proven to cost CPU 39" in inside.stdout, inside.stdout
    assert "sync; echo 3 > /proc/sys/vm/drop_caches" in inside.stdout
    for rng in (["--from", str(h1 + 10)], ["--to", str(h0 - 10)]):
        out = nodesleuth("remedy", "--store", st, *rng)
        assert out.returncode == 0 and out.stdout.startswith("nothing to do"), (rng, out.stdout)
    bad = nodesleuth("remedy", "--store", st, "--from", str(h1), "--to", str(h0))
    assert bad.returncode == 2 and bad.stderr.startswith("nodesleuth: error: --from/--to: from (") and \
        "is after to" in bad.stderr, bad.stderr


CHURNER = r"""
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
ctypes.CDLL(None).prctl(15, b"ns-churner", 0, 0, 0)
parent = sys.argv[1]
os.makedirs(parent, exist_ok=True)
i = 0
while True:
    d = os.path.join(parent, f"job-{i}")
    os.mkdir(d)
    os.rmdir(d)
    i += 1
    time.sleep(0.05)
"""


@needs_root
def test_explain_trace_churn_names_who_makes_cgroups(tmp_path):
    """explain --trace-churn 3 traces cgroup mkdir/rmdir live first and prints who made them: a process making and
    removing a cgroup every 50 ms under a parent of its own."""
    if not shutil.which("perf"):
        missing("perf is not installed")
    from conftest import memcg
    from fixtures.webstore import build
    from nodesleuth.node.cgroupfs import remove_cgroup_tree

    rec = build(str(tmp_path), seconds=40, hot_from=20, cpus=4)
    parent = os.path.join(memcg().mount, f"nodesleuth-churnopt-{os.getpid()}")
    ch = subprocess.Popen([sys.executable, "-c", CHURNER, parent])
    try:
        p = nodesleuth("explain", "--store", rec["store"], "--trace-churn", "3")
    finally:
        ch.kill()
        ch.wait()
        remove_cgroup_tree(parent)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("churn: ns-churner made ")]
    assert lines, p.stderr
    made, removed = (int(x) for x in lines[0].split(" made ")[1].split(" cgroups")[0].split(" / removed "))
    assert made >= 20 and abs(made - removed) <= 1, lines[0]
    assert "cgroups like /nodesleuth-churnopt-*/job-*; " in lines[0], lines[0]
    # the trace is node-wide: another run of this test on a shared machine churns under its own parent too
    pids = [int(x) for x in lines[0].split("pids [")[1].split("]")[0].split(", ")]
    assert ch.pid in pids, lines[0]


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_snapshot_root_and_output(tmp_path):
    """--root reads a recorded tree (its kernel, OS image and 5,000 dying memcgs, not this host's); -o writes the
    document to a file and nothing to stdout."""
    from fixtures.trees import make_v2_node

    root = make_v2_node(str(tmp_path / "n"), dying=5000)
    os.makedirs(os.path.join(root, "proc/sys/kernel"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as f:
        f.write("6.12.57-tree-test\n")
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/os-release"), "w") as f:
        f.write('NAME="Tree"\nPRETTY_NAME="Tree Linux 1 (fixture)"\n')
    out = str(tmp_path / "snap.json")
    p = nodesleuth("snapshot", "--root", root, "--seconds", "0.5", "-o", out)
    assert p.returncode == 0 and p.stdout == "", (p.stdout, p.stderr)
    doc = json.load(open(out))
    assert doc["kernel"] == "6.12.57-tree-test" and doc["os_image"] == "Tree Linux 1 (fixture)"
    assert doc["sysctls"]["kernel.osrelease"] == "6.12.57-tree-test"
    assert doc["health"]["dying_memcgs"] == 5000 and doc["health"]["problem"] is True
    here = json.loads(nodesleuth("snapshot", "--seconds", "0.5").stdout)
    assert here["kernel"] == os.uname().release


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_snapshot_systemd_pid():
    """--systemd-pid: the units are those of the systemd that is PID 1 of that namespace (a crash-looping
    ecs.service there), not of this host."""
    from conftest import start_crasher
    from nodesleuth.lab.systemd import SystemdNamespace

    with SystemdNamespace() as ns:
        start_crasher(ns, 1)
        doc = json.loads(nodesleuth("snapshot", "--seconds", "1", "--systemd-pid", str(ns.pid)).stdout)
        here = json.loads(nodesleuth("snapshot", "--seconds", "1").stdout)
    ecs = [u for u in doc["units"] if u["unit"] == "ecs.service"]
    assert ecs and ecs[0]["crash_looping"] and ecs[0]["enabled"] == "enabled", doc["units"]
    assert doc["health"]["crash_looping_units"] == ["ecs.service"]
    assert not any(u["unit"] == "ecs.service" for u in here["units"])


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_lab_run_options_and_clean_keep_store():
    """A short lab run with every shaping option: --no-curve (no cost curve measured), --cpu 0 (the victim and the
    data loader there), --per-start 300 (each start of the agent leaves 300 cgroups: the churn trace counts
    them per agent pid), --restart-sec 150ms (the unit systemd ran, as recorded), --no-profile (no perf -g
    stream in the store); `lab clean --keep-store` then removes everything but the recording (and its log)."""
    from nodesleuth.store import churn as sc
    from nodesleuth.store import query as sq
    from nodesleuth.store.store import StoreReader

    lab = "/var/lib/nodesleuth-lab-options"
    if os.path.exists(lab):
        nodesleuth("lab", "clean", "--workdir", lab)
    try:
        run = nodesleuth("lab", "run", "--workdir", lab, "--no-curve", "--no-profile", "--cpu", "0", "--per-start",
                         "300", "--restart-sec", "150ms", "--zombies", "900", "--seconds", "3", timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "memcg reclaim cost on this kernel" not in run.stdout and "cost of reclaim" not in run.stderr
        assert "; CPU 0 busy per second: " in run.stdout, run.stdout
        st = json.load(open(os.path.join(lab, "state.json")))
        # the agent keeps one state file per cgroup it made, named as the cgroup (another lab on this host may
        # use the same parent cgroup: only ours are counted)
        ours = set(os.listdir(os.path.join(lab, "run")))
        assert st["cpu"] == 0 and st["curve"] == [] and st["zombies"] >= 900
        clean = nodesleuth("lab", "clean", "--workdir", lab, "--keep-store")
        assert clean.returncode in (0, 1), clean.stderr  # 1: other jobs' memcgs kept the count up (said)
        store = os.path.join(lab, "store")
        assert sorted(os.listdir(lab)) == ["recorder.log", "store"], os.listdir(lab)  # state, data, agent gone
        r = StoreReader(store)
        assert r.segments("ticks") and not r.segments("profile")
        units = [u for tk in sq.ticks(r, None, None) for u in (tk.units or []) if u.id == "ecs.service"]
        assert units and {u.restart_usec for u in units} == {150000}, {u.restart_usec for u in units}
        made: dict[int, int] = {}
        for e in sc.events(r, None, None):
            if e.event == "mkdir" and e.comm == "ecs-agent" and os.path.basename(e.path) in ours:
                made[e.pid] = made.get(e.pid, 0) + 1
        # while it built the population every start made 300; afterwards the lab slows the agent to 300 // 25
        counts = sorted(made.values())
        assert counts and counts.count(300) >= 2 and set(counts) <= {300, 12}, counts
    finally:
        shutil.rmtree(lab, ignore_errors=True)


def test_fleet_concurrency_bounds_snapshot_fetches_in_flight():
    """--concurrency N: at most N snapshot URLs are fetched at once, and N are: the server counts requests in
    flight and holds each until N are (or all the URLs left are), then 0.3 s more, so that a client over its
    bound is seen over it; the analysis is the same whatever N."""
    import http.server

    sys.path.insert(0, HERE)
    from fixtures.fleetgen import make_fleet

    snaps = make_fleet(8)
    for s in snaps[:3]:
        s["health"]["problem"] = True
    for s in snaps[3:]:
        s["health"]["problem"] = False
    state = {"now": 0, "peak": 0, "done": 0, "want": 0, "unmet": []}
    cv = threading.Condition()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            with cv:
                state["now"] += 1
                state["peak"] = max(state["peak"], state["now"])
                cv.notify_all()
                # a barrier, not a fixed pause: on a busy machine the client's next requests may come after
                # the pause has ended, and fewer were counted in flight than the bound lets it have
                target = lambda: min(state["want"], len(snaps) - state["done"])  # noqa: E731
                # (once a wait has ended unmet the client is not fetching N at once: the rest are not held)
                if not state["unmet"] and not cv.wait_for(lambda: state["now"] >= target(), timeout=10):
                    state["unmet"].append((state["now"], target()))
            time.sleep(0.3)
            body = json.dumps(snaps[int(self.path.strip("/").split("/")[0])]).encode()
            # done before the client can have its answer: counted down after the write, the next request of
            # --concurrency 1 came in first and made a peak of 2 under a busy loop on CPU 1
            with cv:
                state["now"] -= 1
                state["done"] += 1
                cv.notify_all()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{srv.server_port}/{i}/snapshot" for i in range(len(snaps))]
    docs = {}
    try:
        for n in ("1", "3"):
            state.update(peak=0, done=0, want=int(n), unmet=[])
            # the client waits for its answers longer than the server holds them: no retry counts twice
            p = nodesleuth("fleet", *urls, "--concurrency", n, "--timeout", "60", "--json")
            assert p.returncode == 0, p.stderr
            docs[n] = json.loads(p.stdout)
            assert state["done"] == len(snaps) and state["peak"] == int(n) and not state["unmet"], (n, state)
    finally:
        srv.shutdown()
        srv.server_close()
    assert docs["1"] == docs["3"] and (docs["1"]["hosts"], docs["1"]["affected"]) == (8, 3)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_exporter_profile_freq():
    """exporter --profile run --profile-freq 99: its profiler samples every CPU 99 times a second (idle included:
    cpu-clock), so nodesleuth_profile_samples_total grows by about 99 x CPUs a second."""
    p, port = _exporter("--profile", "run", "--profile-freq", "99", "--profile-window", "10s")
    try:
        deadline = time.time() + 60
        while time.time() < deadline and _metrics(port).get("nodesleuth_profile_samples_total", 0) == 0:
            time.sleep(1)  # batches reach the shares every 5 s
        a, t = _metrics(port)["nodesleuth_profile_samples_total"], time.monotonic()
        time.sleep(11)
        rate = (_metrics(port)["nodesleuth_profile_samples_total"] - a) / (time.monotonic() - t)
    finally:
        p.terminate()
        p.wait()
    want = 99 * os.cpu_count()
    assert 0.6 * want <= rate <= 1.3 * want, (rate, want)  # whole 5 s batches in an 11 s window


@needs_root
def test_record_tier_ages(tmp_path):
    """record --tier-1s 2h --tier-10s 12h --tier-1m 24h: each tier's own age bound drops that tier's old segments
    (a segment is old once the next one of its stream starts before the cut-off): ticks from 5 h ago go (the next
    started 3 h ago), 10 s aggregates from 20 h ago go (the next, 14 h ago; a 10 s segment spans 6 h), minute
    rollups from 50 h ago stay (the next started 20 h ago, inside 24 h)."""
    store = str(tmp_path / "st")
    ticks = _old_segments(store, "ticks", [5, 3, 1])
    tens = _old_segments(store, "ticks10s", [20, 14, 1])
    mins = _old_segments(store, "rollup", [50, 20])
    p = nodesleuth("record", "--store", store, "--duration", "3s", "--quiet", "--tier-1s", "2h", "--tier-10s", "12h",
                   "--tier-1m", "24h")
    assert p.returncode == 0, p.stderr
    assert [os.path.exists(x) for x in ticks] == [False, True, True]
    assert [os.path.exists(x) for x in tens] == [False, True, True]
    assert [os.path.exists(x) for x in mins] == [True, True]
