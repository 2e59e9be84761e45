"""The samples of a stored time range as global columns (Samples) and the filter every query
applies to them (Filter): the shape loading produces and flame graphs, heatmaps and top functions read.
Each stack's frame classes (model/frames.py) are worked out here, once per stack of the table
(`Samples.classes`), and read by whoever counts them (explain's core profile, its dose-response)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import frames
from .parse import is_clock


@dataclass
class Filter:
    cpus: set[int] | None = None
    pids: set[int] | None = None
    comms: set[str] | None = None
    cgroup_pids: set[int] | None = None  # pids that were in a cgroup (resolved by the caller)
    keep_idle: bool = False


@dataclass
class Samples:
    """Samples of a time range as global columns with one stack table."""

    t: np.ndarray
    cpu: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    comm: np.ndarray  # index into comms
    stack: np.ndarray  # index into stacks
    comms: list[str]
    stacks: list[tuple[str, ...]]
    idle: np.ndarray  # per stack id: bool
    problems: list = field(default_factory=list)
    period: np.ndarray | None = None  # perf's period per sample (0: not printed)
    pid_known: np.ndarray | None = None  # False where perf printed only a tid (pid then holds the tid)
    event: str = ""  # the sampled event(s), `,`-joined
    count: np.ndarray | None = None  # samples each row stands for (pre-aggregated rows); None: one each
    # frames.classify of each stack id, -1 until asked (classes()); shared by every masked() view of this table
    _classes: list = field(default_factory=list, repr=False, compare=False)
    # stack -> frames.classify bits of stacks other tables of the same recording classified (explain/load.py
    # Recording.samples hands its own to every range it loads), so a stack is classified once per recording
    known: dict | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.t)

    def masked(self, m: np.ndarray) -> "Samples":
        """The samples where m is true, sharing the stack and comm tables."""
        return Samples(self.t[m], self.cpu[m], self.pid[m], self.tid[m], self.comm[m], self.stack[m], self.comms,
                       self.stacks, self.idle, self.problems, None if self.period is None else self.period[m],
                       None if self.pid_known is None else self.pid_known[m], self.event,
                       None if self.count is None else self.count[m], self._classes, self.known)

    def classes(self, ids=None) -> np.ndarray:
        """The frame classes (model/frames.classify bits: memcg, reclaim, lock, softirq, kernel leaf, vDSO leaf)
        of the stacks `ids` (default: every stack of the table), each stack classified once whichever view of
        the table asks: the one classification of a sample the profile's readers share."""
        if not self._classes:
            self._classes.append(np.full(len(self.stacks), -1, dtype=np.int16))
        got = self._classes[0]
        if len(got) < len(self.stacks):  # a table grows only by appending
            got = self._classes[0] = np.concatenate([got, np.full(len(self.stacks) - len(got), -1, np.int16)])
        ids = np.arange(len(self.stacks)) if ids is None else np.asarray(ids, dtype=np.int64)
        known = {} if self.known is None else self.known
        for i in np.unique(ids[got[ids] < 0]).tolist():
            st = self.stacks[i]
            c = known.get(st)
            if c is None:
                c = known[st] = frames.classify(st)
            got[i] = c
        return got[ids]

    def total(self, m: np.ndarray) -> int:
        return int(m.sum()) if self.count is None else int(self.count[m].sum())

    @property
    def clock(self) -> bool:
        """Samples are slices of time (a clock event), so per-CPU busy shares can be read from them."""
        return not self.event or all(is_clock(e) for e in self.event.split(",") if e)

    def select(self, f: Filter) -> np.ndarray:
        m = np.ones(len(self.t), dtype=bool)
        if f.cpus is not None:
            m &= np.isin(self.cpu, list(f.cpus))
        pids = f.pids if f.cgroup_pids is None else (f.cgroup_pids if f.pids is None else f.pids & f.cgroup_pids)
        if pids is not None:
            m &= np.isin(self.pid, list(pids))
        if f.comms is not None:
            ids = [i for i, c in enumerate(self.comms) if c in f.comms]
            m &= np.isin(self.comm, ids)
        if not f.keep_idle:
            m &= ~self.idle[self.stack] | (self.pid != 0)
        return m
