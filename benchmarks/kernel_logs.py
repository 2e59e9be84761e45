"""Kernel-log reader on real kernel logs: every NIC event (NETDEV WATCHDOG tx timeout, driver 'Reset adapter' and
'Detected Tx Unit Hang' lines) and every lockup event (soft / hard lockup, RCU stall, hung task, workqueue lockup) in
73 logs published in public GitHub repositories, labelled by reading each log before the tool was run.

Data (labels.json beside the logs: file, source URL at a pinned commit, form, kernel, hardware, how it was trimmed,
events with 1-based line numbers): 53 logs as their owners committed them (dmesg, syslog kern.log, journalctl,
pstore, ChromeOS messages, serial console; x86 desktops, laptops, servers, VirtualBox/VMware/KVM guests, Jetson,
Raspberry Pi, ClearFog, Orion O6, RISC-V Orange Pi RV2, an Android phone; kernels 2.6.32 to 6.12; 5 of them hold
NIC or lockup events: an igb home server with soft/hard lockups, RCU stall and tx timeout, an igc I225 box's
kern.log and pstore, a VirtualBox e1000 reset), and 20 syzbot console excerpts that google/syzkaller keeps as test
data (pkg/report/testdata/linux/report/N, Apache-2.0; its TITLE/ALT/TYPE header and expected-REPORT sections cut)
holding hung tasks, soft lockups, RCU stalls (normal, self-detected, expedited), a workqueue lockup and a NETDEV
WATCHDOG. Logs over 300 KB keep a window of whole lines (labels.json says which).

Each file is read whole, as a file, by nodesleuth.collect.kmsg.KmsgReader (form detected from its lines, as
`nodesleuth` reads a saved log). Each event the reader reports is put on the first line at or after the previous
event's line that holds the event's message and, when both carry one, the same since-boot stamp. A labelled line
with a reported event is found; a labelled line without one is missed; a reported event on a line not labelled is a
false positive (goal: none).

usage: python -m benchmarks kernel_logs [--json]   (or python -m benchmarks.kernel_logs): one JSON object, per file
and in total: labelled events, found, missed, false positives, and the line of every miss and false positive;
saved to benchmarks/results/kernel_logs.json. The logs are stored zstd-compressed (tests/data/kernel-log/whole-set,
SOURCES.md beside them); each is decompressed to a temporary file and read as a file.
"""

from __future__ import annotations

import json
import os
import re
import sys

import tempfile

import zstandard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from nodesleuth.collect.kmsg import KmsgReader  # noqa: E402
from nodesleuth.node.root import Root  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "kernel-log", "whole-set")  # labels.json, SOURCES.md, logs/
LOGS = "logs"


def _raw(path: str) -> bytes:
    with open(path, "rb") as f:
        raw = f.read()
    return zstandard.ZstdDecompressor().decompressobj().decompress(raw) if path.endswith(".zst") else raw


def _lines(raw: bytes) -> list[str]:
    return raw.decode(errors="replace").split("\n")


def _read(raw: bytes):
    """The file read whole by the reader (form detected from its lines), from a temporary copy."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as tmp:
        tmp.write(raw)
        tmp.flush()
        r = KmsgReader(Root("/"), path=tmp.name, boot=None, max_records=10 ** 9)
        try:
            recs, events = r.read()
        finally:
            r.close()
    return r.format, len(recs), events


_STAMP = re.compile(r"\[\s*(\d+)\.(\d+)\]")


def _holds(line: str, msg: str, usec) -> bool:
    """The line holds the event's message and, when both carry a since-boot stamp, the same stamp (a pstore file
    repeats one text under several stamps, and repeats whole records where its parts overlap)."""
    if not msg or msg not in line:
        return False
    m = _STAMP.search(line)
    if usec is None or m is None:
        return True
    return int(m.group(1)) * 1000000 + int((m.group(2) + "000000")[:6]) == usec


def _place(events, lines: list[str]) -> list[tuple[int | None, object]]:
    """(1-based line, event) for each event, in order: the first line at or after the previous one holding its
    message (and stamp); from the top again if none does."""
    out, pos = [], 0
    for ev in events:
        msg = ev.message.strip()
        at = next((i for i in range(pos, len(lines)) if _holds(lines[i], msg, ev.usec)), None)
        if at is None:
            at = next((i for i in range(len(lines)) if _holds(lines[i], msg, ev.usec)), None)
        out.append((None if at is None else at + 1, ev))
        if at is not None:
            pos = at + 1
    return out


def score_file(entry: dict) -> dict:
    raw = _raw(os.path.join(DATA, LOGS, entry["file"]))
    lines = _lines(raw)
    form, nrec, events = _read(raw)
    placed = _place(events, lines)
    labelled = {e["line_no"]: e for e in entry["events"]}
    hit: set[int] = set()
    fps = []
    for ln, ev in placed:
        if ln is not None and ln in labelled and ln not in hit:
            hit.add(ln)
        else:
            fps.append({"line_no": ln, "text": lines[ln - 1][:300] if ln else None, "category": ev.category,
                        "kind": ev.kind, "family": ev.family, "message": ev.message[:300]})
    misses = [{"line_no": n, "text": e["text"][:300], "kind": e["kind"]} for n, e in sorted(labelled.items())
              if n not in hit]
    return {"file": entry["file"], "form_read": form, "records": nrec, "labelled": len(labelled),
            "found": len(hit), "missed": len(misses), "false_positives": len(fps), "misses": misses, "fps": fps}


def run(data: str = DATA) -> dict:
    global DATA
    DATA = data
    with open(os.path.join(data, "labels.json")) as f:
        labels = json.load(f)
    files = [score_file(e) for e in labels]
    total = {k: sum(x[k] for x in files) for k in ("labelled", "found", "missed", "false_positives")}
    total["files"] = len(files)
    total["files_with_events"] = sum(1 for e in labels if e["events"])
    by_kind: dict[str, dict] = {}
    for e, x in zip(labels, files):
        missed = {m["line_no"] for m in x["misses"]}
        for ev in e["events"]:
            k = by_kind.setdefault(ev["kind"], {"labelled": 0, "found": 0})
            k["labelled"] += 1
            k["found"] += ev["line_no"] not in missed
    return {"benchmark": "kernel_logs", "data": os.path.relpath(data, ROOT), "total": total, "by_kind": by_kind,
            "files": files}


def main(argv: list[str] | None = None) -> dict:
    from benchmarks.common import emit

    argv = list(sys.argv[1:] if argv is None else argv)
    return emit(run(), save="--no-save" not in argv)


if __name__ == "__main__":
    main()
