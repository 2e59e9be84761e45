"""Continuous profiling: real perf on a pinned loop, a 96-CPU capture fixture, parser edge cases."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import Busy, needs_root, nodesleuth, owning_cpu, retry_when_busy
from nodesleuth.model.errors import InputError
from fixtures.perfscript import make_capture
from nodesleuth.profile.parse import parse_file, parse_text

SPIN = r"""
volatile unsigned long x;
__attribute__((noinline)) void ns_spin_inner(void) { for (int i = 0; i < 1000; i++) x += i; }
__attribute__((noinline)) void ns_spin_loop(void) { for (;;) ns_spin_inner(); }
int main(void) { ns_spin_loop(); return 0; }
"""


@pytest.fixture
def spin(tmp_path):
    src = tmp_path / "spin.c"
    src.write_text(SPIN)
    exe = tmp_path / "ns-spin"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-o", str(exe), str(src)], check=True)
    p = subprocess.Popen([str(exe)], preexec_fn=owning_cpu(1))  # beside other jobs there too
    yield p
    p.kill()
    p.wait()


def _perf_children(pid: int, store: str) -> list[int]:
    """perf record processes recording into this store (children of the `record` process that names the
    store, or of a reaper whose command line names its work directory)."""
    out = subprocess.run(["pgrep", "-x", "perf"], capture_output=True, text=True).stdout
    pids = []
    for x in out.split():
        try:
            with open(f"/proc/{x}/cmdline") as f:
                cmd = f.read()
            with open(f"/proc/{x}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{ppid}/cmdline") as f:
                parent = f.read()
            if "record" in cmd and (store in cmd or store in parent):
                pids.append(int(x))
        except OSError:
            pass
    return pids


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_real_perf_of_a_pinned_loop(tmp_path, spin):
    d = str(tmp_path / "st")
    start = time.time()
    c0 = _cpu_ticks(spin.pid)
    # the perf record path (the fallback of the direct reader, which test_profile_direct.py covers): its perf is
    # killed below and must be restarted
    rec = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", d, "--quiet", "--profile",
                            "--profile-rotate", "2", "--duration", "9s"],
                           env={**os.environ, "NODESLEUTH_PROFILER": "perf"})
    deadline = time.time() + 20
    perf = []
    while time.time() < deadline and not perf:  # started and past its first chunk
        time.sleep(0.5)
        perf = _perf_children(rec.pid, d)
    time.sleep(2.0)
    assert perf, "perf was not started"
    os.kill(perf[0], signal.SIGKILL)  # perf dies: the runner must restart it
    killed = time.time()
    assert rec.wait(timeout=90) == 0
    end = time.time()
    # the loop's own share of CPU 1 over the run, from the kernel: the profile must agree with it
    # (on a busy host something else shares CPU 1 and both figures drop together)
    share = (_cpu_ticks(spin.pid) - c0) / os.sysconf("SC_CLK_TCK") / (end - start)
    out = nodesleuth("flame", "--store", d, "--cpu", "1", "--format", "folded")
    assert out.returncode == 0, out.stderr
    rows = [ln.rsplit(" ", 1) for ln in out.stdout.splitlines()]
    total = sum(int(c) for _, c in rows)
    spin_n = sum(int(c) for s, c in rows if s.startswith("ns-spin;") and "ns_spin_inner" in s)
    assert total >= 49 * 3 and share >= 0.2, (total, share)
    assert abs(spin_n / total - share) <= 0.15, (spin_n / total, share, out.stdout[:2000])
    # filtered by pid: only the loop
    byp = nodesleuth("flame", "--store", d, "--pid", str(spin.pid), "--format", "folded").stdout
    assert byp and all(ln.startswith("ns-spin;") for ln in byp.splitlines())
    # by cgroup: the loop alone in a memory cgroup of its own
    from conftest import memcg

    cg = os.path.join(memcg().mount, f"ns-flame-{os.getpid()}")  # the memory hierarchy this host has (v1 or v2)
    os.mkdir(cg)
    try:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(spin.pid))
        byc = nodesleuth("flame", "--store", d, "--cgroup", os.path.basename(cg), "--format", "folded").stdout
        assert byc.strip() and all(ln.startswith("ns-spin;") for ln in byc.splitlines())
    finally:
        spin.kill()
        spin.wait()
        os.rmdir(cg)
    # timestamps are wall-clock, and samples continue after perf was killed and restarted
    hm = json.loads(nodesleuth("heatmap", "--store", d, "--cpu", "1", "--json",
                               "--from", str(start), "--to", str(end)).stdout)
    assert sum(sum(c) for c in hm["values"]) >= spin_n * 0.9
    late = nodesleuth("flame", "--store", d, "--cpu", "1", "--format", "folded", "--from", str(killed + 2.5),
                      "--to", str(end)).stdout
    assert "ns_spin_inner" in late
    hot_cols = [c for c, hc in zip(hm["columns"], hm["hot_cpus"]) if 1 in hc]
    assert len(hot_cols) >= 4


@pytest.fixture(scope="module")
def cap96(tmp_path_factory):
    d = tmp_path_factory.mktemp("cap96")
    path = str(d / "cap.txt")
    facts = make_capture(path)
    store = str(d / "st")
    p = nodesleuth("profile", "ingest", path, "--store", store)
    assert p.returncode == 0, p.stderr
    return facts, store, path


def test_96cpu_capture_one_core_in_the_kernel(cap96):
    facts, store, _ = cap96
    t0 = facts["t0"]
    rng = ["--from", str(t0), "--to", str(t0 + 20)]
    # per-CPU heatmap: CPU 39's seconds 8..12 are full
    h39 = json.loads(nodesleuth("heatmap", "--store", store, "--cpu", "39", "--json", *rng).stdout)
    per_col = [sum(c) for c in h39["values"]]
    assert all(per_col[c] >= 45 for c in range(8, 13))
    assert all(per_col[c] <= 15 for c in list(range(0, 8)) + list(range(13, 20)))
    # all-CPU heatmap: summed cells cannot show it (as in FlameScope), the hot-core mark does
    hall = json.loads(nodesleuth("heatmap", "--store", store, "--json", *rng).stdout)
    sums = [sum(c) for c in hall["values"]]
    inside, outside = sums[8:13], sums[:8] + sums[13:]
    mean_out = sum(outside) / len(outside)
    assert max(inside) < mean_out * 1.3  # the summed view barely moves
    assert [c for c, hc in zip(hall["columns"], hall["hot_cpus"]) if hc] == [8, 9, 10, 11, 12]
    assert all(hc == [39] for hc in hall["hot_cpus"][8:13])
    # top kernel functions on CPU 39 in the episode
    top = json.loads(nodesleuth("top-functions", "--store", store, "--cpu", "39", "--json",
                                "--from", str(facts["hot_from"]), "--to", str(facts["hot_to"])).stdout)
    assert top[0]["function"] == "mem_cgroup_nr_lru_pages" and top[0]["kernel"]
    assert top[0]["self_pct"] >= 90
    assert any(r["function"] == "memcg_numa_stat_show" and r["total_pct"] >= 90 for r in top)


def test_idle_filter_keeps_softirq_on_idle_and_kthread_names(cap96):
    facts, store, _ = cap96
    f5 = nodesleuth("flame", "--store", store, "--cpu", "5", "--format", "folded").stdout
    assert any(ln.startswith("swapper;") and "net_rx_action_[k]" in ln and "ena_io_poll_[k]" in ln
               for ln in f5.splitlines())
    assert "pv_native_safe_halt_[k] " not in f5  # plain idle is filtered
    # --idle keeps every sample: the counts add up to all of CPU 5's samples in the capture, and the
    # samples it adds are exactly the plain-idle ones
    import re

    _, _, path = cap96
    on5 = len(re.findall(r"\[005\] +\d+\.\d+:", open(path).read()))
    with_idle = nodesleuth("flame", "--store", store, "--cpu", "5", "--format", "folded", "--idle").stdout
    count = lambda text: sum(int(ln.rsplit(" ", 1)[1]) for ln in text.splitlines())  # noqa: E731
    assert on5 > 0 and count(with_idle) == on5
    idle_only = sum(int(ln.rsplit(" ", 1)[1]) for ln in with_idle.splitlines()
                    if ln.startswith("swapper;") and "net_rx_action" not in ln and "irq" not in ln)
    assert count(f5) == on5 - idle_only and idle_only > 0
    f39 = nodesleuth("flame", "--store", store, "--cpu", "39", "--format", "folded").stdout
    assert any(ln.startswith("kworker/39:1;") for ln in f39.splitlines())
    assert any(ln.startswith("ray::Worker_Actor;") for ln in
               nodesleuth("flame", "--store", store, "--format", "folded").stdout.splitlines())


def test_differential_and_exports(cap96, tmp_path):
    facts, store, _ = cap96
    t0 = facts["t0"]
    inc = ["--from", str(facts["hot_from"]), "--to", str(facts["hot_to"])]
    diff = nodesleuth("flame", "--store", store, "--cpu", "39", "--format", "folded", *inc,
                      "--diff-baseline", f"{t0}..{t0 + 5}").stdout
    rows = {ln.rsplit(" ", 2)[0]: (float(ln.rsplit(" ", 2)[1]), int(ln.rsplit(" ", 2)[2])) for ln in diff.splitlines()}
    walk = [k for k in rows if k.endswith("mem_cgroup_nr_lru_pages_[k]")]
    assert walk and rows[walk[0]][0] == 0 and rows[walk[0]][1] >= 200
    total_inc = sum(v[1] for v in rows.values())
    total_base = sum(v[0] for v in rows.values())
    assert abs(total_base - total_inc) <= 1  # baseline normalised to the incident's total
    svg = str(tmp_path / "f.svg")
    assert nodesleuth("flame", "--store", store, "--cpu", "39", *inc, "-o", svg).returncode == 0
    root = ET.parse(svg).getroot()
    titles = [e.text for e in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("mem_cgroup_nr_lru_pages_[k]") for t in titles)
    sc = str(tmp_path / "p.json")
    assert nodesleuth("flame", "--store", store, *inc, "-o", sc).returncode == 0
    doc = json.load(open(sc))
    names = [p["name"] for p in doc["profiles"]]
    assert len(names) == 96 and names[doc["activeProfileIndex"]] == "CPU 39"
    for p in doc["profiles"]:
        assert p["type"] == "sampled" and len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < len(doc["shared"]["frames"]) for s in p["samples"] for i in s)


def test_parser_edge_cases(tmp_path):
    text = (" ray::Worker Actor  9911/9915  [003]  100.250000:   20408163 cpu-clock:ppp: \n"
            "\t    7f00aa001122 cudaStreamSynchronize (/usr/lib/libcudart.so.12)\n"
            "\t    7f00aa000000 [unknown] (/usr/lib/libfoo.so.1)\n"
            "\t               0 [unknown] ([unknown])\n\n"
            "kworker/3:1-eve    41/41    [003]   100.260000:   20408163 cpu-clock:ppp: \n"
            "\tffffffffc0412a10 ena_io_poll+0x20 ([ena])\n"
            "\tffffffff810b7e21 process_one_work ([kernel.kallsyms])\n\n"
            "this is not a sample header\n\tdeadbeef foo (bar)\n\n"
            "python3  8801/8801  [001]   100.270000:   20408163 cpu-clock:ppp: \n"
            "\t    55d1a2b3c4d5 runtime.scan")  # cut inside the last sample
    b = parse_text(text)
    assert len(b) == 2 and b.skipped == 2
    assert b.comms == ["ray::Worker Actor", "kworker/3:1-eve"]
    assert b.cpus == [3, 3] and b.pids == [9911, 41] and b.tids == [9915, 41]
    assert b.stacks[0] == ("[unknown]", "[libfoo.so.1]", "cudaStreamSynchronize")
    assert b.stacks[1] == ("process_one_work_[k]", "ena_io_poll_[k]")
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\nworld\n")
    with pytest.raises(InputError, match="no perf script samples"):
        parse_file(str(bad))
    p = nodesleuth("profile", "ingest", str(bad), "--store", str(tmp_path / "st"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "bad.txt" in p.stderr


# --- perf script in every shape, folded exactly as FlameGraph's stackcollapse-perf.pl folds it ---

HERE = os.path.dirname(os.path.abspath(__file__))
# stackcollapse-perf.pl (FlameGraph, CDDL-1.0) is not in this machine's registries and its code is not kept
# here: its outputs over exactly the inputs below are recorded (tests/data/perf-script/stackcollapse-outputs.md)
STACKCOLLAPSE_REF = os.path.join(HERE, "data", "perf-script", "stackcollapse-outputs.tar.xz")
# nodesleuth flame options equivalent to each stackcollapse-perf.pl option (counts: --weight period)
EQUIV = {"": ["--annotate", "none"], "--kernel": ["--annotate", "kernel"], "--jit": ["--annotate", "jit"],
         "--all": ["--annotate", "all"], "--pid": ["--annotate", "none", "--name", "pid"],
         "--tid": ["--annotate", "none", "--name", "tid"]}
# where stackcollapse-perf.pl folds differently on purpose (its known limits), checked separately below
NO_FRAMES_UPSTREAM = {"mix-cpuclock.hide-callgraph.txt", "c-busy.hide-callgraph.txt", "single-line-stacks.txt",
                      "mix-cpuclock.F-ip-sym-dso-only.txt"}  # -G one-line samples; no header at all
NO_DSO = {"mix-cpuclock.F-comm-pid-ip-sym.txt", "c-busy.F-comm-pid-ip-sym.txt"}  # -F ip,sym: no `(dso)` column
KERNEL_PATHS = {"versioned-vmlinux.txt"}  # vmlinux-5.4.14-... and *.ko dsos, which its --kernel misses


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import tarfile

    d = tmp_path_factory.mktemp("perf-corpus")
    with tarfile.open(os.path.join(HERE, "data", "perf-script", "corpus.tar.xz")) as t:
        t.extractall(d, filter="data")
    files = sorted(d.glob("recorded/*.txt")) + sorted(d.glob("public/*/*.txt"))
    assert len(files) >= 55
    return d, files


def _same_input(text: str) -> str:
    """The input given to both tools. Two stackcollapse-perf.pl bugs are sidestepped, not copied:
    it drops the last sample when the file does not end with a blank line (FlameGraph issue #230), and
    it cuts a comm at its last word when that word is a number (`busy worker 1` -> `busy worker`, tid 1);
    nodesleuth keeps the comm whole (test_comm_ending_in_a_number)."""
    text = text.replace("busy worker 1 ", "busy worker one ")
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    ends_in_frame = last[:1] in " \t"  # not a side-band record (PERF_RECORD_EXIT), which is no sample
    return text + "\n" if text.endswith("\n") and not text.endswith("\n\n") and ends_in_frame else text


def _corpus_name(src) -> str:
    """The input's path inside corpus.tar.xz (`recorded/x.txt`, `public/inferno-tests/x.txt`): the key."""
    parts = src.parts
    return "/".join(parts[max(i for i, p in enumerate(parts) if p in ("recorded", "public")):])


@functools.cache
def _recorded() -> tuple[dict, dict]:
    """The recorded manifest (key -> entry) and outputs (member name -> text), read once."""
    import tarfile

    with tarfile.open(STACKCOLLAPSE_REF) as t:
        manifest = json.load(t.extractfile("manifest.json"))
        outs = {m.name: t.extractfile(m).read().decode() for m in t.getmembers() if m.name.startswith("outputs/")}
    return {e["key"]: e for e in manifest["outputs"]}, outs


def _stackcollapse(text: str, *opts: str, src) -> str:
    """stackcollapse-perf.pl's output for `text` (corpus file `src`, as given) with `opts`: the recorded
    one, found by input name + options; the input's sha256 must be the recorded input's, so an input
    changed without its output re-recorded fails here. With NODESLEUTH_STACKCOLLAPSE_RECORD=DIR (set by
    tests/tools/record_stackcollapse.py) the real script at NODESLEUTH_STACKCOLLAPSE is run and recorded."""
    import hashlib

    from tools.record_stackcollapse import key, record

    name, data = _corpus_name(src), text.encode()
    if os.environ.get("NODESLEUTH_STACKCOLLAPSE_RECORD"):
        return record(name, data, opts, src, _same_input)
    entries, outs = _recorded()
    e = entries.get(key(name, opts))
    assert e is not None, f"no recorded stackcollapse-perf.pl output for {key(name, opts)!r}: mark the test " \
                          "@pytest.mark.stackcollapse and re-record with tests/tools/record_stackcollapse.py"
    assert hashlib.sha256(data).hexdigest() == e["input_sha256"], \
        f"input {name} ({e['input']}) changed since its stackcollapse-perf.pl output was recorded: re-record " \
        "with tests/tools/record_stackcollapse.py"
    return outs[e["output"]]


def _fold(text: str, event: str | None = None, **kw) -> tuple[str, str]:
    """The `flame --format folded` path in-process: parse, choose the event, encode into the store's
    frame format, decode, assemble, fold (with idle samples kept: stackcollapse keeps them)."""
    from nodesleuth.profile.codec import Decoded, encode
    from nodesleuth.profile.parse import pick_event
    from nodesleuth.profile.folded import folded, folded_text
    from nodesleuth.profile.load import assemble
    from nodesleuth.profile.samples import Filter

    b, _ = pick_event(parse_text(text), event)
    s = assemble([Decoded(encode(b)[1])])
    return folded_text(folded(s, Filter(keep_idle=True), weight="period", **kw)), b.event


@pytest.mark.stackcollapse
def test_folded_equals_stackcollapse_perf_on_the_corpus(corpus):
    _, files = corpus
    kw = {"": dict(annotate="none"), "--kernel": dict(annotate="kernel"), "--jit": dict(annotate="jit"),
          "--all": dict(annotate="all"), "--pid": dict(annotate="none", name="pid"),
          "--tid": dict(annotate="none", name="tid")}
    compared = 0
    for fn in files:
        if fn.name in NO_FRAMES_UPSTREAM | NO_DSO or fn.name == "simple.linux-perf.txt":
            continue
        text = _same_input(fn.read_text(errors="replace"))
        for opt, how in kw.items():
            if fn.name in KERNEL_PATHS and opt in ("--kernel", "--all"):
                continue
            mine, event = _fold(text, **how)
            # stackcollapse's default is the first event in the file; nodesleuth's the clock event
            ref = _stackcollapse(text, *([opt] if opt else []), *([f"--event-filter={event}"] if event else []),
                                 src=fn)
            assert mine == ref, f"{fn.name} {opt}"
            compared += 1
    assert compared >= 300


@pytest.mark.stackcollapse
def test_flame_cli_folded_equals_stackcollapse(corpus, tmp_path):
    d, _ = corpus
    for name, opt in [("recorded/java.default.txt", "--all"), ("recorded/cpp-tmpl.default.txt", "--kernel"),
                      ("recorded/kernel-default-event.vmlinux-path.txt", "--tid"),
                      ("recorded/two-events-faults.default.txt", "--kernel")]:
        src = d / name
        text = _same_input(src.read_text())
        inp = tmp_path / src.name
        inp.write_text(text)
        store = str(tmp_path / ("st-" + src.stem))
        p = nodesleuth("profile", "ingest", str(inp), "--store", store)
        assert p.returncode == 0, p.stderr
        out = nodesleuth("flame", "--store", store, "--format", "folded", "--idle", "--weight", "period", *EQUIV[opt])
        assert out.returncode == 0, out.stderr
        assert out.stdout == _stackcollapse(text, opt, "--event-filter=" + (
            "cpu-clock:ppp" if "kernel-default" in name or "cpp" in name else "cpu-clock"), src=src), name
    # two events: the clock event is chosen and the choice is said
    assert "using cpu-clock, the clock event" in p.stderr and "page-faults" in p.stderr


@pytest.mark.stackcollapse
def test_shapes_stackcollapse_cannot_fold(corpus):
    d, _ = corpus
    # -G: one line per sample, the leaf on the header line; stackcollapse-perf.pl folds it to nothing
    g = (d / "recorded/mix-cpuclock.hide-callgraph.txt").read_text()
    assert _stackcollapse(g, src=d / "recorded/mix-cpuclock.hide-callgraph.txt") == ""
    b = parse_text(g)
    assert len(b) == 401 and all(len(st) <= 1 for st in b.stacks)
    assert b.comms[:3] == ["mktemp", "java", "busy worker 1"]
    # -F ip,sym,symoff,dso: no header at all; every sample is kept, known by its stack
    h = parse_text((d / "recorded/mix-cpuclock.F-ip-sym-dso-only.txt").read_text())
    full = parse_text((d / "recorded/mix-cpuclock.default.txt").read_text())
    assert len(h) == len(full) == 401 and h.comms == [""]
    assert sorted(h.stacks[i] for i in h.stack_ids) == sorted(full.stacks[i] for i in full.stack_ids)
    # -F comm,pid,ip,sym: frames without a `(dso)` column; stackcollapse drops them all
    n = parse_text((d / "recorded/c-busy.F-comm-pid-ip-sym.txt").read_text())
    c = parse_text((d / "recorded/c-busy.default.txt").read_text())
    assert len(n) == 209 and sorted(n.stacks[i] for i in n.stack_ids) == sorted(c.stacks[i] for i in c.stack_ids)
    nd = d / "recorded/c-busy.F-comm-pid-ip-sym.txt"
    nd_ref = _stackcollapse(nd.read_text(), src=nd).splitlines()
    assert nd_ref and all(ln.count(";") == 0 for ln in nd_ref)


@pytest.mark.stackcollapse
def test_comm_ending_in_a_number(corpus):
    d, _ = corpus
    text = (d / "recorded/c-busy.default.txt").read_text()
    b = parse_text(text)
    assert b.comms == ["busy", "busy worker 1"]
    assert sorted(set(b.tids)) == [21271, 21273] and set(b.pids) == {-1}  # perf printed the tid only
    ref = _stackcollapse(text, "--tid", src=d / "recorded/c-busy.default.txt")
    assert "busy_worker-?/1;" in ref  # upstream cuts the comm and reads `1` as the tid
    mine, _ = _fold(text, name="tid")
    assert "busy_worker_1-?/21273;" in mine and "busy_worker-?/1" not in mine


def test_kernel_frames_by_address_and_module_path(corpus):
    d, _ = corpus
    b = parse_text((d / "public/inferno-tests/versioned-vmlinux.txt").read_text())
    st = b.stacks[b.stack_ids[0]]
    assert "mlx5e_xdp_handle_[k]" in st and "net_rx_action_[k]" in st  # *.ko and vmlinux-5.4.14-... dsos
    # a kernel printed from a vmlinux file (no [kernel.kallsyms] marker) is as kernel as kallsyms
    a = parse_text((d / "recorded/kernel-default-event.vmlinux-path.txt").read_text())
    k = parse_text((d / "recorded/kernel-default-event.default.txt").read_text())
    ka = {f for i in a.stack_ids for f in a.stacks[i] if f.endswith("_[k]")}
    kk = {f for i in k.stack_ids for f in k.stacks[i] if f.endswith("_[k]")}
    # the same kernel functions (3 boot-time ones are absent from that vmlinux and print as [unknown])
    assert len(ka) > 150 and ka <= kk and len(kk - ka) <= 3
    # user-space addresses in a file named like a module are not kernel
    from nodesleuth.profile.parse import frame_names

    assert frame_names("\t7f00aa001122 helper (/opt/app/lib/foo.ko.so)") == ("helper",)
    assert frame_names("\tffffffffc087cbc9 mlx5e_xdp_handle+0xa9 (/lib/modules/5.4/kernel/mlx5_core.ko)") == (
        "mlx5e_xdp_handle_[k]",)


def tidy_name_kept(name: str) -> str:
    from nodesleuth.profile.folded import tidy

    return tidy(name)


def test_tidy_rules_and_raw_names(corpus):
    d, _ = corpus
    text = (d / "recorded/java.default.txt").read_text()
    tidy, _ = _fold(text, annotate="none")
    raw, _ = _fold(text, annotate="none", tidy_names=False)
    assert "java;" in tidy and any("java/lang/" in ln or "Busy" in ln for ln in tidy.splitlines())
    assert "(int)" not in tidy and "(int)" in raw  # Java/C++ argument lists
    cpp, _ = _fold((d / "recorded/cpp-tmpl.default.txt").read_text(), annotate="none")
    cpp_raw, _ = _fold((d / "recorded/cpp-tmpl.default.txt").read_text(), annotate="none", tidy_names=False)
    assert "{lambda(" not in cpp and "{lambda(std::__cxx11::basic_string<char" in cpp_raw
    assert tidy_name_kept("v8::internal::(anonymous namespace)::Invoke(v8::internal::Isolate*)") == \
        "v8::internal::(anonymous namespace)::Invoke"
    from nodesleuth.profile.parse import frame_names
    from nodesleuth.profile.folded import tidy as tidy_name

    # perf-map-agent's unfolded inline chains (FlameGraph test data perf-java-stacks-02 shape)
    assert frame_names("\t7f722d142778 Lcom/a/B;::f->Lcom/a/C;::g (/tmp/perf-19982.map)") == (
        "Lcom/a/B:::f_[j]", "Lcom/a/C:::g_[i]")
    assert tidy_name("Lcom/a/B:::f_[j]", java=True) == "com/a/B:::f_[j]"
    assert tidy_name("net/http.(*Client).Do") == "net/http.(*Client).Do"


def test_events_kept_apart_and_hot_cpu_marks_need_a_clock(corpus, tmp_path):
    from nodesleuth.profile.parse import pick_event

    d, _ = corpus
    text = (d / "recorded/two-events-clocks.default.txt").read_text()
    b = parse_text(text)
    assert b.events == ["cpu-clock", "task-clock"]
    c, note = pick_event(b)
    t, _ = pick_event(b, "task-clock")
    assert len(c) + len(t) == len(b) and len(c) > 0 and len(t) > 0 and "using cpu-clock" in note
    with pytest.raises(InputError, match="no samples of this event"):
        pick_event(b, "cycles")
    # an ingested profile of another event: the heatmap says hot-CPU marks are unavailable
    src = d / "recorded/two-events-faults.default.txt"
    store = str(tmp_path / "st")
    p = nodesleuth("profile", "ingest", str(src), "--store", store, "--event", "page-faults")
    assert p.returncode == 0 and "not a clock event" in p.stderr
    hm = json.loads(nodesleuth("heatmap", "--store", store, "--json").stdout)
    assert all(hc == [] for hc in hm["hot_cpus"]) and "unavailable" in hm["notes"][0]
    store2 = str(tmp_path / "st2")
    assert nodesleuth("profile", "ingest", str(d / "recorded/kernel-default-event.default.txt"), "--store",
                      store2).returncode == 0  # -a, cpu-clock: hot marks can be judged
    hm2 = json.loads(nodesleuth("heatmap", "--store", store2, "--json").stdout)
    assert hm2["notes"] == []


def test_continuous_profiler_records_a_clock_event():
    import glob
    import tempfile

    from nodesleuth.profile.runner import ProfileRunner

    scratch = os.path.join(tempfile.gettempdir(), "nodesleuth-profile-*")
    before = set(glob.glob(scratch))
    args = ProfileRunner(None).record_args()
    assert args[args.index("-e") + 1] == "cpu-clock"
    # pipe mode keeps nothing on disk: a runner that never ran leaves no scratch directory behind
    assert set(glob.glob(scratch)) == before


def test_preaggregated_ranges_equal_raw_samples(cap96, tmp_path):
    """Flame graphs and top functions served from the per-minute/hour aggregates (profile/agg.py) are
    exactly those of the raw samples, for aligned and unaligned ranges and with filters."""
    from nodesleuth.profile.agg import Aggregator
    from nodesleuth.profile.codec import encode
    from nodesleuth.profile.parse import parse_file
    from nodesleuth.profile.fastload import load_fast
    from nodesleuth.profile.folded import folded
    from nodesleuth.profile.load import load
    from nodesleuth.profile.samples import Filter
    from nodesleuth.profile.top import top_functions
    from nodesleuth.store.store import StoreReader, StoreWriter

    facts, _, path = cap96
    b = parse_file(path)
    # shift the 20 s capture so that it straddles an hour (and so a minute) boundary
    offset = (facts["t0"] // 3600 + 1) * 3600 - 10 - facts["t0"] + (facts["t0"] - min(b.times))
    st = str(tmp_path / "st")
    w = StoreWriter(st)
    agg = Aggregator(w.write)
    for lo in range(0, len(b), 7000):  # batches as the runner stores them
        part = b.only(b.events[0])
        for col in ("times", "cpus", "pids", "tids", "comm_ids", "stack_ids", "periods", "event_ids"):
            setattr(part, col, getattr(part, col)[lo:lo + 7000])
        w.append("profile", *encode(part, offset))
        agg.add(part, offset)
    agg.flush()
    w.close()
    r = StoreReader(st)
    assert r.segments("profile_agg60") and r.segments("profile_agg3600")
    t = min(b.times) + offset
    for lo, hi, f in ((None, None, Filter()), (t - 100, t + 100, Filter()), (t + 3.3, t + 17.9, Filter(cpus={39})),
                      (t + 10, t + 30, Filter(comms={"kworker/39:1"})), (t - 3600, t + 7200, Filter(cpus={5}))):
        raw, fast = load(r, lo, hi), load_fast(r, lo, hi, f.cpus)
        assert folded(fast, f) == folded(raw, f) and sum(folded(raw, f).values()) > 0
        assert top_functions(fast, f, n=5) == top_functions(raw, f, n=5)


@needs_root
@retry_when_busy()
def test_direct_reader_equals_full_perf_script(tmp_path, spin):
    """The default runner's reader (profile/perfdata.py: records read in Python, perf script asked once
    per distinct stack) stores exactly what the former path stored: the same samples with the same
    comm, pid, tid, cpu, time, period and stack (kernel and user frames, dso-named unknowns) as the
    chunked runner's full `perf script -F SCRIPT_FIELDS -i perf.data`, on one real recording of a
    pinned loop, a process that renames itself, threads and fork/exec churn."""
    from nodesleuth.profile.perfdata import ScriptNamer
    from nodesleuth.profile.runner import SCRIPT_FIELDS, ProfileRunner

    pipe = tmp_path / "pipe.data"
    rename = subprocess.Popen(["perl", "-e", '$t = time; 1 while time - $t < 1; $0 = "ns-renamed"; 1 while 1'],
                              preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    threads = subprocess.Popen([sys.executable, "-c", "import threading\n"
                                "def f():\n    while True: sum(range(1000))\n"
                                "for _ in range(3): threading.Thread(target=f, daemon=True).start()\n"
                                "import time; time.sleep(4)"])
    churn = subprocess.Popen(["sh", "-c", "while :; do /bin/true; ls / >/dev/null; done"])
    try:
        args = ProfileRunner(None, freq=499).record_args()
        with open(pipe, "wb") as out:
            subprocess.run(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "--no-bpf-event", "-m", "16", "-o", "-",
                            *args, "--", "sleep", "3"], stdout=out, stderr=subprocess.DEVNULL, check=True)
    finally:
        for p in (rename, threads, churn):
            p.kill()
            p.wait()
    # the former path: a perf.data file (perf inject writes the same records as a file) and one
    # full perf script over it, parsed by profile/parse.py
    full = tmp_path / "full.data"
    subprocess.run(["perf", "inject", "-i", "-", "-o", str(full)], stdin=open(pipe, "rb"), check=True)
    ref = parse_text(subprocess.run(["perf", "script", "-F", SCRIPT_FIELDS, "-i", str(full)], capture_output=True,
                                    check=True).stdout.decode(errors="replace"))
    # the new one, fed in pipe-sized pieces as the runner reads them, with perf script's answers
    # taken in between (so later stacks are named from addresses named before)
    namer = ScriptNamer("perf", subprocess.DEVNULL)
    s = namer.stream
    asked_pids: list[int] = []
    send = s._send
    s._send = lambda key, rec, out: (asked_pids.append(key[0]), send(key, rec, out))
    data = pipe.read_bytes()
    try:
        for i in range(0, len(data), 16384):
            s.feed(data[i:i + 16384])
            namer.answer(wait=5.0)
        s.flush()
        namer.close()
        namer.answer(wait=30.0)
    finally:
        namer.wait()
    got, dropped = s.take(final=True)

    def rows(b):
        return [(b.times[i], b.cpus[i], b.pids[i], b.tids[i], b.comms[b.comm_ids[i]], b.periods[i],
                 b.stacks[b.stack_ids[i]]) for i in range(len(b))]

    want = rows(ref)
    assert dropped == 0 and len(want) > 1000
    assert rows(got) == want
    assert ref.events == ["cpu-clock"] and got.event == "cpu-clock"
    # the recording has what makes this hard, and perf script was asked about few of the samples
    comms = {r[4] for r in want}
    assert {"ns-spin", "ns-renamed", "true", "ls"} <= comms, comms
    assert any("ns_spin_inner" in r[6] and "ns_spin_loop" in r[6] for r in want)
    assert any(f.endswith("_[k]") for r in want for f in r[6])
    assert len({r[3] for r in want if r[2] == threads.pid}) >= 3  # the threads, under their process
    # the pinned loop repeats a few stacks: perf script was asked about few of its samples (other
    # jobs on a shared host may have ever-new stacks, so only the loop's are counted)
    spin_n = sum(1 for r in want if r[2] == spin.pid)
    if spin_n <= 100:  # 3 s at 499 Hz is ~1,500 samples of a loop that has its CPU
        raise Busy(f"the pinned loop got {spin_n} samples of ~1,500: other jobs held its CPU")
    assert asked_pids.count(spin.pid) < spin_n / 10, (asked_pids.count(spin.pid), spin_n)
    assert s.forwarded_samples < len(want)

    # perf script falling behind (a busy host, a VM under emulation): the second half is fed with no
    # answer taken. Every sample is still stored, with the frames named so far and UNNAMED for the
    # rest, never dropped: the unnamed ones are the new stacks, so dropping them biases every share.
    from nodesleuth.profile.perfdata import UNNAMED

    namer = ScriptNamer("perf", subprocess.DEVNULL)
    s = namer.stream
    half = len(data) // 2
    try:
        for i in range(0, len(data), 16384):
            s.feed(data[i:i + 16384])
            if i < half:
                namer.answer(wait=5.0)
        s.flush()
        got, unnamed = s.take(final=True)
    finally:
        namer.proc.kill()
        namer.wait()
    rows2 = rows(got)
    assert len(rows2) == len(want) and [r[:6] for r in rows2] == [r[:6] for r in want]
    partial = [(g[6], w[6]) for g, w in zip(rows2, want) if any(f.startswith(UNNAMED) for f in g[6])]
    assert unnamed == len(partial) > 0
    for g, w in partial:
        if len(g) == 1:  # sent whole to perf script: only its context is known
            assert g[0] in (UNNAMED, UNNAMED + "_[k]"), g
            continue
        assert len(g) == len(w), (g, w)
        for a, b in zip(g, w):  # a named frame is the true one; an unnamed kernel address stays kernel
            # (a user-context one may be in [vdso], which perf script's names mark as kernel too)
            assert a == b if not a.startswith(UNNAMED) else b.endswith("_[k]") or not a.endswith("_[k]"), (a, b)
    assert any(len(g) > 1 and not all(f.startswith(UNNAMED) for f in g) for g, _ in partial)  # named in part


def test_direct_reader_rejects_what_is_not_perfs_pipe_format(tmp_path):
    """A file-mode perf.data or any other bytes on the pipe: a one-line error naming the input."""
    from nodesleuth.profile.perfdata import PerfStream

    s = PerfStream(lambda b: None)
    with pytest.raises(InputError, match="not perf's pipe format"):
        s.feed(b"PERFILE2" + (104).to_bytes(8, "little"))  # a perf.data file's header: size 104, not 16
    s = PerfStream(lambda b: None)
    with pytest.raises(InputError, match="before any event attribute"):
        s.feed(b"PERFILE2" + (16).to_bytes(8, "little") + (9).to_bytes(4, "little") + b"\0\0" + (8).to_bytes(2, "little"))


def test_long_batches_are_stored_in_pieces_a_later_range_finds(corpus, tmp_path):
    """A batch can cover far more than one rotation: perf did not rotate (seen in a 6.12 VM: one
    280 s chunk), stacks waited to be named, or `profile ingest` of a long file. Stored whole, it is
    stamped with its first sample, and a range late in it found nothing (explain then said "no
    profile" of a core that was sampled 490 times in those 10 s)."""
    from nodesleuth.profile.codec import Decoded, encode, encode_pieces
    from nodesleuth.profile.load import assemble

    d, _ = corpus
    b = parse_file(str(d / "recorded" / "mix-cpuclock.header.txt"))  # 401 real samples over 7.6 s
    pieces = encode_pieces(b, 100.0, span=2.0)
    assert len(pieces) == 4
    got = []
    for t0, payload in pieces:
        dec = Decoded(payload)
        s = assemble([dec])
        assert s.t.max() - s.t.min() < 2.0 and abs(s.t.min() - t0) < 1e-6
        assert len(s.stacks) <= len(set(s.stack.tolist()))  # each piece keeps only the stacks it uses
        got += [(round(t, 6), c, p, s.stacks[k]) for t, c, p, k in zip(s.t.tolist(), s.cpu.tolist(),
                                                                       s.pid.tolist(), s.stack.tolist())]
    w = assemble([Decoded(encode(b, 100.0)[1])])  # the same batch stored whole
    want = [(round(t, 6), c, p, w.stacks[k]) for t, c, p, k in zip(w.t.tolist(), w.cpu.tolist(), w.pid.tolist(),
                                                                  w.stack.tolist())]
    assert len(want) == len(b) == 401
    assert sorted(got) == sorted(want)


@pytest.mark.slow
@needs_root
def test_ingest_of_a_long_recording_answers_its_last_seconds(tmp_path, spin):
    """A real 40 s `perf record` ingested in one go: the flame graph of its last 5 s has the busy loop."""
    data, txt = tmp_path / "perf.data", tmp_path / "perf.txt"
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "19", "-a", "-g", "-k", "CLOCK_MONOTONIC",
                    "-o", str(data), "--", "sleep", "40"], check=True, capture_output=True, timeout=120)
    with open(txt, "w") as f:
        subprocess.run(["perf", "script", "-F", "comm,pid,tid,cpu,time,period,event,ip,sym,dso", "-i", str(data)],
                       check=True, stdout=f, stderr=subprocess.DEVNULL, timeout=300)
    store = str(tmp_path / "st")
    p = nodesleuth("profile", "ingest", str(txt), "--store", store)
    assert p.returncode == 0, p.stderr
    b = parse_file(str(txt))
    assert max(b.times) - min(b.times) > 35
    from nodesleuth.profile.load import load
    from nodesleuth.store.store import StoreReader

    whole = load(StoreReader(store), None, None)
    assert len(whole) == len(b)
    t1 = float(whole.t.max())
    last = load(StoreReader(store), t1 - 5, t1 + 0.001)
    assert int(((last.t >= t1 - 5)).sum()) == int((whole.t >= t1 - 5).sum()) > 0
    assert "ns-spin" in {last.comms[c] for c in last.comm[last.t >= t1 - 5].tolist()}


