"""Kernel log: /dev/kmsg (or a kernel-log file in any form, model/kernlog.py) matched against
data-driven rules.

The rules file is shaped like node-problem-detector's kernel-monitor config (same keys, so NPD can
load it too); our extra per-rule data lives under "x-nodesleuth", which NPD ignores.
A flood is bounded: at most `max_records` are read per call (NPD #1168 went blind on a flood).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time

from ..model.records import KernelEvent
from ..model.errors import InputError
from ..model.kernlog import LABEL, WALL, LineParser, Record, detect, parse_kmsg
from ..node.root import Root
from ..model.rules import Rule, load_rules, match


def parse_record(line: str, path: str) -> Record | None:
    """One /dev/kmsg record (kept here for callers; the grammar lives in kernlog)."""
    return parse_kmsg(line, path)


def boot_wall_time(root: Root) -> float:
    """Wall-clock time of boot, so kmsg's since-boot microseconds become timestamps."""
    if root.live:
        return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
    # a recorded tree: /proc/stat's btime (after the long intr line) is what that host said
    m = re.search(r"^btime (\d+)$", root.read("/proc/stat"), re.M)
    if not m:
        raise InputError(root.join("/proc/stat"), "no btime line: cannot turn kernel-log times into wall time")
    return float(m.group(1))


class KmsgReader:
    """Reads new kernel-log records since the last call; works on /dev/kmsg or a file in any kernel-log
    form (detected from its first lines, model/kernlog.py).

    boot: how since-boot times become wall times: "root" = the root's boot (live host, or the recorded
    tree's /proc/stat btime), a float = that epoch, None = unknown (events then carry time None unless
    the form stamps each line with wall time)."""

    def __init__(self, root: Root, path: str | None = None, rules: list[Rule] | None = None,
                 max_records: int = 10000, boot: float | str | None = "root"):
        self.path = path or root.join("/dev/kmsg")
        self.rules = rules if rules is not None else load_rules()
        self.max_records = max_records
        self.boot_wall = boot_wall_time(root) if boot == "root" else boot
        self.last_seq = -1
        self.lost = 0  # records overwritten in the ring before we read them
        self.truncated = 0  # records left unread because of the flood bound
        self.format: str | None = None  # detected form of a file
        self._fd: int | None = None
        self._file = None
        self._parser: LineParser | None = None
        self._pending: list[str] = []
        self._by_reason = {r.reason: r for r in self.rules}
        self._follow: tuple[KernelEvent, Rule, int] | None = None  # an event whose next lines add detail
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise InputError(self.path, e.strerror or str(e)) from None
        self.is_device = stat.S_ISCHR(st.st_mode)
        if self.is_device:
            self.format = "kmsg"

    @property
    def description(self) -> str:
        return LABEL.get(self.format, self.format) if self.format else "nothing (the file is empty)"

    @property
    def has_wall_time(self) -> bool:
        return self.format in WALL or self.boot_wall is not None

    def _records_device(self):
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
        n = 0
        while n < self.max_records:
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

    def _open(self):
        if self._file is None:
            try:
                self._file = open(self.path, encoding="utf-8", errors="replace")
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
        if self._parser is None:  # detect the form on the first non-empty lines (the file may be growing)
            while len(self._pending) < 50:
                line = self._file.readline()
                if not line:
                    break
                self._pending.append(line)
            if not any(x.strip() for x in self._pending):
                return False
            self.format = detect(self._pending[:50])
            self._parser = LineParser(self.format, self.path)
        return True

    def _records_file(self):
        if not self._open():
            return
        p = self._parser
        if self.format == "journal-export":  # a binary-framed form: read whole
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
            self._file.seek(0, os.SEEK_END)
            self._pending = []
            recs = p.export_records(data)
            if len(recs) > self.max_records:
                self.truncated += 1
            yield from recs[:self.max_records]
            return
        n = 0
        while True:
            line = self._pending.pop(0) if self._pending else self._file.readline()
            if not line:
                return
            rec = p.parse(line)
            if rec is not None:
                n += 1
                yield rec
                if n >= self.max_records:
                    self.truncated += 1
                    return

    def read(self) -> tuple[list[Record], list[KernelEvent]]:
        """New records and the events they match, in sequence order."""
        recs, events = [], []
        gen = self._records_device() if self.is_device else self._records_file()
        for rec in gen:
            if rec.seq <= self.last_seq:
                continue
            if self.last_seq >= 0 and rec.seq > self.last_seq + 1:
                self.lost += rec.seq - self.last_seq - 1
            self.last_seq = rec.seq
            recs.append(rec)
            ev = match(rec, self.rules, self.boot_wall)
            if ev is not None:
                events.append(ev)
                r = self._by_reason.get(ev.reason)
                self._follow = (ev, r, r.follow_lines) if r is not None and r.follow else None
            elif self._follow:
                self._detail(rec)
        return recs, events

    def _detail(self, rec: Record) -> None:
        """Fields from a line after the event (first value wins; every CPU is kept in `cpus`)."""
        ev, rule, left = self._follow
        for rx in rule.follow:
            m = rx.search(rec.message)
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
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._file is not None:
            self._file.close()
            self._file = None
