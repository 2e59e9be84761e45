"""perf's pipe format (`perf record -o -`) read in Python, with `perf script` kept as the symbolizer
but asked only about addresses it has not named yet.

Why: `perf script` costs ~100-250 us per sample here (callchain resolution, symbol loading per
process, text), most of what profiling cost; the samples of a node repeat the same stacks and the
same addresses. So the records are read here (struct, fixed offsets for the sample_type we ask for).
A sample's stack is named from a cache: by its whole callchain, else address by address (kernel
addresses once for all processes; addresses in files by file identity + offset, from the MMAP/MMAP2
maps tracked as perf tracks them; addresses in no map are `[unknown]` as perf names them; anonymous/JIT
ones per address space, or once per map when perf found no /tmp/perf-PID.map symbol file for it). A sample with an unnamed address is forwarded to a long-lived
`perf script -F period,ip,sym,dso -i -` with its period replaced by a sequence number; its answer
names the stack and, when perf printed one line per address (no inlined frames), each address.
Side-band records (MMAP2, COMM, FORK, ...) are all forwarded, in the time order perf itself uses (its
ordered-events rounds), so perf names the forwarded samples exactly as in a full `perf script`.
comm/pid/tid/cpu/time/period come from the records, comm tracked as perf's thread table does (COMM;
FORK copies the parent's; 0/0 is `swapper`; an unknown thread is `:TID`). tests/test_profile.py
checks the stored result equals the full `perf script` path on a real recording.

Keys carry generations: a pid's changes on its MMAPs, exec COMMs and a new process's FORK; the
kernel's on kernel (pid -1) MMAPs and KSYMBOL records, so no name outlives the map that gave it.

Format: tools/perf/Documentation/perf.data-file-format.txt and include/uapi/linux/perf_event.h.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ..model.errors import InputError
from .parse import UNNAMED, Batch, frame_names

MAGIC = b"PERFILE2"
# record types (include/uapi/linux/perf_event.h, tools/lib/perf/include/perf/event.h)
MMAP, LOST, COMM, EXIT, FORK, SAMPLE, MMAP2, KSYMBOL = 1, 2, 3, 4, 7, 9, 10, 17
HEADER_ATTR, FINISHED_ROUND = 64, 68
USER_TYPE_START = 64
COMM_EXEC = 1 << 13  # PERF_RECORD_MISC_COMM_EXEC
CPUMODE_MASK = 7
# sample_type bits
S_IP, S_TID, S_TIME, S_ADDR, S_READ, S_CALLCHAIN, S_ID, S_CPU, S_PERIOD, S_STREAM_ID, S_RAW = (
    1, 2, 4, 8, 0x10, 0x20, 0x40, 0x80, 0x100, 0x200, 0x400)
S_IDENTIFIER = 0x10000
WANT = S_IP | S_TID | S_TIME | S_CALLCHAIN | S_CPU | S_PERIOD  # what ProfileRunner records (+ ID)
HDR = struct.Struct("<IHH")
Q = struct.Struct("<Q")
I32X2 = struct.Struct("<ii")  # pid/tid: signed, as perf prints them (-1)
ROUND = HDR.pack(FINISHED_ROUND, 0, 8)
# callchain context markers (u64 of the negative values in perf_event.h)
CONTEXT_KERNEL, CONTEXT_USER, CONTEXT_MAX = 2**64 - 128, 2**64 - 512, 2**64 - 4095
SCRIPT_FIELDS = "period,ip,sym,dso"
INF = float("inf")


@dataclass
class Layout:
    """Byte offsets inside a SAMPLE record, and of the time in other records' sample_id trailer."""

    sample_type: int
    ip: int = -1
    tid: int = -1
    time: int = -1
    cpu: int = -1
    period: int = -1
    callchain: int = -1
    id_time_from_end: int = 0  # in the sample_id_all trailer of non-sample records (0: none)
    id_cpu_from_end: int = 0
    fields: struct.Struct = struct.Struct("<iiQIIQ")  # from `tid`: pid, tid, time, [id,] cpu, res, period

    @classmethod
    def of(cls, sample_type: int, sample_id_all: bool) -> "Layout":
        if sample_type & WANT != WANT or sample_type & ~(WANT | S_ID | S_IDENTIFIER):
            raise InputError("perf record", f"unsupported sample_type {sample_type:#x} (want {WANT:#x} [+ID])")
        lo, off = cls(sample_type), 8
        if sample_type & S_IDENTIFIER:
            off += 8
        lo.ip, off = off, off + 8
        lo.tid, off = off, off + 8
        lo.time, off = off, off + 8
        if sample_type & S_ID:
            off += 8
        lo.cpu, off = off, off + 8
        lo.period, off = off, off + 8
        lo.callchain = off
        lo.fields = struct.Struct("<iiQQIIQ" if sample_type & S_ID else "<iiQIIQ")
        if sample_id_all:  # trailer: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER
            after = 8 * (bool(sample_type & S_ID) + 1 + bool(sample_type & S_IDENTIFIER))
            lo.id_time_from_end = after + 8
            lo.id_cpu_from_end = 8 * bool(sample_type & S_IDENTIFIER) + 8
        return lo