@needs_root
def test_samples_perf_lost_are_counted_as_perf_counts_them(tmp_path):
    """A perf that cannot drain its rings (here: perf record stopped with SIGSTOP for 1.5 s while the
    kernel samples both CPUs at 4 kHz into 1-page rings) loses samples. The direct reader counts them
    from perf's PERF_RECORD_LOST records, per CPU, as `perf script --show-lost-events` prints them, so
    the store and explain can say a window's profile is incomplete (never a silently thinner one)."""
    import signal

    from nodesleuth.profile.perfdata import PerfStream

    data = tmp_path / "lost.data"
    with open(data, "wb") as out:
        p = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "--no-bpf-event", "-m", "1", "-e",
                              "cpu-clock", "-F", "4000", "-g", "-a", "-o", "-", "--", "sleep", "4"],
                             stdout=out, stderr=subprocess.DEVNULL)
        try:
            # perf execs its workload once its events are on: stopped before that, it loses nothing
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and p.poll() is None and not subprocess.run(
                    ["pgrep", "-P", str(p.pid), "-x", "sleep"], capture_output=True).stdout.strip():
                time.sleep(0.1)
            time.sleep(0.5)
            os.kill(p.pid, signal.SIGSTOP)
            time.sleep(1.5)
        finally:
            os.kill(p.pid, signal.SIGCONT)
            p.wait(timeout=60)
    out = subprocess.run(["perf", "script", "--show-lost-events", "-F", "cpu", "-i", str(data)],
                         capture_output=True, text=True).stdout
    want = [(int(m.group(1)), int(m.group(2))) for m in re.finditer(r"\[(\d+)\] PERF_RECORD_LOST lost (\d+)", out)]
    assert want and sum(n for _, n in want) > 100, out[-300:]  # 1.5 s x 4 kHz per CPU could not be kept
    s = PerfStream(lambda b: None)
    raw = data.read_bytes()
    for i in range(0, len(raw), 65536):
        s.feed(raw[i:i + 65536])
    s.flush()
    got = sorted((cpu, n) for _, cpu, n in s.lost)
    assert got == sorted(want) and sum(n for _, n in got) > 0


