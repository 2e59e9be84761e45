"""Exports the profiling ecosystem reads, and the CLI views of a profile, on the 96-CPU capture
(CPU 39 in the kernel's memcg walk for 5 s): pprof read by Debian's `go tool pprof`, speedscope per
CPU and per process, collapsed-with-CPU, the interactive SVG; heatmap time labels; top-functions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import missing, nodesleuth
from fixtures.perfscript import make_capture


@pytest.fixture(scope="module")
def cap(tmp_path_factory):
    d = tmp_path_factory.mktemp("exports")
    path = str(d / "cap.txt")
    facts = make_capture(path)
    store = str(d / "st")
    p = nodesleuth("profile", "ingest", path, "--store", store)
    assert p.returncode == 0, p.stderr
    hot = ["--from", str(facts["hot_from"]), "--to", str(facts["hot_to"])]
    return facts, store, hot, d


def test_pprof_read_by_go_tool_pprof(cap):
    if not shutil.which("go"):
        missing("Debian's golang-go is not installed (scripts/setup-tests.sh)")
    facts, store, hot, d = cap
    out = str(d / "cpu39.pb.gz")
    p = nodesleuth("flame", "--store", store, "--cpu", "39", *hot, "-o", out)
    assert p.returncode == 0, p.stderr
    with open(out, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"  # gzip, as profile.proto prescribes
    top = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=samples", out], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "HOME": str(d)})
    assert top.returncode == 0, top.stderr
    rows = [ln.split() for ln in top.stdout.splitlines() if re.match(r"\s*\d+\s+[\d.]+%", ln)]
    assert rows[0][-1] == "mem_cgroup_nr_lru_pages", top.stdout  # the top function by flat samples
    assert int(rows[0][0]) >= 0.9 * facts["hot_samples"]
    # the default sample type is CPU time: samples / 49 Hz
    cpu_t = subprocess.run(["go", "tool", "pprof", "-top", out], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "HOME": str(d)}).stdout
    m = re.search(r"^\s*([\d.]+)(ms|s)\s.*mem_cgroup_nr_lru_pages$", cpu_t, re.M)
    assert "Type: cpu" in cpu_t and m, cpu_t
    secs = float(m[1]) / (1000 if m[2] == "ms" else 1)
    assert abs(secs - int(rows[0][0]) / 49) < 0.01
    # labels let pprof narrow by pid: only the kubelet (pid 2345) is left
    tag = subprocess.run(["go", "tool", "pprof", "-top", "-tagfocus", "pid=2345", out], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "HOME": str(d)})
    assert "mem_cgroup_nr_lru_pages" in tag.stdout and "process_one_work" not in tag.stdout


def test_speedscope_per_cpu_and_per_process(cap):
    facts, store, hot, _ = cap
    by_cpu = json.loads(nodesleuth("flame", "--store", store, *hot, "--format", "speedscope").stdout)
    names = [p["name"] for p in by_cpu["profiles"]]
    assert "CPU 39" in names and by_cpu["profiles"][by_cpu["activeProfileIndex"]]["name"] == "CPU 39"
    by_proc = json.loads(nodesleuth("flame", "--store", store, *hot, "--format", "speedscope-process").stdout)
    pnames = [p["name"] for p in by_proc["profiles"]]
    assert any(n.endswith("[2345]") for n in pnames)
    frames = [f["name"] for f in by_proc["shared"]["frames"]]
    kub = next(p for p in by_proc["profiles"] if p["name"].endswith("[2345]"))
    assert sum(kub["weights"]) >= 0.9 * facts["hot_samples"]
    assert frames[kub["samples"][0][-1]] == "mem_cgroup_nr_lru_pages_[k]"


def test_collapsed_with_cpu(cap):
    facts, store, hot, _ = cap
    text = nodesleuth("flame", "--store", store, *hot, "--format", "collapsed-cpu").stdout
    per_cpu: dict[str, int] = {}
    for ln in text.splitlines():
        stack, n = ln.rsplit(" ", 1)
        per_cpu[stack.split(";")[0]] = per_cpu.get(stack.split(";")[0], 0) + int(n)
    assert all(k.startswith("cpu_") for k in per_cpu)
    assert max(per_cpu, key=per_cpu.get) == "cpu_39"
    assert any(ln.startswith("cpu_39;") and "mem_cgroup_nr_lru_pages_[k]" in ln for ln in text.splitlines())


def test_svg_is_interactive_bounded_and_diff_coloured(cap, tmp_path):
    facts, store, hot, _ = cap
    out = str(tmp_path / "f.svg")
    assert nodesleuth("flame", "--store", store, *hot, "--cpu", "39", "--max-depth", "6", "-o", out).returncode == 0
    root = ET.parse(out).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    assert root.find(f"{ns}script") is not None and "function search(" in root.find(f"{ns}script").text
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    assert {"search", "unzoom", "details", "matched", "frames"} <= ids
    frames = root.find(f".//{ns}g[@id='frames']")
    assert max(int(g.get("data-l")) for g in frames) <= 6  # all + 6 frames at most
    assert int(root.get("height")) < 16 * 8 + 150
    notes = next(e for e in root.iter(f"{ns}text") if e.get("id") == "notes").text
    assert "deeper than 6 frames" in notes
    # diff against a quiet window: CPU 39's memcg walk is new there, so it is solid red
    diff = str(tmp_path / "d.svg")
    base = f"{facts['t0'] + 1}..{facts['t0'] + 6}"
    assert nodesleuth("flame", "--store", store, *hot, "--cpu", "39", "--diff-baseline", base, "-o", diff).returncode == 0
    g = {e.get("data-name"): e for e in ET.parse(diff).getroot().iter(f"{ns}g") if e.get("class") == "f"}
    assert g["mem_cgroup_nr_lru_pages_[k]"].find(f"{ns}rect").get("fill") == "rgb(220,0,0)"
    gone = [e for e in g.values() if e.get("data-gone")]
    assert gone and all(e.find(f"{ns}rect").get("fill") == "url(#gone)" for e in gone)


def test_heatmap_prints_wall_clock_labels(cap):
    facts, store, _, _ = cap
    t0 = facts["t0"]
    p = nodesleuth("heatmap", "--store", store, "--cpu", "39", "--from", str(t0), "--to", str(t0 + 20), "--rows", "10")
    assert p.returncode == 0, p.stderr
    from datetime import datetime, timezone

    hms = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")  # noqa: E731
    lines = p.stdout.splitlines()
    assert lines[1].split() == [hms(t0), hms(t0 + 10)]
    assert lines[2].index("|") == lines[3].index("|") + 1  # the tick sits over the first column
    hot = [hms(t0 + s) for s in range(8, 13)]
    assert lines[-1] == "hot CPUs (>= 90% busy) per second: " + "; ".join(f"{h} CPU 39" for h in hot)


def test_top_functions_user_and_kernel_marked(cap):
    facts, store, hot, _ = cap
    p = nodesleuth("top-functions", "--store", store, *hot, "-n", "40")
    rows = {}
    for ln in p.stdout.splitlines():
        cells = [c.strip() for c in ln.split("│")[1:-1]]
        if len(cells) == 6:
            rows[cells[0]] = cells
    assert rows["mem_cgroup_nr_lru_pages"][1] == "kernel"
    assert any(c[1] == "user" for c in rows.values())
    share = re.search(r"([\d.]+)% in the kernel, ([\d.]+)% in user space", p.stdout)
    assert share and abs(float(share[1]) + float(share[2]) - 100) < 0.2 and float(share[2]) > 50
    k = json.loads(nodesleuth("top-functions", "--store", store, *hot, "--kernel-only", "--json").stdout)
    assert k and all(r["kernel"] for r in k)
    both = json.loads(nodesleuth("top-functions", "--store", store, *hot, "--json", "-n", "50").stdout)
    assert any(not r["kernel"] for r in both)
