"""Process state as perf tracks it for naming user frames: each process's executable maps (by
version, so a sample is named with the maps it ran under) and each thread's name, from a /proc
snapshot at start and from the rings' side-band records (MMAP2, COMM, FORK, EXIT) after."""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_right

import numpy as np

from ..node.root import Root
from .arrays import distinct, intern as intern_in
from .parse import Batch
from .ringbuf import COMM, COMM_EXEC, EXIT, FORK, LOST, MMAP, MMAP2, U64
from .perfmap import perf_map_symbols

ANON, FILE, VDSO, OTHER = 0, 1, 2, 3


def _kind(name: str) -> int:
    if name in ("//anon", "") or name.startswith(("/dev/zero", "/anon_hugepage", "[anon:")):
        return ANON
    if name == "[vdso]":
        return VDSO
    if name.startswith("/") and not name.endswith(" (deleted)"):
        return FILE
    return OTHER


class Maps:
    """A process's executable maps: sorted starts and (start, end, pgoff, kind, name, ident, file key)
    rows; a version is never changed once a later one exists (copy, then add)."""

    __slots__ = ("starts", "rows", "_arrays")

    def __init__(self, starts=None, rows=None):
        self.starts: list[int] = starts if starts is not None else []
        self.rows: list[tuple] = rows if rows is not None else []
        self._arrays = None

    def copy(self) -> "Maps":
        return Maps(list(self.starts), list(self.rows))

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect_right(self.starts, start) - 1
        if i >= 0 and self.rows[i][1] > start:
            return True
        return i + 1 < len(self.rows) and self.rows[i + 1][0] < end

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, ends, pgoffs) as uint64 arrays, for resolving many addresses at once."""
        if self._arrays is None or len(self._arrays[0]) != len(self.rows):
            self._arrays = (np.array([r[0] for r in self.rows], dtype=np.uint64),
                            np.array([r[1] for r in self.rows], dtype=np.uint64),
                            np.array([r[2] for r in self.rows], dtype=np.uint64))
        return self._arrays

    def add(self, start: int, end: int, pgoff: int, name: str, ident: tuple) -> None:
        """A new map replaces the parts of older ones it overlaps (perf's maps__fixup_overlappings).
        Rows: (start, end, pgoff, kind, name, ident, file key)."""
        lo = max(0, bisect_right(self.starts, start) - 1)
        hi = lo
        keep = []
        rows = self.rows
        while hi < len(rows) and rows[hi][0] < end:
            r = rows[hi]
            s0, e0, p0 = r[0], r[1], r[2]
            if e0 > start:
                if s0 < start:
                    keep.append((s0, start, p0) + r[3:])
                if e0 > end:
                    keep.append((end, e0, p0 + (end - s0)) + r[3:])
            else:
                keep.append(r)
            hi += 1
        keep.append((start, end, pgoff, _kind(name), name, ident, hash((name, ident))))
        keep.sort()
        rows[lo:hi] = keep
        self.starts[lo:hi] = [r[0] for r in keep]
        self._arrays = None

    def find(self, ip: int):
        i = bisect_right(self.starts, ip) - 1
        if i >= 0 and ip < self.rows[i][1]:
            return self.rows[i]
        return None


def proc_maps(pid: int, proc: str = "/proc") -> Maps | None:
    """A running process's executable maps from /proc (perf record synthesizes the same at start)."""
    try:
        with open(f"{proc}/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    m = Maps()
    for ln in lines:
        p = ln.split(None, 5)
        if len(p) < 5 or "x" not in p[1]:
            continue
        a, _, b = p[0].partition("-")
        maj, _, mn = p[3].partition(":")
        name = p[5] if len(p) > 5 else "//anon"
        try:
            m.add(int(a, 16), int(b, 16), int(p[2], 16), name, (int(maj, 16), int(mn, 16), int(p[4])))
        except ValueError:
            continue
    return m


def _cstr(rec: bytes, at: int) -> str:
    end = rec.find(b"\0", at)
    return rec[at:end if end >= 0 else len(rec)].decode(errors="replace")


class Processes:
    """Maps and comms of the sampled processes, at any time of a batch (the Decoder's side-band half)."""

    # thread names kept; past this the table starts over and a live thread's name is read again from
    # /proc. An exited thread's name is forgotten one batch after the batch that saw its EXIT (not at
    # once: dropped at EXIT, samples of a reused tid were named from /proc after an exec, in
    # tests/test_profile_direct.py's fork/exec churn, and a sample read from another CPU's ring a
    # batch late still finds it): on a node that starts processes all day the table held every thread
    # ever seen until this bound (140 new a second in the soak of issue 38: a start-over every 12 min)
    COMM_LIMIT = 100_000

    def __init__(self, root: Root = Root("/")):
        # the /proc of the PID namespace the events report pids in: ours, or a host root (/host) seen
        # from a pod that shares the host's PID namespace (the DaemonSet's hostPID)
        self.proc = root.join("/proc")
        self.comm: dict[int, str] = {0: "swapper"}
        self.maps: dict[int, Maps] = {}
        self.gen: dict[int, int] = {}
        self.versions: dict[tuple[int, int], Maps] = {}
        self.root: dict[int, str] = {}  # pid -> /proc/PID/root prefix ("" if it is ours)
        self.nspid: dict[int, int] = {}
        self.jit: dict[int, object] = {}  # pid -> its /tmp/perf-PID.map symbols (None: it has none)
        self.lost: list[tuple[int, int, int]] = []
        self.exited: set[int] = set()
        self.tids_exited: set[int] = set()  # threads whose EXIT this batch saw: their names go next batch
        self._tids_gone: set[int] = set()  # those of the batch before: their names go at this batch's end
        self._skip: set[int] = set()  # pids whose MMAP2 records this batch skips (decode)
        self._snap: dict[int, Maps] | None = None  # maps read by the snapshot thread, not yet taken
        self._snap_pid: int | None = None  # the pid that thread is reading
        self._snap_done: threading.Event | None = None
        try:
            self.my_mnt = os.stat("/proc/self/ns/mnt").st_ino
        except OSError:
            self.my_mnt = None

    def snapshot(self, wait: float = 5.0) -> None:
        """Every thread's name and every process's executable maps now, as perf record synthesizes
        them at start (once the events are enabled: what changes later comes as records): a process
        that exits before its samples are decoded keeps its names. The maps are read on a thread of
        their own, waited for `wait` s: reading /proc/PID/maps takes the process's mmap lock and can
        block for as long as another holds it (perf bounds it with --proc-map-timeout); decoding takes
        what has been read, and never reads the maps of the process that thread is stuck on."""
        try:
            pids = [int(p) for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return
        for pid in pids:
            try:
                tids = os.listdir(f"{self.proc}/{pid}/task")
            except OSError:
                continue
            for t in tids:
                try:
                    with open(f"{self.proc}/{pid}/task/{t}/comm") as f:
                        self.comm.setdefault(int(t), f.read().rstrip("\n"))
                except (OSError, ValueError):
                    pass
        done = threading.Event()
        snap = self._snap = {}

        def read_all():
            for pid in pids:
                self._snap_pid = pid
                m = proc_maps(pid, self.proc)
                if m is not None:
                    snap[pid] = m
            self._snap_pid = None
            done.set()

        self._snap_done = done
        threading.Thread(target=read_all, name="nodesleuth-maps", daemon=True).start()
        done.wait(wait)
        self._merge_snapshot()

    def _merge_snapshot(self) -> None:
        """Take the maps the snapshot thread has read so far (pids the records have not made known)."""
        snap = self._snap
        if snap is None:
            return
        for pid in list(snap):
            m = snap.pop(pid)
            if pid not in self.maps:
                self.maps[pid] = m
                self.gen.setdefault(pid, 0)
                self.versions[(pid, self.gen[pid])] = m
        if self._snap_done is not None and self._snap_done.is_set() and not snap:
            self._snap = None

    # --- side-band

    def _maps_of(self, pid: int) -> Maps:
        m = self.maps.get(pid)
        if m is None:
            if self._snap is not None and pid in self._snap:
                self._merge_snapshot()
                m = self.maps.get(pid)
                if m is not None:
                    return m
            # the snapshot thread is stuck reading this one: do not block the decoder on it too
            stuck = self._snap is not None and pid == self._snap_pid
            m = self.maps[pid] = (None if stuck else proc_maps(pid, self.proc)) or Maps()
            self.gen.setdefault(pid, 0)
            self.versions[(pid, self.gen[pid])] = m
        return m

    def _bump(self, pid: int, m: Maps) -> int:
        g = self.gen.get(pid, 0) + 1
        self.gen[pid] = g
        self.maps[pid] = m
        self.versions[(pid, g)] = m
        return g

    def side_band(self, typ: int, misc: int, rec: bytes, t: int, changes: dict, comm_changes: dict) -> None:
        if typ == MMAP2 or typ == MMAP:
            pid = struct.unpack_from("<i", rec, 8)[0]
            if pid == -1 or pid in self._skip:
                return  # kernel maps (this process reads kallsyms itself), or a process never sampled
            start, length, pgoff = struct.unpack_from("<QQQ", rec, 16)
            if typ == MMAP2:
                maj, mn, ino = struct.unpack_from("<IIQ", rec, 40)
                ident = (maj, mn, ino)
                name = _cstr(rec, 72)
            else:
                ident, name = (0, 0, 0), _cstr(rec, 40)
            m = self._maps_of(pid)
            if not m.overlaps(start, start + length):
                # a map where none was (a process starting, dlopen, a JIT region): no earlier address
                # changes its name, so the current version takes it (no copy, no new generation)
                m.add(start, start + length, pgoff, name, ident)
                return
            m = m.copy()
            m.add(start, start + length, pgoff, name, ident)
            changes.setdefault(pid, []).append((t, self._bump(pid, m)))
        elif typ == COMM:
            pid, tid = struct.unpack_from("<ii", rec, 8)
            comm_changes.setdefault(tid, []).append((t, _cstr(rec, 16)))
            if misc & COMM_EXEC and pid not in self._skip:
                changes.setdefault(pid, []).append((t, self._bump(pid, self._maps_of(pid).copy())))
        elif typ == FORK:
            pid, ppid, tid, ptid = struct.unpack_from("<iiii", rec, 8)
            c = self._comm_at(ptid, t, comm_changes)
            comm_changes.setdefault(tid, []).append((t, c))
            self.tids_exited.discard(tid)  # a reused tid lives again: its name is kept
            self._tids_gone.discard(tid)
            if pid != ppid:
                self.root.pop(pid, None)
                self.nspid.pop(pid, None)
                self.exited.discard(pid)
                if pid in self._skip:  # exits in this batch, never sampled, forks nothing
                    return
                parent = self._maps_of(ppid) if ppid > 0 else Maps()
                changes.setdefault(pid, []).append((t, self._bump(pid, parent.copy())))
        elif typ == EXIT:
            pid, _ppid, tid, _ptid = struct.unpack_from("<iiii", rec, 8)
            self.tids_exited.add(tid)
            if pid == tid:
                self.exited.add(pid)
        elif typ == LOST:
            n = U64.unpack_from(rec, 16)[0]
            cpu = struct.unpack_from("<I", rec, len(rec) - 8)[0]
            self.lost.append((t, cpu, n))

    def _comm_at(self, tid: int, t: int, comm_changes: dict) -> str | None:
        ch = comm_changes.get(tid)
        if ch:
            return ch[-1][1]
        return self.comm.get(tid)

    # --- where a process's files are: its mount namespace, its pid there

    def _root(self, pid: int) -> str:
        r = self.root.get(pid)
        if r is None:
            r = ""
            try:
                if self.my_mnt is not None and os.stat(f"{self.proc}/{pid}/ns/mnt").st_ino != self.my_mnt:
                    r = f"{self.proc}/{pid}/root"
            except OSError:
                pass
            self.root[pid] = r
        return r

    def _nspid(self, pid: int) -> int:
        n = self.nspid.get(pid)
        if n is None:
            n = pid
            try:
                with open(f"{self.proc}/{pid}/status") as f:
                    for ln in f:
                        if ln.startswith("NStgid:"):
                            n = int(ln.split()[-1])
                            break
            except (OSError, ValueError):
                pass
            self.nspid[pid] = n
        return n

    def _jit_table(self, pid: int):
        tab = self.jit.get(pid, False)
        if tab is False:
            nsp = self._nspid(pid)
            tab = None
            for p in (f"{self._root(pid)}/tmp/perf-{nsp}.map", f"/tmp/perf-{pid}.map"):
                tab = perf_map_symbols(p)
                if tab is not None:
                    break
            self.jit[pid] = tab
        return tab

    def _gens(self, pid: np.ndarray, t: np.ndarray, changes: dict) -> np.ndarray:
        """The map generation of each sample's process at its time."""
        up = distinct(pid)
        base = {}
        for p, ch in changes.items():
            base[p] = ch[0][1] - 1  # the generation before this batch's first change
        cur = np.array([base.get(p, self.gen.get(p, 0)) for p in up.tolist()], dtype=np.int64)
        gen = cur[np.searchsorted(up, pid)]
        _follow(pid, t, gen, changes, lambda p, ch: [base[p]] + [c[1] for c in ch])
        return gen

    def _comms(self, b: Batch, pid, tid, t, comm_changes: dict) -> np.ndarray:
        """The comm of each sample's thread at its time, interned into b.comms."""
        ut = distinct(tid)
        comm_ix: dict[str, int] = {}

        def intern(c: str) -> int:
            return intern_in(comm_ix, b.comms, c)

        def base(x: int, p: int) -> str:
            ch = comm_changes.get(x)
            c = self.comm.get(x)
            if c is None and not ch:
                try:
                    with open(f"{self.proc}/{p}/task/{x}/comm") as f:
                        c = self.comm[x] = f.read().rstrip("\n")
                except OSError:
                    c = None
            return c if c is not None else f":{x}"

        firsts = np.searchsorted(np.sort(tid), ut)  # any sample of each tid, for its pid
        sorted_pid = pid[np.argsort(tid, kind="stable")]
        cids = np.array([intern(base(x, int(sorted_pid[f]))) for x, f in zip(ut.tolist(), firsts.tolist())],
                        dtype=np.int64)
        out = cids[np.searchsorted(ut, tid)]

        def ids(x: int, ch: list) -> list[int]:
            prev = self.comm.get(x)
            names = [prev if prev is not None else f":{x}"] + [c[1] if c[1] is not None else f":{x}" for c in ch]
            return [intern(c) for c in names]

        _follow(tid, t, out, comm_changes, ids)
        return out

    def _settle_processes(self, comm_changes: dict) -> None:
        """After a batch: comms take their last value, only the current map versions are kept, and
        what exited is forgotten (a thread's name a batch later); the comm table is bounded."""
        for x, ch in comm_changes.items():
            if ch[-1][1] is not None:
                self.comm[x] = ch[-1][1]
        for x in self._tids_gone:
            self.comm.pop(x, None)
        self._tids_gone, self.tids_exited = self.tids_exited, set()
        self.versions = {(p, g): self.maps[p] for p, g in self.gen.items() if p in self.maps}
        for p in self.exited:
            self.maps.pop(p, None)
            self.gen.pop(p, None)
            self.root.pop(p, None)
            self.nspid.pop(p, None)
            self.jit.pop(p, None)
        self.exited.clear()
        if len(self.comm) > self.COMM_LIMIT:
            self.comm = {0: "swapper"}


def _follow(keys: np.ndarray, t: np.ndarray, out: np.ndarray, changes: dict, values) -> None:
    """Where a key (a pid's maps, a thread's comm) changed during the batch, give each of its samples the
    value it had at the sample's time: changes = {key: [(time, new value), ...]} in time order, and
    values(key, changes) the value before them followed by each new one."""
    if not changes:
        return
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    for k, ch in changes.items():
        lo, hi = np.searchsorted(ordered, k), np.searchsorted(ordered, k, side="right")
        if lo == hi:
            continue
        idx = order[lo:hi]
        times = np.array([c[0] for c in ch], dtype=np.uint64)
        out[idx] = np.array(values(k, ch), dtype=np.int64)[np.searchsorted(times, t[idx], side="right")]
