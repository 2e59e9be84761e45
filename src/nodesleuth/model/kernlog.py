"""Kernel-log files in every form users hand over: /dev/kmsg records, dmesg (plain, -r, -T, --time-format
iso, -t), journalctl -k (short, short-precise, short-iso[-precise], short-full, short-unix,
short-monotonic, -o json, -o export) and syslog files; the form is detected per file.

Each line becomes a Record with whatever the form carries: a since-boot time (dmesg, kmsg, journal
monotonic), a wall time (dmesg -T/iso, journal), or neither (dmesg -t). Grammar from util-linux
sys-utils/dmesg.c, systemd src/shared/logs-show.c and kernel/printk/printk.c; real samples of each form
are in tests/data/kernel-log/formats/.
"""

from __future__ import annotations

import calendar
import json
import re
import struct
import time
from dataclasses import dataclass
from datetime import datetime

from .errors import InputError


@dataclass(frozen=True)
class Record:
    seq: int
    level: int | None  # syslog level 0-7; None when the form does not carry it
    usec: int | None  # since boot; None when the form does not carry it
    message: str
    wall: float | None = None  # the line's own wall-clock time (epoch s), when the form carries one


MON = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                   "Dec"), 1)}
_MON = "(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_UP = r"\[\s*(?P<s>\d+)\.(?P<us>\d+)\]"  # dmesg/console since-boot stamp
_CALLER = r"(?:\[\s*[CT]\d+\])?"  # CONFIG_PRINTK_CALLER
_KERNEL = r"(?:(?P<host>\S+) )?kernel(?:\[\d+\])?: ?"  # journal/syslog "host kernel: "
_RELTIME = re.compile(r"^\[(?:\s*[+<][^\]]*|[A-Z][a-z]{2}\s?\d+ \d\d:\d\d)\]\s?")  # dmesg -e/-H/-d stamps
_INNER = re.compile(r"^" + _UP + _CALLER + " ?")  # a dmesg stamp syslog kept inside the message

# name -> line grammar; order matters where one grammar is a prefix of another
FORMATS: dict[str, re.Pattern] = {
    "kmsg": re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$"),
    "journal-short-monotonic": re.compile(r"^" + _UP + " " + _KERNEL + "(?P<msg>.*)$"),
    "dmesg-x": re.compile(r"^(?P<fac>[a-z]+)\s*:(?P<lvl>[a-z]+)\s*: " + _UP + _CALLER + " ?(?P<msg>.*)$"),
    # OpenWrt logread: "Sun Feb 23 19:00:45 2025 kern.warn kernel: [211255.742299] r8152 ..."
    "logread": re.compile(r"^" + _DAY + " " + _MON + r" (?P<d>[ \d]\d) (?P<hms>\d\d:\d\d:\d\d) (?P<y>\d{4}) "
                          r"(?P<fac>[a-z]+)\.(?P<lvl>[a-z]+) kernel: ?(?P<msg>.*)$"),
    "dmesg-r": re.compile(r"^<(?P<prio>\d+)>" + _UP + _CALLER + " ?(?P<msg>.*)$"),
    "dmesg": re.compile(r"^" + _UP + _CALLER + " ?(?P<msg>.*)$"),
    "dmesg-T": re.compile(r"^\[" + _DAY + " " + _MON + r" (?P<d>[ \d]\d) (?P<hms>\d\d:\d\d:\d\d) (?P<y>\d{4})\] ?"
                          r"(?P<msg>.*)$"),
    "dmesg-iso": re.compile(r"^(?P<dt>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(?P<frac>\d+)(?P<tz>[+-]\d\d:?\d\d|Z) "
                            r"(?P<msg>.*)$"),
    "journal-short-iso": re.compile(r"^(?P<dt>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
                                    r"(?P<tz>[+-]\d\d:?\d\d|Z)? " + _KERNEL + "(?P<msg>.*)$"),
    "journal-short-full": re.compile(r"^" + _DAY + r" (?P<dt>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? "
                                     r"(?P<zone>[A-Z]{2,5}|[+-]\d{4}) " + _KERNEL + "(?P<msg>.*)$"),
    "journal-short-unix": re.compile(r"^(?P<epoch>\d{9,11}\.\d+) " + _KERNEL + "(?P<msg>.*)$"),
    # journalctl -o short / short-precise (day zero-padded) and classic syslog (day space-padded)
    "journal-short": re.compile(r"^" + _MON + r" (?P<d>[ \d]\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? "
                                + _KERNEL + "(?P<msg>.*)$"),
}
LEVELS = {n: i for i, n in enumerate(("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"))}
LABEL = {"kmsg": "/dev/kmsg records", "dmesg": "dmesg", "dmesg-r": "dmesg -r", "dmesg-x": "dmesg -x",
         "logread": "OpenWrt logread (local time)", "dmesg-T": "dmesg -T (local time)",
         "dmesg-iso": "dmesg --time-format iso", "journal-short": "journalctl short / syslog (year assumed)",
         "journal-short-iso": "journalctl -o short-iso", "journal-short-full": "journalctl -o short-full",
         "journal-short-unix": "journalctl -o short-unix", "journal-short-monotonic": "journalctl -o short-monotonic",
         "journal-json": "journalctl -o json", "journal-export": "journalctl -o export",
         "bare": "messages without time stamps (dmesg -t / journalctl -o cat)"}
