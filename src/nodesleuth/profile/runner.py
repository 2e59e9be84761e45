"""Continuous `perf record -a -g` ingested into the store: the CPU profile read from perf's pipe
format with one long-lived `perf script` naming each distinct stack once (ProfileRunner; the former
chunk-per-`perf script` path is ChunkedProfileRunner), the cgroup-churn trace in rotating chunks
(PerfRotator).

perf writes with CLOCK_MONOTONIC timestamps (-k), so samples map to wall-clock time exactly
(offset = wall - monotonic, taken when each batch is stored). Chunks are deleted once stored,
at most `max_pending` wait on disk (older ones are dropped and counted if ingestion falls
behind), and perf is restarted with back-off if it dies. The store's retention bounds the rest.
"""

from __future__ import annotations

import fcntl
import glob
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from ..node.children import spawn, spawn_reaped
from ..node.root import Root
from ..node.wait import readable

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
from .agg import Aggregator
from .counters import RunnerCounters
from ..model.errors import InputError
from ..store.catalog import CHURN, PROFILE
from .parse import UNNAMED, FrameCache, parse_text
from .perfdata import ScriptNamer
from .worker import ProfileWorker, perf_record_args

SCRIPT_FIELDS = "comm,pid,tid,cpu,time,period,event,ip,sym,dso"


def wall_minus_monotonic() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


