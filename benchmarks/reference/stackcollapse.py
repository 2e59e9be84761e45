"""A Python re-implementation of stackcollapse-perf.pl's algorithm (brendangregg/FlameGraph, CDDL-1.0),
written for side-by-side timing only: it is not the Perl script and holds none of its code (the patterns
below are written here from perf script's format). Line by line: a sample header names the process (and
may carry the period), each frame line gives a function and its dso, `+0x` offsets are stripped,
`[unknown]` becomes `[dso basename]`, kernel frames get `_[k]`, stacks are joined with ';' and counted
(weighted by the period when perf printed it). See profiling-anchors.md 2.2. The real script is timed
only when its path is given (benchmarks/perf_parse.py --stackcollapse PATH)."""

from __future__ import annotations

import re
from collections import Counter

# header `comm pid[/tid] [cpu] time: [period] event:`; frame `<tab>addr symbol[+0xoff] (dso)`
header_re = re.compile(r"^(\S.*?)\s+(\d+)(?:/(\d+))?\s")
event_re = re.compile(r":\s+(?:(\d+)\s+)?(\S+):\s*$")
frame_re = re.compile(r"^\s*([0-9a-fA-F]+)\s+(.*\S) \((\S*)\)")


def collapse_file(path: str) -> Counter:
    out: Counter = Counter()
    stack: list[str] = []
    pname = None
    period = 1
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                continue
            if line == "":
                if pname is None:
                    continue
                stack.insert(0, pname)
                out[";".join(stack)] += period
                stack, pname, period = [], None, 1
                continue
            m = header_re.match(line)
            if m and pname is None:
                pname = m.group(1).strip().replace(" ", "_")
                e = event_re.search(line)
                if e and e.group(1):
                    period = int(e.group(1))
                continue
            fm = frame_re.match(line)
            if fm:
                rawfunc, mod = fm.group(2), fm.group(3)
                rawfunc = re.sub(r"\+0x[\da-f]+$", "", rawfunc)
                if rawfunc == "[unknown]":
                    rawfunc = "[" + mod.rsplit("/", 1)[-1] + "]" if mod else rawfunc
                func = rawfunc.replace(";", ":")
                if mod.startswith("[kernel") or mod == "[vmlinux]":
                    func += "_[k]"
                stack.insert(0, func)
    if pname is not None:
        stack.insert(0, pname)
        out[";".join(stack)] += period
    return out