WALL = {"dmesg-T", "logread", "dmesg-iso", "journal-short", "journal-short-iso", "journal-short-full",
        "journal-short-unix", "journal-json", "journal-export"}  # forms whose lines carry a wall-clock time


def parse_kmsg(line: str, path: str) -> Record | None:
    """One /dev/kmsg record `prio,seq,usec,flags[,..];message`; dictionary lines (leading space) are skipped."""
    if not line or line[0] == " ":
        return None
    head, sep, msg = line.partition(";")
    if not sep:
        raise InputError(path, f"malformed kmsg record {line[:80]!r}")
    parts = head.split(",")
    try:
        prio, seq, usec = int(parts[0]), int(parts[1]), int(parts[2])
    except (ValueError, IndexError):
        raise InputError(path, f"malformed kmsg header {head[:60]!r}") from None
    return Record(seq, prio & 7, usec, msg.rstrip("\n"))


def detect(head: list[str]) -> str:
    """The form of a file from its first lines: the grammar most of them follow."""
    lines = [x for x in head if x.strip() and not x[0].isspace() and not x.startswith("-- ")]
    if not lines:
        return "bare"
    if lines[0].startswith("__CURSOR=") or lines[0].startswith("__SEQNUM="):
        return "journal-export"
    if lines[0].lstrip().startswith("{"):
        return "journal-json"
    best, hits = "bare", 0
    for name, rx in FORMATS.items():
        n = sum(1 for x in lines if rx.match(x))
        if n > hits:
            best, hits = name, n
    return best if hits * 2 >= len(lines) else "bare"  # a stray stamped line does not make a form


def _usec(m: re.Match) -> int:
    return int(m.group("s")) * 1_000_000 + int(m.group("us").ljust(6, "0")[:6])


def _frac(f: str | None) -> float:
    return float("0." + f) if f else 0.0


def _tz(tz: str | None) -> float | None:
    """Offset in seconds of an ISO zone (+00:00, +0000, Z); None = none given."""
    if not tz:
        return None
    if tz == "Z":
        return 0.0
    sign = -1 if tz[0] == "-" else 1
    d = tz[1:].replace(":", "")
    return sign * (int(d[:2]) * 3600 + int(d[2:4]) * 60)


def _local(y: int, mo: int, d: int, hms: str) -> float:
    h, mi, s = (int(x) for x in hms.split(":"))
    return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))


