"""perf script text cut short, on real output recorded here (tests/data/perf-script/cut/busy.default.txt: `perf
record -g` of a two-thread C loop, its .cmd sidecar says how), cut the ways files are cut: in the middle of the
last line (a killed `perf script`, a full disk, `head -c`), exactly before the last newline, and every line cut
at 64 characters (a pipeline that truncates long lines, as coreutils `cut -c -64`).

What FlameGraph's stackcollapse-perf.pl (commit 778d6d4, the one tests/test_profile.py compares with) does with
these, read from its source: a frame line must match `^\\s*(\\w+)\\s*(.+) \\((.*)\\)`, so a line cut inside its
`(dso)` column has no closing paren and is dropped with "Unrecognized line"; a sample is stored only at the blank
line after it, so a file that does not end with one loses its last sample (FlameGraph issue #230). Its outputs
over these inputs were recorded with the real script (tests/data/perf-script/cut/stackcollapse.json; re-record:
NODESLEUTH_STACKCOLLAPSE=PATH/stackcollapse-perf.pl pytest tests/test_cut_input.py).

nodesleuth drops a cut frame line the same way (never a `start_thread ` frame with a trailing space); drops a last
sample cut inside a line, and says so; reads a last sample whose final line is whole and lacks only its newline
(stackcollapse-perf.pl's #230 drops it: the one difference, on purpose); refuses a file whose only sample is cut,
blaming the cut sample; and `profile ingest` of a file with no samples is one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import missing, needs_root, nodesleuth

HERE = os.path.dirname(os.path.abspath(__file__))
CUT = os.path.join(HERE, "data", "perf-script", "cut")
REF = os.path.join(CUT, "stackcollapse.json")


def _full() -> str:
    with open(os.path.join(CUT, "busy.default.txt")) as f:
        return f.read()


def _samples(text: str) -> list[str]:
    return [b for b in text.split("\n\n") if b.strip()]


def variants() -> dict[str, str]:
    """The cut inputs, made from the recording the same way every time."""
    full = _full()
    first = _samples(full)[0] + "\n\n"
    last_line = first.rstrip("\n").rsplit("\n", 1)[-1]
    assert "start_thread" in last_line and "(/usr/lib/x86_64-linux-gnu/libc.so.6)" in last_line
    mid_path = last_line.index("/x86_64-linux-gnu") + len("/x86_64-linux-gnu")  # `start_thread+0x305 (/usr/lib/x86_64-linux-gnu`
    head = first[:len(first.rstrip("\n")) - len(last_line)]
    tail_at = full.rstrip("\n").rindex("(/usr/lib/x86_64-linux-gnu/libc.so.6)") + len("(/usr/lib/x86_64-linux-gnu")
    return {
        "only-sample-cut-mid-path": head + last_line[:mid_path],
        "only-sample-without-newline": first.rstrip("\n"),
        "file-cut-mid-path": full[:tail_at],
        "lines-cut-at-64": "".join(ln[:64] + "\n" for ln in full.split("\n")[:-1]),
        "whole": full,
    }


def _stackcollapse(name: str, text: str) -> str:
    """stackcollapse-perf.pl's output for a variant: recorded (and the input's sha256 checked), or, with
    NODESLEUTH_STACKCOLLAPSE set, run now and recorded."""
    sha = hashlib.sha256(text.encode()).hexdigest()
    script = os.environ.get("NODESLEUTH_STACKCOLLAPSE")
    doc = json.load(open(REF)) if os.path.exists(REF) else {"outputs": {}}
    if script:
        p = subprocess.run(["perl", script], input=text.encode(), capture_output=True)
        assert p.returncode == 0, p.stderr
        with open(script, "rb") as f:
            s_sha = hashlib.sha256(f.read()).hexdigest()
        perl = subprocess.run(["perl", "-e", "print $^V"], capture_output=True, text=True).stdout
        doc["script"] = {"repository": "github.com/brendangregg/FlameGraph", "path": "stackcollapse-perf.pl",
                         "commit": "778d6d4b7b75e7b960f39c6f05b658b1a75d4fa3" if s_sha.startswith("0e04526d") else "?",
                         "sha256": s_sha, "perl": perl, "licence": "CDDL-1.0 (only its outputs are kept here)"}
        doc["outputs"][name] = {"input": f"tests/test_cut_input.py variants()[{name!r}] of busy.default.txt",
                                "input_sha256": sha, "command": "perl stackcollapse-perf.pl < INPUT",
                                "stdout": p.stdout.decode(),
                                "stderr": sorted(set(re.sub(r" at \S+ line \d+.*", "", ln)
                                                     for ln in p.stderr.decode().splitlines()))}
        with open(REF, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
    e = doc["outputs"].get(name)
    assert e is not None, f"no recorded stackcollapse-perf.pl output for {name}: re-record (see the module doc)"
    assert e["input_sha256"] == sha, f"{name} changed since its stackcollapse-perf.pl output was recorded"
    return e["stdout"]


def _fold(text: str) -> tuple[str, object]:
    """nodesleuth's folded output (as `flame --format folded --idle --weight period --annotate none`)."""
    from nodesleuth.profile.codec import Decoded, encode
    from nodesleuth.profile.parse import parse_text, pick_event
    from nodesleuth.profile.folded import folded, folded_text
    from nodesleuth.profile.load import assemble
    from nodesleuth.profile.samples import Filter

    b, _ = pick_event(parse_text(text), None)
    if not len(b):
        return "", b
    s = assemble([Decoded(encode(b)[1])])
    return folded_text(folded(s, Filter(keep_idle=True), weight="period", annotate="none")), b