class PerfRotator(RunnerCounters):
    """perf record in rotating chunks; subclasses say what to record and how to store a chunk.

    perf runs under nodesleuth.node.children's reaper, started from this runner's own thread (which lives
    until perf has stopped), so a kill -9 of nodesleuth takes perf and its chunk directory with it.
    Chunks go to `workdir` (the store's .work/ when recording: a new `record` clears what a killed
    one left)."""

    name = "perf"

    def __init__(self, sink, rotate: float = 10.0, workdir: str | None = None, max_pending: int = 6):
        super().__init__()
        self.sink = sink  # the store writer: write(stream, record, offset), the aggregates' too
        self.rotate = rotate
        self.dir = workdir or tempfile.mkdtemp(prefix=f"nodesleuth-{self.name}-")
        os.makedirs(self.dir, exist_ok=True)
        self.max_pending = max_pending
        self.perf = shutil.which("perf")
        self.proc: subprocess.Popen | None = None
        self.stop_ev = threading.Event()
        self.started = threading.Event()
        self.thread: threading.Thread | None = None

    def record_args(self) -> list[str]:
        raise NotImplementedError

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        raise NotImplementedError

    script_fields = SCRIPT_FIELDS
    script_args: tuple[str, ...] = ()

    def _start_perf(self) -> None:
        cmd = [self.perf, "record", "-q", "-k", "CLOCK_MONOTONIC", f"--switch-output={int(self.rotate)}s",
               "-o", os.path.join(self.dir, "perf.data")] + self.record_args()
        try:
            self.proc = spawn_reaped(cmd, self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        except OSError as e:
            self.error = str(e)
            self.proc = None

    def start(self) -> bool:
        if not self.perf:
            self.error = "perf is not installed"
            return False
        self.thread = threading.Thread(target=self._loop, name=f"nodesleuth-{self.name}", daemon=True)
        self.thread.start()
        self.started.wait(30)
        return self.proc is not None

    def _completed(self) -> list[str]:
        return sorted(glob.glob(os.path.join(self.dir, "perf.data.*")))

    def ingest(self, path: str) -> int:
        offset = wall_minus_monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0 = time.process_time()
        p = spawn([self.perf, "script", *self.script_args, "-F", self.script_fields, "-i", path], stdout=subprocess.PIPE,
                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=300)
        n = self.store_chunk(out.decode(errors="replace"), offset, path)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.ingest_cpu += (time.process_time() - c0) + (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        self.samples += n
        self.chunks += 1
        return n

    def _ingest_done(self) -> None:
        done = self._completed()
        if len(done) > self.max_pending:
            for p in done[:-self.max_pending]:
                os.unlink(p)
                self.dropped_chunks += 1
            done = done[-self.max_pending:]
        for p in done:
            try:
                self.ingest(p)
            except Exception as e:  # noqa: BLE001 - one bad chunk must not stop the profiler
                self.error = f"chunk {os.path.basename(p)} not stored: {e}"
                self.dropped_chunks += 1
            finally:
                if os.path.exists(p):
                    os.unlink(p)

    def _loop(self) -> None:
        self._start_perf()
        self.started.set()
        backoff = 1.0
        try:
            while not self.stop_ev.is_set():
                self._ingest_done()
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
        finally:
            self._finish()

    def _finish(self) -> None:
        """On this thread (perf's parent): stop perf, store what it wrote, remove the chunks."""
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
                except Exception as e:  # noqa: BLE001 - a bad last chunk must not keep the files
                    self.error = f"last chunk not stored: {e}"
                finally:
                    os.unlink(p)
        shutil.rmtree(self.dir, ignore_errors=True)

    def stop(self, timeout: float = 300) -> bool:
        """Stop perf and store what it wrote; False when that did not finish within `timeout` (a slow
        machine: the chunks left are then lost, and the caller says so)."""
        self.stop_ev.set()
        if self.thread:
            self.thread.join(timeout=timeout)
            return not self.thread.is_alive()
        return True


class ChunkedProfileRunner(PerfRotator):
    """perf record -a -g at `freq` Hz in rotating chunks, one full `perf script` per chunk; each batch is
    also pre-aggregated per minute and hour (profile/agg.py). The former default (`profile run
    --chunked`), kept as the reference the default ProfileRunner is measured and tested against."""

    name = "profile"

    def __init__(self, sink, freq: int = 49, rotate: float = 10.0, workdir: str | None = None,
                 max_pending: int = 6, cpus: str | None = None):
        super().__init__(sink, rotate, workdir, max_pending)
        self.freq = freq
        self.cpus = cpus

    def record_args(self) -> list[str]:
        return perf_record_args(self.freq, self.cpus)

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        if not hasattr(self, "agg"):
            self.agg, self.cache = Aggregator(self.sink.write), FrameCache()
        b = parse_text(script_text, path=path, cache=self.cache)
        if len(b):
            self.sink.write(PROFILE, b, offset)  # pieces of <= store/profile.SPAN s each
            self.agg.add(b, offset)
        return len(b)

    def _finish(self) -> None:
        super()._finish()
        if hasattr(self, "agg"):
            self.agg.flush()


class PerfRecordProfileRunner(ProfileWorker):
    """perf record -a -g at `freq` Hz in perf's pipe format, read here (profile/perfdata.py) rather
    than printed by `perf script` per sample: one long-lived `perf script` names each address it has
    not named before, the rest comes from the records and caches. Every `rotate` s the samples read so far are
    stored, raw and pre-aggregated (profile/agg.py). If perf dies, both are restarted with back-off.
    The result is the same as ChunkedProfileRunner's full `perf script` (tests/test_profile.py); at
    49 Hz it costs about a seventh of its CPU per sample (benchmarks/profile_cost.py). The fallback of
    ProfileRunner where the direct reader (profile/direct.py) cannot run.

    perf record and perf script are started from this runner's thread with a parent-death signal
    (children.spawn), so neither outlives nodesleuth; perf record writes only to its pipe, so there
    is no scratch file and no reaper process."""

    method = "perf"
    PENDING_LIMIT = 2_000_000  # samples held for stacks perf script has not named yet (it fell behind)

    def __init__(self, sink, freq: int = 49, rotate: float = 10.0, cpus: str | None = None,
                 buffer_kb: int = 0, store: bool = True, on_batch=None):
        super().__init__(sink, freq, rotate, cpus, buffer_kb, store, on_batch)  # buffer_kb: perf's ring per CPU
        # no scratch directory: pipe mode keeps nothing on disk (one made here was left behind by every
        # runner that never ran)
        self.perf = shutil.which("perf")
        self.rec: subprocess.Popen | None = None
        self.namer: ScriptNamer | None = None
        self.log = None

    def start(self) -> bool:
        if not self.perf:
            self.error = "perf is not installed"
            return False
        self._start_thread()
        self.started.wait(30)
        return self.rec is not None

    def _start_perf(self) -> None:
        # perf's messages go to an unlinked file: nothing is left on disk if nodesleuth is killed
        # (perf record, writing to a pipe, may die of SIGPIPE before its reaper learns why)
        if self.log is not None:
            self.log.close()
        log = self.log = tempfile.TemporaryFile()
        try:
            # --no-bpf-event: perf 6.1's script dies on PERF_RECORD_KSYMBOL in pipe mode ("failed to
            # process type: 17") whenever a BPF program loads on the host
            # -m: perf writes a CPU's ring out when it is half full; 128 KB per CPU at 49 Hz holds ~7 s of
            # deep stacks, so samples reach the store within about a rotation. At 64 KB a VM under
            # software emulation kept 60% of a hot core's samples over 27 s (a full ring drops what does
            # not fit, so deep stacks such as reclaim's go first). At higher rates the rings grow with
            # the rate. Losses are counted (PERF_RECORD_LOST) and stored.
            pages = 32
            while pages < 1024 and pages * 49 < 32 * self.freq:
                pages *= 2
            if self.buffer_kb:  # asked for: perf wants a power of two pages
                pages = 1 << max(0, (max(4, self.buffer_kb) // 4 - 1).bit_length())
            # perf writes only to the pipe, so there is no scratch file for a reaper to remove: perf
            # itself dies with this thread (PDEATHSIG), and no second Python starts (~0.1 CPU s a run)
            self.rec = spawn([self.perf, "record", "-q", "-k", "CLOCK_MONOTONIC", "--no-bpf-event", "-m",
                              str(pages), "-o", "-"] + self.record_args(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
            try:  # a pipe of 1 MB (the default maximum) rides out a reader busy for a second or two
                fcntl.fcntl(self.rec.stdout.fileno(), F_SETPIPE_SZ, 1 << 20)
            except OSError:
                pass
            self.namer = ScriptNamer(self.perf, log)
        except OSError as e:
            self.error = str(e)
            if self.rec is not None:
                self.rec.kill()
                self.rec.wait()
            self.rec = self.namer = None

    def _store(self, final: bool = False) -> None:
        # never wait while perf record runs: its rings fill in well under a second at high rates;
        # samples whose stacks are still being named are stored with the next batch. At the end, wait while perf script keeps answering (minutes under a slow VM's emulation); what
        # it has not named by then is stored with UNNAMED frames, never dropped
        if final:
            self.namer.answer(240.0, stall=30.0)
        else:
            self.namer.answer(0.0)
        c0 = time.process_time()
        stream = self.namer.stream
        b, unnamed = stream.take(final or len(stream.pending) > self.PENDING_LIMIT)
        self.unnamed_samples += unnamed
        if unnamed:
            self.error = (f"{self.unnamed_samples} samples stored with frames perf script had not named in time "
                          f"(shown as {UNNAMED}; it fell behind)")
        offset = wall_minus_monotonic()
        if stream.lost:
            lost, stream.lost = stream.lost, []
            self._store_lost(lost, offset, "perf lost {n} samples (its ring buffer overflowed: the machine was too busy)")
        self._store_batch(b, offset, c0)

    def _feed(self, chunk: bytes) -> None:
        c0 = time.process_time()
        try:
            self.namer.answer(0.0)  # addresses named so far name the stacks of this chunk
            self.namer.stream.feed(chunk)
        finally:
            self.ingest_cpu += time.process_time() - c0

    def _end_perf(self) -> None:
        """perf record has stopped: read the rest, let perf script name it, store it, reap both."""
        if self.rec is not None and self.rec.poll() is None:
            self.rec.send_signal(signal.SIGINT)
        if self.rec is not None:
            fd = self.rec.stdout.fileno()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                r = readable([fd], 1.0)
                if r:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    try:
                        self._feed(chunk)
                    except InputError as e:
                        self.error = str(e)
                        break
        if self.namer is not None:
            self.namer.stream.flush()
            self.namer.close()
            self._store(final=True)
            self.namer.wait()
            self.error = self.error or self.namer.error
        if self.rec is not None:
            try:
                self.rec.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.rec.kill()
                self.rec.wait()
            self.rec.stdout.close()

    def _perf_error(self) -> str:
        try:
            self.log.seek(0)
            err = self.log.read().decode(errors="replace").strip()
        except (OSError, ValueError, AttributeError):
            err = ""
        return err.splitlines()[-1] if err else f"perf exited with {self.rec.returncode}"

    def _loop(self) -> None:
        self._start_perf()
        self.started.set()
        backoff = 1.0
        try:
            while not self.stop_ev.is_set() and self.rec is not None:
                fd = self.rec.stdout.fileno()
                next_store = time.monotonic() + self.rotate
                eof = False
                while not self.stop_ev.is_set():
                    # asleep until perf writes, the next store or stop() (its pipe); a 0.5 s poll woke this
                    # thread twice a second for nothing (at 49 Hz perf writes every few seconds)
                    r = readable([fd, self._wake[0]], max(0.0, next_store - time.monotonic()))
                    if fd in r:
                        chunk = os.read(fd, 1 << 20)
                        if not chunk:
                            eof = True
                            break
                        try:
                            self._feed(chunk)
                        except InputError as e:  # not perf's format: stop this perf, restart below
                            self.error = str(e)
                            eof = True
                            break
                    if time.monotonic() >= next_store:
                        self._store()
                        next_store = time.monotonic() + self.rotate
                        backoff = 1.0
                if not eof:
                    break  # stopping: _finish stores the rest
                self._end_perf()
                self.error = self.error or self._perf_error()
                self.stop_ev.wait(backoff)
                backoff = min(30.0, backoff * 2)
                if not self.stop_ev.is_set():
                    self.restarts += 1
                    self._start_perf()
                else:
                    self.rec = self.namer = None
        finally:
            self._finish()

    def _finish(self) -> None:
        """On this thread: stop perf record (its end ends perf script), store the rest."""
        try:
            if self.rec is not None:
                self._end_perf()
        finally:
            self._flush_aggregates()
            if self.log is not None:
                self.log.close()


METHODS = ("auto", "direct", "perf")


def _say(msg: str) -> None:
    import sys

    print(f"nodesleuth: {msg}", file=sys.stderr, flush=True)


class ProfileRunner:
    """The continuous profiler: the direct ring-buffer reader (profile/direct.py) where it can run,
    else `perf record` read through its pipe (PerfRecordProfileRunner), chosen when it starts and said
    (`say`, stderr by default) when it falls back. `method`: auto | direct | perf; default from
    $NODESLEUTH_PROFILER, else auto. Attributes and counters (RunnerCounters) are the chosen runner's."""

    name = "profile"

    def __init__(self, sink, freq: int = 49, rotate: float = 10.0, cpus: str | None = None, buffer_kb: int = 0,
                 method: str | None = None, say=_say, store: bool = True, on_batch=None, root: Root = Root("/")):
        method = method or os.environ.get("NODESLEUTH_PROFILER") or "auto"
        if method not in METHODS:
            raise InputError("profiler method", f"{method!r}: expected one of {', '.join(METHODS)}")
        self._args = dict(sink=sink, freq=freq, rotate=rotate, cpus=cpus, buffer_kb=buffer_kb, store=store,
                          on_batch=on_batch)
        self.requested = method
        self.fallback: str | None = None  # why the direct reader is not used (auto)
        self.say = say
        from .direct import DirectProfileRunner

        self.impl = (PerfRecordProfileRunner(**self._args) if method == "perf"
                     else DirectProfileRunner(**self._args, root=root))

    def __getattr__(self, name):
        return getattr(self.__dict__["impl"], name)

    @property
    def method(self) -> str:
        return self.impl.method

    def record_args(self) -> list[str]:
        return self.impl.record_args()

    def start(self) -> bool:
        from .direct import DirectProfileRunner, Unavailable

        if isinstance(self.impl, DirectProfileRunner):
            try:
                self.impl.open()
            except Unavailable as e:
                if self.requested == "direct":
                    self.impl.error = str(e)
                    return False
                self.fallback = str(e)
                self.impl = PerfRecordProfileRunner(**self._args)
                if self.say is not None:
                    self.say(f"profile: the direct ring-buffer reader cannot run here ({e}); using perf record")
        return self.impl.start()

    def stop(self, timeout: float = 300) -> bool:
        return self.impl.stop(timeout)


class ChurnRunner(PerfRotator):
    """perf on cgroup:cgroup_mkdir/rmdir/release: who creates cgroups, and zombie lifetimes."""

    name = "churn"
    script_fields = "comm,pid,tid,cpu,time,event,trace"
    # tracepoint fields need no kernel symbol: without this, every chunk's `perf script` had the kernel format
    # all of /proc/kallsyms (seconds of a vCPU per chunk under emulation, the same output)
    script_args = ("--kallsyms=/dev/null",)

    def record_args(self) -> list[str]:
        from ..collect.churn import EVENTS

        args = ["-a"]
        for ev in EVENTS:
            args += ["-e", ev]
        return args

    def store_chunk(self, script_text: str, offset: float, path: str) -> int:
        from ..model.churn import parse_script

        evs = parse_script(script_text)
        if evs:
            self.sink.write(CHURN, evs, offset)
        return len(evs)
