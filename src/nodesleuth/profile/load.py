"""Loading a store range's profile batches into one Samples (load, assemble), and the samples perf
lost in a range (lost_samples)."""

from __future__ import annotations

import numpy as np

from ..model.errors import InputError
from ..store.segment import Problem
from ..store.catalog import PROFILE, PROFILE_LOST
from ..store.store import StoreReader
from .arrays import distinct, intern
from .codec import SPAN, Decoded, decode_lost
from .parse import idle_stacks
from .samples import Samples

LOST_AFTER = 5.0  # s: perf notes a loss once its ring has room again, stamped then


def lost_samples(reader: StoreReader, t0: float, t1: float, cpus: set[int] | None = None) -> int:
    """Samples perf lost (its ring buffer full) on `cpus` (None: any) or an unknown CPU in [t0, t1],
    counting notes up to LOST_AFTER s after t1 (an upper bound). A damaged record is a store problem."""
    if not reader.segments(PROFILE_LOST):
        return 0
    where = f"{reader.dir}/{PROFILE_LOST}"
    n = 0
    for _, payload in reader.read(PROFILE_LOST, t0 - 60, t1 + LOST_AFTER):
        try:
            rows = decode_lost(payload, where)
        except InputError as e:
            reader.problems.append(Problem(where, 0, str(e)))
            continue
        n += sum(k for t, c, k in rows if t0 <= t <= t1 + LOST_AFTER and (cpus is None or c in cpus or c == -1))
    return n


def load(reader: StoreReader, t0: float | None, t1: float | None, on_segment=None) -> Samples:
    """Read batches overlapping [t0, t1] (a batch covers up to its rotation period)."""
    slack = 3 * SPAN  # a batch is stamped with its first sample and covers at most SPAN (codec.encode_pieces)
    payloads = reader.read(PROFILE, None if t0 is None else t0 - slack, t1, on_segment)
    s = assemble((Decoded(p) for _, p in payloads), t0, t1)
    s.problems = list(reader.problems)
    return s


def assemble(decoded, t0: float | None = None, t1: float | None = None) -> Samples:
    """Decoded batches -> one Samples with global stack and comm tables."""
    parts = []
    stack_ix: dict[tuple[str, ...], int] = {}
    comm_ix: dict[str, int] = {}
    stacks: list[tuple[str, ...]] = []
    comms: list[str] = []
    events: list[str] = []
    for d in decoded:
        m = np.ones(len(d.t), dtype=bool)
        if t0 is not None:
            m &= d.t >= t0
        if t1 is not None:
            m &= d.t < t1
        if not m.any():
            continue
        for e in (d.event or "").split(","):
            if e and e not in events:
                events.append(e)
        # intern only the stacks the selected samples use (a 1 s query touches few of a batch's)
        used = distinct(d.stack[m])
        smap = np.zeros(len(d.stack_frames), dtype=np.int64)
        smap[used] = [intern(stack_ix, stacks, d.stack_names(i)) for i in used.tolist()]
        cmap = np.array([intern(comm_ix, comms, c) for c in d.comms], dtype=np.int64)
        parts.append((d.t[m], d.cpu[m], d.pid[m], d.tid[m], cmap[d.comm[m]] if len(cmap) else d.comm[m],
                      smap[d.stack[m]] if len(smap) else d.stack[m], d.period[m]))
    if parts:
        cols = [np.concatenate([p[i] for p in parts]) for i in range(7)]
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
    else:
        cols = [np.zeros(0, dtype=np.float64)] + [np.zeros(0, dtype=np.int64)] * 5 + [np.zeros(0, np.uint64)]
    known = cols[2] >= 0
    pid = np.where(known, cols[2], cols[3])
    idle = idle_stacks(stacks)
    return Samples(cols[0], cols[1], pid, cols[3], cols[4], cols[5], comms, stacks, idle, [], cols[6], known,
                   ",".join(events))