@pytest.mark.parametrize("name", ["file-cut-mid-path", "lines-cut-at-64", "whole"])
def test_folded_like_stackcollapse_on_cut_input(name):
    text = variants()[name]
    mine, b = _fold(text)
    assert mine == _stackcollapse(name, text)
    assert not any(f != f.strip() or "(" in f for st in b.stacks for f in st), "a cut frame was kept"


def test_a_frame_cut_mid_path_is_dropped_not_kept_with_a_trailing_space():
    """Every line at 64 characters: the frames whose `(dso)` lost its closing paren are gone (stackcollapse-perf.pl
    warns "Unrecognized line" for each and drops it), the samples stay with the frames that were whole."""
    text = variants()["lines-cut-at-64"]
    cut = [ln for ln in text.splitlines() if ln[:1] == "\t" and " (" in ln and not ln.endswith(")")]
    assert any("start_thread" in ln for ln in cut)  # e.g. `	           891f5 start_thread+0x305 (/usr/lib/x86_64-lin`
    mine, b = _fold(text)
    assert len(b) == len(_samples(_full())) and b.skipped == 0
    assert not any(f.startswith("start_thread") for st in b.stacks for f in st)
    assert all(" " not in f for st in b.stacks for f in st)
    ref = json.load(open(REF))["outputs"]["lines-cut-at-64"]
    assert any(w.startswith("Unrecognized line: \t") for w in ref["stderr"])  # what the script said of those lines


def test_the_last_sample_cut_mid_line_is_dropped_and_said():
    from nodesleuth.profile.parse import parse_text

    text = variants()["file-cut-mid-path"]
    b = parse_text(text)
    assert len(b) == len(_samples(_full())) - 1 and b.skipped == 1
    assert b.cut is not None and b.cut.endswith("(/usr/lib/x86_64-linux-gnu")


