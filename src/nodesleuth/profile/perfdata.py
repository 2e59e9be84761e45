"""perf's pipe format (`perf record -o -`) read in Python, with `perf script` kept as the symbolizer
but asked only once per distinct stack.

Why: `perf script` costs ~50-150 us per sample (callchain resolution and text), which is most of
continuous profiling's cost; the samples of a busy node repeat the same few thousand stacks. So the
records are read here (struct, fixed offsets for the sample_type we ask for), and each sample is keyed
by (pid, the pid's map generation, cpumode, raw callchain). A sample with a new key is forwarded to a
long-lived `perf script -F period,ip,sym,dso -i -` with its period field replaced by a sequence
number; every other sample is answered from the cache. Side-band records (MMAP2, COMM, FORK, ...) are
all forwarded, in the same time order perf itself uses (its ordered-events rounds), so perf resolves
the forwarded samples exactly as it would in a full `perf script`; comm/pid/tid/cpu/time/period come
straight from the records, comm tracked the way perf's thread table does (COMM; FORK copies the
parent's; 0/0 is `swapper`; an unknown thread is `:TID`).

The map generation of a pid changes on every MMAP/MMAP2 and exec COMM of that pid and on a new
process's FORK, and a global one on kernel (pid -1) MMAPs and KSYMBOL records, so a key never outlives
the address space that named it.

Format: tools/perf/Documentation/perf.data-file-format.txt and include/uapi/linux/perf_event.h.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import InputError
from .parse import Batch, frame_names

MAGIC = b"PERFILE2"
# record types (include/uapi/linux/perf_event.h, tools/lib/perf/include/perf/event.h)
MMAP, COMM, EXIT, FORK, SAMPLE, MMAP2, KSYMBOL = 1, 3, 4, 7, 9, 10, 17
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
U32X2 = struct.Struct("<II")
ROUND = HDR.pack(FINISHED_ROUND, 0, 8)
SCRIPT_FIELDS = "period,ip,sym,dso"


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
        if sample_id_all:  # trailer: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER
            after = 8 * (bool(sample_type & S_ID) + 1 + bool(sample_type & S_IDENTIFIER))
            lo.id_time_from_end = after + 8
        return lo


@dataclass
class Pending:
    """Samples read and time-ordered, waiting to be stored once their stacks are known."""

    times_ns: list[int] = field(default_factory=list)
    cpus: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    tids: list[int] = field(default_factory=list)
    comms: list[str] = field(default_factory=list)
    periods: list[int] = field(default_factory=list)
    keys: list[tuple] = field(default_factory=list)


class PerfStream:
    """Feed it perf's pipe output; it writes what perf script must see to `forward` and keeps the
    samples in `pending`. `answer(text)` takes perf script's output for the forwarded samples."""

    CACHE_LIMIT = 200_000  # distinct stacks kept; past it the cache starts over

    def __init__(self, forward):
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
        self.kgen = 0
        self.stacks: dict[tuple, tuple[str, ...] | None] = {}  # key -> stack (None: asked, not answered)
        self.asked: dict[int, tuple] = {}  # sequence number -> key
        self.seq = 0
        self.lines: dict[str, tuple[str, ...] | None] = {}
        self.pending = Pending()
        self.records = 0
        self.forwarded_samples = 0

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
        while off + 8 <= n:
            typ, misc, size = unpack(buf, off)
            if size < 8:
                raise InputError("perf record -o -", f"record of size {size} at byte {off}")
            if off + size > n:
                break
            self._record(typ, misc, bytes(buf[off:off + size]))
            off += size
        del buf[:off]

    def _record(self, typ: int, misc: int, rec: bytes) -> None:
        self.records += 1
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
        self.arrival += 1
        self.queue.append((t, self.arrival, typ, rec))

    def _attr(self, rec: bytes) -> None:
        # perf_event_attr: type u32, size u32, config, sample_period, sample_type, read_format, flags
        sample_type = Q.unpack_from(rec, 8 + 24)[0]
        flags = Q.unpack_from(rec, 8 + 40)[0]
        lo = Layout.of(sample_type, bool(flags & (1 << 18)))
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
        q.sort()
        if upto is None:
            k = len(q)
        else:
            k = 0
            while k < len(q) and q[k][0] <= upto:
                k += 1
            if not k:
                return
        out: list[bytes] = []
        lo = self.lo
        p = self.pending
        stacks, comm, gen = self.stacks, self.comm, self.gen
        tq, cq, pq, tidq, commq, perq, kq = (p.times_ns.append, p.cpus.append, p.pids.append, p.tids.append,
                                            p.comms.append, p.periods.append, p.keys.append)
        unpack_ptt = struct.Struct("<IIQ").unpack_from
        for t, _, typ, rec in q[:k]:
            if typ == SAMPLE:
                pid, tid, _t = unpack_ptt(rec, lo.tid)
                cpu = U32X2.unpack_from(rec, lo.cpu)[0]
                period = Q.unpack_from(rec, lo.period)[0]
                key = (pid, gen.get(pid, 0), self.kgen, HDR.unpack_from(rec)[1] & CPUMODE_MASK, rec[lo.callchain:])
                if key not in stacks:
                    stacks[key] = None
                    self.seq += 1
                    self.asked[self.seq] = key
                    out.append(rec[:lo.period] + Q.pack(self.seq) + rec[lo.period + 8:])
                    self.forwarded_samples += 1
                tq(t)
                cq(cpu)
                pq(pid)
                tidq(tid)
                c = comm.get(tid)
                commq(c if c is not None else f":{tid}")
                perq(period)
                kq(key)
                continue
            out.append(rec)
            if typ in (MMAP, MMAP2):
                pid = U32X2.unpack_from(rec, 8)[0]
                if pid == 0xFFFFFFFF:
                    self.kgen += 1
                else:
                    gen[pid] = gen.get(pid, 0) + 1
            elif typ == COMM:
                pid, tid = U32X2.unpack_from(rec, 8)
                end = rec.find(b"\0", 16)
                comm[tid] = rec[16:end if end >= 0 else len(rec)].decode(errors="replace")
                if HDR.unpack_from(rec)[1] & COMM_EXEC:
                    gen[pid] = gen.get(pid, 0) + 1
            elif typ == FORK:
                pid, ppid, tid, ptid = struct.unpack_from("<IIII", rec, 8)
                c = comm.get(ptid)
                if c is not None:
                    comm[tid] = c
                else:
                    comm.pop(tid, None)
                if pid != ppid:
                    gen[pid] = gen.get(pid, 0) + 1
            elif typ == KSYMBOL:
                self.kgen += 1
        del q[:k]
        if out:
            out.append(ROUND)
            out.append(ROUND)  # the second round lets perf script process all of the first
            self.forward(b"".join(out))

    # --- perf script's answers

    def answer(self, text: str) -> int:
        """Take `perf script -F period,ip,sym,dso` output (whole samples); returns samples answered."""
        n = 0
        lines_ix = self.lines
        for block in text.split("\n\n"):
            head, _, body = block.lstrip("\n").partition("\n")
            head = head.strip()
            if not head.isdigit():
                continue
            key = self.asked.pop(int(head), None)
            if key is None:
                continue
            names: list[str] = []
            for ln in reversed(body.split("\n")) if body else ():
                f = lines_ix.get(ln, False)
                if f is False:
                    f = lines_ix[ln] = frame_names(ln)
                if f:
                    names.extend(f)
            self.stacks[key] = tuple(names)
            n += 1
        return n

    @property
    def waiting(self) -> int:
        return len(self.asked)

    def take(self, final: bool = False) -> tuple[Batch, int]:
        """The pending samples whose stacks are known, as a Batch (times in perf's clock, seconds at
        perf script's microsecond precision), in time order; with `final`, the unanswered ones too
        are dropped and counted. Returns (batch, dropped)."""
        p = self.pending
        stacks = self.stacks
        b = Batch(events=["cpu-clock"])
        stack_ix: dict[tuple, int] = {}
        comm_ix: dict[str, int] = {}
        keep = Pending()
        dropped = 0
        for i, key in enumerate(p.keys):
            st = stacks.get(key)
            if st is None:
                if final or key not in stacks:
                    dropped += 1
                    continue
                for col in ("times_ns", "cpus", "pids", "tids", "comms", "periods", "keys"):
                    getattr(keep, col).append(getattr(p, col)[i])
                continue
            sid = stack_ix.get(st)
            if sid is None:
                sid = stack_ix[st] = len(b.stacks)
                b.stacks.append(st)
            c = p.comms[i]
            cid = comm_ix.get(c)
            if cid is None:
                cid = comm_ix[c] = len(b.comms)
                b.comms.append(c)
            b.times.append((p.times_ns[i] // 1000) / 1e6)
            b.cpus.append(p.cpus[i])
            b.pids.append(p.pids[i])
            b.tids.append(p.tids[i])
            b.comm_ids.append(cid)
            b.stack_ids.append(sid)
            b.periods.append(p.periods[i])
            b.event_ids.append(0)
        self.pending = keep
        if len(stacks) > self.CACHE_LIMIT and not self.asked:
            self.stacks.clear()
            self.lines.clear()
        return b, dropped
