"""Decoding the rings' records in bulk: raw records -> Batch (numpy columns in time order, stacks
named as perf script names them). Fixed offsets for the one sample type asked for and a callchain
hash per sample, so Python's per-sample work is a record-length walk; a stack is named once, when
its (process, map generation, callchain) is first seen (profile/stacknames.py, profile/procs.py)."""

from __future__ import annotations

import numpy as np

from ..node.root import Root
from .arrays import distinct
from .parse import Batch
from .ringbuf import CONTEXT_HV, CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER, EXIT, FORK, SAMPLE
from .stacknames import MIX_GEN, MIX_GEN2, MIX_PID, MULT, MULT2, StackNames
from .worker import EVENT

MASK32 = np.uint64(0xFFFFFFFF)


def _record_offsets(buf: bytes) -> list[int]:
    """The byte offset of each whole record in `buf`: the one per-record Python step, a walk over lengths."""
    n = len(buf)
    offs = []
    app = offs.append
    off = 0
    while off + 8 <= n:
        app(off)
        sz = buf[off + 6] | (buf[off + 7] << 8)
        if sz < 8:  # not a record: stop here (cannot happen with whole ring reads)
            offs.pop()
            off = n
            break
        off += sz
    if off > n:  # a cut record (cannot happen with whole ring reads)
        offs.pop()
    return offs


