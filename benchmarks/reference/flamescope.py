"""FlameScope's perf-script algorithm, reimplemented from its published description
(Netflix/flamescope app/perf/regexp.py, heatmap.py, flame_graph.py; see
shared/reference/profiling-anchors.md section 1.2) for side-by-side timing.

- heatmap pass: stream lines, `event_regexp` on every line to find sample headers, accumulate the
  stack text, drop it if `idle_regexp` matches, keep one float offset per non-idle sample;
- flame graph pass: re-read the file, `event_regexp` + `comm_regexp` on headers, `frame_regexp`
  on every frame line, skip idle, keep samples within [start, end], merge into a tree whose
  children are found by linear scan.
"""

from __future__ import annotations

import re

# Written here to match as FlameScope's parser is described to (not copied from its code): a sample header
# has a timestamp followed by ": " and an event name ending in ":"; a frame line is an address, a symbol
# and a parenthesised library; the comm is the header's leading run of non-digits; a sample is idle when
# the swapper runs one of the idle functions.
IDLE_FUNCS = ("cpuidle", "cpu_idle", "cpu_bringup_and_idle", "native_safe_halt", "xen_hypercall_sched_op",
              "xen_hypercall_vcpu_op")
event_regexp = re.compile(r"[ ]+([.0-9]+): .+?:")
frame_regexp = re.compile(r"^[ \t]*[a-fA-F0-9]+ (.+) [(](.*)[)]$")
comm_regexp = re.compile(r"^[ ]*(\D+)")
idle_regexp = re.compile("swapper.*(" + "|".join(IDLE_FUNCS) + ")")


def read_offsets(path: str):
    start = end = None
    offsets = []
    stack = ""
    ts = -1.0
    with open(path) as f:
        for line in f:
            if line[0] == "#":
                continue
            r = event_regexp.search(line)
            if r:
                if stack != "":
                    if not idle_regexp.search(stack):
                        offsets.append(ts)
                    stack = ""
                ts = float(r.group(1))
                if start is None:
                    start = ts
                stack = line.rstrip()
            else:
                stack += line.rstrip()
    if stack != "" and not idle_regexp.search(stack):
        offsets.append(ts)
    end = ts
    return start, end, offsets


def _library2type(lib: str) -> str:
    if lib == "":
        return ""
    if lib.startswith("/tmp/perf-"):
        return "jit"
    if lib.startswith("[") or lib.endswith("vmlinux"):
        return "kernel"
    return "user"


def _add_stack(root: dict, stack: list, comm: str) -> None:
    root["v"] += 1
    node = root
    for name, libtype in [(comm, "")] + stack:
        child = None
        for c in node["c"]:  # linear scan, as FlameScope does
            if c["n"] == name and c["l"] == libtype:
                child = c
                break
        if child is None:
            child = {"n": name, "l": libtype, "v": 0, "c": []}
            node["c"].append(child)
        child["v"] += 1
        node = child


def generate_flame_graph(path: str, range_start: float | None = None, range_end: float | None = None) -> dict:
    root = {"n": "root", "l": "", "v": 0, "c": []}
    stack: list = []
    ts = -1.0
    comm = ""
    in_sample = False
    with open(path) as f:
        for line in f:
            if line[0] == "#":
                continue
            if not in_sample:
                r = event_regexp.search(line)
                if r:
                    ts = float(r.group(1))
                    m = comm_regexp.search(line)
                    comm = m.group(1).rstrip() if m else ""
                    stack = []
                    in_sample = True
                    raw = line.rstrip()
                continue
            if line.strip() == "":
                in_sample = False
                if range_start is not None and ts < range_start:
                    continue
                if range_end is not None and ts > range_end:
                    continue
                if idle_regexp.search(raw + "".join(n for n, _ in stack)):
                    continue
                stack.reverse()
                _add_stack(root, stack, comm)
                continue
            r = frame_regexp.search(line)
            if r:
                name = r.group(1)
                idx = name.find("+")
                if idx > 0:
                    name = name[:idx]
                stack.append((name, _library2type(r.group(2))))
    return root
