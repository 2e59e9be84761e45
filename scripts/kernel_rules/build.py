"""Rebuilds src/nodesleuth/rules/kernel-net.json from the inputs in this directory:

    python3 scripts/kernel_rules/build.py [--check]

  * inputs.json.gz: the printk formats the rules were read from (format, call, file, function, kernel versions,
    refs) with the code around each printk in the pinned Debian kernel sources (written by extract.py);
  * rules.json: the rule definitions (reason, pattern, class, family, kind, declared severity, source, notes) with,
    per rule, the ids of its formats in inputs.json.gz. Patterns and names are edited here, by hand.

Each format gets its path class (classify.py) from its text, its function and the code after it; a rule's class is
its formats' (an event over a dump). A rule's severity follows its class: a status or register dump is "info" (it
never makes a finding), a failed reset "critical", the others keep the declared severity (warning or critical).
--check compares instead of writing (exit 1 when the committed file differs)."""

from __future__ import annotations

import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from classify import SEVERITY, classify, rule_class  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "src", "nodesleuth", "rules", "kernel-net.json")
KEYS = ("format", "call", "file", "function", "versions", "refs", "from")


def severity(cls: str, declared: str) -> str:
    allowed = SEVERITY[cls]
    return declared if declared in allowed else ("critical" if "critical" in allowed else sorted(allowed)[0])


def build() -> str:
    with gzip.open(os.path.join(HERE, "inputs.json.gz"), "rt", encoding="utf-8") as fh:
        fmts = {f["id"]: f for f in json.load(fh)["formats"]}
    spec = json.load(open(os.path.join(HERE, "rules.json"), encoding="utf-8"))
    doc = {k: v for k, v in spec.items() if k != "rules"}
    doc["rules"] = []
    for r in spec["rules"]:
        r = json.loads(json.dumps(r))
        x = r["x-nodesleuth"]
        formats, classes = [], []
        for i in x["format_ids"]:
            f = fmts[i]
            cls = classify(f, x["kind"])
            classes.append(cls)
            formats.append({**{k: f[k] for k in KEYS}, "path_class": cls})
        nx = {}
        for k, v in x.items():  # the spec's key order; severity follows the class, formats replace their ids
            if k == "severity":
                nx["severity"] = severity(rule_class(classes), v)
                nx["path_class"] = rule_class(classes)
            elif k == "format_ids":
                nx["formats"] = formats
            else:
                nx[k] = v
        r["x-nodesleuth"] = nx
        doc["rules"].append(r)
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if "--check" in argv:
        same = open(OUT, encoding="utf-8").read() == text
        print("kernel-net.json is " + ("up to date" if same else "NOT what build.py makes: run it"))
        return 0 if same else 1
    with open(OUT, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"{len(json.loads(text)['rules'])} rules -> {os.path.relpath(OUT, ROOT)}")
    # the NPD copy of the rules (deploy/npd) follows them: tests/test_deploy.py checks it equals its source
    import subprocess

    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_deploy.py")]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
