"""Kernel log: /dev/kmsg (or a kernel-log file in any form, model/kernlog.py) matched against
data-driven rules.

The rules file is shaped like node-problem-detector's kernel-monitor config (same keys, so NPD can
load it too); our extra per-rule data lives under "x-nodesleuth", which NPD ignores.
A flood is bounded: at most `max_records`, or `budget` seconds, are read per call (NPD #1168 went blind on a
flood); on /dev/kmsg what the kernel overwrote before it was read is counted from the gaps in its sequence
numbers (`lost`, `gaps`), so a flood is said, never silently skipped.

A file is followed by byte offset: each call reads what was appended since the last one, complete lines (or
journal entries) only; a file replaced or rewritten in place (a rotated log, `dmesg > file` again) is read from its
start again and the records already reported are recognised and skipped; journal entries are also skipped by
their cursor when an export/json file repeats them. A lockup or stall line opens its report: the lines after it
(stack trace, RIP, module names) are searched for NIC driver code (model/rules.py tie_stack()).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import stat
import time
from collections import OrderedDict, deque

from ..model.records import KernelEvent
from ..model.errors import InputError
from ..model.mpstat import parse_btime
from ..model.kernlog import LABEL, WALL, LineParser, Record, detect, parse_kmsg, split_units
from ..node.root import Root
from ..node.wait import readable
from ..model.rules import REPORT_END, Rule, load_rules, match, tie_stack


def parse_record(line: str, path: str) -> Record | None:
    """One /dev/kmsg record (kept here for callers; the grammar lives in kernlog)."""
    return parse_kmsg(line, path)


def boot_wall_time(root: Root) -> float:
    """Wall-clock time of boot, so kmsg's since-boot microseconds become timestamps."""
    if root.live:
        return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
    # a recorded tree: /proc/stat's btime (after the long intr line) is what that host said
    btime = parse_btime(root.read("/proc/stat"), root.join("/proc/stat"))
    if btime is None:
        raise InputError(root.join("/proc/stat"), "no btime line: cannot turn kernel-log times into wall time")
    return float(btime)


SHARE = 0.25  # of a CPU the reader may take in a flood (per tick for a file, per second on its thread for /dev/kmsg)


