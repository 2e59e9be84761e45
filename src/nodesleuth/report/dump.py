"""`nodesleuth dump`'s exports of recorded seconds: JSON lines (Tick.to_dict), CSV (mpstat's columns per
CPU per second), and OpenMetrics with sample timestamps, in the exporter's names and labels, so a
backfilled dump (promtool tsdb create-blocks-from openmetrics) meets the shipped alert rules."""

from __future__ import annotations

import csv
import io
from typing import Iterator

import orjson

from ..detect.incidents import HotCoreTracker
from ..model.metrics import METRICS, label_text, tick_gauges
from ..model.mpstat import COLUMNS
from ..model.records import Tick
from ..model.timeparse import iso


def to_json_lines(ts: Iterator[Tick], out) -> int:
    n = 0
    for t in ts:
        out.write(orjson.dumps(t.to_dict()) + b"\n")
        n += 1
    return n


def to_csv(ts: Iterator[Tick], out: io.TextIOBase) -> int:
    """One row per CPU per second: the mpstat columns plus busy, and the top process on that CPU."""
    w = csv.writer(out)
    w.writerow(["time", "iso", "cpu", *COLUMNS, "busy", "top_pid", "top_comm", "top_pct"])
    n = 0
    for t in ts:
        top = {}
        for p in t.procs:
            if p.cpu not in top or p.pct > top[p.cpu].pct:
                top[p.cpu] = p
        for c, u in sorted(t.cpu.items()):
            p = top.get(c)
            w.writerow([f"{t.time:.3f}", iso(t.time), "all" if c < 0 else c, *(f"{v:.2f}" for v in u.row()),
                        f"{u.busy:.2f}", p.pid if p else "", p.comm if p else "", f"{p.pct:.1f}" if p else ""])
        n += 1
    return n


def to_openmetrics(ts: Iterator[Tick], out: io.TextIOBase) -> int:
    """OpenMetrics text with timestamps, with the exporter's names and labels (model/metrics.py),
    each series' samples contiguous as the spec requires: feedable to
    `promtool tsdb create-blocks-from openmetrics`, and the shipped alert rules apply to it."""
    series: dict[str, dict[str, list[str]]] = {}
    n = 0
    hot = HotCoreTracker()  # the exporter's hot-core gauges, second by second, as it would have served them
    for t in ts:
        ts_ = f"{t.time:.3f}"
        hot.feed(t)
        for name, labels, value in tick_gauges(t, hot.gauges(t)):
            series.setdefault(name, {}).setdefault(label_text(name, labels), []).append(f"{value} {ts_}")
        n += 1
    for name, by_labels in series.items():
        m = METRICS[name]
        out.write(f"# TYPE {name} {m.type}\n# HELP {name} {m.help}\n")
        sample = f"{name}_total" if m.type == "counter" else name  # OpenMetrics: a counter's sample is NAME_total
        for labels, samples in by_labels.items():
            for smp in samples:
                out.write(f"{sample}{labels} {smp}\n")
    out.write("# EOF\n")
    return n
