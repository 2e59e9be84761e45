"""The profile's write-time aggregates to stored frames (profile/agg.py makes the records and reads
the frames back; StoreWriter.write encodes them, store/encoding.py).

`profile_agg10` / `profile_agg60` ... (rows per CPU) and `profile_agg10all` ... (summed over CPUs,
cpu = profile/agg.ALL_CPUS), one record per window, stamped with its start. Each record is
self-contained (its own comm and stack tables). Payload: u32 header length | JSON {level, t0, t1, n,
comms, frames, stacks, event, cpus: [[cpu, start, end]...]} | columns sorted by cpu: cpu i16, pid
i32 (profile/agg.pid_column), comm u32, stack u32, count u32 | the stacks' 64-bit hashes u64 | a
trailer JSON {level, t0, t1, n, nstacks, comms, event, cpus} | u32 its length.

`profile_heat60` (HEAT): per CPU the cells of its work samples (second of the minute * 50 +
FlameScope row, u16, one entry per sample, sorted), and per second and CPU the counts of all and of
work samples (for the hot-CPU marks); `profile_heat60all` (HEAT_ALL) the same minute with the cells
summed over CPUs, a dense grid u32[60 * 50]. Payload: u32 header length | JSON {level, t0, rows,
event, tmin, tmax, n, dense, cpus: [[cpu, start, end]...], tcpus: [cpu...], tdtype} | cells |
totals [60 x len(tcpus)] | work [60 x len(tcpus)].

Records are duck-typed (profile/agg.AggRows, HeatMinute): the store imports the model only.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

COLS = (("cpu", "<i2"), ("pid", "<i4"), ("comm", "<u4"), ("stack", "<u4"), ("count", "<u4"))
HEAT_ROWS = 50  # FlameScope's rows per second (20 ms)


def encode_agg(r) -> tuple[float, bytes]:
    """One window's rows (profile/agg.AggRows: cpu-sorted columns, comm and stack indices into its own
    tables) -> (its start, payload)."""
    cpus, starts = np.unique(r.cpu, return_index=True)
    ends = np.append(starts[1:], len(r.cpu))
    ranges = [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]
    t0, lvl, n = r.t0, r.level, len(r.count)
    head = orjson.dumps({"level": lvl, "t0": t0, "t1": t0 + lvl, "n": n, "comms": r.comms, "frames": r.frames,
                         "stacks": r.stacks, "event": r.event, "cpus": ranges})
    arrs = [np.asarray(a).astype(dt) for a, (_, dt) in zip((r.cpu, r.pid, r.comm, r.stack, r.count), COLS)]
    hashes = np.asarray(r.hashes, dtype="<u8")
    tail = orjson.dumps({"level": lvl, "t0": t0, "t1": t0 + lvl, "n": n, "nstacks": len(hashes),
                         "comms": r.comms, "event": r.event, "cpus": ranges})
    return float(t0), (struct.pack("<I", len(head)) + head + b"".join(a.tobytes() for a in arrs) + hashes.tobytes()
                       + tail + struct.pack("<I", len(tail)))


def encode_heat(m, summed: bool = False) -> tuple[float, bytes]:
    """One minute of heatmap cells (profile/agg.HeatMinute: decoded sample times within [t0, t0 + 60),
    CPUs, whether each is work) -> (its start, payload). summed: the cells of all CPUs as one dense grid
    (header `dense`) instead of per CPU."""
    t0, t, cpu, work = m.t0, m.t, m.cpu, m.work
    sec = np.floor(t).astype(np.int64)
    row = HEAT_ROWS - np.floor(HEAT_ROWS * (t - np.floor(t))).astype(np.int64) - 1  # profile/heatmap.heatmap's rows
    rel = sec - t0
    cell = rel * HEAT_ROWS + row
    order = np.lexsort((cell[work], cpu[work]))
    wc, cells = cpu[work][order], cell[work][order]
    cpus, starts = np.unique(wc, return_index=True)
    ends = np.append(starts[1:], len(wc))
    tcpus, ti = np.unique(cpu, return_inverse=True)
    tot = np.zeros((60, len(tcpus)), dtype=np.int64)
    busy = np.zeros((60, len(tcpus)), dtype=np.int64)
    np.add.at(tot, (rel, ti), 1)
    np.add.at(busy, (rel[work], ti[work]), 1)
    tdt = "<u2" if tot.max(initial=0) < 65536 else "<u4"
    if summed:
        body = np.bincount(cells, minlength=60 * HEAT_ROWS).astype("<u4").tobytes()
        n, ranges = 60 * HEAT_ROWS, []
    else:
        body = cells.astype("<u2").tobytes()
        n, ranges = len(cells), [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]
    head = orjson.dumps({"level": 60, "t0": float(t0), "rows": HEAT_ROWS, "event": m.event,
                         "tmin": float(t.min()), "tmax": float(t.max()), "n": n, "dense": summed,
                         "cpus": ranges, "tcpus": tcpus.tolist(), "tdtype": tdt})
    return float(t0), (struct.pack("<I", len(head)) + head + body + tot.astype(tdt).tobytes()
                       + busy.astype(tdt).tobytes())
