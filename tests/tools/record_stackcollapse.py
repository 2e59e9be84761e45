"""Re-record stackcollapse-perf.pl's outputs that tests/test_profile.py compares nodesleuth with.

FlameGraph's stackcollapse-perf.pl (CDDL-1.0) is in none of this machine's registries (PyPI, Debian,
npm) and its code is not kept in this repository; bring your own copy:

    git clone https://github.com/brendangregg/FlameGraph /tmp/FlameGraph
    git -C /tmp/FlameGraph checkout 778d6d4b7b75e7b960f39c6f05b658b1a75d4fa3
    python tests/tools/record_stackcollapse.py /tmp/FlameGraph/stackcollapse-perf.pl

It runs the `stackcollapse`-marked tests of tests/test_profile.py with the real script: each
`_stackcollapse(text, *opts, src=...)` call runs `perl SCRIPT OPTS < text` (record() below) and the tests
must pass against it; every (input, options) pair the tests feed is written, with the input's sha256 and
the command, to tests/data/perf-script/stackcollapse-outputs.tar.xz (manifest.json + outputs/) and
tests/data/perf-script/stackcollapse-outputs.md (provenance, one row per output).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "perf-script")
KNOWN_COMMIT = "778d6d4b7b75e7b960f39c6f05b658b1a75d4fa3"
KNOWN_SHA256 = "0e04526d53cbce26d6e61c4567232f6e5da638310d472306c2b28fab7037ce70"  # that commit's file, 13,570 B
ENTRIES = "entries.jsonl"

ABOUT_COMMIT = f"""\
The script recorded from is github.com/brendangregg/FlameGraph, path `stackcollapse-perf.pl`, commit
{KNOWN_COMMIT} (13,570 bytes, sha256 {KNOWN_SHA256}), as stored in a public copy of
that repository. That commit is on the branch of FlameGraph PR #257 (`--no-aggregate-stacks`); apart from
that option it equals master (checked against the fork Thaumy/FlameGraph@ca26a741, master-equivalent:
identical output on all 189 corpus runs). Licence of the script: CDDL-1.0 (Common Development and
Distribution License 1.0), Copyright 2012 Joyent, Inc. and Brendan Gregg
(https://opensource.org/licenses/CDDL-1.0). Only its outputs are kept here, not its code."""


def key(name: str, opts) -> str:
    """Lookup key of one output: the input's path in corpus.tar.xz and the options, as given."""
    return " ".join([name, *opts])


def record(name: str, data: bytes, opts, src, same_input) -> str:
    """Inside the tests: run the real script on `data` and keep its output under key(name, opts)."""
    script, out = os.environ["NODESLEUTH_STACKCOLLAPSE"], os.environ["NODESLEUTH_STACKCOLLAPSE_RECORD"]
    p = subprocess.run(["perl", script, *opts], input=data, capture_output=True)
    assert p.returncode == 0, p.stderr
    if data == src.read_bytes():
        how = "the file as stored"
    elif data == same_input(src.read_text(errors="replace")).encode():
        how = "the file through tests/test_profile.py::_same_input"
    else:
        raise AssertionError(f"{name}: input is neither the file nor _same_input(file); say how it is made here")
    member = f"outputs/{name}/{'_'.join(opts) or 'no-options'}.folded"
    e = {"key": key(name, opts), "input": f"corpus.tar.xz:{name}, {how}", "options": list(opts),
         "input_sha256": hashlib.sha256(data).hexdigest(), "input_bytes": len(data),
         "command": " ".join(["perl stackcollapse-perf.pl", *opts, "<", "INPUT"]),
         "output": member, "output_sha256": hashlib.sha256(p.stdout).hexdigest(), "output_bytes": len(p.stdout)}
    os.makedirs(os.path.dirname(os.path.join(out, member)), exist_ok=True)
    with open(os.path.join(out, member), "wb") as f:
        f.write(p.stdout)
    with open(os.path.join(out, ENTRIES), "a") as f:
        f.write(json.dumps(e) + "\n")
    return p.stdout.decode()


def _add(t: tarfile.TarFile, name: str, data: bytes) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), 0, 0o644
    t.addfile(ti, io.BytesIO(data))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("script", help="path to FlameGraph's stackcollapse-perf.pl")
    ap.add_argument("--out", default=os.path.join(DATA, "stackcollapse-outputs.tar.xz"))
    a = ap.parse_args(argv)
    script = os.path.abspath(a.script)
    if not os.path.isfile(script):
        print(f"record_stackcollapse: {a.script}: no such file", file=sys.stderr)
        return 2
    body = open(script, "rb").read()
    sha = hashlib.sha256(body).hexdigest()
    if sha != KNOWN_SHA256:
        print(f"record_stackcollapse: note: {a.script} (sha256 {sha}) is not commit {KNOWN_COMMIT}'s file; "
              "the provenance says which file was used", file=sys.stderr)
    perl = subprocess.run(["perl", "-e", "print $^V"], capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NODESLEUTH_STACKCOLLAPSE=script, NODESLEUTH_STACKCOLLAPSE_RECORD=d,
                   PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), os.environ.get("PYTHONPATH", "")]))
        junit = os.path.join(d, "junit.xml")
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "stackcollapse",
                            f"--junitxml={junit}", os.path.join(ROOT, "tests", "test_profile.py")], cwd=ROOT, env=env)
        # the exit status also counts processes other jobs on this machine start meanwhile (conftest's
        # leak check): the tests' own outcome is read from the report
        suite = ET.parse(junit).getroot().find("testsuite") if os.path.exists(junit) else None
        if suite is None or int(suite.get("tests", 0)) == 0 or any(
                int(suite.get(k, 0)) for k in ("failures", "errors")) or int(suite.get("skipped", 0)):
            print("record_stackcollapse: the tests failed against the real script; nothing recorded", file=sys.stderr)
            return 1
        if p.returncode != 0:
            print(f"record_stackcollapse: note: pytest exited {p.returncode} with every test passed (see its LEAK "
                  "line)", file=sys.stderr)
        entries: dict[str, dict] = {}
        with open(os.path.join(d, ENTRIES)) as f:
            for ln in f:
                e = json.loads(ln)
                if e["key"] in entries and entries[e["key"]]["input_sha256"] != e["input_sha256"]:
                    print(f"record_stackcollapse: {e['key']}: two different inputs under one key", file=sys.stderr)
                    return 1
                entries[e["key"]] = e
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        machine = " ".join(platform.uname()[i] for i in (0, 2, 4)) + f", {platform.freedesktop_os_release().get('PRETTY_NAME', '')}"
        manifest = {"produced": when, "machine": machine, "perl": perl, "script_sha256": sha,
                    "script_bytes": len(body), "script": f"github.com/brendangregg/FlameGraph commit {KNOWN_COMMIT}"
                    if sha == KNOWN_SHA256 else f"a stackcollapse-perf.pl with sha256 {sha}",
                    "about": ABOUT_COMMIT, "outputs": [entries[k] for k in sorted(entries)]}
        with tarfile.open(a.out, "w:xz") as t:
            _add(t, "manifest.json", json.dumps(manifest, indent=1).encode())
            for k in sorted(entries):
                _add(t, entries[k]["output"], open(os.path.join(d, entries[k]["output"]), "rb").read())
    md = os.path.splitext(os.path.splitext(a.out)[0])[0] + ".md"
    with open(md, "w") as f:
        f.write(f"# stackcollapse-perf.pl's recorded outputs ({os.path.basename(a.out)})\n\n"
                f"Produced on {when} on this machine ({machine}) with perl {perl} by\n"
                f"`python tests/tools/record_stackcollapse.py PATH/stackcollapse-perf.pl`, which ran the\n"
                f"`stackcollapse`-marked tests of tests/test_profile.py with the real script (they passed) and kept\n"
                f"each output it gave. Script used: {manifest['script']} (sha256 {sha}, {len(body)} bytes).\n\n"
                f"{ABOUT_COMMIT}\n\n"
                "tests/test_profile.py `_stackcollapse(text, *opts, src=...)` finds an output by key (the input's\n"
                "path in corpus.tar.xz and the options) and fails when the input's sha256 is not the recorded\n"
                "one: re-record after changing an input. INPUT in each command is the input named in its row,\n"
                "fed on stdin as UTF-8. The archive's manifest.json holds the same rows and each output's sha256.\n\n"
                "| key | input | input sha256 | command | output bytes |\n|---|---|---|---|---|\n")
        for k in sorted(entries):
            e = entries[k]
            f.write(f"| `{k}` | {e['input']} | `{e['input_sha256']}` | `{e['command']}` | {e['output_bytes']} |\n")
    print(f"recorded {len(entries)} outputs in {a.out} and {md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
