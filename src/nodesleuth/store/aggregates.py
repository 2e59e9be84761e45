"""The profile's write-time aggregates (profile/agg.py makes the records) to and from stored payloads:
StoreWriter.write encodes them through the agg/heat/heat_all codecs (store/encoding.py); AggRecord
and HeatRecord decode them. Records are duck-typed (profile/agg.AggRows, HeatMinute): the store
imports the model only.

`profile_agg10` / `profile_agg60` ... (rows per CPU) and `profile_agg10all` ... (summed over CPUs,
cpu = profile/agg.ALL_CPUS), one record per window, stamped with its start. Payload: u32 header
length | JSON {level, t0, t1, n, comms, frames, stacks, event, cpus: [[cpu, start, end]...]} |
columns sorted by cpu: cpu i16, pid i32 (profile/agg.pid_column), comm u32, stack u32, count u32 |
the stacks' 64-bit hashes u64 | a trailer JSON {level, t0, t1, n, nstacks, comms, event, cpus} | u32
its length.

`profile_heat60` (HEAT): per CPU the cells of its work samples (second of the minute * 50 + FlameScope
row, u16, one entry per sample, sorted), and per second and CPU the counts of all and of work samples
(for the hot-CPU marks); `profile_heat60all` (HEAT_ALL) the same minute with the cells summed over
CPUs, a dense grid u32[60 * 50]. Payload: u32 header length | JSON {level, t0, rows, event, tmin,
tmax, n, dense, cpus: [[cpu, start, end]...], tcpus: [cpu...], tdtype} | cells | totals [60 x
len(tcpus)] | work [60 x len(tcpus)].
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

from ..model.errors import InputError

COLS = (("cpu", "<i2"), ("pid", "<i4"), ("comm", "<u4"), ("stack", "<u4"), ("count", "<u4"))
HEAT_ROWS = 50  # FlameScope's rows per second (20 ms)


def encode_agg(r) -> tuple[float, bytes]:
    """One window's rows (profile/agg.AggRows: cpu-sorted columns, comm and stack indices into its own
    tables, its stacks' frames flat) -> (its start, payload)."""
    cpus, starts = np.unique(r.cpu, return_index=True)
    ends = np.append(starts[1:], len(r.cpu))
    ranges = [[int(c), int(s), int(e)] for c, s, e in zip(cpus, starts, ends)]
    t0, lvl, n = r.t0, r.level, len(r.count)
    ids, ends = r.frame_ids.tolist(), r.stack_ends.tolist()
    head = orjson.dumps({"level": lvl, "t0": t0, "t1": t0 + lvl, "n": n, "comms": r.comms, "frames": r.frames,
                         "stacks": [ids[a:b] for a, b in zip([0] + ends[:-1], ends)], "event": r.event, "cpus": ranges})
    arrs = [np.asarray(a, dtype=dt) for a, (_, dt) in zip((r.cpu, r.pid, r.comm, r.stack, r.count), COLS)]
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


class HeatRecord:
    """One decoded minute of heatmap cells."""

    def __init__(self, payload: bytes, where: str = "profile heatmap aggregate"):
        try:
            (hl,) = struct.unpack_from("<I", payload)
            h = orjson.loads(payload[4:4 + hl])
            off = 4 + hl
            self.dense = bool(h.get("dense"))
            self.cells = np.frombuffer(payload, dtype="<u4" if self.dense else "<u2", count=h["n"], offset=off)
            off += self.cells.nbytes
            k = 60 * len(h["tcpus"])
            self.tot = np.frombuffer(payload, dtype=h["tdtype"], count=k, offset=off).reshape(60, -1)
            off += self.tot.nbytes
            self.busy = np.frombuffer(payload, dtype=h["tdtype"], count=k, offset=off).reshape(60, -1)
        except (struct.error, ValueError, KeyError) as e:
            raise InputError(where, f"undecodable profile heatmap aggregate: {e}") from None
        self.t0, self.rows, self.event = h["t0"], h["rows"], h.get("event", "")
        self.tmin, self.tmax = h["tmin"], h["tmax"]
        self.cpu_ranges = {c: (s, e) for c, s, e in h["cpus"]}
        self.tcpus = h["tcpus"]

    def grid(self, cpus: set[int] | None) -> np.ndarray:
        """Work samples per cell (second of the minute * rows + row) of these CPUs (None: all)."""
        if self.dense:
            if cpus is not None:
                raise ValueError("a summed heatmap record has no per-CPU cells")
            return self.cells
        return np.bincount(self.cells_of(cpus), minlength=60 * self.rows)

    def cells_of(self, cpus: set[int] | None) -> np.ndarray:
        if cpus is None:
            return self.cells
        sel = [self.cpu_ranges[c] for c in sorted(cpus) if c in self.cpu_ranges]
        return np.concatenate([self.cells[s:e] for s, e in sel]) if sel else self.cells[:0]