def test_only_sample_without_its_newline_is_read(tmp_path):
    """Its last frame is whole; only the newline (and the blank line) is missing: read, as one that has them.
    stackcollapse-perf.pl stores a sample at the blank line after it, so it prints nothing here (#230)."""
    text = variants()["only-sample-without-newline"]
    path = tmp_path / "one.txt"
    path.write_text(text)
    p = nodesleuth("profile", "ingest", str(path), "--store", str(tmp_path / "st"))
    assert p.returncode == 0 and "1 samples, 1 unique stacks, 0 skipped" in p.stderr, p.stderr
    out = nodesleuth("flame", "--store", str(tmp_path / "st"), "--annotate", "none", "--weight", "period")
    assert out.returncode == 0 and out.stdout == _fold(text + "\n\n")[0], out.stdout
    assert out.stdout.startswith("busy;start_thread;worker;") and out.stdout.endswith(" 10101010\n")
    assert _stackcollapse("only-sample-without-newline", text) == ""


def test_only_sample_cut_mid_path_is_refused_blaming_the_cut(tmp_path):
    text = variants()["only-sample-cut-mid-path"]
    path = tmp_path / "cut.txt"
    path.write_text(text)
    p = nodesleuth("profile", "ingest", str(path), "--store", str(tmp_path / "st"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"nodesleuth: error: {path}: its only sample is cut short: the file ends inside it, "
                               "in the middle of the line '891f5 start_thread+0x305 (/usr/lib/x86_64-linux-gnu' (no newline)"), p.stderr
    assert "expected 'comm pid/tid" not in p.stderr  # the header is fine: the sample was cut
    assert _stackcollapse("only-sample-cut-mid-path", text) == ""


@pytest.mark.parametrize("content,says", [
    ("", "empty: no perf script samples (perf script printed nothing: did perf record capture any?)"),
    ("# ========\n# captured on    : Thu Dec  3 08:33:10 2026\n# ========\n#\n",
     "only perf's header ('#' lines), no samples: the recording holds none"),
    ("hello\nworld\n", "no perf script samples found (expected 'comm pid/tid [cpu] time: ...' lines)"),
])
def test_ingest_of_no_samples_is_one_line_and_exit_2(tmp_path, content, says):
    """The user asked to store samples: a file with none is an error, not exit 0 followed by a failing `flame`."""
    path = tmp_path / "in.txt"
    path.write_text(content)
    store = tmp_path / "st"
    p = nodesleuth("profile", "ingest", str(path), "--store", str(store))
    assert p.returncode == 2 and p.stderr == f"nodesleuth: error: {path}: {says}\n", p.stderr
    assert not store.exists()  # nothing half-made


@needs_root
def test_cut_live_recording(tmp_path):
    """The same on a recording made now: `perf record -g` of this Python, `perf script`, cut in the middle of a
    `(dso)` path: the cut frame is dropped, the sample before it kept whole, and no frame has a trailing space."""
    import shutil

    if not shutil.which("perf"):
        missing("perf is not installed")
    data = str(tmp_path / "p.data")
    rec = subprocess.run(["perf", "record", "-q", "-g", "-F", "199", "-o", data, "--", sys.executable, "-c",
                          "import hashlib\nfor i in range(200000): hashlib.sha256(b'x' * 512).digest()"],
                         capture_output=True, text=True, timeout=120)
    assert rec.returncode == 0, rec.stderr
    text = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True, timeout=120).stdout
    k = text.rfind(" (/")
    assert k > 0, text[:500]
    cut = text[:k + 5]  # ` (/us` or the like: inside the last (dso) column
    from nodesleuth.profile.parse import parse_text

    whole, b = parse_text(text), parse_text(cut)
    assert len(b) == len(whole) - 1 and b.skipped == 1 and b.cut.endswith(text[k:k + 5])
    assert not any(f != f.strip() for st in b.stacks for f in st)
    lines = cut.split("\n")
    lines.insert(len(lines) - 1, lines[-1])  # the cut line, then the rest of the file as if a line were truncated
    mid = "\n".join(lines[:-1]) + "\n" + text[k + 5:].split("\n", 1)[1]
    m = parse_text(mid)
    assert len(m) == len(whole) and not any("(" in f or f != f.strip() for st in m.stacks for f in st)
