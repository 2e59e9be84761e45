"""Reading ticks back: decoded ranges, and the exports `dump` offers (csv, json, openmetrics)."""

from __future__ import annotations

import csv
import io
from typing import Iterator

import orjson

from ..collect.cpu import COLUMNS
from ..collect.sampler import Tick
from ..timeparse import iso
from .codec import KEYFRAME, decode, decode_lazy
from .store import TICKS, StoreReader


def ticks(reader: StoreReader, t0: float | None, t1: float | None, on_segment=None,
          carry: bool = True, lazy: bool = False) -> Iterator[Tick]:
    """Decoded ticks in [t0, t1]; NIC counters and units are carried forward from up to a keyframe
    before t0, so every tick in the range has them. `lazy`: bulky fields built on first read
    (codec.LazyTick), for readers of many seconds that look closely at few."""
    start = None if t0 is None else t0 - KEYFRAME if carry else t0
    nics = units = None
    for t, payload in reader.read(TICKS, start, t1, on_segment):
        if t0 is not None and t < t0 and b'"nic"' not in payload and b'"u"' not in payload:
            continue  # before the range and carrying nothing forward: not worth decoding
        tk = decode_lazy(payload) if lazy else decode(payload)
        if tk.nics is not None:
            nics = tk.nics
        elif carry:
            tk.nics = nics
        if tk.units is not None:
            units = tk.units
        elif carry:
            tk.units = units
        if t0 is not None and t < t0:
            continue
        yield tk


def tick_dict(t: Tick) -> dict:
    return t.to_dict()


def to_json_lines(ts: Iterator[Tick], out) -> int:
    n = 0
    for t in ts:
        out.write(orjson.dumps(tick_dict(t)) + b"\n")
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
    """OpenMetrics text with timestamps, with the exporter's names and labels (nodesleuth/metrics.py),
    each series' samples contiguous as the spec requires: feedable to
    `promtool tsdb create-blocks-from openmetrics`, and the shipped alert rules apply to it."""
    from ..metrics import METRICS, label_text, tick_gauges

    series: dict[str, dict[str, list[str]]] = {}
    n = 0
    for t in ts:
        ts_ = f"{t.time:.3f}"
        for name, labels, value in tick_gauges(t):
            series.setdefault(name, {}).setdefault(label_text(name, labels), []).append(f"{value} {ts_}")
        n += 1
    for name, by_labels in series.items():
        m = METRICS[name]
        out.write(f"# TYPE {name} {m.type}\n# HELP {name} {m.help}\n")
        for labels, samples in by_labels.items():
            for smp in samples:
                out.write(f"{name}{labels} {smp}\n")
    out.write("# EOF\n")
    return n
