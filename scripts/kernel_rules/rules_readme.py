#!/usr/bin/env python3
"""Write the table of src/nodesleuth/rules/README.md (between its TABLE markers) from the rules file, corpus.json and
generated.json: one row per driver family (or lockup kind) with its rules, the sources they were read from and how
many real / generated lines test them. Run after changing the rules; tests/test_rules.py checks the table is current."""

from __future__ import annotations

import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "src", "nodesleuth", "rules", "kernel-net.json")
README = os.path.join(ROOT, "src", "nodesleuth", "rules", "README.md")
DATA = os.path.join(ROOT, "tests", "data", "kernel-log")
BEGIN, END = "<!-- TABLE BEGIN (scripts/kernel_rules/rules_readme.py) -->", "<!-- TABLE END -->"


def _vkey(v: str):
    m = re.match(r"(\d+)\.(\d+)", v)
    return (0, int(m.group(1)), int(m.group(2))) if m else (1, 0, 0)


def table() -> str:
    rules = json.load(open(RULES))["rules"]
    corpus = json.load(open(os.path.join(DATA, "corpus.json")))
    gen = json.load(open(os.path.join(DATA, "generated.json")))["lines"]
    real, made = {}, {}
    for c in corpus:
        if c["must_match"]:
            real[c["family"]] = real.get(c["family"], 0) + 1
    for g in gen:
        if g["must_match"]:
            made[g["family"]] = made.get(g["family"], 0) + 1
    fams: dict[str, list] = {}
    for r in rules:
        x = r["x-nodesleuth"]
        fams.setdefault((x["class"], x["family"] or "(named in the line)"), []).append(r)
    rows = ["| class | driver family | rules: reason (kind) | read from: file, function (kernel versions) | real lines "
            "in corpus / generated lines |", "|---|---|---|---|---|"]
    for (cls, fam), rs in sorted(fams.items(), key=lambda kv: (kv[0][0] != "nic", kv[0][1])):
        what = "<br>".join(f"{r['reason']} ({r['x-nodesleuth']['kind']})" for r in rs)
        src, vers = [], set()
        for r in rs:
            for f in r["x-nodesleuth"].get("formats", []):
                s = f"{f['file'].split('/')[-1]} {f['function']}"
                if s not in src:
                    src.append(s)
                vers.update(v for v in f["versions"] if re.match(r"\d+\.\d+", v))
                vers.update("amzn-drivers" for v in f["versions"] if v.startswith("amzn"))
            if not r["x-nodesleuth"].get("formats"):
                src.append(r["x-nodesleuth"]["source"][:90])
        shown = "; ".join(src[:4]) + (f"; +{len(src) - 4} more" if len(src) > 4 else "")
        v = ", ".join(sorted(vers, key=lambda x: (_vkey(x), x))) if vers else "see source"
        n_real, n_gen = real.get(fam, 0), made.get(fam, 0)
        tested = f"{n_real} real / {n_gen} generated" if n_real else f"generated only ({n_gen})"
        if fam.startswith("("):
            tested = "counted under the family each line names (i40e, ice, iavf)"
        rows.append(f"| {cls} | {fam} | {what} | {shown} ({v}) | {tested} |")
    return "\n".join(rows)


def main() -> int:
    text = open(README).read()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:a] + "\n" + table() + "\n" + text[b:]
    if "--check" in sys.argv:
        return 0 if new == text else 1
    with open(README, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