@pytest.mark.slow
@needs_root
def test_profile_run_stops_on_its_duration_and_on_signals(tmp_path, spin):
    """`profile run --method perf` sleeps until its duration ends or SIGTERM/SIGINT arrive (no polling loop:
    it cost a fifth of the profiler's steady CPU at 49 Hz), then stores what perf wrote and leaves no
    perf (the direct reader: test_profile_direct.py)."""
    def run(name, sig=None):
        st = str(tmp_path / name)
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "profile", "run", "--store", st, "--rotate", "2",
                              "--method", "perf"] + ([] if sig else ["--duration", "5s"]), stderr=subprocess.PIPE,
                             text=True)
        perf = []
        while time.monotonic() - t0 < 30 and len(perf) < 2:  # perf record and perf script
            time.sleep(0.2)
            perf = [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid), "-x", "perf"], capture_output=True,
                                                   text=True).stdout.split()]
            perf += [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid), "-x", "stdbuf"], capture_output=True,
                                                    text=True).stdout.split()]
        assert perf, "perf was not started"
        if sig:
            time.sleep(4.0)
            p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 0, err
        m = re.search(r"(\d+) samples in \d+ chunks", err)
        assert m and int(m.group(1)) > 0, err
        for x in perf:
            assert not os.path.exists(f"/proc/{x}") or open(f"/proc/{x}/stat").read().split()[2] == "Z"
        out = nodesleuth("flame", "--store", st, "--pid", str(spin.pid), "--format", "folded").stdout
        assert "ns_spin_inner" in out
        return took

    took = run("duration")
    assert took >= 5.0  # the duration, not cut short
    for sig in (signal.SIGTERM, signal.SIGINT):
        run(sig.name, sig)