class AggRecord:
    """One decoded aggregate record; `rows(cpus)` slices the rows of some CPUs without a scan.

    Records since the ten-minute level also end with the stacks' hashes (profile/agg.stack_hash) and a small
    trailer {level, t0, t1, n, nstacks, comms, event, cpus} | u32 its length, so a reader gets the rows
    and stack hashes without parsing the frame tables (`frames`, `stack_frames`, parsed on first use);
    readers of the first version read the leading header and columns and ignore the rest."""

    def __init__(self, payload: bytes, where: str = "profile aggregate"):
        self.where = where
        self.payload = payload
        self.hashes = None
        self._head = None
        try:
            (hl,) = struct.unpack_from("<I", payload)
            h = self._trailer(payload, hl)
            if h is None:
                h = self._head = orjson.loads(payload[4:4 + hl])
            n, off = h["n"], 4 + hl
            self.cols = []
            for _, dt in COLS:
                a = np.frombuffer(payload, dtype=dt, count=n, offset=off)
                off += a.nbytes
                self.cols.append(a)
            if "nstacks" in h:
                self.hashes = np.frombuffer(payload, dtype="<u8", count=h["nstacks"], offset=off)
        except (struct.error, ValueError, KeyError) as e:
            raise InputError(where, f"undecodable profile aggregate: {e}") from None
        self.level, self.t0, self.t1 = h["level"], h["t0"], h["t1"]
        self.comms = h["comms"]
        self.event = h.get("event", "")
        self.cpu_ranges = {c: (s, e) for c, s, e in h["cpus"]}

    @staticmethod
    def _trailer(payload: bytes, hl: int) -> dict | None:
        if len(payload) < 8 + hl:
            return None
        (tl,) = struct.unpack_from("<I", payload, len(payload) - 4)
        start = len(payload) - 4 - tl
        if tl < 2 or start < 4 + hl or payload[start:start + 1] != b"{":
            return None
        try:
            h = orjson.loads(payload[start:len(payload) - 4])
        except ValueError:
            return None
        if not isinstance(h, dict) or 4 + hl + h.get("n", -1) * 18 + h.get("nstacks", -1) * 8 != start:
            return None
        return h

    def _header(self) -> dict:
        if self._head is None:
            (hl,) = struct.unpack_from("<I", self.payload)
            try:
                self._head = orjson.loads(self.payload[4:4 + hl])
            except ValueError as e:
                raise InputError(self.where, f"undecodable profile aggregate: {e}") from None
        return self._head

    @property
    def frames(self) -> list[str]:
        return self._header()["frames"]

    @property
    def stack_frames(self) -> list[list[int]]:
        return self._header()["stacks"]

    def rows(self, cpus: set[int] | None):
        """The rows of these CPUs (None: all rows)."""
        if cpus is None:
            return self.cols
        sel = [self.cpu_ranges[c] for c in sorted(cpus) if c in self.cpu_ranges]
        if not sel:
            return [c[:0] for c in self.cols]
        idx = np.concatenate([np.arange(s, e) for s, e in sel])
        return [c[idx] for c in self.cols]
