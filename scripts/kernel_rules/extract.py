"""Writes scripts/kernel_rules/inputs.json.gz: every printk format the kernel-log rules were read from (format, call,
file, function, versions, refs), each with the code around it (the lines before and after the printk, from the
pinned Debian kernel source packages this script fetches), from which build.py reads the path class of each rule.

    python3 scripts/kernel_rules/extract.py SRCDIR [--from-rules]

SRCDIR holds (or receives) the pinned Debian packages, fetched with apt-get (Debian's archive, no other source):
    linux-source-6.1=6.1.176-1, linux-source-6.12=6.12.117-1~deb12u1
Only the files the formats cite are unpacked. The formats themselves (file, function, versions, refs) were read by
issue 28's extraction from linux-source 5.10.223/6.1.176/6.12.117/7.2.13 and git snapshots of 4.4/4.19 and
amzn-drivers; that extraction's own files were lost, and its facts survive per rule in kernel-net.json ("formats"):
--from-rules recovers them from there (that is how inputs.json.gz was made; see README.md). The code context comes
from the two packages Debian's archive still serves (5.10.223 and 7.2.13 are no longer in it); a format cited only
in other trees keeps an empty context and is classified from its function and text.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RULES = os.path.join(ROOT, "src", "nodesleuth", "rules", "kernel-net.json")
INPUTS = os.path.join(HERE, "inputs.json.gz")
PACKAGES = {"6.1": ("linux-source-6.1", "6.1.176-1"), "6.12": ("linux-source-6.12", "6.12.117-1~deb12u1")}
REF = re.compile(r"^Debian linux-source-(?P<v>[\d.]+) \((?P<full>[\d.]+)\) (?P<path>\S+):(?P<line>\d+)")
BEFORE, AFTER = 12, 6  # lines of code kept around each printk


def key(f: dict) -> str:
    return json.dumps([f["format"], f["call"], f["file"], f["function"], f["versions"], f["refs"], f["from"]])


def recover_formats() -> list[dict]:
    """The distinct format entries of the committed rules, in order of first appearance."""
    seen: dict[str, dict] = {}
    for r in json.load(open(RULES, encoding="utf-8"))["rules"]:
        for f in r["x-nodesleuth"]["formats"]:
            f = {k: v for k, v in f.items() if k not in ("path_class", "id")}
            seen.setdefault(key(f), f)
    return list(seen.values())


def fetch(srcdir: str, files: set[str]) -> dict[str, str]:
    """Unpacks the cited files of each pinned package under srcdir/<version>/; returns version -> tree."""
    trees = {}
    for v, (pkg, ver) in PACKAGES.items():
        tree = os.path.join(srcdir, v, f"linux-source-{v}")
        if not os.path.isdir(tree):
            deb = os.path.join(srcdir, f"{pkg}_{ver.replace(':', '%3a')}_all.deb")
            if not os.path.exists(deb):
                subprocess.run(["apt-get", "download", f"{pkg}={ver}"], cwd=srcdir, check=True)
            tar = subprocess.run(f"dpkg-deb --fsys-tarfile {deb} | tar -t | grep 'tar.xz$'", shell=True, check=True,
                                 capture_output=True, text=True).stdout.split()[0]
            os.makedirs(os.path.join(srcdir, v), exist_ok=True)
            xz = os.path.join(srcdir, f"linux-{v}.tar.xz")
            if not os.path.exists(xz):
                subprocess.run(f"dpkg-deb --fsys-tarfile {deb} | tar -xO {tar} > {xz}", shell=True, check=True)
            names = [f"linux-source-{v}/{p}" for p in sorted(files)]
            subprocess.run(["tar", "-xJf", xz, "--ignore-failed-read", *names], cwd=os.path.join(srcdir, v),
                           stderr=subprocess.DEVNULL)
        trees[v] = tree
    return trees


def context(trees: dict[str, str], f: dict) -> dict:
    """The code around the printk in the newest pinned tree that cites it: {version, line, code}."""
    for ref in reversed(f["refs"]):
        m = REF.match(ref)
        if not m or m["v"] not in trees:
            continue
        path = os.path.join(trees[m["v"]], m["path"])
        if not os.path.exists(path):
            continue
        lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
        n = int(m["line"])
        lo, hi = max(0, n - 1 - BEFORE), min(len(lines), n + AFTER)
        return {"tree": f"Debian linux-source-{m['v']} ({m['full']})", "path": m["path"], "line": n,
                "code": lines[lo:hi]}
    return {}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__)
        return 2
    srcdir = os.path.abspath(argv[1])
    os.makedirs(srcdir, exist_ok=True)
    if "--from-rules" in argv:
        fmts = recover_formats()
    else:
        with gzip.open(INPUTS, "rt", encoding="utf-8") as fh:
            fmts = [{k: v for k, v in f.items() if k not in ("id", "context")} for f in json.load(fh)["formats"]]
    files = {REF.match(r)["path"] for f in fmts for r in f["refs"] if REF.match(r)}
    trees = fetch(srcdir, files)
    out = []
    for i, f in enumerate(fmts):
        out.append({"id": i, **f, "context": context(trees, f)})
    doc = {"packages": {v: f"{p}={ver}" for v, (p, ver) in PACKAGES.items()}, "before": BEFORE, "after": AFTER,
           "formats": out}
    data = json.dumps(doc, indent=0, ensure_ascii=False, sort_keys=False).encode()
    with open(INPUTS, "wb") as fh:  # mtime 0: the same inputs give the same bytes
        with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
            gz.write(data)
    print(f"{len(out)} formats, {sum(1 for f in out if f['context'])} with code context -> {INPUTS} "
          f"({os.path.getsize(INPUTS)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