class PerfStream:
    """Feed it perf's pipe output; it writes what perf script must see to `forward` and keeps the
    samples in `pending`. `answer(text)` takes perf script's output for the forwarded samples."""

    CACHE_LIMIT = 200_000  # distinct stacks kept; past it the cache starts over

    def __init__(self, forward, max_stack: int = 127):
        self.forward = forward  # callable(bytes)
        self.buf = bytearray()
        self.header = False
        self.lo: Layout | None = None
        self.queue: list[tuple[int, int, int, bytes]] = []  # (time, arrival, type, record)
        self.arrival = 0
        self.max_time = 0
        self.next_flush = 0
        self.comm: dict[int, str] = {0: "swapper"}
        self.gen: dict[int, int] = {}
        self.maps: dict[int, tuple[list[int], list[tuple]]] = {}  # pid -> (starts, (start, end, pgoff, file))
        self.kgen = 0
        self.stacks: dict[tuple, tuple[str, ...] | None] = {}  # key -> stack (None: asked, not answered)
        self.addrs: dict[tuple, tuple[str, ...]] = {}  # (pid..., context, ip) -> its frame names
        self.parts: dict[tuple, list[tuple]] = {}  # stack key -> its addresses, until it is named
        self.asked: dict[int, tuple] = {}  # sequence number -> stack key
        self.inflight: set[tuple] = set()  # addresses in samples sent to perf script, not yet named
        self.held: dict[tuple, bytes] = {}  # stack key -> its sample, waiting for in-flight addresses
        self.waiters: dict[tuple, list[tuple]] = {}  # in-flight address -> stack keys waiting for it
        self.max_stack = max_stack
        self.jit_maps: set[tuple] = set()  # anonymous maps whose perf map file was looked for
        self.seq = 0
        self.lines: dict[str, tuple[str, ...] | None] = {}
        self.pending: list[tuple] = []  # stack keys of the samples read, time order
        self.rows: list[tuple] = []  # and their (time ns, cpu, pid, tid, period, comm)
        self.forwarded_samples = 0
        self.lost: list[tuple[int, int, int]] = []  # (time ns, CPU or -1, samples perf lost): the caller takes them

    # --- reading perf record's stream

    def feed(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        off = 0
        if not self.header:
            if len(buf) < 16:
                return
            if bytes(buf[:8]) != MAGIC or Q.unpack_from(buf, 8)[0] != 16:
                raise InputError("perf record -o -", "not perf's pipe format (no PERFILE2 pipe header)")
            self.forward(bytes(buf[:16]))
            self.header, off = True, 16
        n = len(buf)
        unpack = HDR.unpack_from
        lo = self.lo
        # samples, the bulk of the stream, are queued here inline (a method call per record costs as
        # much as the rest of their reading); the rest goes through _record
        queue = self.queue.append
        t_at = lo.time if lo is not None else 0
        q_unpack = Q.unpack_from
        arrival, max_time = self.arrival, self.max_time
        while off + 8 <= n:
            typ, misc, size = unpack(buf, off)
            if size < 8:
                raise InputError("perf record -o -", f"record of size {size} at byte {off}")
            end = off + size
            if end > n:
                break
            if typ == SAMPLE and lo is not None:
                t = q_unpack(buf, off + t_at)[0]
                if t > max_time:
                    max_time = t
                arrival += 1
                queue((t, arrival, SAMPLE, bytes(buf[off:end])))
            else:
                self.arrival, self.max_time = arrival, max_time
                self._record(typ, misc, bytes(buf[off:end]))
                arrival, max_time = self.arrival, self.max_time
                if lo is None and self.lo is not None:
                    lo = self.lo
                    t_at = lo.time
            off = end
        self.arrival, self.max_time = arrival, max_time
        del buf[:off]

    def _record(self, typ: int, misc: int, rec: bytes) -> None:
        if typ >= USER_TYPE_START:
            if typ == FINISHED_ROUND:
                self._round()
                return
            if typ == HEADER_ATTR:
                self._attr(rec)
            self.forward(rec)
            return
        lo = self.lo
        if lo is None:
            raise InputError("perf record -o -", "a kernel record came before any event attribute")
        if typ == SAMPLE:
            t = Q.unpack_from(rec, lo.time)[0]
        elif lo.id_time_from_end and len(rec) >= 8 + lo.id_time_from_end:
            t = Q.unpack_from(rec, len(rec) - lo.id_time_from_end)[0]
        else:
            t = 0
        if t > self.max_time:
            self.max_time = t
        if typ == LOST:  # perf's ring was full: these samples never reached us (LOST_SAMPLES, which perf
            # also writes at its end from the same counter, would count them twice)
            n = Q.unpack_from(rec, 16)[0]
            cpu = (struct.unpack_from("<I", rec, len(rec) - lo.id_cpu_from_end)[0]
                   if lo.id_cpu_from_end and len(rec) >= 8 + lo.id_cpu_from_end + 8 else -1)
            self.lost.append((t, cpu, n))
        self.arrival += 1
        self.queue.append((t, self.arrival, typ, rec))

    def _attr(self, rec: bytes) -> None:
        # perf_event_attr: type u32, size u32, config, sample_period, sample_type, read_format, flags
        typ, config = struct.unpack_from("<I", rec, 8)[0], Q.unpack_from(rec, 8 + 8)[0]
        sample_type = Q.unpack_from(rec, 8 + 24)[0]
        flags = Q.unpack_from(rec, 8 + 40)[0]
        if typ == 1 and config == 9:
            # PERF_COUNT_SW_DUMMY: perf >= 6.x adds it for side-band records (mmap, comm, ...) with -a;
            # it makes no samples (no callchain either) and its sample_id trailer must match ours
            trailer = sample_type & (S_TID | S_TIME | S_ID | S_CPU | S_IDENTIFIER)
            if self.lo is not None and trailer != self.lo.sample_type & (S_TID | S_TIME | S_ID | S_CPU | S_IDENTIFIER):
                raise InputError("perf record -o -", "a side-band event with another sample_id layout")
            self.dummy_trailer = trailer
            return
        lo = Layout.of(sample_type, bool(flags & (1 << 18)))
        dt = getattr(self, "dummy_trailer", None)
        if dt is not None and dt != sample_type & (S_TID | S_TIME | S_ID | S_CPU | S_IDENTIFIER):
            raise InputError("perf record -o -", "a side-band event with another sample_id layout")
        if self.lo is not None and (self.lo.sample_type, self.lo.id_time_from_end) != (
                lo.sample_type, lo.id_time_from_end):
            raise InputError("perf record -o -", "events with different sample_type")
        self.lo = lo

    def _round(self) -> None:
        """perf's ordered-events round: process what is not later than the previous round's latest."""
        self.flush(self.next_flush)
        self.next_flush = self.max_time

    def flush(self, upto: int | None = None) -> None:
        """Process queued kernel records in time order (all if `upto` is None)."""
        q = self.queue
        if not q:
            return
        q.sort()  # per-CPU runs already in order: timsort merges them
        k = len(q) if upto is None else bisect_right(q, (upto, INF))
        if not k:
            return
        out: list[bytes] = []
        lo = self.lo
        add_key, add_row = self.pending.append, self.rows.append
        stacks, comm, gen = self.stacks, self.comm, self.gen
        fields, at, cc, kgen = lo.fields.unpack_from, lo.tid, lo.callchain, self.kgen
        for t, _, typ, rec in q[:k]:
            if typ == SAMPLE:
                f = fields(rec, at)  # pid, tid, time, [id,] cpu, res, period
                pid, tid = f[0], f[1]
                key = (pid, gen.get(pid, 0), kgen, rec[4] & CPUMODE_MASK, rec[cc:])
                if key not in stacks:
                    stacks[key] = None
                    self._ask(key, rec, out)
                c = comm.get(tid)
                add_key(key)
                add_row((t, f[-3], pid, tid, f[-1], c if c is not None else f":{tid}"))
                continue
            out.append(rec)
            if typ in (MMAP, MMAP2):
                pid = I32X2.unpack_from(rec, 8)[0]
                if pid == -1:
                    self.kgen += 1
                    kgen = self.kgen
                else:
                    gen[pid] = gen.get(pid, 0) + 1
                    self._map(pid, typ, rec)
            elif typ == COMM:
                pid, tid = I32X2.unpack_from(rec, 8)
                end = rec.find(b"\0", 16)
                comm[tid] = rec[16:end if end >= 0 else len(rec)].decode(errors="replace")
                if HDR.unpack_from(rec)[1] & COMM_EXEC:
                    gen[pid] = gen.get(pid, 0) + 1
            elif typ == FORK:
                pid, ppid, tid, ptid = struct.unpack_from("<iiii", rec, 8)
                c = comm.get(ptid)
                if c is not None:
                    comm[tid] = c
                else:
                    comm.pop(tid, None)
                if pid != ppid:
                    gen[pid] = gen.get(pid, 0) + 1
                    parent = self.maps.get(ppid)
                    self.maps[pid] = (list(parent[0]), list(parent[1])) if parent else ([], [])
            elif typ == KSYMBOL:
                self.kgen += 1
                kgen = self.kgen
        del q[:k]
        if out:
            out.append(ROUND)
            out.append(ROUND)  # the second round lets perf script process all of the first
            self.forward(b"".join(out))

    def _map(self, pid: int, typ: int, rec: bytes) -> None:
        """A process's executable maps as perf keeps them: a new map replaces the parts of older
        ones it overlaps; FORK of a process copies its parent's; exec keeps them (perf does)."""
        start, length, pgoff = struct.unpack_from("<QQQ", rec, 16)
        name_at = 40 if typ == MMAP else 72
        end_name = rec.find(b"\0", name_at)
        name = rec[name_at:end_name if end_name >= 0 else len(rec)]
        # a file's offset names the same in any process; anon, JIT, [vdso] and deleted files do not
        ident = (name, rec[40:64] if typ == MMAP2 else b"") if name[:1] == b"/" and not name.endswith(
            b" (deleted)") and not name.startswith(b"/tmp/perf-") and not name.startswith(b"//") else None
        end = start + length
        starts, entries = self.maps.setdefault(pid, ([], []))
        lo = bisect_right(starts, start) - 1
        if lo < 0:
            lo = 0
        hi = lo
        keep = []
        while hi < len(entries) and entries[hi][0] < end:
            s0, e0, p0, id0 = entries[hi]
            if e0 > start:
                if s0 < start:
                    keep.append((s0, start, p0, id0))
                if e0 > end:
                    keep.append((end, e0, p0 + (end - s0), id0))
            else:
                keep.append(entries[hi])
            hi += 1
        keep.append((start, end, pgoff, ident))
        keep.sort()
        entries[lo:hi] = keep
        starts[lo:hi] = [e[0] for e in keep]

    def _ask(self, key: tuple, rec: bytes, out: list[bytes]) -> None:
        """A stack not seen before: named from its addresses if perf script has named them all in
        other stacks, else the sample goes to perf script."""
        pid, pgen, kgen, mode, chain = key
        n = Q.unpack_from(chain)[0]
        ips = struct.unpack_from(f"<{n}Q", chain, 8) if len(chain) >= 8 + 8 * n else ()
        parts: list[tuple] | None = []
        ctx = None
        pm = self.maps.get(pid)
        addrs = self.addrs
        for ip in ips:
            if ip >= CONTEXT_MAX:
                if ip not in (CONTEXT_KERNEL, CONTEXT_USER):
                    parts = None  # hypervisor/guest contexts, or perf's invalid-context reset
                    break
                ctx = ip
                continue
            # kernel addresses name the same in every process, addresses in files by file offset
            # whatever the process; the rest per address space
            if ctx == CONTEXT_KERNEL:
                parts.append(("k", kgen, ip))
                continue
            i = bisect_right(pm[0], ip) - 1 if pm is not None else -1
            if i < 0 or ip >= pm[1][i][1]:
                parts.append(("n", mode, ctx))  # in no map: perf names it [unknown] whatever its value
                continue
            start, end, pgoff, ident = pm[1][i]
            if ident is not None:
                parts.append(("f", ident, ip - start + pgoff, mode, ctx))
                continue
            mk = ("m", pid, pgen, start, end, mode, ctx)
            parts.append(mk if mk in addrs else (pid, pgen, kgen, mode, ctx, ip, start, end))
        if parts is not None and (len(ips) != n or len(parts) > self.max_stack):
            parts = None
        if parts is not None:
            self.parts[key] = parts
            if self._assemble(key) is not None:
                return
            addrs, inflight = self.addrs, self.inflight
            unknown = [a for a in parts if a not in addrs]
            if all(a in inflight for a in unknown):
                # every address it lacks is in a sample perf script is naming now: wait for that
                self.held[key] = rec
                for a in unknown:
                    self.waiters.setdefault(a, []).append(key)
                return
            inflight.update(unknown)
        self._send(key, rec, out)

    def _send(self, key: tuple, rec: bytes, out: list[bytes]) -> None:
        """Forward the sample to perf script, its period replaced by a sequence number."""
        lo = self.lo
        self.seq += 1
        self.asked[self.seq] = key
        out.append(rec[:lo.period] + Q.pack(self.seq) + rec[lo.period + 8:])
        self.forwarded_samples += 1

    # --- perf script's answers

    def answer(self, text: str) -> int:
        """Take `perf script -F period,ip,sym,dso` output (whole samples); returns samples answered."""
        n = 0
        lines_ix = self.lines
        failed: set[tuple] = set()
        for block in text.split("\n\n"):
            head, _, body = block.lstrip("\n").partition("\n")
            head = head.strip()
            if not head.isdigit():
                continue
            key = self.asked.pop(int(head), None)
            if key is None:
                continue
            lines = [ln for ln in body.split("\n") if ln] if body else []
            per_line = []
            for ln in lines:
                f = lines_ix.get(ln, False)
                if f is False:
                    f = lines_ix[ln] = frame_names(ln)
                per_line.append(f or ())
            self.stacks[key] = tuple(x for f in reversed(per_line) for x in f)
            self.held.pop(key, None)
            parts = self.parts.pop(key, None)
            if parts is None:
                pass
            elif len(parts) == len(per_line):
                # one line per address (no inlined frames added): each address is named for reuse
                for a, f in zip(parts, per_line):
                    if a not in self.addrs:
                        self.addrs[a] = f
                        self.inflight.discard(a)
                        self.waiters.pop(a, None)  # its waiters assemble in take()
                        if len(a) == 8 and len(f) == 1 and f[0].startswith("[perf-") and f[0].endswith(".map]_[j]"):
                            self._symbolless(a, f)
            else:
                failed.update(a for a in parts if a in self.inflight and a not in self.addrs)
            n += 1
        if failed:
            # addresses perf script named with inlined frames: their waiters go to perf script whole
            out: list[bytes] = []
            for a in failed:
                self.inflight.discard(a)
                for key in self.waiters.pop(a, ()):
                    rec = self.held.pop(key, None)
                    if rec is not None and self.stacks.get(key) is None:
                        self.parts.pop(key, None)
                        self._send(key, rec, out)
            if out:
                self.forward(b"".join(out) + ROUND + ROUND)
        return n

    def _symbolless(self, a: tuple, f: tuple[str, ...]) -> None:
        """An anonymous (JIT) address perf named `[unknown] (/tmp/perf-PID.map)`: perf found no
        /tmp/perf-PID.map (JIT symbol file) for the process, so it names every address of that map
        alike; the map is then named once, not address by address (a JIT's code is ever-new
        addresses). Not when the symbol file exists: then addresses have their own names."""
        pid, pgen, _, mode, ctx, _, start, end = a
        mk = ("m", pid, pgen, start, end, mode, ctx)
        if mk in self.jit_maps:
            return
        nspid = f[0][len("[perf-"):-len(".map]_[j]")]
        self.jit_maps.add(mk)  # looked at once per map
        if any(os.path.exists(p) for p in (f"/tmp/perf-{nspid}.map", f"/proc/{pid}/root/tmp/perf-{nspid}.map")):
            return
        self.addrs[mk] = f

    def _assemble(self, key: tuple) -> tuple[str, ...] | None:
        """A stack from its addresses' names (root first, as perf script's lines reversed), once all
        are known."""
        parts = self.parts.get(key)
        if parts is None:
            return None
        addrs = self.addrs
        names: list[str] = []
        for a in reversed(parts):
            f = addrs.get(a)
            if f is None:
                return None
            names.extend(f)
        st = self.stacks[key] = tuple(names)
        del self.parts[key]
        self.held.pop(key, None)
        return st

    @property
    def waiting(self) -> int:
        return len(self.asked)

    def _partial(self, key: tuple) -> tuple[str, ...]:
        """A stack perf script has not (fully) named, for a sample that must be stored now: the frames
        already named from other stacks, UNNAMED for the rest (`_[k]` in kernel context). Dropping the
        sample instead would bias every share: the unnamed ones are the new stacks, e.g. a reclaim
        loop's ever-different addresses, so the code that got hot would be undercounted."""
        parts = self.parts.pop(key, None)
        self.held.pop(key, None)
        if parts is None:  # sent whole to perf script: only its context is known
            return (UNNAMED + ("_[k]" if key[3] == 1 else ""),)
        names: list[str] = []
        for a in reversed(parts):
            f = self.addrs.get(a)
            names.extend(f if f is not None else (UNNAMED + ("_[k]" if a[0] == "k" else ""),))
        return tuple(names)

    def take(self, final: bool = False) -> tuple[Batch, int]:
        """The pending samples whose stacks are known, as a Batch of numpy columns (times in perf's
        clock, seconds at perf script's microsecond precision), in time order; with `final`, the
        unanswered ones too, their unnamed frames as UNNAMED (counted). Returns (batch, unnamed)."""
        stacks = self.stacks
        b = Batch(events=["cpu-clock"])
        keys, rows = self.pending, self.rows
        sid_of: dict[tuple, int] = {}  # stack key -> batch stack id (-1: not named yet)
        stack_ix: dict[tuple, int] = {}
        partial: set[int] = set()  # batch stack ids with UNNAMED frames
        for key in dict.fromkeys(keys):
            st = stacks.get(key)
            if st is None:
                st = self._assemble(key)
            unnamed = False
            if st is None:
                if not final and key in stacks:
                    sid_of[key] = -1
                    continue
                st, unnamed = self._partial(key), True
            sid = stack_ix.get(st)
            if sid is None:
                sid = stack_ix[st] = len(b.stacks)
                b.stacks.append(st)
            if unnamed:
                partial.add(sid)
            sid_of[key] = sid
        sids = np.fromiter(map(sid_of.__getitem__, keys), dtype=np.int64, count=len(keys))
        ok = sids >= 0
        unnamed_n = int(np.isin(sids, list(partial)).sum()) if partial else 0
        if ok.all():
            take_rows, self.pending, self.rows = rows, [], []
        else:
            idx = np.flatnonzero(ok).tolist()
            take_rows = [rows[i] for i in idx]
            wait = np.flatnonzero(sids == -1).tolist()
            self.pending, self.rows = [keys[i] for i in wait], [rows[i] for i in wait]
            sids = sids[ok]
        n = len(take_rows)
        if n:
            t, cpu, pid, tid, period, comm = zip(*take_rows)
            comm_ix: dict[str, int] = {}
            for c in dict.fromkeys(comm):
                comm_ix[c] = len(b.comms)
                b.comms.append(c)
            b.times = (np.array(t, dtype=np.int64) // 1000) / 1e6
            b.cpus = np.array(cpu, dtype=np.int64)
            b.pids = np.array(pid, dtype=np.int64)
            b.tids = np.array(tid, dtype=np.int64)
            b.periods = np.array(period, dtype=np.uint64)
            b.comm_ids = np.fromiter(map(comm_ix.__getitem__, comm), dtype=np.int64, count=n)
            b.stack_ids = sids
        b.event_ids = [0] * n
        if len(stacks) + len(self.addrs) > self.CACHE_LIMIT and not self.asked and not self.held:
            for d in (self.stacks, self.addrs, self.parts, self.lines, self.inflight, self.held, self.waiters,
                      self.jit_maps):
                d.clear()
        return b, unnamed_n


class ScriptNamer:
    """A long-lived `perf script -F period,ip,sym,dso -i -` fed by a PerfStream: what it prints for
    the forwarded samples is read on a thread (so neither side blocks) and handed to the stream."""

    def __init__(self, perf: str, stderr):
        from ..node.children import spawn

        # perf script's stdout is a pipe, so stdio would hold its answers until 4 KB are due; line
        # buffering (stdbuf) hands them over as they are made (few lines: only unnamed stacks)
        buf = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
        self.proc = spawn(buf + [perf, "script", "-F", SCRIPT_FIELDS, "-i", "-"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=stderr)
        self.stream = PerfStream(self._forward)
        self.error: str | None = None
        self._got: list[bytes] = []
        self._lock = threading.Lock()
        self._text = ""
        self._reader = threading.Thread(target=self._read, name="nodesleuth-symbols", daemon=True)
        self._reader.start()

    def _forward(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (OSError, ValueError) as e:  # perf script died: its samples are dropped at the end
            self.error = f"perf script: {e}"

    def _read(self) -> None:
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            with self._lock:
                self._got.append(chunk)

    def answer(self, wait: float, stall: float | None = None) -> None:
        """Hand perf script's output to the stream, waiting up to `wait` s until all is answered, or
        with `stall`, only as long as perf script answers something every `stall` s."""
        now = time.monotonic()
        deadline = now + wait
        stalled = now + stall if stall is not None else deadline
        while True:
            with self._lock:
                got, self._got = self._got, []
            done = not self._reader.is_alive()
            if got:
                self._text += b"".join(got).decode(errors="replace")
            cut = len(self._text) if done else self._text.rfind("\n\n") + 2
            if cut >= 2:
                if self.stream.answer(self._text[:cut] + ("\n\n" if done else "")) and stall is not None:
                    stalled = time.monotonic() + stall
                self._text = self._text[cut:]
            now = time.monotonic()
            if not self.stream.waiting or now >= deadline or now >= stalled or (done and not got):
                return
            time.sleep(0.01)

    def close(self, timeout: float = 60) -> None:
        """No more input: perf script finishes what it was given and exits."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self._reader.join(timeout=timeout)

    def wait(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