class KmsgReader:
    """Reads new kernel-log records since the last call; works on /dev/kmsg or a file in any kernel-log
    form (detected from its first lines, model/kernlog.py).

    boot: how since-boot times become wall times: "root" = the root's boot (live host, or the recorded
    tree's /proc/stat btime), a float = that epoch, None = unknown (events then carry time None unless
    the form stamps each line with wall time)."""

    CHUNK = 8 << 20  # bytes of a file read per call at most (a flood is also bounded by max_records)
    REPORT_LINES = 400  # lines after a lockup header searched for its stack trace
    SEEN = 50000  # records remembered to recognise them when a rewritten file is read again
    DETECT_LINES = 20000  # lines (of the first MiB) a file's form is detected from

    def __init__(self, root: Root, path: str | None = None, rules: list[Rule] | None = None,
                 max_records: int = 10000, boot: float | str | None = "root"):
        self.path = path or root.join("/dev/kmsg")
        self.rules = rules if rules is not None else load_rules()
        self.max_records = max_records
        self.boot_wall = boot_wall_time(root) if boot == "root" else boot
        self.dated = boot == "root"  # following the root's own log: a line with no time at all is dated when read
        self.last_seq = -1
        self.records = 0  # records handed over (read and matched)
        self.first_seq: int | None = None  # of the first record read
        self.lost = 0  # records overwritten in the ring before we read them (the kernel's seq numbers jumped)
        self.gaps: deque = deque(maxlen=1000)  # (first, last) seq ranges skipped, the latest kept
        self.gaps_total = 0  # ranges ever skipped (the deque keeps the latest 1000)
        self.truncated = 0  # reads stopped at the flood bound (records or time) with records left
        self.throttled = 0  # times the follow thread paused for its CPU share (the kernel kept the rest)
        self.error: str | None = None  # why the follow thread stopped reading, if it did
        import threading

        self._lock = threading.Lock()
        self._thread = None
        self._follow_share: float | None = None
        self._pending: list[KernelEvent] = []  # events the follow thread matched, not handed over yet
        self._carry: list[KernelEvent] = []  # what the thread handed over when it was stopped
        self.rewrites = 0  # times the file was replaced or rewritten (read again from its start)
        self.repeated = 0  # records skipped because they were reported already (rewritten file, repeated cursor)
        self.format: str | None = None  # detected form of a file
        self._fd: int | None = None
        self._fh = None
        self._ino: int | None = None
        self._offset = 0
        self._head: tuple[int, bytes] | None = None  # (length, digest) of the file's first bytes read
        self._seen_size: tuple[int, float] | None = None
        self._parser: LineParser | None = None
        self._replay = False  # reading a rewritten file: skip records reported before
        self._fps: OrderedDict = OrderedDict()
        self._last_fp: tuple | None = None  # the previous record's (usec, wall, text), and whether it was skipped
        self._last_dup = False
        self._cursor_i: dict[str, int] = {}
        self._by_reason = {r.reason: r for r in self.rules}
        self._follow: tuple[KernelEvent, Rule, int] | None = None  # an event whose next lines add detail
        self._report: tuple[KernelEvent, list[str]] | None = None  # a lockup report being read
        self._nic_recent: deque = deque(maxlen=64)  # recent NIC events: name a tied lockup's device
        self._tied_no_dev: deque = deque(maxlen=8)  # tied lockups waiting for a NIC line naming the device
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise InputError(self.path, e.strerror or str(e)) from None
        self.is_device = stat.S_ISCHR(st.st_mode)
        if self.is_device:
            self.format = "kmsg"

    @property
    def description(self) -> str:
        if not self.format:
            return "nothing (the file is empty)"
        d = LABEL.get(self.format, self.format)
        p = self._parser
        if p is not None and p.undated:
            d += (f"; {p.undated} line(s) could not be dated (a stamp in a language or order not known, e.g. "
                  f"{p.undated_example!r}): their wall time is unknown")
        if p is not None and p.binary:
            d += f"; {p.binary} entr(y/ies) with a binary MESSAGE journalctl printed as '[NB blob data]'"
        return d

    @property
    def time_notes(self) -> list[str]:
        """What the reader could not date, or skipped, said once for the check's notes."""
        out = []
        if self.format == "bare":
            out.append(f"{self.path}: its lines carry no time stamp (dmesg -t / --time-format delta / journalctl "
                       "-o cat): wall time unknown")
        p = self._parser
        if p is not None and p.undated:
            out.append(f"{self.path}: {p.undated} line(s) could not be dated ({p.undated_example!r}): wall time "
                       "unknown for them")
        if self.rewrites:
            out.append(f"{self.path} was replaced or rewritten {self.rewrites} time(s) while followed: read again, "
                       f"{self.repeated} record(s) already reported skipped")
        return out

    @property
    def has_wall_time(self) -> bool:
        return self.format in WALL or self.boot_wall is not None

    def _over(self, n: int, deadline: float | None) -> bool:
        """The flood bound of one read: `max_records`, or the time budget (looked at every 64 records)."""
        return n >= self.max_records or (deadline is not None and n % 64 == 0 and n and time.monotonic() > deadline)

    def _records_device(self, deadline: float | None = None):
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
        n = 0
        while not self._over(n, deadline):
            try:
                data = os.read(self._fd, 8192)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EPIPE:  # ring overwrote records: the seq gap counts the loss
                    continue
                raise InputError(self.path, e.strerror or str(e)) from None
            if not data:
                return
            rec = parse_record(data.decode(errors="replace").split("\n", 1)[0], self.path)
            if rec is not None:
                n += 1
                yield rec
        self.truncated += 1

    def _rewritten(self, st: os.stat_result) -> bool:
        """Whether the file is no longer the one read so far: another inode, shorter than what was read, or its
        first bytes changed (rewritten in place)."""
        if st.st_ino != self._ino or st.st_size < self._offset:
            return True
        if self._head is not None:
            n, digest = self._head
            self._fh.seek(0)
            if hashlib.sha1(self._fh.read(n)).digest() != digest:
                return True
        return False

    @property
    def behind_bytes(self) -> int | None:
        """Bytes of a followed file not read yet (None for the device, whose backlog only the kernel knows)."""
        if self.is_device or self._fh is None:
            return None
        try:
            return max(0, os.stat(self.path).st_size - self._offset)
        except OSError:
            return None

    def _records_file(self, deadline: float | None = None):
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise InputError(self.path, e.strerror or str(e)) from None
        if self._fh is not None and self._rewritten(st):
            self._fh.close()
            self._fh = None
            self.rewrites += 1
            self._replay = True
            if self._parser is not None:
                self._parser.restart()
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
            self._ino, self._offset, self._head = st.st_ino, 0, None
        # a last line without its newline is complete once the file has stopped growing: unchanged since the
        # previous read, or not written for 2 s
        now_seen = (st.st_size, st.st_mtime)
        settled = now_seen == self._seen_size or time.time() - st.st_mtime > 2
        self._seen_size = now_seen
        self._fh.seek(self._offset)
        data = self._fh.read(self.CHUNK)
        at_end = self._offset + len(data) >= st.st_size
        if self._parser is None:
            if not data.strip():
                return
            # the form from every line of the first MiB, not the first few: a full journal or syslog may open with
            # hundreds of userland lines before its first kernel line
            head = [ln.decode(errors="replace") for ln in data[:1 << 20].split(b"\n")[:self.DETECT_LINES + 1]]
            if not settled and b"\n" not in data:
                return  # not even one complete line yet
            self.format = detect(head[:self.DETECT_LINES] if len(head) > self.DETECT_LINES or settled else head[:-1])
            self._parser = LineParser(self.format, self.path)
        p = self._parser
        units, used = split_units(self.format, data, final=settled and at_end)
        pos, n = self._offset, 0
        sep = 0 if self.format in ("journal-json-pretty", "journal-verbose") else 1  # newline / blank line after a unit
        for u in units:
            end = pos + len(u) + sep
            item = p.unit(u) if self.format != "kmsg" else parse_kmsg(u.decode(errors="replace"), self.path)
            pos = min(end, self._offset + used)
            if isinstance(item, Record):
                if self._seen(item):
                    continue
                n += 1
                yield item
                if self._over(n, deadline):
                    self.truncated += 1
                    self._commit(pos)
                    return
            elif item is not None:
                yield item
        self._commit(self._offset + used)
        if at_end:
            self._replay = False

    def _commit(self, offset: int) -> None:
        """Everything before `offset` is read; remember the file's first bytes to notice a rewrite."""
        self._offset = max(self._offset, offset)
        if self._head is None or self._head[0] < min(4096, self._offset):
            n = min(4096, self._offset)
            self._fh.seek(0)
            self._head = (n, hashlib.sha1(self._fh.read(n)).digest())

    def _seen(self, rec: Record) -> bool:
        """A record reported before: a journal entry whose cursor is not past the last one of its journal, or the
        same time and text as one read (a rewritten file read again, overlapping pstore records)."""
        if rec.cursor:
            sid, _, i = rec.cursor.partition(":")
            if int(i) <= self._cursor_i.get(sid, -1):
                self.repeated += 1
                return True
            self._cursor_i[sid] = int(i)
            return False
        # /dev/kmsg records carry the kernel's sequence number: the same number is the same record (a flood prints
        # one text at one microsecond many times, under different numbers); other forms number lines as read
        fp = (rec.usec, rec.wall, rec.message, rec.seq if self.format == "kmsg" else None)
        # a record with the same since-boot time (and wall time) and text as one read: a rewritten file read again,
        # or pstore/ramoops records that overlap (each dmesg-efi-* / dmesg-ramoops-* part repeats the lines of the
        # one before; a concatenation of them holds every line twice)
        # one time and text printed several times in a row (a low-resolution clock: '[ 259.670000] nfs: server ...
        # not responding' five times) are lines of their own, unless they repeat a run already skipped
        last, self._last_fp = self._last_fp, fp
        if self._replay and fp in self._fps or rec.usec is not None and fp in self._fps and (fp != last or self._last_dup):
            self.repeated += 1
            self._last_dup = True
            return True
        self._last_dup = False
        self._fps[fp] = None
        if len(self._fps) > self.SEEN:
            self._fps.popitem(last=False)
        return False

    def events(self, budget: float | None = None) -> list[KernelEvent]:
        """read()'s events. Following the root's own log (record, exporter), a line whose form carries no time at
        all (dmesg -t) is dated when read; a check of a given file leaves it undated."""
        events = self.read(budget)[1]
        if self.dated and any(e.time is None for e in events):
            now = time.time()
            events = [dataclasses.replace(e, time=now, clock="read") if e.time is None else e for e in events]
        return events

    def read(self, budget: float | None = None) -> tuple[list[Record], list[KernelEvent]]:
        """New records and the events they match, in sequence order. `budget`: seconds this read may take (the
        sampler gives a share of its tick, so a flood never stalls it); what is left is read next time, or, on
        /dev/kmsg, overwritten by the kernel meanwhile and counted in `lost` with its seq range in `gaps`.
        Following /dev/kmsg on its thread (follow()), this hands over the events the thread matched since the
        last call (records are counted, not kept)."""
        if self._thread is not None:
            with self._lock:
                events, self._pending = self._pending, []
            return [], events
        recs, events = [], self._carry
        self._carry = []
        deadline = None if budget is None else time.monotonic() + budget
        gen = self._records_device(deadline) if self.is_device else self._records_file(deadline)
        for rec in gen:
            self._take(rec, recs, events)
        if self._report is not None:  # the report may go on in the next read: tie what is there now
            self._tie(*self._report)
        if self._follow_share is not None and self.is_device and self._thread is None:
            self._start_thread()
        return recs, events

    def _take(self, rec, recs: list | None, events: list) -> None:
        """One record (or continuation line) in sequence: count it and any gap before it, match it."""
        if isinstance(rec, str):  # an indented continuation line (a stack frame of a form without stamps)
            self._more(rec)
            return
        if rec.seq <= self.last_seq:
            return
        if self.last_seq >= 0 and rec.seq > self.last_seq + 1:
            with self._lock:
                self.lost += rec.seq - self.last_seq - 1
                self.gaps.append((self.last_seq + 1, rec.seq - 1))
                self.gaps_total += 1
        self.last_seq = rec.seq
        if self.first_seq is None:
            self.first_seq = rec.seq
        self.records += 1
        if recs is not None:
            recs.append(rec)
        ev = match(rec, self.rules, self.boot_wall)
        if ev is not None:
            if rec.clock and ev.clock == "wall":  # dmesg --reltime: the time is known to the minute
                ev = dataclasses.replace(ev, clock=rec.clock)
            events.append(ev)
            self._end_report()
            r = self._by_reason.get(ev.reason)
            self._follow = (ev, r, r.follow_lines) if r is not None and r.follow else None
            if ev.category == "lockup" and (ev.family or ev.kind) in ("soft_lockup", "hard_lockup", "rcu_stall"):
                self._report = (ev, [ev.message])
            elif ev.category == "nic":
                self._nic_event(ev)
        else:
            self._more(rec.message)

    # --- following /dev/kmsg on a thread: as the kernel writes, not once a tick ---------------------------

    def follow(self, share: float = 0.25) -> None:
        """From the next read on (the first reads what the ring holds at once), read /dev/kmsg on a thread of its
        own, as `dmesg -w` does: a record is read when the kernel writes it, so a flood is read as it comes
        instead of being overwritten in the ring between two ticks (the ring holds a few thousand records:
        a fraction of a second of a 20,000 lines/s flood). The thread spends at most `share` of a CPU: past it,
        it sleeps to the end of the second, and what the kernel overwrote meanwhile is counted dropped."""
        if self.is_device:
            self._follow_share = share

    def _start_thread(self) -> None:
        import threading

        self._stop = threading.Event()
        # unfollow() writes here to wake the thread's poll: no timeout that wakes it twice a second for nothing
        # (each wakeup ~50 us of CPU here: a third of node_exporter's CPU per 15 s scrape interval, issue 38)
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._run, name="nodesleuth-kmsg", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        share = self._follow_share or 0.25
        window, used0 = time.monotonic(), time.thread_time()
        while not self._stop.is_set():
            try:
                ready = readable([self._fd, self._wake[0]], 60.0)
            except (OSError, ValueError):
                return
            if self._fd not in ready:
                continue
            events: list[KernelEvent] = []
            for _ in range(512):  # a batch, then hand over and look at the budget
                try:
                    data = os.read(self._fd, 8192)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.EPIPE:  # overwritten before we got there: the seq gap counts it
                        continue
                    self.error = f"{self.path}: {e.strerror or e}"
                    return
                if not data:
                    break
                rec = parse_record(data.decode(errors="replace").split("\n", 1)[0], self.path)
                if rec is not None:
                    self._take(rec, None, events)
            if self._report is not None:
                self._tie(*self._report)
            if events:
                with self._lock:
                    self._pending += events
            now = time.monotonic()
            if now - window >= 1.0:
                window, used0 = now, time.thread_time()
            elif time.thread_time() - used0 > share:  # over its share of this second: the kernel keeps the rest
                with self._lock:
                    self.throttled += 1
                self._stop.wait(window + 1.0 - now)

    def unfollow(self) -> None:
        """Stop the thread (its last batch handed over); later reads are the caller's own again."""
        if self._thread is not None:
            self._stop.set()
            os.write(self._wake[1], b"x")
            self._thread.join(timeout=5)
            if not self._thread.is_alive():  # else it may still select on them: left to the process's end
                for fd in self._wake:
                    os.close(fd)
            with self._lock:
                pending, self._pending = self._pending, []
            self._thread = None
            self._follow_share = None
            self._carry = pending

    def account(self) -> dict:
        """The reader's counts and its latest skipped ranges, read consistently while the thread runs."""
        with self._lock:
            return {"read": self.records, "dropped": self.lost, "gaps": list(self.gaps), "gaps_total": self.gaps_total,
                    "bounded": self.truncated + self.throttled, "first_seq": self.first_seq,
                    "last_seq": self.last_seq if self.last_seq >= 0 else None}

    def _more(self, line: str) -> None:
        """A line after an event: detail for the follow patterns, a line of an open lockup report."""
        if self._follow:
            self._detail(line)
        if self._report is not None:
            ev, lines = self._report
            lines.append(line)
            if REPORT_END.search(line) or len(lines) > self.REPORT_LINES:
                self._end_report()

    def _end_report(self) -> None:
        if self._report is not None:
            self._tie(*self._report)
            self._report = None

    def _tie(self, ev: KernelEvent, lines: list[str]) -> None:
        """The NIC driver a lockup's stack runs, and its device when the report or a recent NIC line names it."""
        got = tie_stack(lines)
        if not got:
            return
        ev.fields.update(got)
        if "nic_ifname" in ev.fields or "nic_device" in ev.fields:
            return
        fams = set(got["nic_family"].split("|")) | set(got["nic_driver"].split("|"))
        same = [nic for nic in self._nic_recent
                if (nic.family in fams or nic.driver.replace("-", "_") in fams) and _near(nic, ev)]
        if same:
            self._name_device(ev, same[-1], same)
            return
        if ev not in self._tied_no_dev:
            self._tied_no_dev.append(ev)

    def _nic_event(self, nic: KernelEvent) -> None:
        self._nic_recent.append(nic)
        for ev in list(self._tied_no_dev):
            fams = set(ev.fields.get("nic_family", "").split("|")) | set(ev.fields.get("nic_driver", "").split("|"))
            if (nic.family in fams or nic.driver.replace("-", "_") in fams) and _near(nic, ev):
                self._name_device(ev, nic, [nic])
                self._tied_no_dev.remove(ev)

    @staticmethod
    def _name_device(ev: KernelEvent, nic: KernelEvent, same: list[KernelEvent]) -> None:
        """The device of the nearest NIC line of the tied driver; if that driver logged for other devices too,
        say so (which of them the stuck CPU served is then not certain)."""
        if nic.ifname:
            ev.fields["nic_ifname"] = nic.ifname
        if nic.fields.get("bus"):
            ev.fields["nic_device"] = nic.fields["bus"]
        ev.fields["nic_device_from"] = f"kernel log seq {nic.seq}: {nic.message[:120]}"
        others = sorted({o.ifname or o.fields.get("bus", "") for o in same} - {nic.ifname or nic.fields.get("bus", "")})
        if others:
            ev.fields["nic_device_note"] = "the driver also logged for " + ", ".join(o for o in others if o)

    def _detail(self, line: str) -> None:
        """Fields from a line after the event (first value wins; every CPU is kept in `cpus`)."""
        ev, rule, left = self._follow
        for rx in rule.follow:
            m = rx.search(line)
            if not m:
                continue
            for k, v in m.groupdict().items():
                if v is None:
                    continue
                if k == "cpu":
                    ev.fields["cpus"] = ",".join(filter(None, (ev.fields.get("cpus", ""), v)))
                ev.fields.setdefault(k, v)
        self._follow = (ev, rule, left - 1) if left > 1 else None

    def close(self) -> None:
        self.unfollow()
        self._end_report()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _near(a: KernelEvent, b: KernelEvent, seconds: float = 3600, records: int = 5000) -> bool:
    """Two events of one log close enough for one to name the other's device: within `seconds` when both have a
    time (or since-boot time), else within `records` records."""
    if a.time is not None and b.time is not None:
        return abs(a.time - b.time) <= seconds
    if a.usec is not None and b.usec is not None:
        return abs(a.usec - b.usec) <= seconds * 1e6
    return abs(a.seq - b.seq) <= records
