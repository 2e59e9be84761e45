"""What both continuous profilers share (perf record read through its pipe, profile/runner.py, and the
kernel's rings read directly, profile/direct.py): one worker thread woken by a pipe and stopped with
a bounded wait, and one way of storing a batch, its lost-sample counts (handed to the store, which encodes them) and its aggregates, so the two
paths cannot drift apart in what they store or how they fail."""

from __future__ import annotations

import os
import threading
import time

from ..store.catalog import PROFILE, PROFILE_LOST
from .agg import Aggregator
from .counters import RunnerCounters

EVENT = "cpu-clock"  # a clock event on both paths: every sample is 1/F s of a CPU's time, idle or busy (cycles is not)


def perf_record_args(freq: int, cpus: str | None) -> list[str]:
    """perf record's event, rate, call graphs and CPUs: what either path samples."""
    return ["-e", EVENT, "-F", str(freq), "-g"] + (["-C", cpus] if cpus else ["-a"])


class ProfileWorker(RunnerCounters):
    """Fields, counters and stop() of a continuous profiler; subclasses define _loop (on the thread)
    and _finish (the thread's last act: stop the source, store the rest, then _flush_aggregates)."""

    name = "profile"
    method = "?"

    def __init__(self, sink, freq: int = 49, rotate: float = 10.0, cpus: str | None = None, buffer_kb: int = 0,
                 store: bool = True, on_batch=None):
        super().__init__()
        self.sink = sink  # the store writer (StoreWriter: write records, the aggregates' too), None: not storing
        self.store = store  # False: samples only go to on_batch (the exporter's live shares)
        self.on_batch = on_batch  # callable(Batch, offset): the exporter's live shares, tests
        self.freq, self.rotate, self.cpus, self.buffer_kb = freq, rotate, cpus, buffer_kb
        self.stop_ev = threading.Event()
        self.started = threading.Event()
        self.thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None
        self.agg = Aggregator(sink.write if sink is not None else None)

    def record_args(self) -> list[str]:  # perf record's (the fallback's): for messages and tests
        return perf_record_args(self.freq, self.cpus)

    def _start_thread(self) -> None:
        self._wake = os.pipe()  # stop() writes a byte: the loop's poll/select returns at once
        self.thread = threading.Thread(target=self._loop, name="nodesleuth-profile", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        raise NotImplementedError

    def _store_lost(self, lost: list[tuple[int, int, int]], offset: float, why: str) -> None:
        """(monotonic ns, cpu, count) of samples the kernel or perf dropped, stored so explain can say
        a window's profile is incomplete."""
        rows = [(round(t / 1e9 + offset, 6), cpu, n) for t, cpu, n in lost]
        self.lost_samples += sum(r[2] for r in rows)
        self.error = why.format(n=self.lost_samples)
        if not self.store:  # the exporter's live shares: nothing is stored
            return
        try:
            self.sink.write(PROFILE_LOST, rows)
        except Exception as e:  # noqa: BLE001 - as a batch: the profiler goes on, the recorder says it
            self.error = f"lost-sample counts not stored: {e}"

    def _store_batch(self, b, offset: float, c0: float) -> None:
        """Raw pieces (<= codec.SPAN s each) and the pre-aggregation, then on_batch; CPU since c0 counted."""
        if len(b):
            try:
                if self.store:
                    self.sink.write(PROFILE, b, offset)  # pieces of <= store/profile.SPAN s each
                    self.agg.add(b, offset)
                self.samples += len(b)
                self.chunks += 1
                if self.on_batch is not None:
                    self.on_batch(b, offset)
            except Exception as e:  # noqa: BLE001 - one bad batch must not stop the profiler
                self.error = f"batch not stored: {e}"
                self.dropped_chunks += 1
        self.ingest_cpu += time.process_time() - c0

    def _flush_aggregates(self) -> None:
        try:
            self.agg.flush()
        except Exception as e:  # noqa: BLE001 - the raw samples are stored; only the summary is lost
            self.error = f"aggregates not stored: {e}"

    def _close_unstarted(self) -> None:
        """Opened but never started: release what open() took."""

    def stop(self, timeout: float = 300) -> bool:
        """Stop sampling and store what was read; False when that did not finish within `timeout` (a
        slow machine: the batches left are then lost, and the caller says so)."""
        self.stop_ev.set()
        if self.thread:
            os.write(self._wake[1], b".")
            self.thread.join(timeout=timeout)
            if self.thread.is_alive():
                return False
            for fd in self._wake:
                os.close(fd)
            self.thread = None
        else:
            self._close_unstarted()
        return True
