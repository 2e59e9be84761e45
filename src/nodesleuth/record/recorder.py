"""`nodesleuth record`: the 1 Hz loop. Ticks are aligned to the wall-clock second, so two nodes'
recordings line up, and a tick that overruns skips ahead instead of bunching up."""

from __future__ import annotations

import gc
import resource
import signal
import sys
import time
import dataclasses
from dataclasses import dataclass

from ..node.root import Root
from ..model.errors import InputError
from ..collect.sampler import RECORD, Sampler
from ..collect.cgroups import UNMOUNTED
from ..store.catalog import ROLLUP, TICKS, TICKS10
from ..store.rollup import Rollup
from ..store.store import StoreWriter
from ..store.tier import Aggregator


@dataclass
class RecordOptions:
    store: str
    root: str = "/"
    interval: float = 1.0
    duration: float | None = None  # None: until SIGTERM/SIGINT
    retention: float | None = None  # schema 2's one age bound for every stream; None: `tiers`
    tiers: dict | None = None  # retention tier -> (seconds, bytes) (store/catalog.py KEEP); None: defaults
    max_bytes: int | None = 2 << 30
    segment_seconds: float = 3600.0
    live_every: float = 60.0
    units_every: int = 5
    units_timeout: float = 120.0  # a units read waits this long for a busy systemd (never a tick)
    threads: bool = True
    ns_pid: int | None = None
    kmsg: str | None = None
    fsync_every: int = 1
    procs_full_every: int = 3  # see collect/procs.py: busy processes are still read every second
    procs_full_max: int = 10  # full rescans deferred up to this while every CPU's busy time is explained
    profile: bool = False  # continuous perf record -a -g alongside
    profile_freq: int = 49
    profile_rotate: float = 10.0
    profile_buffer_kb: int = 0  # perf's ring per CPU; 0: from the rate (profile/runner.py)
    churn: bool = False  # perf on the cgroup mkdir/rmdir/release tracepoints alongside