class Decoder(StackNames):
    """Raw ring records -> Batch (numpy columns, stacks named as perf script names them)."""

    def __init__(self, max_stack: int = 127, root: Root = Root("/")):
        super().__init__(max_stack, root)
        self.samples = 0

    def decode(self, buf: bytes) -> Batch:
        """All records of `buf` (whole records from the rings, any CPU order): side-band applied in
        time order, samples as a Batch in time order."""
        b = Batch(events=[EVENT])
        n = len(buf)
        if n < 8:
            return b
        u = np.frombuffer(buf, dtype="<u8", count=n // 8)
        o = np.array(_record_offsets(buf), dtype=np.int64) >> 3
        hdr = u[o]
        typ = (hdr & MASK32).astype(np.int64)
        size8 = (hdr >> np.uint64(51)).astype(np.int64)
        is_s = typ == SAMPLE
        if self._snap is not None:
            self._merge_snapshot()
        changes: dict[int, list] = {}
        comm_changes: dict[int, list] = {}
        self._side_bands(buf, u, o, hdr, typ, size8, is_s, changes, comm_changes)
        s = o[is_s]
        if len(s):
            self._sample_columns(b, u, s, size8[is_s], changes, comm_changes)
        self._settle(comm_changes)
        return b

    def _side_bands(self, buf: bytes, u: np.ndarray, o: np.ndarray, hdr: np.ndarray, typ: np.ndarray,
                    size8: np.ndarray, is_s: np.ndarray, changes: dict, comm_changes: dict) -> None:
        """The batch's side-band records applied in time order, noting the map and name changes samples need."""
        sb = np.flatnonzero(~is_s)
        if not len(sb):
            return
        so = o[sb]
        sz8 = size8[sb]
        ok = sz8 >= 4
        ts = np.where(ok, u[np.where(ok, so + sz8 - 2, 0)], 0)
        # processes that start and exit within this batch without a sample (a busy host's churn) need
        # no maps: their MMAP2 records are skipped, and no copy of their parent's maps is made at their
        # FORK or exec, unless they forked (a child starts with their maps)
        u32 = np.frombuffer(buf, dtype="<u4", count=len(buf) // 4)
        st = typ[sb]
        ex = so[st == EXIT]
        fk = so[st == FORK]
        self._skip = set()
        if len(ex):
            ex = ex[u32[ex * 2 + 2] == u32[ex * 2 + 4]]  # a process's exit (pid == tid), not a thread's
            gone = set(u32[ex * 2 + 2].tolist())
            if gone:
                sampled = set(distinct(u32[o[is_s] * 2 + 4]).tolist())  # the pid of each sample
                parents = set(u32[fk * 2 + 3].tolist()) if len(fk) else set()
                self._skip = gone - sampled - parents
        for i in np.argsort(ts, kind="stable").tolist():
            t = int(ts[i])
            a = int(so[i]) * 8
            h = int(hdr[sb[i]])
            self.side_band(h & 0xFFFFFFFF, (h >> 32) & 0xFFFF, buf[a:a + int(sz8[i]) * 8], t, changes,
                           comm_changes)

    def _sample_columns(self, b: Batch, u: np.ndarray, s: np.ndarray, size8: np.ndarray, changes: dict,
                 comm_changes: dict) -> None:
        """The sample records (at word offsets `s`) as `b`'s columns, in time order, with their stacks."""
        nr = u[s + 6].astype(np.int64)
        room = size8 - 7
        nr = np.minimum(nr, np.maximum(room, 0))
        pt = u[s + 2]
        pid = (pt & MASK32).astype(np.uint32).view(np.int32).astype(np.int64)
        tid = (pt >> np.uint64(32)).astype(np.uint32).view(np.int32).astype(np.int64)
        t = u[s + 3]
        cpu = (u[s + 4] & MASK32).astype(np.int64)
        period = u[s + 5]
        order = np.argsort(t, kind="stable")
        s, nr, pid, tid, t, cpu, period = (x[order] for x in (s, nr, pid, tid, t, cpu, period))
        m = len(s)
        gen = self._gens(pid, t, changes)
        kid, uid = self._parts(u, s, nr, pid, gen)
        b.stack_ids = self._stacks(b, kid, uid)
        b.comm_ids = self._comms(b, pid, tid, t, comm_changes)
        b.times = (t // np.uint64(1000)).astype(np.float64) / 1e6
        b.cpus, b.pids, b.tids, b.periods = cpu, pid, tid, period.astype(np.uint64)
        b.event_ids = [0] * m
        self.samples += m

    def _stacks(self, b: Batch, kid: np.ndarray, uid: np.ndarray) -> np.ndarray:
        """Each sample's stack id in `b.stacks` (user part then kernel part), one per distinct pair of parts."""
        combo = (kid << np.int64(32)) | uid
        ucombo = distinct(combo)
        inv = np.searchsorted(ucombo, combo)
        stack_ix: dict[tuple, int] = {}
        local = np.empty(len(ucombo), dtype=np.int64)
        names, combos = self.part_names, self.combos
        for j, c in enumerate(ucombo.tolist()):
            st = combos.get(c)
            if st is None:
                st = combos[c] = names[c & 0xFFFFFFFF] + names[c >> 32]
            x = stack_ix.get(st)
            if x is None:
                x = stack_ix[st] = len(b.stacks)
                b.stacks.append(st)
            local[j] = x
        return local[inv]

    def _parts(self, u: np.ndarray, s: np.ndarray, nr: np.ndarray, pid: np.ndarray, gen: np.ndarray):
        """(kernel part id, user part id) of each sample. A callchain is its kernel part (from the
        PERF_CONTEXT_KERNEL marker) then its user part (from PERF_CONTEXT_USER): the kernel part names
        the same in every process, the user part per process and map generation. Each part is hashed
        twice (64-bit sums of its entries times per-position odd multipliers, positions counted from
        the part's start) and named once, when first seen."""
        m = len(s)
        total = int(nr.sum())
        hk1 = np.zeros(m, dtype=np.uint64)
        hk2, hu1, hu2 = hk1.copy(), hk1.copy(), hk1.copy()
        umark = nr.copy()  # where the user part starts (nr: none)
        corrupt = None
        if total:
            first = np.cumsum(nr) - nr
            rep = np.repeat(np.arange(m), nr)
            pos = np.arange(total, dtype=np.int64) - first[rep]
            vals = u[(s + 7)[rep] + pos]
            at = np.flatnonzero(vals == np.uint64(CONTEXT_USER))[::-1]
            umark[rep[at]] = pos[at]  # reversed: the first marker of a chain wins
            in_user = pos >= umark[rep]
            rel = np.where(in_user, pos - umark[rep], pos) & 1023
            p1, p2 = vals * MULT[rel], (vals ^ MIX_PID) * MULT2[rel]
            zero = np.uint64(0)
            nz = np.flatnonzero(nr > 0)
            starts = first[nz]
            for h, prod, mask in ((hk1, p1, ~in_user), (hk2, p2, ~in_user), (hu1, p1, in_user), (hu2, p2, in_user)):
                h[nz] = np.add.reduceat(np.where(mask, prod, zero), starts)
            # an entry in the context range that is no context (a corrupt frame-pointer walk, a guest
            # context): perf discards the whole chain ("invalid callchain context"), so the stack is empty
            odd = (vals >= np.uint64(CONTEXT_MAX)) & (vals != np.uint64(CONTEXT_KERNEL)) & (
                vals != np.uint64(CONTEXT_USER)) & (vals != np.uint64(CONTEXT_HV))
            if odd.any():
                corrupt = distinct(rep[odd])
        klen = umark.astype(np.uint64)
        ulen = (nr - umark).astype(np.uint64)
        hk1 += klen * MIX_GEN
        hu1 += ulen * MIX_GEN ^ pid.astype(np.uint64) * MIX_PID ^ gen.astype(np.uint64) * MIX_GEN2
        if corrupt is not None:  # empty parts: (0, 0, 0) is the empty kernel part; users' keyed apart
            hk1[corrupt], hk2[corrupt], umark[corrupt], nr = 0, 0, 0, nr.copy()
            nr[corrupt] = 0
            hu1[corrupt], hu2[corrupt] = 0, 0
        kid = self._ids(hk1, hk2, u, s, umark, nr, pid, gen, kernel=True)
        uid = self._ids(hu1, hu2, u, s, umark, nr, pid, gen, kernel=False)
        return kid, uid

    def _settle(self, comm_changes: dict) -> None:
        """After a batch: process state settled, tables bounded."""
        self.forget_parts(self.exited)
        self._settle_processes(comm_changes)
        self._bound_names()
