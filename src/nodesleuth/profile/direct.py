"""The direct profiler: the kernel's perf ring buffers read in this process, without `perf record`
or `perf script`.

The rings (profile/ringbuf.py) are copied out when the kernel says one is half full (a watermark
wakeup, as perf record reads them) and at each store; their records are decoded in bulk
(profile/decode.py), with the processes' maps and names tracked from the side-band records
(profile/procs.py) and stacks named as `perf script` names them (profile/stacknames.py,
profile/kallsyms.py, usersyms.py), so the stored profile folds as stackcollapse-perf.pl folds perf's text
(tests/test_profile_direct.py compares both on the same live samples).

Where the rings cannot be opened (Unavailable says why), runner.ProfileRunner falls back to
`perf record` (profile/perfdata.py).
"""

from __future__ import annotations

import select
import time

from ..node.root import Root
from .decode import Decoder
from .ringbuf import (IOC_DISABLE, IOC_ENABLE, Rings, Unavailable, online_cpus, online_cpus_from, read_setting,
                      ring_pages)
from .worker import ProfileWorker

__all__ = ["DirectProfileRunner", "Rings", "Unavailable"]  # Rings looked up here at open (tests patch it)


class DirectProfileRunner(ProfileWorker):
    """The continuous profiler on the direct path: same interface as the perf record runner
    (start/stop, counters, error), same streams and batches (profile/worker.py)."""

    method = "direct"

    def __init__(self, sink, freq: int = 49, rotate: float = 10.0, cpus: str | None = None, buffer_kb: int = 0,
                 store: bool = True, on_batch=None, root: Root = Root("/")):
        super().__init__(sink, freq, rotate, cpus, buffer_kb, store, on_batch)
        # the events sample this kernel: a recorded tree's /proc says nothing of its processes
        self.root = root if root.live else Root("/")
        self.rings: Rings | None = None
        self.pending: list[bytes] = []
        self.decoder: Decoder | None = None

    def open(self) -> None:
        """Open the events (raises Unavailable with the reason); start() runs them."""
        online = self.root.join("/sys/devices/system/cpu/online")
        cpus = online_cpus_from(self.cpus) if self.cpus else online_cpus(online)
        try:
            max_stack = int(read_setting(self.root.join("/proc/sys/kernel/perf_event_max_stack")))
        except ValueError:
            max_stack = 127
        self.rings = Rings(cpus, self.freq, ring_pages(self.freq, self.buffer_kb), max_stack, self.root)
        self.decoder = Decoder(max_stack, self.root)
        if not self.decoder.kernel.ok:
            self.error = "kernel addresses hidden (kernel.kptr_restrict): kernel frames are [unknown]"

    def start(self) -> bool:
        if self.rings is None:
            try:
                self.open()
            except Unavailable as e:
                self.error = str(e)
                return False
        self._start_thread()
        self.started.wait(30)
        return True

    def _drain(self, which=None) -> None:
        r = self.rings
        for i in (range(len(r.fds)) if which is None else which):
            data = r.read(i)
            if data:
                self.pending.append(data)

    def _store(self) -> None:
        c0 = time.process_time()
        self._drain()
        buf, self.pending = b"".join(self.pending), []
        try:
            b = self.decoder.decode(buf)
        except Exception as e:  # noqa: BLE001 - one undecodable batch must not stop the profiler
            self.error = f"batch not decoded: {type(e).__name__}: {e}"
            self.dropped_chunks += 1
            self.ingest_cpu += time.process_time() - c0
            return
        offset = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
        dec = self.decoder
        if dec.lost:
            lost, dec.lost = dec.lost, []
            self._store_lost(lost, offset,
                             "the kernel dropped {n} samples (a ring buffer was full: the reader fell behind)")
        self._store_batch(b, offset, c0)

    def _loop(self) -> None:
        r = self.rings
        poller = select.poll()
        fd_ix = {fd: i for i, fd in enumerate(r.fds)}
        for fd in r.fds:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            r.ioctl_all(IOC_ENABLE)
            self.decoder.snapshot()
        except OSError as e:
            self.error = f"cannot enable the perf events: {e}"
            self.started.set()
            return self._finish()
        self.started.set()
        next_store = time.monotonic() + self.rotate
        dead: set[int] = set()
        try:
            while not self.stop_ev.is_set():
                wait = max(0.0, next_store - time.monotonic())
                ev = poller.poll(int(wait * 1000) + 1)
                ready = []
                for fd, what in ev:
                    if fd == self._wake[0]:
                        continue
                    i = fd_ix.get(fd)
                    if i is None:
                        continue
                    if what & (select.POLLHUP | select.POLLERR) and i not in dead:
                        dead.add(i)  # its CPU went offline: the event is gone
                        poller.unregister(fd)
                        self.error = f"CPU {r.cpus[i]} went offline: no more samples from it"
                    if what & select.POLLIN:
                        ready.append(i)
                if ready:
                    c0 = time.process_time()
                    self._drain(ready)
                    self.ingest_cpu += time.process_time() - c0
                if time.monotonic() >= next_store:
                    self._store()
                    next_store = time.monotonic() + self.rotate
        finally:
            self._finish()

    def _finish(self) -> None:
        try:
            if self.rings is not None and self.rings.fds:
                try:
                    self.rings.ioctl_all(IOC_DISABLE)
                except OSError:
                    pass
                self._store()
        finally:
            self._flush_aggregates()
            if self.rings is not None:
                self.rings.close()
            if self.decoder is not None:
                self.decoder.close()

    def _close_unstarted(self) -> None:
        if self.rings is not None:
            self.rings.close()
