"""Which tasks ran on which CPU: /proc/PID/stat and, for busy multi-threaded processes,
/proc/PID/task/TID/stat; field 39 (processor) and utime+stime.

Cost model (this runs every second on nodes with thousands of processes):
- each /proc/PID/stat is opened once and re-read with pread() every tick (procfs regenerates
  it on every read from offset 0), which saves an open/close per process per second;
- threads are read only for processes that used CPU in the interval and have more than one
  thread: a Go daemon like kubelet spreads work over threads and its main thread's field 39
  says nothing about where the hot thread ran, but an idle process costs one pread;
- a process busy now and then keeps its thread files open for `keep_threads` scans after it was
  last busy (opening /proc/PID/task/TID/stat costs many times a pread of it), and its threads' last
  counters stay the reference: when it is busy again after idle seconds, its CPU is still
  attributed per thread (the reference is valid while the process's own stat bytes are unchanged);
- with `full_every` = N > 1, all processes are read every N ticks and, in between, only the
  "hot set" (processes whose stat changed in the last read). A process that stays busy is
  measured every second; one that wakes from idle is noticed within N seconds and its CPU is
  spread over the seconds since it was last read. This keeps a 1 Hz recorder on a 1,000-process
  node within 1% of a core.
- with `full_max` > N (the recorder: 3 and 10), a full scan that found "nothing changed" (the
  processes outside the hot set used under WAKERS of a CPU) lets the next ones wait up to
  `full_max` ticks, unless /proc/stat shows a CPU busier, by UNEXPLAINED of a CPU, than what the
  processes read attribute to it: then the full scan runs at its usual turn. A hog that starts is
  seen within N seconds as before; only small wakers on a quiet node wait longer. A node where
  many processes wake every second (the 96-CPU benchmark fixture) is never "quiet": same reads.
- beyond RLIMIT_NOFILE (raised to the hard limit, and that to fs.nr_open where permitted) a process
  without an open stat file is read in every OVERFLOW_EVERY-th full scan (see _overflow_share).

Short-lived processes: a process that starts and exits between two reads is never seen. Its CPU
time is not lost: when its parent waits for it, the kernel adds it to the parent's cutime and
cstime (fields 16 and 17, utime+stime of waited-for children, their own children's included), and
an orphan's to whoever reaps it (a subreaper such as containerd-shim, or PID 1). So every process
read also yields how much CPU its children that exited since cost; what of it was already
attributed to a child seen alive is subtracted (the child's `credit`, owed to its parent when it is
gone), the rest is attributed to the parent as "COMM (exited children)", an estimate: the CPU it
ran on is not known, so it goes to the CPUs whose busy time (/proc/stat) no process read explains,
in proportion, and to the parent's own CPU for what exceeds them. A parent whose children cost CPU
is read every second while they do. Chosen over process accounting (acct(2): a node-wide setting
with a file it writes per exit, which the node's owner may use for their own) and taskstats
(netlink, CAP_NET_ADMIN, one message per exit on a node that churns thousands of processes): both
give the exiting process's own name but cost a per-exit stream; cutime/cstime costs nothing more
than the stat line already read. What it cannot say: the children's names and their CPU, and time
of a child whose reaper is not read (exited before its children were reaped: then it is the
reaper's). The profiler's samples carry both (a sample's pid and CPU, live or short-lived).
"""

from __future__ import annotations

import os
import resource

from ..model.records import Procs, ProcUse
from ..model.errors import InputError
from ..node.pread import Preader
from ..node.root import Root
from ..model.procfs import Task, parse_task_stat
from .registry import Collector, collector