def self_usage() -> tuple[float, int]:
    """CPU seconds and max RSS (KiB) of this process: the recorder measures itself."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss


_LIBC = None


M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 256 << 10
ARENA_MAX = 2


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes

        try:
            _LIBC = ctypes.CDLL(None)
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
            _LIBC.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC


def bound_heap() -> bool:
    """Keep big transient blocks off the C heap, and the heap in few arenas (glibc's mallopt). By
    default glibc raises its mmap threshold to the size of each mmapped block freed (up to 32 MB): once
    the profiler had freed a symbol table's read or a fork storm's ring read, blocks of that size came
    from the heap, where what stays allocated between them keeps the freed memory in RSS (85 MB free of
    177 MB of malloc arenas at 13 min). Fixed at 256 KB, a block that size or larger is its own mapping,
    returned to the kernel when freed. And each thread (the 1 Hz loop, the profiler, the maps reader,
    c++filt's feeder) may otherwise get an arena of its own, each with its own free memory: two serve
    them all (the threads mostly wait). False where there is no glibc (musl)."""
    libc = _libc()
    if not libc:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))


# ticks between two release_free_heap() of the profiling recorder: every 5 min, the pages the profiler's
# batches freed stayed in RSS until the next trim (12.5 MB of 142 released by a trim at 18 min of churn,
# issue 38): each minute now (a trim of a 100 MB fragmented heap took 2.6 ms here)
TRIM_EVERY = 60


def release_free_heap() -> bool:
    """Hand the C allocator's free pages back to the kernel (glibc's malloc_trim(0)). The profiler's
    work comes in bursts (a ring read of a fork storm, a big binary's symbol table read then dropped)
    and the memory they free between blocks still in use stays in RSS otherwise: measured at 10 min of
    `record --profile` on a busy host, 37 MB of 294. False where there is none (musl)."""
    libc = _libc()
    if not libc:
        return False
    libc.malloc_trim(0)
    return True


class Recorder:
    def __init__(self, opt: RecordOptions, on_tick=None):
        self.opt = opt
        self.root = Root(opt.root)
        kmsg: bool | str = opt.kmsg or self.root.exists("/dev/kmsg")
        preset = dataclasses.replace(RECORD, threads=opt.threads, live_every=opt.live_every,
                                     units_every=opt.units_every, procs_full_every=opt.procs_full_every,
                                     procs_full_max=opt.procs_full_max)
        self.sampler = Sampler.preset(self.root, preset, kmsg=kmsg, ns_pid=opt.ns_pid,
                                      units_timeout=opt.units_timeout)
        tiers = opt.tiers
        if tiers is None and opt.retention is None:
            from ..store.catalog import KEEP_DEFAULT

            tiers = {k: (v, None) for k, v in KEEP_DEFAULT.items()}
        self.store = StoreWriter(opt.store, opt.retention, opt.max_bytes, opt.segment_seconds, opt.fsync_every,
                                 tiers=tiers)
        self.agg = Aggregator()
        self.rollup = Rollup()
        self._unread_said: set[str] = set()
        self.stop = False
        self._said = 0.0
        self._skipped_said = 0
        self._drops_said = 0
        self._kmsg_said = (0.0, 0, 0)  # (when, records dropped, read) at the last flood warning
        self.on_tick = on_tick
        self.ticks = 0
        self.bytes = 0
        self.profiler = None
        if opt.profile:
            from ..profile.runner import ProfileRunner

            self.profiler = ProfileRunner(self.store, freq=opt.profile_freq, rotate=opt.profile_rotate,
                                          buffer_kb=opt.profile_buffer_kb, root=self.root)
        self.churn = None
        if opt.churn:
            from ..profile.runner import ChurnRunner

            self.churn = ChurnRunner(self.store, rotate=opt.profile_rotate, workdir=self.store.workdir("churn"))

    def _signal(self, *_):
        self.stop = True

    def _say_store_trouble(self, every: float = 60.0) -> None:
        """A full or slow disk is said once a minute on stderr, never per tick, and never fatal."""
        now = time.time()
        if now - self._said < every:
            return
        st = self.store
        msgs = []
        if st.skipped > self._skipped_said or st.full_drops > self._drops_said:
            msgs.append(f"store {st.dir}: disk full: {st.full_drops - self._drops_said} oldest segment(s) dropped "
                        f"to make room, {st.skipped - self._skipped_said} record(s) not written; recording goes on")
            self._skipped_said, self._drops_said = st.skipped, st.full_drops
        slow = st.syncer.slow if st.syncer is not None else []
        if slow:
            msgs.append(f"store {st.dir}: {len(slow)} fsync(s) took over a second (slowest {max(slow):.1f} s); "
                        "durability lags, the 1 Hz loop does not")
            slow.clear()
        for m in msgs:
            print(f"nodesleuth: warning: {m}", file=sys.stderr, flush=True)
        if msgs:
            self._said = now

    def _say_kernel_log(self, every: float = 60.0) -> None:
        """A kernel-log flood the reader could not keep up with is said once a minute on stderr (each second's
        count and skipped seq ranges are in the store's kernel_log section)."""
        r = self.sampler.kmsg
        if r is None:
            return
        a = r.account()
        if a["dropped"] == self._kmsg_said[1] or time.time() - self._kmsg_said[0] < every:
            return
        when, lost, read = self._kmsg_said
        print(f"nodesleuth: warning: kernel log {r.path}: {a['dropped'] - lost} record(s) dropped (overwritten by "
              f"the kernel before they could be read: a flood), {a['read'] - read} read"
              + (f" since {time.strftime('%H:%M:%S', time.localtime(when))}" if when else "")
              + "; recording goes on", file=sys.stderr, flush=True)
        self._kmsg_said = (time.time(), a["dropped"], a["read"])

    def _say_unread(self) -> None:
        """A /proc or /sys file that cannot be read is said once on stderr; the rest is still recorded.
        A section that reads again (a systemd that answers again) is said too, and a later failure again."""
        for section in self.sampler.recovered:
            if section in self._unread_said:
                self._unread_said.discard(section)
                print(f"nodesleuth: {section} read again; recording them", file=sys.stderr, flush=True)
        self.sampler.recovered.clear()
        for section, why in self.sampler.problems.items():
            if section not in self._unread_said:
                self._unread_said.add(section)
                print(f"nodesleuth: note: {section}: {why}" if section == UNMOUNTED else
                      f"nodesleuth: warning: could not read {section}: {why}; recording without it",
                      file=sys.stderr, flush=True)

    def _aggregate(self, done) -> None:
        """A closed 10 s window: its aggregate into the 10 s tier (store/tier.py)."""
        if done is None:
            return
        tk, extra = done
        self.store.write(TICKS10, tk, extra=extra)

    def run(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._signal)
        self.store.enforce()  # a restart with new bounds applies them at once, not a minute later
        if self.profiler is not None:
            bound_heap()
        for runner in (self.profiler, self.churn):
            if runner is not None and not runner.start():
                raise InputError("perf", runner.error or "cannot start perf")
        if self.profiler is not None:
            # the profiler's start (kallsyms parsed: ~40 MB of transient objects for a 120k-symbol kernel)
            # freed most of what it used: handed back now, not at the first periodic trim a minute later
            release_free_heap()
        self.sampler.prime()
        # what start-up made (imports, rules, the first census) lives as long as the process: out of
        # the cyclic collector's way, so each collection walks only what ticks allocate
        gc.collect()
        gc.freeze()
        # --duration counts from here, once perf and the sampler are ready: on a loaded host their start
        # takes seconds, which would otherwise come out of the ticks asked for
        start = time.time()
        nxt = (int(start / self.opt.interval) + 1) * self.opt.interval
        try:
            while not self.stop:
                if self.opt.duration is not None and time.time() - start >= self.opt.duration:
                    break
                d = nxt - time.time()
                if d > 0:
                    time.sleep(d)
                if self.stop:
                    break
                tick = self.sampler.tick()
                cpu_s, rss = self_usage()
                self.bytes += self.store.write(TICKS, tick, extra={"self": [round(cpu_s, 3), rss]})
                self._aggregate(self.agg.add(tick))
                done = self.rollup.add(tick)
                if done is not None:
                    self.store.write(ROLLUP, done)
                self.ticks += 1
                if self.ticks % 60 == 0:
                    self.store.enforce()
                if self.ticks % TRIM_EVERY == 0 and self.profiler is not None:
                    release_free_heap()
                self._say_store_trouble()
                self._say_unread()
                self._say_kernel_log()
                if self.on_tick:
                    self.on_tick(self, tick)
                nxt += self.opt.interval
                while nxt <= time.time():  # overran: skip the missed slots, never bunch up
                    nxt += self.opt.interval
        finally:
            self._aggregate(self.agg.flush())
            last = self.rollup.flush()
            if last is not None:
                self.store.write(ROLLUP, last)
            runners = [r for r in (self.profiler, self.churn) if r is not None]
            for runner in runners:  # both stop at once: each then stores its last chunks
                runner.stop_ev.set()
            for runner in runners:
                done = runner.stop()
                if runner.error or runner.restarts or runner.dropped_chunks or not done:
                    print(f"nodesleuth: warning: {runner.name}: {runner.chunks} chunks stored, "
                          f"{runner.restarts} perf restarts, {runner.dropped_chunks} chunks dropped"
                          + (f", {runner.lost_samples} samples lost by perf (ring buffer full)"
                             if runner.lost_samples else "")
                          + (f", {runner.unnamed_samples} samples stored with unnamed frames"
                             if runner.unnamed_samples else "")
                          + ("" if done else "; its last chunks were not stored in time")
                          + (f"; last error: {runner.error}" if runner.error else ""), file=sys.stderr)
            self._say_kernel_log(every=0.0)  # what the last minute dropped, said before exit
            self.sampler.close()
            self.store.close()
