"""The direct profiler: the kernel's perf ring buffers read in this process, without `perf record`
or `perf script`.

One cpu-clock event per online CPU (perf_event_open(2), pid -1, frequency mode, the sample type
`perf record -g` uses: IP|TID|TIME|CALLCHAIN|CPU|PERIOD, CLOCK_MONOTONIC timestamps, side-band
MMAP2/COMM/FORK/EXIT records for naming user frames), each with its mmap'ed ring. The rings are
copied out when the kernel says one is half full (a watermark wakeup, as perf record reads them) and
at each store; records are decoded in bulk with numpy (fixed offsets for the one sample type asked
for; a callchain hash per sample), so Python's per-sample work is a record-length walk and the
kernel's work is all that grows with the rate. A stack is named once, when its (process, map
generation, callchain) is first seen: kernel addresses from kallsyms, user ones from the process's
maps and its files' ELF symbol tables (profile/symbols.py), each address once. The names are those
`perf script` prints, so the stored profile folds as stackcollapse-perf.pl folds perf's text
(tests/test_profile_direct.py compares both on the same live samples).

Needs: Linux on x86_64 (the ring's head is read without a barrier, which x86's ordering allows),
perf_event_open allowed for system-wide events (root, CAP_PERFMON or CAP_SYS_ADMIN, or
kernel.perf_event_paranoid <= 0), and the rings' memory lockable (CAP_IPC_LOCK or under
kernel.perf_event_mlock_kb). runner.ProfileRunner tries this first and otherwise falls back to
`perf record` (profile/perfdata.py), saying why.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import select
import struct
import threading
import time
from bisect import bisect_right
from itertools import chain

import numpy as np

from ..model.procfs import parse_cpu_list
from ..node.root import Root
from .arrays import distinct, intern as intern_in
from .parse import Batch
from .symbols import KernelSymbols, Lazy, UserSymbols, frame, perf_map_symbols
from .worker import EVENT, ProfileWorker

# include/uapi/linux/perf_event.h
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
S_IP, S_TID, S_TIME, S_CALLCHAIN, S_CPU, S_PERIOD = 0x1, 0x2, 0x4, 0x20, 0x80, 0x100
SAMPLE_TYPE = S_IP | S_TID | S_TIME | S_CALLCHAIN | S_CPU | S_PERIOD
(F_DISABLED, F_MMAP, F_COMM, F_FREQ, F_TASK, F_WATERMARK, F_SAMPLE_ID_ALL, F_MMAP2, F_COMM_EXEC,
 F_USE_CLOCKID) = (1 << 0, 1 << 8, 1 << 9, 1 << 10, 1 << 13, 1 << 14, 1 << 18, 1 << 23, 1 << 24, 1 << 25)
ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHH")  # perf_event_attr up to sample_max_stack: 112 bytes (VER5)
PERF_FLAG_FD_CLOEXEC = 8
IOC_ENABLE, IOC_DISABLE = 0x2400, 0x2401
NR_PERF_EVENT_OPEN = {"x86_64": 298}
CLOCK_MONOTONIC = 1
# records
MMAP, LOST, COMM, EXIT, FORK, SAMPLE, MMAP2 = 1, 2, 3, 4, 7, 9, 10
COMM_EXEC = 1 << 13
CONTEXT_HV, CONTEXT_KERNEL, CONTEXT_USER, CONTEXT_MAX = 2**64 - 32, 2**64 - 128, 2**64 - 512, 2**64 - 4095
META_HEAD, META_TAIL = 1024, 1032  # data_head / data_tail in struct perf_event_mmap_page
U64 = struct.Struct("<Q")
MASK32 = np.uint64(0xFFFFFFFF)
_rng = np.random.default_rng(0x6E73)  # fixed: the same stack hashes alike in every run (tests, reruns)
MULT = (_rng.integers(1, 2**63, size=1024, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)  # odd multipliers
MULT2 = (_rng.integers(1, 2**63, size=1024, dtype=np.uint64) << np.uint64(1)) | np.uint64(1)
MIX_PID, MIX_GEN, MIX_GEN2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F),
                              np.uint64(0x165667B19E3779F9))


class Unavailable(Exception):
    """The direct path cannot run here; the message says why (the runner falls back to perf record)."""


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return list(range(os.cpu_count() or 1))
    return parse_cpu_list(text, path)


def online_cpus_from(text: str) -> list[int]:
    return parse_cpu_list(text, "the CPU list")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


class Rings:
    """One cpu-clock sampling event per CPU with its mmap'ed ring buffer."""

    def __init__(self, cpus: list[int], freq: int, pages: int, max_stack: int = 127, root: Root = Root("/")):
        self.sysctl = root.join("/proc/sys/kernel")  # for the reasons it gives
        if platform.machine() not in NR_PERF_EVENT_OPEN:
            raise Unavailable(f"the direct reader supports x86_64 only (this is {platform.machine()})")
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        self.nr = NR_PERF_EVENT_OPEN[platform.machine()]
        self.page = mmap.PAGESIZE
        self.pages = pages
        self.size = pages * self.page
        self.fds: list[int] = []
        self.maps: list[mmap.mmap] = []
        self.cpus: list[int] = []
        self.tails: list[int] = []
        flags = (F_DISABLED | F_MMAP | F_COMM | F_FREQ | F_TASK | F_WATERMARK | F_SAMPLE_ID_ALL | F_MMAP2
                 | F_COMM_EXEC | F_USE_CLOCKID)
        attr = ATTR.pack(PERF_TYPE_SOFTWARE, ATTR.size, PERF_COUNT_SW_CPU_CLOCK, freq, SAMPLE_TYPE, 0, flags,
                         self.size // 2, 0, 0, 0, 0, 0, 0, CLOCK_MONOTONIC, 0, 0, max_stack, 0)
        self.attr = ctypes.create_string_buffer(attr, ATTR.size)
        try:
            for cpu in cpus:
                fd = self.libc.syscall(self.nr, self.attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
                if fd < 0:
                    e = ctypes.get_errno()
                    if e == errno.ENODEV and len(cpus) > 1:
                        continue  # went offline meanwhile
                    raise Unavailable(self._why(e, _read(self.sysctl + "/perf_event_paranoid")))
                self.fds.append(fd)
                try:
                    m = mmap.mmap(fd, self.page + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except OSError as ex:
                    raise Unavailable(f"cannot map a {self.size // 1024} KB perf ring per CPU ({ex.strerror}; "
                                      f"kernel.perf_event_mlock_kb={_read(self.sysctl + '/perf_event_mlock_kb')}"
                                      ", no CAP_IPC_LOCK?)") from None
                self.maps.append(m)
                self.cpus.append(cpu)
                self.tails.append(0)
            if not self.fds:
                raise Unavailable("no online CPU could be sampled")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _why(e: int, para: str) -> str:
        if e in (errno.EACCES, errno.EPERM):
            return (f"perf_event_open refused a system-wide event ({os.strerror(e)}; kernel.perf_event_paranoid="
                    f"{para}: needs root, CAP_PERFMON or a paranoid level <= 0)")
        if e == errno.ENOENT or e == errno.ENOSYS:
            return f"no perf events in this kernel ({os.strerror(e)})"
        if e == errno.EINVAL:
            return "the kernel refused the event's attributes (EINVAL: too old for use_clockid/mmap2?)"
        if e == errno.EMFILE:
            return "too many open files for one event per CPU (EMFILE)"
        return f"perf_event_open failed: {os.strerror(e)}"

    def ioctl_all(self, req: int) -> None:
        import fcntl

        for fd in self.fds:
            fcntl.ioctl(fd, req, 0)

    def read(self, i: int) -> bytes:
        """Everything the kernel wrote into ring i since the last read; the space is handed back."""
        m = self.maps[i]
        head = U64.unpack_from(m, META_HEAD)[0]
        tail = self.tails[i]
        if head == tail:
            return b""
        size, base = self.size, self.page
        s, e = tail % size, head % size
        if head - tail >= size:  # cannot happen in the non-overwrite mode asked for; be safe
            s, e = e, e
        data = m[base + s:base + e] if s < e else m[base + s:base + size] + m[base:base + e]
        U64.pack_into(m, META_TAIL, head)
        self.tails[i] = head
        return data

    def close(self) -> None:
        for m in self.maps:
            try:
                m.close()
            except (BufferError, ValueError):
                pass
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.maps, self.fds = [], []


# --- process state: maps and comms, as perf tracks them

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


class Decoder:
    """Raw ring records -> Batch (numpy columns, stacks named as perf script names them)."""

    STACK_LIMIT = 200_000  # distinct (process, callchain) keys kept; past it the caches start over
    # user parts are keyed per process (and map version): on a node that starts processes all day their
    # keys pile up for processes long gone, ~200 bytes each; past this the part tables start over (the
    # frame caches stay, so naming them again is a dict lookup per frame)
    PARTS_LIMIT = 50_000
    # thread names kept (exited threads' too: dropping them at EXIT named samples of a reused tid from
    # /proc after an exec, in tests/test_profile_direct.py's fork/exec churn); past this the table
    # starts over and a live thread's name is read again from /proc
    COMM_LIMIT = 100_000

    def __init__(self, max_stack: int = 127, root: Root = Root("/")):
        self.max_stack = max_stack
        # the /proc of the PID namespace the events report pids in: ours, or a host root (/host) seen
        # from a pod that shares the host's PID namespace (the DaemonSet's hostPID)
        self.proc = root.join("/proc")
        self.kernel = KernelSymbols(f"{self.proc}/kallsyms", f"{self.proc}/modules", f"{self.proc}/kcore")
        self.user = UserSymbols()
        self.comm: dict[int, str] = {0: "swapper"}
        self.maps: dict[int, Maps] = {}
        self.gen: dict[int, int] = {}
        self.versions: dict[tuple[int, int], Maps] = {}
        self.root: dict[int, str] = {}  # pid -> /proc/PID/root prefix ("" if it is ours)
        self.nspid: dict[int, int] = {}
        # stack parts: (hash, hash2, pid[, gen]) -> id; id -> names (root first); (kernel id << 32 | user id) -> stack
        self.parts: dict[tuple, int] = {(0, 0, 0): 0}
        self.part_names: list[tuple[str, ...]] = [()]
        self.combos: dict[int, tuple[str, ...]] = {}
        self.kcache: dict[int, tuple[str, ...]] = {}
        self.fnames: dict[tuple[str, str], tuple[str, ...]] = {}  # (symbol, dso) -> frame names
        self.fcache: dict[tuple, tuple[str, ...]] = {}
        self.jit: dict[int, object] = {}  # pid -> its /tmp/perf-PID.map symbols (None: it has none)
        self.lost: list[tuple[int, int, int]] = []
        self.samples = 0
        self.named = 0  # distinct stacks named
        self.exited: set[int] = set()
        self._skip: set[int] = set()  # pids whose MMAP2 records this batch skips (decode)
        self._snap: dict[int, Maps] | None = None  # maps read by the snapshot thread, not yet taken
        self._snap_pid: int | None = None  # the pid that thread is reading
        self._snap_done: threading.Event | None = None
        # frames (the names one address stands for) by id; 0: an address in no map
        self.frames: list[tuple[str, ...]] = [("[unknown]",)]
        self.frame_id: dict[tuple[str, ...], int] = {("[unknown]",): 0}
        self.frames_gen = 0  # bumped when the frame table starts over: per-table frame ids are then stale
        self.named_parts: dict[tuple, int] = {}  # (frame-id hashes, length) -> part id: user parts by their names
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

    # --- naming

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

    def _kframe(self, ip: int) -> tuple[str, ...]:
        f = self.kcache.get(ip)
        if f is None:
            sym, dso = self.kernel.name(ip)
            f = self.kcache[ip] = frame(ip, sym, dso)
        return f

    def _frame(self, ip: int, sym: str, dso: str) -> tuple[str, ...]:
        """frame() by (symbol, dso): a user frame's names do not depend on its address."""
        key = (sym, dso)
        f = self.fnames.get(key)
        if f is None:
            f = self.fnames[key] = frame(ip, sym, dso)
        return f

    def _uframe(self, pid: int, m: Maps | None, ip: int) -> tuple[tuple[str, ...], bool]:
        row = m.find(ip) if m is not None else None
        if row is None:
            return ("[unknown]",), False
        start, end, pgoff, kind, name, ident, fid = row
        off = ip - start + pgoff
        if kind == FILE:
            key = (fid, off)
            f = self.fcache.get(key)
            if f is None:
                fs = self.user.file(name, self._root(pid), ident)
                sym = fs.lookup(off)
                f = self.fcache[key] = self._frame(ip, sym if sym is not None else "[unknown]", name)
            return f, True
        if kind == VDSO:
            sym = self.user.vdso_symbols().lookup(off)
            return self._frame(ip, sym if sym is not None else "[unknown]", "[vdso]"), True
        if kind == ANON:
            tab = self._jit_table(pid)
            if tab is None:  # no JIT symbol file: every address of its anonymous maps names alike
                return self._frame(0, "[unknown]", f"/tmp/perf-{pid}.map"), False
            sym = tab.lookup(ip)
            return self._frame(ip, sym if sym is not None else "[unknown]", f"/tmp/perf-{pid}.map"), True
        return self._frame(ip, "[unknown]", name), True

    def name_kernel(self, ips: list[int]) -> tuple[str, ...]:
        """A kernel part ([PERF_CONTEXT_KERNEL, ip...]), root first."""
        if len(ips) > self.max_stack + 1 or max(ips[1:], default=0) >= CONTEXT_MAX:
            return self.name_stack(0, 0, ips)
        kget, miss = self.kcache.get, self._kframe
        per = [kget(ip) or miss(ip) for ip in ips[1:]]
        per.reverse()
        self.named += 1
        return tuple(chain.from_iterable(per))

    def name_stack(self, pid: int, gen: int, ips: list[int]) -> tuple[str, ...]:
        """perf script's callchain for one sample (any contexts), root first (as folded)."""
        m = self.versions.get((pid, gen))
        if m is None and pid > 0:
            m = self._maps_of(pid) if pid not in self.maps else self.maps[pid]
        per: list[tuple[str, ...]] = []
        ctx = CONTEXT_USER
        n = 0
        for ip in ips:
            if ip >= CONTEXT_MAX:
                if ip in (CONTEXT_KERNEL, CONTEXT_USER, CONTEXT_HV):
                    ctx = ip
                    continue
                per = []  # a guest context: perf resets the chain
                break
            if n >= self.max_stack:
                break
            n += 1
            if ctx == CONTEXT_KERNEL:
                per.append(self._kframe(ip))
            elif ctx == CONTEXT_USER:
                per.append(self._uframe(pid, m, ip)[0])
            else:
                per.append(("[unknown]",))
        self.named += 1
        per.reverse()
        return tuple(chain.from_iterable(per))

    # --- bulk decoding

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

    def _ids(self, h1, h2, u, s, umark, nr, pid, gen, kernel: bool) -> np.ndarray:
        """Part ids for part hashes: a dict lookup per distinct part; new kernel parts are named address
        by address (kallsyms, cached per address), new user parts all at once (_name_user_parts)."""
        uh = distinct(h1)
        inv = np.searchsorted(uh, h1)
        rep = np.empty(len(uh), dtype=np.int64)
        rep[inv] = np.arange(len(h1))
        parts, names = self.parts, self.part_names
        k2 = h2[rep].tolist()
        if kernel:
            keys = list(zip(uh.tolist(), k2, [0] * len(uh)))
        else:
            keys = list(zip(uh.tolist(), k2, pid[rep].tolist(), gen[rep].tolist()))
        get = parts.get
        ids = [get(k) for k in keys]
        if None in ids:
            miss = [j for j, x in enumerate(ids) if x is None]
            r = rep[miss]
            if kernel:
                a_l, n_l = (s[r] + 7).tolist(), umark[r].tolist()
            else:
                a_l, n_l = (s[r] + 7 + umark[r]).tolist(), (nr[r] - umark[r]).tolist()
            if kernel:
                for j, a, n in zip(miss, a_l, n_l):
                    ips = u[a:a + n].tolist()
                    x = ids[j] = parts[keys[j]] = len(names)
                    names.append(() if not ips else self.name_kernel(ips) if ips[0] == CONTEXT_KERNEL
                                 else self.name_stack(0, 0, ips))
            else:
                got = self._name_user_parts(u, np.array(a_l, dtype=np.int64), np.array(n_l, dtype=np.int64),
                                            pid[r], gen[r])
                for j, x in zip(miss, got):
                    ids[j] = parts[keys[j]] = x
        return np.array(ids, dtype=np.int64)[inv]

    def _name_user_parts(self, u: np.ndarray, a: np.ndarray, n: np.ndarray, pids: np.ndarray,
                         gens: np.ndarray) -> list[int]:
        """Part ids of new user parts ([PERF_CONTEXT_USER, ip...] at u[a:a+n] of processes `pids` at map
        generations `gens`). Their addresses are resolved to frame ids in bulk, per process map
        version and per file (numpy searches in the maps and the symbol tables); parts with the same
        frames are one part, so a new address chain whose names are known (another return address in
        the same functions, a JIT address, the same program in a new process) costs no naming. Odd
        chains (other contexts, longer than the kernel's limit) are named one by one."""
        out = np.full(len(a), -1, dtype=np.int64)
        if not len(a):
            return []
        empty = n == 0
        if empty.any():
            out[empty] = self._named_part(())
        odd = ~empty & ((n - 1 > self.max_stack) | (u[np.where(empty, 0, a)] != np.uint64(CONTEXT_USER)))

        def layout(ok):
            aa, nn = a[ok] + 1, n[ok] - 1
            first = np.cumsum(nn) - nn
            owner = np.repeat(np.arange(len(ok)), nn)
            pos = np.arange(int(nn.sum()), dtype=np.int64) - first[owner]
            return nn, first, owner, pos, u[aa[owner] + pos]

        ok = np.flatnonzero(~empty & ~odd)
        nn, first, owner, pos, addrs = layout(ok)
        inner = addrs >= np.uint64(CONTEXT_MAX)
        if inner.any():  # a context marker inside the user part: named one by one
            odd[ok[distinct(owner[inner])]] = True
            ok = np.flatnonzero(~empty & ~odd)
            nn, first, owner, pos, addrs = layout(ok)
        for j in np.flatnonzero(odd).tolist():
            out[j] = self._named_part(self.name_stack(int(pids[j]), int(gens[j]), u[a[j]:a[j] + n[j]].tolist()))
        if not len(ok):
            return out.tolist()
        total = len(addrs)
        fids = np.zeros(total, dtype=np.int64)
        # resolve per (pid, gen): the addresses of all new chains of one map version at once
        pg = pids[ok].astype(np.int64) * (1 << 24) + gens[ok].astype(np.int64)
        upg = distinct(pg)
        gid = np.searchsorted(upg, pg)
        rep = np.empty(len(upg), dtype=np.int64)
        rep[gid] = ok
        if len(upg) == 1:
            fids[:] = self._resolve_user(int(pids[ok[0]]), int(gens[ok[0]]), addrs)
        elif total:
            eg = gid[owner]
            order = np.argsort(eg, kind="stable")
            se = eg[order]
            cuts = np.flatnonzero(np.concatenate(([True], se[1:] != se[:-1]))).tolist() + [len(order)]
            for c0, c1 in zip(cuts[:-1], cuts[1:]):
                idx = order[c0:c1]
                j = int(rep[se[c0]])
                fids[idx] = self._resolve_user(int(pids[j]), int(gens[j]), addrs[idx])
        # one part per distinct frame-id sequence (hashed as the address chains are)
        h1 = np.zeros(len(ok), dtype=np.uint64)
        h2 = h1.copy()
        if total:
            f = fids.astype(np.uint64)
            nz = np.flatnonzero(nn > 0)
            h1[nz] = np.add.reduceat(f * MULT[pos & 1023], first[nz])
            h2[nz] = np.add.reduceat((f ^ MIX_PID) * MULT2[pos & 1023], first[nz])
        frames, names, named = self.frames, self.part_names, self.named_parts
        fl = fids.tolist()
        res = []
        for x1, x2, ln, st in zip(h1.tolist(), h2.tolist(), nn.tolist(), first.tolist()):
            key = (x1, x2, ln)
            x = named.get(key)
            if x is None:
                seq = [frames[i] for i in fl[st:st + ln]]
                seq.reverse()
                x = named[key] = len(names)
                names.append(tuple(chain.from_iterable(seq)))
                self.named += 1
            res.append(x)
        out[ok] = res
        return out.tolist()

    def _named_part(self, names_: tuple[str, ...]) -> int:
        key = ("names", names_)
        x = self.named_parts.get(key)
        if x is None:
            x = self.named_parts[key] = len(self.part_names)
            self.part_names.append(names_)
        return x

    def _fid(self, f: tuple[str, ...]) -> int:
        x = self.frame_id.get(f)
        if x is None:
            x = self.frame_id[f] = len(self.frames)
            self.frames.append(f)
        return x

    def _resolve_user(self, pid: int, gen: int, addrs: np.ndarray) -> np.ndarray:
        """Frame ids of user addresses of process `pid` at map generation `gen` (0: in no map)."""
        out = np.zeros(len(addrs), dtype=np.int64)
        m = self.versions.get((pid, gen))
        if m is None and pid > 0:
            m = self._maps_of(pid) if pid not in self.maps else self.maps[pid]
        if m is None or not m.rows or not len(addrs):
            return out
        if len(addrs) <= 16:  # a few addresses: one by one (numpy's per-call cost is more than their work)
            fid = self._fid
            return np.array([fid(self._uframe(pid, m, a)[0]) for a in addrs.tolist()], dtype=np.int64)
        st, en, pg = m.arrays()
        i = st.searchsorted(addrs, "right").astype(np.int64) - 1
        ic = np.maximum(i, 0)
        inside = (i >= 0) & (addrs < en[ic])
        if not inside.any():
            return out
        sel = np.flatnonzero(inside)
        rows = ic[sel]
        order = np.argsort(rows, kind="stable")
        rs = rows[order]
        cuts = np.flatnonzero(np.concatenate(([True], rs[1:] != rs[:-1])))
        for c0, c1 in zip(cuts.tolist(), cuts[1:].tolist() + [len(rs)]):
            r = int(rs[c0])
            where = sel[order[c0:c1]]
            row = m.rows[r]
            kind, name = row[3], row[4]
            if kind == FILE:
                fs = self.user.file(name, self._root(pid), row[5])
                out[where] = self._table_fids(fs.table, addrs[where] - st[r] + pg[r], name)
            elif kind == VDSO:
                out[where] = self._table_fids(self.user.vdso_symbols().table, addrs[where] - st[r] + pg[r], "[vdso]")
            elif kind == ANON:
                tab = self._jit_table(pid)
                dso = f"/tmp/perf-{pid}.map"
                out[where] = self._table_fids(tab, addrs[where], dso)
            else:
                out[where] = self._fid(self._frame(0, "[unknown]", name))
        return out

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

    def _table_fids(self, tab, offs: np.ndarray, dso: str) -> np.ndarray:
        """Frame ids of offsets (or addresses) in a symbol table: perf's symbol, else [unknown] of dso."""
        unknown = self._fid(self._frame(0, "[unknown]", dso))
        if tab is None or not len(tab):
            return np.full(len(offs), unknown, dtype=np.int64)
        if getattr(tab, "fids_gen", None) != self.frames_gen:
            tab.fids = np.full(len(tab), -1, dtype=np.int64)
            tab.fids_gen = self.frames_gen
        j = tab.starts.searchsorted(offs, "right").astype(np.int64) - 1
        jc = np.maximum(j, 0)
        hit = (j >= 0) & ((offs < tab.ends[jc]) | (offs == tab.starts[jc]))
        res = np.where(hit, tab.fids[jc], unknown)
        todo = hit & (res < 0)
        if todo.any():
            for x in distinct(jc[todo]).tolist():
                nm = tab.name_of(int(tab.idx[x]))
                if isinstance(nm, Lazy):
                    nm = nm.resolve()
                tab.fids[x] = self._fid(self._frame(0, nm, dso))
            res = np.where(hit, tab.fids[jc], unknown)
        return res

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

    def _settle(self, comm_changes: dict) -> None:
        """After a batch: comms take their last value, only the current map versions are kept, and
        what exited is forgotten; caches are bounded."""
        for x, ch in comm_changes.items():
            if ch[-1][1] is not None:
                self.comm[x] = ch[-1][1]
        self.versions = {(p, g): self.maps[p] for p, g in self.gen.items() if p in self.maps}
        for p in self.exited:
            self.maps.pop(p, None)
            self.gen.pop(p, None)
            self.root.pop(p, None)
            self.nspid.pop(p, None)
            self.jit.pop(p, None)
        self.exited.clear()
        if (len(self.part_names) > self.STACK_LIMIT or len(self.combos) > self.STACK_LIMIT
                or len(self.parts) > self.PARTS_LIMIT):
            self.parts, self.part_names, self.combos, self.named_parts = {(0, 0, 0): 0}, [()], {}, {}
        if len(self.fcache) + len(self.kcache) + len(self.fnames) > self.STACK_LIMIT:
            self.fcache.clear()
            self.kcache.clear()
            self.fnames.clear()
        if len(self.frames) > self.STACK_LIMIT:
            self.frames, self.frame_id = [("[unknown]",)], {("[unknown]",): 0}
            self.frames_gen += 1
            self.parts, self.part_names, self.combos, self.named_parts = {(0, 0, 0): 0}, [()], {}, {}
        if len(self.comm) > self.COMM_LIMIT:
            self.comm = {0: "swapper"}

    def close(self) -> None:
        self.user.demangle.close()


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


def ring_pages(freq: int, buffer_kb: int = 0) -> int:
    """Pages of ring per CPU: 32 (128 KB) at 49 Hz, more at higher rates, a power of two."""
    if buffer_kb:
        return 1 << max(0, (max(4, buffer_kb) // 4 - 1).bit_length())
    pages = 32
    while pages < 1024 and pages * 49 < 32 * freq:
        pages *= 2
    return pages


class DirectProfileRunner(ProfileWorker):
    """The continuous profiler on the direct path: same interface as the perf record runner
    (start/stop, counters, error), same streams and batches (profile/worker.py)."""

    method = "direct"

    def __init__(self, append, freq: int = 49, rotate: float = 10.0, cpus: str | None = None, buffer_kb: int = 0,
                 store: bool = True, on_batch=None, root: Root = Root("/")):
        super().__init__(append, freq, rotate, cpus, buffer_kb, store, on_batch)
        # the events sample this kernel: a recorded tree's /proc says nothing of its processes
        self.root = root if root.live else Root("/")
        self.rings: Rings | None = None
        self.pending: list[bytes] = []
        self.decoder: Decoder | None = None

    def open(self) -> None:
        """Open the events (raises Unavailable with the reason); start() runs them."""
        online = self.root.join("/sys/devices/system/cpu/online")
        cpus = online_cpus_from(self.cpus) if self.cpus else online_cpus(online)
        try:
            max_stack = int(_read(self.root.join("/proc/sys/kernel/perf_event_max_stack")))
        except ValueError:
            max_stack = 127
        self.rings = Rings(cpus, self.freq, ring_pages(self.freq, self.buffer_kb), max_stack, self.root)
        self.decoder = Decoder(max_stack, self.root)
        if not self.decoder.kernel.ok:
            self.error = "kernel addresses hidden (kernel.kptr_restrict): kernel frames are [unknown]"

    def start(self) -> bool:
        if self.rings is None:
            try:
                self.open()
            except Unavailable as e:
                self.error = str(e)
                return False
        self._start_thread()
        self.started.wait(30)
        return True

    def _drain(self, which=None) -> None:
        r = self.rings
        for i in (range(len(r.fds)) if which is None else which):
            data = r.read(i)
            if data:
                self.pending.append(data)

    def _store(self) -> None:
        c0 = time.process_time()
        self._drain()
        buf, self.pending = b"".join(self.pending), []
        try:
            b = self.decoder.decode(buf)
        except Exception as e:  # noqa: BLE001 - one undecodable batch must not stop the profiler
            self.error = f"batch not decoded: {type(e).__name__}: {e}"
            self.dropped_chunks += 1
            self.ingest_cpu += time.process_time() - c0
            return
        offset = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
        dec = self.decoder
        if dec.lost:
            lost, dec.lost = dec.lost, []
            self._store_lost(lost, offset,
                             "the kernel dropped {n} samples (a ring buffer was full: the reader fell behind)")
        self._store_batch(b, offset, c0)

    def _loop(self) -> None:
        r = self.rings
        poller = select.poll()
        fd_ix = {fd: i for i, fd in enumerate(r.fds)}
        for fd in r.fds:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            r.ioctl_all(IOC_ENABLE)
            self.decoder.snapshot()
        except OSError as e:
            self.error = f"cannot enable the perf events: {e}"
            self.started.set()
            return self._finish()
        self.started.set()
        next_store = time.monotonic() + self.rotate
        dead: set[int] = set()
        try:
            while not self.stop_ev.is_set():
                wait = max(0.0, next_store - time.monotonic())
                ev = poller.poll(int(wait * 1000) + 1)
                ready = []
                for fd, what in ev:
                    if fd == self._wake[0]:
                        continue
                    i = fd_ix.get(fd)
                    if i is None:
                        continue
                    if what & (select.POLLHUP | select.POLLERR) and i not in dead:
                        dead.add(i)  # its CPU went offline: the event is gone
                        poller.unregister(fd)
                        self.error = f"CPU {r.cpus[i]} went offline: no more samples from it"
                    if what & select.POLLIN:
                        ready.append(i)
                if ready:
                    c0 = time.process_time()
                    self._drain(ready)
                    self.ingest_cpu += time.process_time() - c0
                if time.monotonic() >= next_store:
                    self._store()
                    next_store = time.monotonic() + self.rotate
        finally:
            self._finish()

    def _finish(self) -> None:
        try:
            if self.rings is not None and self.rings.fds:
                try:
                    self.rings.ioctl_all(IOC_DISABLE)
                except OSError:
                    pass
                self._store()
        finally:
            self._flush_aggregates()
            if self.rings is not None:
                self.rings.close()
            if self.decoder is not None:
                self.decoder.close()

    def _close_unstarted(self) -> None:
        if self.rings is not None:
            self.rings.close()