def _raise_nofile() -> None:
    """Room for one open stat file per process: the soft limit up to the hard one, and the hard one
    up to the kernel's fs.nr_open where this process may (root). Above the limit every further
    process's stat would be opened and closed on every read (many times a pread: the 10k -> 50k process
    cost grew faster than linearly in benchmarks/scale.py)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:  # this process's kernel, whatever the root read
            ceiling = min(int(f.read()), 1 << 20)
    except (OSError, ValueError):
        ceiling = hard
    for lim in ((ceiling, ceiling), (hard, hard)):
        if lim[0] <= soft or (lim[0] > hard and hard == resource.RLIM_INFINITY):
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, lim)
            return
        except (ValueError, OSError):  # not privileged: raising the hard limit is refused
            pass


def _open_read(path: str, size: int) -> tuple[int | None, bytes | None]:
    """A /proc file opened and read from its start: (fd, bytes), or (None, None) and closed if it cannot be."""
    fd = None
    try:
        fd = os.open(path, os.O_RDONLY)
        return fd, os.pread(fd, size, 0)
    except OSError:
        if fd is not None:
            os.close(fd)
        return None, None


OVERFLOW_EVERY = 4  # see TaskSampler._overflow_share
UNEXPLAINED = 0.25  # of a CPU: busy time no process read explains, which brings the full scan forward
WAKERS = 0.05  # of a CPU: under this, outside the hot set, a full scan found "nothing changed"


class TaskSampler:
    """Keeps /proc/PID/stat open between ticks and reports per-(pid, cpu) CPU use per interval."""

    def __init__(self, root: Root, threads: bool = True, max_open: int | None = None, full_every: int = 1,
                 keep_threads: int = 60, full_max: int | None = None):
        self.proc = root.join("/proc")
        self.keep_threads = keep_threads
        self.threads = threads
        self.full_every = max(1, full_every)
        self.full_max = max(self.full_every, full_max or self.full_every)
        self.last_full = 0  # scan number of the last full scan
        self.quiet = False  # the last full scan found (almost) no CPU outside the hot set
        self.woke = 0.0  # jiffies of processes outside the hot set, this scan
        self.n = 0
        self.read_at: dict[int, int] = {}  # pid -> scan number it was last read in
        self.hot: list[int] = []  # pids that used CPU (or appeared) in the last scan
        self.hotset: set[int] = set()
        self._victims: list[int] = []  # processes outside the hot set whose open stat may be taken
        self._victims_at = -1  # scan in which that list was last made
        _raise_nofile()
        self.max_open = max_open or max(256, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 256)
        self.fds: dict[int, int] = {}
        self.tfds: dict[int, dict[str, int]] = {}  # pid -> tid -> fd of /proc/PID/task/TID/stat
        self.traw: dict[int, dict[str, tuple[bytes, Task]]] = {}  # pid -> tid -> last bytes and parse
        self.prev: dict[int, Task] = {}  # pid -> process-level task
        self.prev_raw: dict[int, bytes] = {}  # pid -> last stat bytes: identical bytes = idle, no parse
        # pid -> (its stat bytes, tid -> task) at the last read of its threads, and the scan of that read
        self.tbase: dict[int, tuple[bytes, dict[int, Task]]] = {}
        self.tread_at: dict[int, int] = {}
        self.tsfds: dict[int, dict[str, int]] = {}  # pid -> tid -> fd of /proc/PID/task/TID/schedstat
        self.tsched: dict[int, dict[str, bytes]] = {}  # pid -> tid -> its last schedstat bytes
        self.tcount: dict[int, int] = {}  # pid -> thread count when its task directory was last listed
        self.full_uptime: float | None = None  # uptime (clock ticks) at the last full scan
        self.fulls = 0  # full scans so far
        # exited children (cutime + cstime, fields 16-17): pid -> its last sum, its parent; ticks
        # attributed to a process while it lived (owed to its reaper's sum when it is gone)
        self.reaped: dict[int, int] = {}
        self.parent: dict[int, int] = {}
        self.credit: dict[int, float] = {}
        self.owed: dict[int, float] = {}
        self.kids: dict[int, list] = {}  # this scan: parent pid -> [comm, ticks of exited children]

    def _pread(self, pid: int) -> bytes | None:
        """(Re)open a process's stat: new process, or a PID reused after the old one exited."""
        fd = self.fds.pop(pid, None)
        if fd is not None:
            os.close(fd)
        fd, data = _open_read(f"{self.proc}/{pid}/stat", 1024)
        if fd is None:
            return None  # exited between listdir and open: normal churn
        if self.nfds < self.max_open or (pid in self.hotset and self._evict_idle()):
            self.fds[pid] = fd
        else:
            os.close(fd)
        return data

    def _evict_idle(self) -> bool:
        """Over the open-file limit, a hot process takes the open stat of one outside the hot set
        (read once per full scan at most, where a hot one is read every second)."""
        while True:
            if not self._victims:
                if self._victims_at == self.n:  # one look over the open files per scan at most
                    return False
                self._victims_at = self.n
                hot = self.hotset
                self._victims = [p for p in self.fds if p not in hot]
                if not self._victims:
                    return False
            v = self._victims.pop()
            fd = self.fds.pop(v, None) if v not in self.hotset else None
            if fd is not None:
                os.close(fd)
                return True

    def _threads(self, pid: int, nthreads: int = 0) -> dict[int, Task]:
        """The threads of a busy process; their stat files stay open while the process stays busy
        (a busy Go or Java daemon has dozens, read every second). The task directory is listed only
        when the thread count (field 20) moved or a thread's stat could not be read: the same count
        with one thread gone and one new means a failed read of the gone one, and a listing next time."""
        tdir = f"{self.proc}/{pid}/task"
        old = self.tfds.get(pid, {})
        if nthreads and len(old) == nthreads and self.tcount.get(pid) == nthreads:
            tids = list(old)
        else:
            try:
                tids = os.listdir(tdir)
            except OSError:
                return {}
        self.tcount[pid] = nthreads
        olds = self.tsfds.get(pid, {})
        out, fds, sfds, sched, raw = self._read_threads(pid, tdir, tids, old, olds)
        for fd in olds.values():
            os.close(fd)
        self.tsfds[pid] = sfds
        self.tsched[pid] = sched
        for fd in old.values():  # threads that ended
            os.close(fd)
        self.tfds[pid] = fds
        self.traw[pid] = raw
        return out

    def _read_threads(self, pid: int, tdir: str, tids, old: dict[str, int], olds: dict[str, int]):
        """Each thread's task through its open stat, unread while its schedstat did not move: the per-thread loop."""
        # takes the still-open files out of `old` and `olds` (what stays there belongs to threads that
        # ended); returns (tid -> task, the files kept open, schedstat bytes, stat bytes and parses)
        out = {}
        last = self.traw.get(pid, {})
        lasts = self.tsched.get(pid, {})
        raw: dict[str, tuple[bytes, Task]] = {}
        fds: dict[str, int] = {}
        sfds: dict[str, int] = {}
        sched: dict[str, bytes] = {}
        pread = os.pread
        room = self.max_open - self.nfds + len(old) + len(olds)
        for tid in tids:
            fd = old.pop(tid, None)
            sfd = olds.pop(tid, None)
            seen = last.get(tid)
            data = None
            if sfd is not None and seen is not None:
                # schedstat (run ns, wait ns, slices) costs a fifth of stat; unchanged, the thread has
                # not run since, so neither its CPU ticks nor its field 39 moved: no stat read
                try:
                    ss = pread(sfd, 128, 0)
                except OSError:
                    ss = b""
                if ss and ss == lasts.get(tid) and fd is not None:
                    fds[tid], sfds[tid], sched[tid], raw[tid] = fd, sfd, ss, seen
                    out[seen[1].tid] = seen[1]
                    continue
                if ss:
                    sched[tid] = ss
            if fd is not None:
                try:
                    data = pread(fd, 1024, 0)
                except OSError:
                    os.close(fd)
                    fd = None
                    self.tcount.pop(pid, None)  # a thread gone: list the directory next time
            if fd is None:
                fd, data = _open_read(f"{tdir}/{tid}/stat", 1024)
                if fd is None:
                    if sfd is not None:
                        os.close(sfd)
                    sched.pop(tid, None)
                    continue
            if sfd is None and len(fds) + len(sfds) + 2 <= room:
                # None: no schedstats in this kernel (or the thread just ended), stat only
                sfd, ss = _open_read(f"{tdir}/{tid}/schedstat", 128)
                if sfd is not None:
                    sched[tid] = ss
            if len(fds) + len(sfds) < room:
                fds[tid] = fd
                if sfd is not None:
                    sfds[tid] = sfd
            else:
                os.close(fd)
                if sfd is not None:
                    os.close(sfd)
                sched.pop(tid, None)
            if data:
                if seen is not None and seen[0] == data:  # an idle thread: same bytes, no parse
                    t = seen[1]
                else:
                    t = parse_task_stat(data, pid, f"{tdir}/{tid}/stat")
                raw[tid] = (data, t)
                out[t.tid] = t
        return out, fds, sfds, sched, raw

    @property
    def nfds(self) -> int:
        return len(self.fds) + sum(len(v) for v in self.tfds.values()) + sum(len(v) for v in self.tsfds.values())

    def _drop_threads(self, keep) -> None:
        """Close the thread files (and forget the thread references) of processes not in `keep`."""
        for pid in [p for p in self.tread_at if p not in keep]:
            for fd in self.tfds.pop(pid, {}).values():
                os.close(fd)
            for fd in self.tsfds.pop(pid, {}).values():
                os.close(fd)
            self.tsched.pop(pid, None)
            self.traw.pop(pid, None)
            self.tbase.pop(pid, None)
            self.tread_at.pop(pid, None)
            self.tcount.pop(pid, None)

    def sample(self, interval_ticks: float, uptime: float | None = None,
               cpu_busy: dict[int, int] | None = None) -> list[ProcUse]:
        """CPU use since the previous call, attributed to the CPU each task last ran on.

        `uptime` (clock ticks since boot, from /proc/uptime) lets a process that started since the
        last full scan count from its start (field 22): a hog started a second ago is not invisible.
        `cpu_busy` (CPU -> user+nice+system jiffies of the same interval, from /proc/stat) lets a
        sampler with `full_max` > `full_every` defer full scans while the processes it reads explain
        every CPU's busy time (see `_unexplained`)."""
        self.n += 1
        n = self.n
        since = n - self.last_full
        acc: dict[tuple[int, int], list] = {}
        hot: list[int] = []
        read = self.hot
        self.woke = 0.0
        due = n % self.full_every == 0  # the full scan's usual turn
        full = n == 1 or (due and not self.quiet) or (since >= self.full_max and self.full_max > self.full_every)
        if full:
            self._account(self._scan(self._all_pids(), n), n, interval_ticks, uptime, acc, hot, set(read))
        else:
            if len(self.fds) >= self.max_open:  # over the open-file limit: see _overflow_share
                fds, k = self.fds, OVERFLOW_EVERY
                read = [p for p in read if p in fds or p % k == n % k]
            self._account(self._scan(read, n), n, interval_ticks, uptime, acc, hot, None)
            if due and self._unexplained(acc, cpu_busy, interval_ticks):
                # a CPU busier than what the processes read explain: whoever runs there is read now
                full = True
                done = set(read)
                rest = [p for p in self._all_pids() if p not in done]
                self._account(self._scan(rest, n), n, interval_ticks, uptime, acc, hot, done)
        if full:
            self.last_full = n
            if uptime is not None:
                self.full_uptime = uptime
            # "nothing changed": the processes outside the hot set used under WAKERS of a CPU
            self.quiet = interval_ticks > 0 and self.woke < WAKERS * interval_ticks
        self.hot = hot
        self.hotset = set(hot)
        old = n - self.keep_threads
        prev = self.prev
        if any(at <= old or pid not in prev for pid, at in self.tread_at.items()):
            self._drop_threads({pid for pid, at in self.tread_at.items() if at > old and pid in prev})
        if interval_ticks <= 0:
            self.kids = {}
            return []
        out = [ProcUse(pid, comm, cpu, 100.0 * d / interval_ticks) for (pid, cpu), (comm, d) in acc.items()]
        if self.kids:
            out += self._children_use(acc, cpu_busy, interval_ticks)
        return out

    def _children_use(self, acc: dict, cpu_busy: dict[int, int] | None, interval_ticks: float) -> list[ProcUse]:
        """The CPU of children that exited this interval, per parent, on the CPUs whose busy time no
        process read explains (in proportion), the rest on the parent's own CPU; estimates."""
        kids, self.kids = self.kids, {}
        attributed: dict[int, float] = {}
        for (_, cpu), (_, d) in acc.items():
            attributed[cpu] = attributed.get(cpu, 0.0) + d
        room = {c: b - attributed.get(c, 0.0) for c, b in (cpu_busy or {}).items() if b - attributed.get(c, 0.0) > 0}
        out = []
        for pid, (comm, ticks, home) in sorted(kids.items(), key=lambda kv: -kv[1][1]):
            total = sum(room.values())
            placed: dict[int, float] = {}
            if total > 0:
                take = min(ticks, total)
                for c, r in room.items():
                    placed[c] = take * r / total
                for c, v in placed.items():
                    room[c] -= v
                ticks -= take
            if ticks > 0:
                placed[home] = placed.get(home, 0.0) + ticks
            label = f"{comm} (exited children)"
            out += [ProcUse(pid, label, c, 100.0 * v / interval_ticks, True) for c, v in placed.items() if v > 0]
        return out

    def _reap(self, pid: int, comm: str, processor: int, data: bytes, gap: int, first: bool) -> bool:
        """Note the CPU of `pid`'s children that exited since it was last read (cutime + cstime);
        True when there was some (the parent is read again next tick)."""
        try:
            rest = data[data.rindex(b")") + 2:].split(None, 16)
            ppid, summed = int(rest[1]), int(rest[13]) + int(rest[14])
        except (ValueError, IndexError):
            return False
        self.parent[pid] = ppid
        before = self.reaped.get(pid)
        self.reaped[pid] = summed
        if first or before is None or summed <= before:
            return False  # a baseline (children reaped before it was first read are not this interval's)
        dc = summed - before
        owed = self.owed.pop(pid, 0.0)
        if owed > dc:  # children seen alive, their ticks already attributed to them
            self.owed[pid] = owed - dc
            return True
        net = (dc - owed) / gap
        if net > 0:
            slot = self.kids.get(pid)
            if slot is None:
                self.kids[pid] = [comm, net, processor]
            else:
                slot[1] += net
        return True

    def _unexplained(self, acc: dict, cpu_busy: dict[int, int] | None, interval_ticks: float) -> bool:
        """True when some CPU's user+nice+system time exceeds what the processes read this tick
        attribute to it by more than `UNEXPLAINED` of the interval: something not in the hot set ran
        there (a new hog, or one that woke up), so the full scan is not deferred."""
        if cpu_busy is None or interval_ticks <= 0:
            return True
        attributed: dict[int, float] = {}
        for (_, cpu), (_, d) in acc.items():
            attributed[cpu] = attributed.get(cpu, 0.0) + d
        limit = UNEXPLAINED * interval_ticks
        return any(b - attributed.get(c, 0.0) > limit for c, b in cpu_busy.items())

    def _all_pids(self) -> list[int]:
        """Every process now (a directory listing of /proc); the state of those gone is dropped."""
        try:
            pids = [int(x) for x in os.listdir(self.proc) if x.isdigit()]
        except OSError as e:
            raise InputError(self.proc, e.strerror or str(e)) from None
        for pid in self.prev_raw.keys() - set(pids):  # exited since the last full scan
            self._forget(pid)
        self.fulls += 1
        if len(pids) > self.max_open:
            pids = self._overflow_share(pids)
        return pids

    def _scan(self, pids, n: int) -> list[tuple[int, bytes, bytes | None]]:
        """One pread per process, a byte comparison, no parsing when idle; returns (pid, new bytes,
        old bytes) of those that changed. State is updated in place (a full scan of 1,000 processes
        is ~1,000 loop turns on its own)."""
        praw, fds, read_at, pread = self.prev_raw, self.fds, self.read_at, os.pread
        fds_get, praw_get = fds.get, praw.get
        changed: list[tuple[int, bytes, bytes | None]] = []
        for pid in pids:
            fd = fds_get(pid)
            if fd is not None:
                try:
                    data = pread(fd, 1024, 0)
                except OSError:
                    data = None
                if data:
                    old = praw_get(pid)
                    if old == data:  # nothing changed, not even the CPU it sits on
                        read_at[pid] = n
                    else:
                        praw[pid] = data
                        changed.append((pid, data, old))
                    continue
            data = self._pread(pid)
            if not data:
                self._forget(pid)
                continue
            changed.append((pid, data, praw_get(pid)))
            praw[pid] = data
        return changed

    def _account(self, changed, n: int, interval_ticks: float, uptime: float | None, acc: dict,
                 hot: list[int], was_hot: set[int] | None) -> None:
        """Per-(pid, cpu) jiffies of the processes whose stat changed, into `acc`; those that used
        CPU (or appeared) go to `hot`, read again next tick. The jiffies of those not in `was_hot`
        (the last hot set; a full scan's wakers) add up in `self.woke`."""
        prev, read_at, credit = self.prev, self.read_at, self.credit
        for pid, data, old_raw in changed:
            t = parse_task_stat(data, pid, f"{self.proc}/{pid}/stat")
            p = prev.get(pid)
            prev[pid] = t
            gap = max(1, n - read_at.get(pid, n - 1))
            read_at[pid] = n
            fresh = p is None or p.starttime != t.starttime
            if self._reap(pid, t.comm, t.processor, data, gap, fresh) and not fresh:
                hot.append(pid)  # its children keep exiting: read it every tick while they do
            if fresh:
                # new process: all its CPU time is since it started; count it only when it started
                # after the last full scan (else its lifetime ticks would be over-attributed)
                hot.append(pid)
                if was_hot is not None:
                    self.woke += max(0.0, interval_ticks)  # a new process: not "nothing changed"
                since = self.full_uptime
                if uptime is None or since is None or t.starttime < since or t.ticks <= 0 or interval_ticks <= 0:
                    continue
                d = t.ticks / max(1, -(-(uptime - t.starttime) // interval_ticks))
                _add(acc, pid, t.processor, t.comm, d)
                credit[pid] = credit.get(pid, 0.0) + d
                continue
            d = (t.ticks - p.ticks) / gap  # a process last read N scans ago: its per-scan share
            if d <= 0:  # bytes moved (state, faults, a kworker's comm) but no CPU: not hot
                continue
            credit[pid] = credit.get(pid, 0.0) + d
            if not hot or hot[-1] != pid:
                hot.append(pid)
            if was_hot is not None and pid not in was_hot:
                self.woke += d
            if self.threads and t.nthreads > 1:
                base = self.tbase.get(pid)
                th = self._threads(pid, t.nthreads)
                self.tbase[pid] = (data, th)
                self.tread_at[pid] = n
                # the threads' reference holds if they were read when the process was last read
                before = base[1] if base is not None and base[0] == old_raw else None
                if before:
                    for tid, tt in th.items():
                        b = before.get(tid)
                        td = (tt.ticks - b.ticks) / gap if b is not None and b.starttime == tt.starttime else 0
                        if td > 0:
                            _add(acc, pid, tt.processor, t.comm, td)
                    continue
            _add(acc, pid, t.processor, t.comm, d)

    def _overflow_share(self, pids: list[int]) -> list[int]:
        """More processes than open files allowed (RLIMIT_NOFILE, when it cannot be raised): a known
        process without an open stat is read in every `OVERFLOW_EVERY`-th full scan (by pid), since
        opening costs ~4 preads; so a full scan costs the same per process at 50,000 processes as at
        1,000. Its CPU is spread over the scans since it was last read (as for any process read late);
        new processes are read at once. Between full scans, a hot process without an open stat is read
        on the same 1-in-OVERFLOW_EVERY turn, and once read it takes an idle process's open file
        (_evict_idle): a process that stays busy is read every second from then on."""
        fds, praw, k, turn = self.fds, self.prev_raw, OVERFLOW_EVERY, self.fulls % OVERFLOW_EVERY
        hot = set(self.hot)
        return [p for p in pids if p in fds or p not in praw or p % k == turn or p in hot]

    def _forget(self, pid: int) -> None:
        """A process that exited (or whose stat cannot be read): its state and open file go; what was
        attributed to it while it lived is owed to its parent's count of exited children."""
        got = self.credit.pop(pid, 0.0)
        pp = self.parent.pop(pid, None)
        if got > 0 and pp is not None and pp in self.prev:
            self.owed[pp] = self.owed.get(pp, 0.0) + got
        self.reaped.pop(pid, None)
        self.owed.pop(pid, None)
        self.prev.pop(pid, None)
        self.prev_raw.pop(pid, None)
        self.read_at.pop(pid, None)
        fd = self.fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self._drop_threads(())


# /proc/stat and the tasks' stat files are read milliseconds apart: a spinner pinned to a CPU at 100.0%
# busy reads 99.5-101.5% here (tests/test_cli_options.py), and a few neighbours add their own jitter.
# Scaling a CPU's processes by less than this keeps the sums right without calling them estimates; a
# thread that migrated puts its whole interval on its last CPU, far more.
JITTER = 0.05


def fit_to_cpus(uses: list[ProcUse], busy: dict[int, float], tolerance: float = 2.0) -> list[ProcUse]:
    """Make per-CPU attribution add up. Field 39 is only the CPU a thread ran on *last*: a thread
    that migrated gets all its time on one CPU, and that CPU's processes can sum past its busy %.
    On such a CPU the estimates already there (exited children's CPU) give way first; if they are not
    enough, every process is scaled to the CPU's busy % (from /proc/stat), and what was cut is spread
    over CPUs with unexplained busy time, in proportion to it. Moved entries, and entries scaled by
    more than JITTER, are marked `estimate`. `busy` maps CPU -> busy % over the same interval."""
    by_cpu: dict[int, list[ProcUse]] = {}
    for u in uses:
        by_cpu.setdefault(u.cpu, []).append(u)
    sums = {c: sum(u.pct for u in us) for c, us in by_cpu.items()}
    over = {c for c, s in sums.items() if c in busy and s > busy[c] + tolerance}
    if not over:
        return uses
    out: list[ProcUse] = []
    cut: dict[tuple[int, str], float] = {}
    for c, us in by_cpu.items():
        if c not in over:
            out += us
            continue
        excess = sums[c] - busy[c]
        est = sum(u.pct for u in us if u.estimate)
        if est >= excess:
            # what is already a guess gives way first (exited children's CPU placed on their parent's
            # CPU): the processes measured there stay exact
            g = (est - excess) / est
            for u in us:
                if u.estimate:
                    out.append(ProcUse(u.pid, u.comm, c, u.pct * g, True))
                    cut[(u.pid, u.comm)] = cut.get((u.pid, u.comm), 0.0) + u.pct * (1 - g)
                else:
                    out.append(u)
            continue
        f = busy[c] / sums[c]
        for u in us:  # scaled by less than JITTER: the reads' timing, not where it ran; not an estimate
            out.append(ProcUse(u.pid, u.comm, c, u.pct * f, u.estimate or f < 1 - JITTER))
            cut[(u.pid, u.comm)] = cut.get((u.pid, u.comm), 0.0) + u.pct * (1 - f)
    spare = {c: b - sums.get(c, 0.0) for c, b in busy.items() if c not in over and b - sums.get(c, 0.0) > tolerance}
    room = sum(spare.values())
    if room > 0:
        moved = sum(cut.values())
        k = min(1.0, room / moved) if moved else 0.0
        for (pid, comm), v in cut.items():
            for c, sp in spare.items():
                pct = v * k * sp / room
                if pct >= 0.05:
                    out.append(ProcUse(pid, comm, c, pct, True))
    merged: dict[tuple[int, int], ProcUse] = {}
    for u in out:
        m = merged.get((u.pid, u.cpu))
        merged[(u.pid, u.cpu)] = u if m is None else ProcUse(u.pid, u.comm, u.cpu, m.pct + u.pct,
                                                              m.estimate or u.estimate)
    return list(merged.values())


@collector("procs", options=("threads", "procs_full_every", "procs_full_max"))
class Processes(Collector):
    """The busiest processes of each CPU (Procs). The sampler reads it second, itself (its problems under
    "processes"): it divides by the CPUs' jiffies read first, and the other collectors see its top (Seen.procs)."""

    def __init__(self, root: Root, reader: Preader, threads: bool = True, procs_full_every: int = 1,
                 procs_full_max: int = 0):
        super().__init__(root, reader)
        self.hz = clock_ticks()
        self.tasks = TaskSampler(root, threads, full_every=procs_full_every, full_max=procs_full_max or None)

    def prime(self) -> None:
        self.tasks.sample(0, self._uptime())

    def top(self, interval_ticks: float, cpu_busy: dict[int, int] | None, busy: dict[int, float]) -> Procs:
        """Each CPU's top processes over the interval (`interval_ticks` clock ticks per CPU; `cpu_busy`: the jiffies
        processes can explain, per CPU; `busy`: busy % per CPU, which their shares are fitted to)."""
        return Procs.top(fit_to_cpus(self.tasks.sample(interval_ticks, self._uptime(), cpu_busy), busy))

    def _uptime(self) -> float | None:
        """Clock ticks since boot (for processes that started between scans)."""
        try:
            text = self.reader.read_opt(self.root.join("/proc/uptime"), True)
            return float(text.split()[0]) * self.hz if text else None
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        self.tasks.close()


def _add(acc: dict, pid: int, cpu: int, comm: str, d: int) -> None:
    slot = acc.get((pid, cpu))
    if slot is None:
        acc[(pid, cpu)] = [comm, d]
    else:
        slot[1] += d


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")
