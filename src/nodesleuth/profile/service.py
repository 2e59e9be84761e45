"""`profile run` and `profile ingest` as services: they do the work and return what happened, so the
CLI (cli/profile.py) only parses options and prints."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from ..model.errors import InputError
from ..node.wait import readable
from ..store.catalog import PROFILE
from ..store.store import StoreWriter


@dataclass
class RunSummary:
    samples: int
    chunks: int
    method: str  # "direct" | "perf"
    restarts: int
    lost: int
    unnamed: int
    error: str | None

    def line(self) -> str:
        how = {"direct": "direct ring-buffer reader"}.get(self.method, "perf record")
        return (f"{self.samples} samples in {self.chunks} chunks ({how}), {self.restarts} perf restarts"
                + (f", {self.lost} lost by perf (ring buffer full)" if self.lost else "")
                + (f", {self.unnamed} with unnamed frames" if self.unnamed else "")
                + (f"; {self.error}" if self.error else ""))


def run(store: str, freq: int, rotate: float, buffer_kb: int, duration: float | None, retention: float,
        max_size: int, method: str | None = None, chunked: bool = False) -> RunSummary:
    """Profile every CPU into `store` until SIGTERM/SIGINT or `duration` seconds."""
    from .runner import ChunkedProfileRunner, ProfileRunner

    w = StoreWriter(store, retention, max_size)
    if chunked:
        r = ChunkedProfileRunner(w, freq=freq, rotate=rotate, workdir=w.workdir("profile"))
    else:
        r = ProfileRunner(w, freq=freq, rotate=rotate, buffer_kb=buffer_kb, method=method)
    if not r.start():
        w.close()
        raise InputError("perf" if r.method == "perf" else "profiler", r.error or "cannot start")
    # wait for a signal or the duration without waking: a polling loop was a fifth of the whole
    # profiler's steady cost at 49 Hz (benchmarks/results/summary.md). The signal wakes the select through
    # Python's wakeup fd (a handler taking a lock could deadlock the thread it interrupted)
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    end = time.monotonic() + duration if duration else None
    try:
        while end is None or time.monotonic() < end:
            if readable([rfd], None if end is None else max(0.0, end - time.monotonic())):
                break
    finally:
        r.stop()
        w.enforce()
        w.close()
    return RunSummary(r.samples, r.chunks, r.method, r.restarts, r.lost_samples, r.unnamed_samples, r.error)


def ingest(script: str, store: str, offset: float = 0.0, event: str | None = None) -> tuple[list[str], str]:
    """Store a `perf script` text file; (notes, summary line)."""
    from .agg import Aggregator
    from .parse import is_clock, parse_file, pick_event

    b, note = pick_event(parse_file(script), event)
    notes = [note] if note else []
    if b.event and not is_clock(b.event):
        notes.append(f"{b.event} is not a clock event: sample counts are not time, so hot-CPU marks will be unavailable")
    w = StoreWriter(store)
    w.write(PROFILE, b, offset)  # pieces of <= store/profile.SPAN s each
    agg = Aggregator(w.write)
    agg.add(b, offset)
    agg.flush()
    w.close()
    return notes, f"{len(b)} samples, {len(b.stacks)} unique stacks, {b.skipped} skipped"
