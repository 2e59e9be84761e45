"""Where each CPU's time goes, by code family, over a recent window of the profile: the fleet-wide
profile signal the exporter publishes (nodesleuth_profile_cpu_share_ratio{cpu, family}).

Families are fixed (bounded cardinality: CPUs x 5) and decided per stack, first match wins:
- idle: the idle task idling (parse.is_idle: softirq/IRQ work on top of idle is not idle);
- memcg: a kernel frame of memory-cgroup code, the walk or reclaim the incident's cores were pinned
  in (model/frames.py's classify, the same classification explain uses);
- softirq: a kernel frame of softirq/NAPI/IRQ handling (model/frames.py's SOFTIRQ);
- kernel: any other sample whose leaf is in the kernel;
- user: the rest (user code, vDSO included).
With a clock event (cpu-clock: every sample is 1/F s of one CPU, idle or busy) a CPU's shares over the
window sum to 1.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..model import frames
from .arrays import distinct
from .parse import is_idle

FAMILIES = ("memcg", "softirq", "kernel", "user", "idle")
MEMCG, SOFTIRQ, KERNEL, USER, IDLE = range(5)


def family(pid: int, stack: tuple[str, ...]) -> int:
    if is_idle(pid, stack):
        return IDLE
    c = frames.classify(stack)
    if c & frames.IS_MEMCG:
        return MEMCG
    if c & frames.IS_SOFTIRQ:
        return SOFTIRQ
    if c & frames.KERNEL_LEAF and not c & frames.VDSO_LEAF:
        return KERNEL
    return USER


class CpuShares:
    """Per-second counts of (cpu, family), kept for `window` seconds; shares() over the last window.
    Thread-safe: a profiler thread adds, the exporter's scrapes read."""

    def __init__(self, window: float = 60.0):
        self.window = float(window)
        self.counts: dict[int, dict[int, int]] = {}  # second -> {cpu * 8 + family: n}
        self.latest: float | None = None  # wall time of the latest sample seen
        self.samples = 0
        self.lock = threading.Lock()
        self._fam: dict[tuple, int] = {}  # (idle pid?, stack) -> family

    def add(self, t: np.ndarray, cpu: np.ndarray, pid: np.ndarray, stack_ids: np.ndarray, stacks) -> None:
        """Samples as columns: wall-clock times, CPUs, pids, stack ids into `stacks`."""
        if not len(t):
            return
        cache = self._fam
        if len(cache) > 100_000:
            cache.clear()
        # the idle rule looks at the pid (0): one family per (stack, pid is 0)
        zero = pid == 0
        key = stack_ids.astype(np.int64) * 2 + zero
        uk = distinct(key)
        inv = np.searchsorted(uk, key)
        fam_of = np.empty(len(uk), dtype=np.int64)
        for j, k in enumerate(uk.tolist()):
            st = stacks[k >> 1]
            ck = (k & 1, st)
            f = cache.get(ck)
            if f is None:
                f = cache[ck] = family(0 if k & 1 else 1, st)
            fam_of[j] = f
        fam = fam_of[inv]
        sec = np.floor(t).astype(np.int64)
        comb = (sec - sec.min()) * (1 << 24) + cpu.astype(np.int64) * 8 + fam
        uc = distinct(comb)
        n = np.bincount(np.searchsorted(uc, comb), minlength=len(uc))
        base = int(sec.min())
        with self.lock:
            for c, k in zip(uc.tolist(), n.tolist()):
                s, rest = base + (c >> 24), c & ((1 << 24) - 1)
                d = self.counts.setdefault(s, {})
                d[rest] = d.get(rest, 0) + k
            tmax = float(t.max())
            self.latest = tmax if self.latest is None else max(self.latest, tmax)
            self.samples += len(t)
            cut = int(self.latest - self.window) - 1
            for s in [s for s in self.counts if s < cut]:
                del self.counts[s]

    def add_batch(self, b, offset: float = 0.0) -> None:
        """A profile Batch (profile/parse.py) with perf-clock times + offset = wall clock."""
        self.add(np.asarray(b.times, dtype=np.float64) + offset, np.asarray(b.cpus), np.asarray(b.pids),
                 np.asarray(b.stack_ids), b.stacks)

    def shares(self, end: float | None = None) -> tuple[dict[int, list[float]], float]:
        """({cpu: [share per family in FAMILIES order]}, seconds covered) over [end - window, end]
        (end: the latest sample)."""
        with self.lock:
            if self.latest is None:
                return {}, 0.0
            end = self.latest if end is None else end
            lo = int(end - self.window) + 1  # whole seconds: (end - window, end]
            tot: dict[int, int] = {}
            for s, d in self.counts.items():
                if lo <= s <= int(end):
                    for k, n in d.items():
                        tot[k] = tot.get(k, 0) + n
            first = min((s for s in self.counts if s >= lo), default=int(end))
        per: dict[int, list[int]] = {}
        for k, n in tot.items():
            per.setdefault(k >> 3, [0] * len(FAMILIES))[k & 7] += n
        out = {cpu: [x / max(1, sum(v)) for x in v] for cpu, v in per.items()}
        return out, float(int(end) - first + 1) if per else 0.0


class StoreShares:
    """CpuShares over a recorder's store: the last `window` seconds of its raw profile batches, read
    again when a scrape finds the result older than `every` seconds."""

    def __init__(self, store: str, window: float = 60.0, every: float = 5.0):
        self.store, self.window, self.every = store, window, every
        self.t = -1e18
        self.result: tuple[dict, float, float | None] = ({}, 0.0, None)
        self.error: str | None = None
        self.lock = threading.Lock()

    def get(self) -> tuple[dict[int, list[float]], float, float | None]:
        """(shares, seconds covered, latest sample time)."""
        with self.lock:
            if time.monotonic() - self.t < self.every:
                return self.result
            self.t = time.monotonic()
            try:
                self.result = self._read()
                self.error = None
            except Exception as e:  # noqa: BLE001 - a store being written or gone: keep the last result
                self.error = f"{type(e).__name__}: {e}"
            return self.result

    def _read(self):
        from ..store.catalog import PROFILE
        from ..store.store import StoreReader
        from .codec import SPAN, Decoded

        r = StoreReader(self.store)
        span = r.span(PROFILE)
        if span is None:
            return {}, 0.0, None
        end = span[1]
        cs = CpuShares(self.window)
        for _t, payload in r.read(PROFILE, end - self.window - 3 * SPAN, end + SPAN):
            d = Decoded(payload)
            m = d.t > end - self.window - 1
            if m.any():
                cs.add(d.t[m], d.cpu[m], d.pid[m], d.stack[m].astype(np.int64), _Lazy(d))
        sh, covered = cs.shares()
        return sh, covered, cs.latest


class _Lazy:
    """A Decoded frame's stacks by index, built only for the stacks used."""

    def __init__(self, d):
        self.d = d

    def __getitem__(self, i: int):
        return self.d.stack_names(i)
