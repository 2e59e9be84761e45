"""Continuous `perf record -a -g` in rotating chunks, ingested into the store as they close.

perf writes with CLOCK_MONOTONIC timestamps (-k), so samples map to wall-clock time exactly
(offset = wall - monotonic, taken when each chunk is ingested). Chunks are deleted once stored,
at most `max_pending` wait on disk (older ones are dropped and counted if ingestion falls
behind), and perf is restarted with back-off if it dies. The store's retention bounds the rest.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from .codec import encode
from .parse import parse_text

SCRIPT_FIELDS = "comm,pid,tid,cpu,time,period,event,ip,sym,dso"


def wall_minus_monotonic() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


class PerfRotator:
    """perf record in rotating chunks; subclasses say what to record and how to store a chunk."""

    name = "perf"

    def __init__(self, append, rotate: float = 10.0, workdir: str | None = None, max_pending: int = 6):
        self.append = append  # callable(stream, t, payload)
        self.rotate = rotate
        self.dir = workdir or tempfile.mkdtemp(prefix="nodesleuth-perf-")
        self.max_pending = max_pending
        self.perf = shutil.which("perf")
        self.proc: subprocess.Popen | None = None
        self.stop_ev = threading.Event()
        self.thread: threading.Thread | None = None
        self.restarts = 0
        self.dropped_chunks = 0
        self.samples = 0
        self.chunks = 0
        self.error: str | None = None

    def record_args(self) -> list[str]:
        raise NotImplementedError

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        raise NotImplementedError

    script_fields = SCRIPT_FIELDS

    def _start_perf(self) -> None:
        cmd = [self.perf, "record", "-q", "-k", "CLOCK_MONOTONIC", f"--switch-output={int(self.rotate)}s",
               "-o", os.path.join(self.dir, "perf.data")] + self.record_args()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)

    def start(self) -> bool:
        if not self.perf:
            self.error = "perf is not installed"
            return False
        self._start_perf()
        self.thread = threading.Thread(target=self._loop, name=f"nodesleuth-{self.name}", daemon=True)
        self.thread.start()
        return True

    def _completed(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.dir, "perf.data.*")))

    def ingest(self, path: str) -> int:
        offset = wall_minus_monotonic()
        p = subprocess.run([self.perf, "script", "-F", self.script_fields, "-i", path], capture_output=True,
                           text=True, errors="replace", timeout=300)
        n = self.store_chunk(p.stdout, offset, path)
        self.samples += n
        self.chunks += 1
        return n

    def _loop(self) -> None:
        backoff = 1.0
        while not self.stop_ev.is_set():
            done = self._completed()
            if len(done) > self.max_pending:
                for p in done[:-self.max_pending]:
                    os.unlink(p)
                    self.dropped_chunks += 1
                done = done[-self.max_pending:]
            for p in done:
                try:
                    self.ingest(p)
                finally:
                    if os.path.exists(p):
                        os.unlink(p)
            if self.proc is not None and self.proc.poll() is not None and not self.stop_ev.is_set():
                err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
                self.error = err.splitlines()[-1] if err else f"perf exited with {self.proc.returncode}"
                self.stop_ev.wait(backoff)
                backoff = min(30.0, backoff * 2)
                if not self.stop_ev.is_set():
                    self.restarts += 1
                    self._start_perf()
            elif self.proc is not None:
                backoff = 1.0
            self.stop_ev.wait(0.5)

    def stop(self) -> None:
        self.stop_ev.set()
        if self.thread:
            self.thread.join(timeout=30)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in self._completed() + [os.path.join(self.dir, "perf.data")]:
            if os.path.exists(p):
                try:
                    self.ingest(p)
                finally:
                    os.unlink(p)
        shutil.rmtree(self.dir, ignore_errors=True)


class ProfileRunner(PerfRotator):
    """perf record -a -g at `freq` Hz: the continuous CPU profile."""

    name = "profile"

    def __init__(self, append, freq: int = 49, rotate: float = 10.0, workdir: str | None = None,
                 max_pending: int = 6, cpus: str | None = None):
        super().__init__(append, rotate, workdir, max_pending)
        self.freq = freq
        self.cpus = cpus

    def record_args(self) -> list[str]:
        return ["-F", str(self.freq), "-g"] + (["-C", self.cpus] if self.cpus else ["-a"])

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        b = parse_text(script_text, path=path)
        if len(b):
            t0, payload = encode(b, offset)
            self.append("profile", t0, payload)
        return len(b)


class ChurnRunner(PerfRotator):
    """perf on cgroup:cgroup_mkdir/rmdir/release: who creates cgroups, and zombie lifetimes."""

    name = "churn"
    script_fields = "comm,pid,tid,cpu,time,event,trace"

    def record_args(self) -> list[str]:
        from ..collect.churn import EVENTS

        args = ["-a"]
        for ev in EVENTS:
            args += ["-e", ev]
        return args

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        import orjson

        from ..collect.churn import parse_script

        evs = parse_script(script_text)
        if evs:
            rows = [[round(e.time + offset, 6), e.event, e.comm, e.pid, e.hierarchy, e.cg_id, e.path] for e in evs]
            self.append("churn", rows[0][0], orjson.dumps(rows))
        return len(evs)
