"""The direct reader's samples named by `perf script` too: the same live samples, two namers.

A `perf record -a -g` in pipe mode runs beside the direct reader only for its side-band (the
processes, threads and maps it synthesizes at start and records after); its own samples are
dropped. Each sample the direct reader took is rewritten into perf's sample layout, its period
replaced by its sequence number, merged in time order with perf's side-band, and given to one
`perf script -F comm,tid,cpu,time,period,event,ip,sym,dso`; its answer for sequence number i is perf's
naming of the direct reader's sample i. Used by tests/test_profile_direct.py and
benchmarks/profile_cost.py.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time

import numpy as np

from nodesleuth.profile.decode import Decoder
from nodesleuth.profile.ringbuf import Rings, ring_pages, online_cpus, IOC_ENABLE, IOC_DISABLE
from nodesleuth.profile.parse import parse_text
from nodesleuth.profile.perfdata import HDR, Layout, Q

SAMPLE, HEADER_ATTR, FINISHED_ROUND = 9, 64, 68


def record_both(seconds: float, freq: int, tmp: str, during=None, every: float = 1.0):
    """Run perf record (side-band only) and the direct reader together for `seconds`, the reader
    decoding what it read every `every` s as the runner does. Returns (perf's pipe bytes, the raw ring
    bytes of each decode, the Batch of each decode, the Decoder)."""
    side = os.path.join(tmp, "side.data")
    out = open(side, "wb")
    perf = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "--no-bpf-event", "--namespaces", "-e", "cpu-clock",
                             "-F", "1", "-a", "-g", "-m", "256", "-o", "-"], stdout=out, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    time.sleep(2.0)  # past its /proc synthesis
    rings = Rings(online_cpus(), freq, ring_pages(freq))
    dec = Decoder()
    chunks: list[bytes] = []
    batches = []

    def take():
        raw = b"".join(d for d in (rings.read(i) for i in range(len(rings.fds))) if d)
        chunks.append(raw)
        batches.append(dec.decode(raw))

    try:
        rings.ioctl_all(IOC_ENABLE)
        dec.snapshot()
        t_end = time.monotonic() + seconds
        if during is not None:
            during()
        while time.monotonic() < t_end:
            time.sleep(every)
            take()
        rings.ioctl_all(IOC_DISABLE)
        take()
    finally:
        rings.close()
        dec.close()
        time.sleep(0.5)
        os.killpg(perf.pid, signal.SIGINT)
        perf.wait(timeout=60)
        out.close()
    with open(side, "rb") as f:
        return f.read(), chunks, batches, dec


def _records(buf: bytes, start: int = 0):
    off = start
    while off + 8 <= len(buf):
        typ, misc, size = HDR.unpack_from(buf, off)
        if size < 8:
            break
        yield off, typ, misc, buf[off:off + size]
        off += size


def merged_stream(side: bytes, chunks: list[bytes]) -> tuple[bytes, int]:
    """perf's header, attributes and side-band + the direct reader's samples (periods = sequence
    numbers, in the order the Decoder stores them: by time, stable) in time order."""
    assert side[:8] == b"PERFILE2"
    user: list[bytes] = []
    timed: list[tuple[int, int, bytes]] = []
    lo: Layout | None = None
    sample_id = 0
    n = 0
    for _, typ, _, rec in _records(side, 16):
        if typ >= 64:
            if typ == FINISHED_ROUND:
                continue
            if typ == HEADER_ATTR and lo is None:
                sample_type = Q.unpack_from(rec, 8 + 24)[0]
                flags = Q.unpack_from(rec, 8 + 40)[0]
                lo = Layout.of(sample_type, bool(flags & (1 << 18)))
                attr_size = struct.unpack_from("<I", rec, 8 + 4)[0]
                ids = rec[8 + attr_size:]
                sample_id = Q.unpack_from(ids, 0)[0] if len(ids) >= 8 else 0
            user.append(rec)
            continue
        if typ == SAMPLE:
            continue
        t = Q.unpack_from(rec, len(rec) - lo.id_time_from_end)[0] if lo.id_time_from_end else 0
        n += 1
        timed.append((t, n, rec))
    # the direct reader's samples, in its storing order (each decode's by time, stable)
    mine = []
    for raw in chunks:
        part = [(Q.unpack_from(rec, 24)[0], k, misc, rec) for k, (_, typ, misc, rec) in enumerate(_records(raw))
                if typ == SAMPLE]
        part.sort(key=lambda x: (x[0], x[1]))
        mine += part
    has_id = bool(lo.sample_type & 0x40)
    for seq, (t, _, misc, rec) in enumerate(mine):
        ip, pidtid, tt, cpures, _period = struct.unpack_from("<QQQQQ", rec, 8)
        chain = rec[48:]
        body = struct.pack("<QQQ", ip, pidtid, tt) + (struct.pack("<Q", sample_id) if has_id else b"") + \
            struct.pack("<QQ", cpures, seq) + chain
        timed.append((t, 0, HDR.pack(SAMPLE, misc, 8 + len(body)) + body))
    timed.sort(key=lambda x: (x[0], x[1]))
    rnd = HDR.pack(FINISHED_ROUND, 0, 8)
    return side[:16] + b"".join(user) + b"".join(r for _, _, r in timed) + rnd, len(mine)


def perf_names(side: bytes, chunks: list[bytes]):
    """perf script's Batch for the direct reader's samples (periods = sequence numbers)."""
    stream, n = merged_stream(side, chunks)
    p = subprocess.run(["perf", "script", "-F", "comm,tid,cpu,time,period,event,ip,sym,dso", "-i", "-"], input=stream,
                       capture_output=True, timeout=600)
    return parse_text(p.stdout.decode(errors="replace")), n


def rows(batches):
    out = []
    for b in batches:
        for i in range(len(b)):
            out.append((b.comms[b.comm_ids[i]], int(b.tids[i]), int(b.cpus[i]), float(b.times[i]),
                        b.stacks[b.stack_ids[i]], int(b.pids[i])))
    return out


def same_comm(a: str, b: str) -> bool:
    """A kworker's name carries the workqueue it works for at the moment it is read (`kworker/1:5-events`):
    two readers at different moments see different suffixes."""
    if a == b:
        return True
    def base(c: str) -> str:
        return c.replace("+", "-").split("-")[0]

    return a.startswith("kworker/") and b.startswith("kworker/") and base(a) == base(b)


def same_stack(mine: tuple[str, ...], perfs: tuple[str, ...]) -> bool:
    """Equal, but for one difference on purpose: a PLT stub. Both read the same symbol tables, but the
    perf of Debian 12 (6.1) extends a zero-size `_init` (crti.o's, in .init just before .plt) over the
    PLT, which it also names by synthesized `NAME@plt` symbols, and its lookup finds `_init`: recorded
    here, `gcc -O1` of tests/test_profile_direct.py's MEMSTAT, `readelf -s`: `_init` 0x1000 size 0, .plt
    at 0x1020; `perf script`: `1040 _init+0x40 (ns-memstat)` for the stub of pread. The reader says
    `pread@plt` (what the stub is; docs/profiling.md)."""
    return len(mine) == len(perfs) and all(
        a == b or (a.endswith("@plt") and b == "_init") for a, b in zip(mine, perfs))


def compare(side: bytes, chunks: list[bytes], batches):
    """(rows compared, mismatches [(seq, field, direct, perf, pid)], direct rows, perf Batch)."""
    mine = rows(batches)
    ref, n = perf_names(side, chunks)
    assert len(mine) == n, (len(mine), n)
    by_seq = {int(p): i for i, p in enumerate(np.asarray(ref.periods).tolist())}
    bad = []
    for i, (comm, tid, cpu, t, st, pid) in enumerate(mine):
        j = by_seq.get(i)
        if j is None:
            bad.append((i, "missing", None, None, pid))
            continue
        b = (ref.comms[ref.comm_ids[j]], int(ref.tids[j]), int(ref.cpus[j]), float(ref.times[j]))
        if not same_comm(comm, b[0]) or (tid, cpu, t) != b[1:]:
            bad.append((i, "header", (comm, tid, cpu, t), b, pid))
        sb = ref.stacks[ref.stack_ids[j]]
        if not same_stack(st, sb):
            bad.append((i, "stack", st, sb, pid))
    return len(mine), bad, mine, ref