class LineParser:
    """Turns the lines of one file, in its detected form, into Records (seq = record number when the form
    has none). `year` is for syslog/journal short lines, which print none: the year that puts the line
    at most a day in the future of `now`."""

    def __init__(self, fmt: str, path: str, now: float | None = None):
        self.fmt = fmt
        self.path = path
        self.rx = FORMATS.get(fmt)
        self.n = 0
        self.now = time.time() if now is None else now
        self.skipped = 0  # lines of other forms (continuations, other programs' lines in a syslog file)

    def parse(self, line: str) -> Record | None:
        line = line.rstrip("\n")
        if self.fmt == "kmsg":
            return parse_kmsg(line, self.path)
        if not line.strip() or line[0].isspace() or line.startswith("-- "):
            return None  # continuation lines of a multi-line record, journalctl's boot separators
        if self.fmt == "journal-json":
            return self._json(line)
        if self.fmt == "bare":  # no usable time: dmesg -t, journalctl -o cat, dmesg -H/--reltime/-d
            self.n += 1
            return Record(self.n, None, None, _RELTIME.sub("", line, count=1))
        m = self.rx.match(line)
        if not m:
            self.skipped += 1
            return None
        g = m.groupdict()
        msg, usec, wall, level = g["msg"], None, None, None
        if g.get("prio") is not None:
            level = int(g["prio"]) & 7
        elif g.get("lvl") is not None:
            level = LEVELS.get(g["lvl"])
        if g.get("s") is not None:
            usec = _usec(m)
        f = self.fmt
        if f in ("dmesg-T", "logread"):
            wall = _local(int(g["y"]), MON[g["mon"]], int(g["d"]), g["hms"])
        elif f in ("dmesg-iso", "journal-short-iso"):
            dt = datetime.strptime(g["dt"], "%Y-%m-%dT%H:%M:%S")
            off = _tz(g["tz"])
            base = calendar.timegm(dt.timetuple()) - off if off is not None else time.mktime(dt.timetuple())
            wall = base + _frac(g["frac"])
        elif f == "journal-short-full":
            dt = datetime.strptime(g["dt"], "%Y-%m-%d %H:%M:%S")
            z = g["zone"]
            off = 0.0 if z in ("UTC", "GMT") else (_tz(z) if z[0] in "+-" else None)
            base = calendar.timegm(dt.timetuple()) - off if off is not None else time.mktime(dt.timetuple())
            wall = base + _frac(g["frac"])
        elif f == "journal-short-unix":
            wall = float(g["epoch"])
        elif f == "journal-short":
            y = time.localtime(self.now).tm_year
            wall = _local(y, MON[g["mon"]], int(g["d"]), g["hms"])
            if wall > self.now + 86400:  # December lines read in January
                wall = _local(y - 1, MON[g["mon"]], int(g["d"]), g["hms"])
            wall += _frac(g["frac"])
        if (f.startswith("journal-short") or f == "logread") and usec is None:
            inner = _INNER.match(msg)  # syslog kept the console stamp: "kernel: [ 95.178723] igb ..."
            if inner:
                usec, msg = _usec(inner), msg[inner.end():]
        self.n += 1
        return Record(self.n, level, usec, msg, wall)

    def _json(self, line: str) -> Record | None:
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(self.path, f"line {self.n + self.skipped + 1}: not a journal JSON object: {e}") from None
        return self._entry(d)

    def _entry(self, d: dict) -> Record | None:
        """One journal entry (json or export): kernel entries only. journald stamps an entry with the time
        it READ the message (__REALTIME_TIMESTAMP, import time for the boot backlog); the kernel's own time
        is _SOURCE_MONOTONIC_TIMESTAMP, so the wall time is boot time (realtime - monotonic) + that."""
        if d.get("_TRANSPORT", "kernel") != "kernel" and d.get("SYSLOG_IDENTIFIER") != "kernel":
            self.skipped += 1
            return None
        msg = d.get("MESSAGE")
        if isinstance(msg, list):  # non-UTF-8 messages are arrays of byte values
            msg = bytes(msg).decode(errors="replace")
        if msg is None:
            self.skipped += 1
            return None

        def num(k):
            try:
                return int(d[k])
            except (KeyError, TypeError, ValueError):
                return None

        src, mono, real = num("_SOURCE_MONOTONIC_TIMESTAMP"), num("__MONOTONIC_TIMESTAMP"), num("__REALTIME_TIMESTAMP")
        usec = src if src is not None else mono
        wall = None
        if real is not None:
            wall = (real - mono + usec) / 1e6 if mono is not None and usec is not None else real / 1e6
        prio = num("PRIORITY")
        self.n += 1
        first = msg.split("\n", 1)[0]  # a multi-line record (igb/ixgbe hang dump): its first line names it
        return Record(self.n, prio, usec, first, wall)

    def export_records(self, data: bytes) -> list[Record]:
        """`journalctl -o export`: KEY=value lines, a blank line between entries; a value with newlines or
        binary is `KEY\\n` + 64-bit little-endian length + bytes + `\\n` (systemd JOURNAL_EXPORT_FORMATS)."""
        out, d, i, n = [], {}, 0, len(data)
        while i < n:
            j = data.find(b"\n", i)
            if j < 0:
                j = n
            line = data[i:j]
            if not line:
                if d:
                    r = self._entry(d)
                    if r:
                        out.append(r)
                d, i = {}, j + 1
                continue
            k, eq, v = line.partition(b"=")
            if eq:
                d[k.decode(errors="replace")] = v.decode(errors="replace")
                i = j + 1
                continue
            if j + 9 > n:
                raise InputError(self.path, f"journal export: field {k[:40]!r} cut short")
            size = struct.unpack("<Q", data[j + 1:j + 9])[0]
            d[k.decode(errors="replace")] = data[j + 9:j + 9 + size].decode(errors="replace")
            i = j + 9 + size + 1
        if d:
            r = self._entry(d)
            if r:
                out.append(r)
        return out
