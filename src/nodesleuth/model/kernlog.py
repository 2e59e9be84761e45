"""Kernel-log files in every form users hand over: /dev/kmsg records, dmesg (plain, -r, -x, -d, -T /
--time-format ctime in any of the locales util-linux and glibc localize it to, --time-format iso, reltime / -H,
delta, -t), journalctl -k (short and short-precise with the month in any language, short-iso[-precise], short-full,
short-unix, short-monotonic, short-delta, -o json, -o json-pretty, -o verbose, -o export) and syslog files; the
form is detected per file.

Each line (or journal entry) becomes a Record with whatever the form carries: a since-boot time (dmesg, kmsg,
journal monotonic), a wall time (dmesg -T/iso, journal), a wall time to the minute (dmesg --reltime), or neither
(dmesg -t, --time-format delta). Grammar from util-linux sys-utils/dmesg.c, systemd src/shared/logs-show.c and
kernel/printk/printk.c; real samples of each form are in tests/data/kernel-log/formats/.

A file may grow while it is followed: split_units() hands over only complete lines / entries / objects and how
many bytes they took, so a reader resumes at that byte offset (collect/kmsg.py).
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
    cursor: str | None = None  # a journal entry's identity ("<seqnum id>:<seqnum>", from __CURSOR), for dedup
    clock: str | None = None  # how `wall` is known when not to the second: "minute" (dmesg --reltime)


MON = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                   "Dec"), 1)}
_MON = "(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
# dmesg/console since-boot stamp; dmesg -d and journalctl -o short-delta add the delta to the previous record
_UP = r"\[\s*(?P<s>\d+)\.(?P<us>\d+)(?:\s*<\s*[\d.,]+\s*>)?\s*\]"
_CALLER = r"(?:\[\s*[CT]\d+\])?"  # CONFIG_PRINTK_CALLER
_KERNEL = r"(?:(?P<host>\S+) )?kernel(?:\[\d+\])?: ?"  # journal/syslog "host kernel: "
_RELTIME = re.compile(r"^\[(?:\s*[+<][^\]]*|[A-Z][a-z]{2}\s?\d+ \d\d:\d\d)\]\s?")  # dmesg -e/-H/-d stamps
_INNER = re.compile(r"^" + _UP + _CALLER + " ?")  # a dmesg stamp syslog kept inside the message

# dmesg -T / --time-format ctime: strftime("%a %b %e %H:%M:%S %Y") in the reader's LC_TIME, and the format itself
# translated by util-linux's .mo files (de: "%a, %e. %b %Y, %H:%M:%S", fr: "%a %e %b %H:%M:%S %Y", cs: "%a %e. %b %Y
# %H:%M:%S"): any words, a day, a month, hh:mm:ss and a 4-digit year inside the brackets
_CTIME_ANY = r"\[(?P<stamp>[^\]\d]{0,24}\d[^\]]{0,40}?\d{1,2}:\d\d:\d\d[^\]]{0,24})\]"
# dmesg --time-format reltime / -H: "[<%b%e %H:%M>]" when the minute changes (translated: de "%e. %b %H:%M", fr
# "%e%b %H:%M"), else "[  +%f]" the delta to the previous record (a decimal comma under de/fr/ru/es)
_REL_MINUTE = r"\[(?P<minute>[^\]\d+<]{0,12}\d{1,2}[^\]:]{0,12}\d{1,2}:\d\d)\]"
_REL_DELTA = r"\[\s*(?P<delta>[+-]\d+[.,]\d+)\]"
# month names of the locales glibc 2.36 ships (abmon, mon, ab_alt_mon, alt_mon of en de fr es it pt nl sv ru uk pl cs
# hr tr ja zh ko, /usr/share/i18n/locales), lower case, trailing '.' dropped; names two languages give different
# months ("lis", "lip", "srp", "listopad") are left out: such a stamp cannot be dated. CJK: "12月", "12월".
_MONTH_NAMES = {
    1: "ene enero gen gennaio jan janeiro januar januari january janv janvier led leden ledna oca ocak sij siječanj "
       "siječnja sty styczeń stycznia січ січень січня янв январь января 一月",
    2: "feb febbraio febrero februar februari february fev fevereiro févr février lut lutego luty velj veljača veljače "
       "úno únor února şub şubat лют лютий лютого фев февраль февраля 二月",
    3: "bře březen března maart mar marca march mars mart marzec marzo março mrt mär märz ožu ožujak ožujka бер "
       "березень березня мар март марта 三月",
    4: "abr abril apr april aprile avril dub duben dubna kwi kwiecień kwietnia nis nisan tra travanj travnja апр апрель "
       "апреля кві квітень квітня 四月",
    5: "kvě květen května mag maggio mai maio maj maja may mayo mayıs mei svi svibanj svibnja май мая тра травень "
       "травня 五月",
    6: "cze czerwca czerwiec giu giugno haz haziran juin jun june junho juni junio lipanj lipnja čen červen června июн "
       "июнь июня чер червень червня 六月",
    7: "juil juillet jul julho juli julio july lipca lipiec lug luglio srpanj srpnja tem temmuz čec července červenec "
       "июл июль июля лип липень липня 七月",
    8: "ago agosto août aug august augusti augustus ağu ağustos kol kolovoz kolovoza sie sierpień sierpnia srpen srpna "
       "авг август августа сер серпень серпня 八月",
    9: "eyl eylül ruj rujan rujna sep sept september septembre septiembre set setembro settembre wrz wrzesień września "
       "zář září вер вересень вересня сен сентябрь сентября 九月",
    10: "eki ekim oct october octobre octubre okt oktober ott ottobre out outubro paź październik października říj "
        "říjen října жов жовтень жовтня окт октябрь октября 十月",
    11: "kas kasım listopadu nov november novembre novembro noviembre stu studeni studenoga лис листопад листопада ноя "
        "ноябрь ноября 十一月",
    12: "ara aralık dec december dez dezember dezembro dic dicembre diciembre déc décembre gru grudnia grudzień pro "
        "prosinac prosinca prosince prosinec гру грудень грудня дек декабрь декабря 十二月",
}
MONTHS = {w: m for m, names in _MONTH_NAMES.items() for w in names.split()}


def month_of(word: str) -> int | None:
    """A month name or abbreviation in any of the locales above ('Dez', 'déc.', 'дек', '12月'); None if unknown."""
    w = word.strip().lower().rstrip(".,")
    m = re.fullmatch(r"(\d{1,2})[月월]", w)
    if m:
        return int(m.group(1)) if 1 <= int(m.group(1)) <= 12 else None
    return MONTHS.get(w)


def parse_stamp(stamp: str, need_year: bool = True) -> tuple[int | None, int, int, str] | None:
    """(year, month, day, 'hh:mm[:ss]') from a localized dmesg stamp, whatever the order of its parts; None if a
    part is missing or its month name is not one we know (the caller then says the line cannot be dated)."""
    t = re.search(r"\b(\d{1,2}:\d\d(?::\d\d)?)\b", stamp)
    if not t:
        return None
    rest = stamp[:t.start()] + " " + stamp[t.end():]
    y = re.search(r"(?<!\d)(\d{4})(?!\d)", rest)
    if y:
        rest = rest[:y.start()] + " " + rest[y.end():]
    elif need_year:
        return None
    month = day = None
    for tok in re.split(r"[\s,]+", rest):
        if not tok:
            continue
        cjk = re.fullmatch(r"(\d{1,2})[月월](\d{1,2})?", tok)  # "12月" (and "12月4" without a space)
        if cjk:
            month = int(cjk.group(1))
            if cjk.group(2):
                day = int(cjk.group(2))
            continue
        d = re.fullmatch(r"(\d{1,2})\.?", tok)
        if d:
            day = int(d.group(1))
            continue
        lead = re.fullmatch(r"(\d{1,2})(\D+)", tok)  # fr reltime "4déc."
        if lead and month_of(lead.group(2)):
            day, month = int(lead.group(1)), month_of(lead.group(2))
            continue
        m = month_of(tok)
        if m:
            month = m
    if month is None or day is None or not 1 <= day <= 31:
        return None
    return (int(y.group(1)) if y else None), month, day, t.group(1)


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
    # any other language (util-linux-locales or just LC_TIME): parsed by parse_stamp()
    "dmesg-T-locale": re.compile(r"^" + _CTIME_ANY + r" ?(?P<msg>.*)$"),
    "dmesg-reltime": re.compile(r"^(?:" + _REL_MINUTE + "|" + _REL_DELTA + r") ?(?P<msg>.*)$"),
    "dmesg-iso": re.compile(r"^(?P<dt>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(?P<frac>\d+)(?P<tz>[+-]\d\d:?\d\d|Z) "
                            r"(?P<msg>.*)$"),
    "journal-short-iso": re.compile(r"^(?P<dt>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
                                    r"(?P<tz>[+-]\d\d:?\d\d|Z)? " + _KERNEL + "(?P<msg>.*)$"),
    "journal-short-full": re.compile(r"^" + _DAY + r" (?P<dt>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? "
                                     r"(?P<zone>[A-Z]{2,5}|[+-]\d{4}) " + _KERNEL + "(?P<msg>.*)$"),
    "journal-short-unix": re.compile(r"^(?P<epoch>\d{9,11}\.\d+) " + _KERNEL + "(?P<msg>.*)$"),
    # journalctl -o short / short-precise (day zero-padded) and classic syslog (day space-padded)
    # (journalctl localizes the month: 'Dez 05', 'déc. 05', '12月 05', 'дек 05')
    "journal-short": re.compile(r"^(?P<mon>[^\W\d_]{3,12}\.?|\d{1,2}月) (?P<d>[ \d]\d) (?P<hms>\d\d:\d\d:\d\d)"
                                r"(?:\.(?P<frac>\d+))? " + _KERNEL + "(?P<msg>.*)$"),
}
LEVELS = {n: i for i, n in enumerate(("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug"))}
LABEL = {"kmsg": "/dev/kmsg records", "dmesg": "dmesg", "dmesg-r": "dmesg -r", "dmesg-x": "dmesg -x",
         "logread": "OpenWrt logread (local time)", "dmesg-T": "dmesg -T (local time)",
         "dmesg-T-locale": "dmesg -T in another language (local time; month names of glibc's locales)",
         "dmesg-reltime": "dmesg --reltime / -H (local time to the minute: hh:mm stamps and deltas; year assumed)",
         "journal-json-pretty": "journalctl -o json-pretty", "journal-verbose": "journalctl -o verbose",
         "dmesg-iso": "dmesg --time-format iso", "journal-short": "journalctl short / syslog (year assumed)",
         "journal-short-iso": "journalctl -o short-iso", "journal-short-full": "journalctl -o short-full",
         "journal-short-unix": "journalctl -o short-unix", "journal-short-monotonic": "journalctl -o short-monotonic",
         "journal-json": "journalctl -o json", "journal-export": "journalctl -o export",
         "bare": "messages without time stamps (dmesg -t / journalctl -o cat)"}
WALL = {"dmesg-T", "dmesg-T-locale", "logread", "dmesg-iso", "journal-short", "journal-short-iso",
        "journal-short-full", "journal-short-unix", "journal-json", "journal-json-pretty", "journal-verbose",
        "journal-export", "dmesg-reltime"}  # forms whose lines carry a wall-clock time (reltime: to the minute)
# journalctl -o verbose: 'Thu 2026-12-03 08:39:43.840037 UTC [s=..;i=..;b=..;m=..;t=..;x=..]' then '    KEY=value'
VERBOSE_HEAD = re.compile(r"^[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(?P<cursor>s=[^\]]*)\]\s*$")


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


# journal / syslog forms print every program's lines with the same stamp: "host prog[pid]: msg". A file of such a form
# (a full `journalctl` dump, /var/log/messages, a kern.log opening with NetworkManager lines) is recognised by all its
# lines, kernel or not; only its kernel lines become records (LineParser skips the others).
_OTHER = r"(?:(?P<host>\S+) )?(?!kernel(?:\[\d+\])?:)[^\s:\[]+(?:\[\d+\])?: ?"
USERLAND: dict[str, re.Pattern] = {
    name: re.compile(FORMATS[name].pattern.replace(_KERNEL, _OTHER, 1))
    for name in ("journal-short-iso", "journal-short-full", "journal-short-unix", "journal-short")
}
USERLAND["journal-short-syslogd"] = re.compile(  # syslogd's own lines: "Feb 15 16:08:55 host last message repeated 4 times"
    r"^(?:[^\W\d_]{3,12}\.?|\d{1,2}月) [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ last message repeated \d+ times?\s*$")


def detect(head: list[str]) -> str:
    """The form of a file from its lines (give it as many as there are, not only the first: a journal's kernel
    lines may start after hundreds of userland ones): the grammar most of them follow. In a journal or syslog,
    other programs' lines count for the form (they carry the same stamps); the form needs one kernel line at
    least, or, with none, wins only when nothing else matches."""
    lines = [x for x in head if x.strip() and not x[0].isspace() and not x.startswith("-- ")]
    if not lines:
        return "bare"
    if lines[0].startswith(("__CURSOR=", "__SEQNUM=", "__REALTIME_TIMESTAMP=")):
        return "journal-export"
    if lines[0].strip() == "{":
        return "journal-json-pretty"
    if lines[0].lstrip().startswith("{"):
        return "journal-json"
    if VERBOSE_HEAD.match(lines[0]):
        return "journal-verbose"
    best, hits, kern = "bare", 0, 0
    syslogd = USERLAND["journal-short-syslogd"]
    for name, rx in FORMATS.items():
        n = sum(1 for x in lines if rx.match(x))
        other = USERLAND.get(name)
        m = sum(1 for x in lines if not rx.match(x) and (other.match(x) or (name == "journal-short" and syslogd.match(x)))) \
            if other else 0
        if (n + m, n) > (hits, kern):
            best, hits, kern = name, n + m, n
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
    h, mi, *sec = (int(x) for x in hms.split(":"))
    return time.mktime((y, mo, d, h, mi, sec[0] if sec else 0, 0, 0, -1))


def _year_for(mo: int, d: int, hms: str, now: float) -> float:
    """A stamp without a year (syslog, journalctl short, dmesg --reltime): the year that puts it at most a day
    in the future of `now`."""
    y = time.localtime(now).tm_year
    wall = _local(y, mo, d, hms)
    if wall > now + 86400:  # December lines read in January
        wall = _local(y - 1, mo, d, hms)
    return wall


_CURSOR = re.compile(r"(?:^|;)s=(?P<s>[0-9a-f]+);i=(?P<i>[0-9a-f]+)")


def cursor_key(cursor: str | None) -> str | None:
    """'<seqnum id>:<seqnum>' of a journal cursor ('s=6b36..;i=154;b=..;m=..;t=..;x=..'): the entry's identity."""
    m = _CURSOR.search(cursor or "")
    return f"{m.group('s')}:{int(m.group('i'), 16)}" if m else None


def split_units(fmt: str, data: bytes, final: bool) -> tuple[list[bytes], int]:
    """The complete units (lines; journal entries for export, json-pretty and verbose) at the start of `data`, and
    how many bytes they take. An incomplete last unit (a line without its newline, an export entry without its
    blank line or with a binary field cut short, an unclosed JSON object) is left for the next read, unless
    `final` (the file has stopped growing): then it is handed over as it is, and its parser says what is wrong."""
    units: list[bytes] = []
    n = len(data)
    if fmt == "journal-export":
        i = start = 0
        while i < n:
            j = data.find(b"\n", i)
            if j < 0:
                break
            if j == i:  # blank line: the entry ends
                if i > start:
                    units.append(data[start:i])
                i = start = j + 1
                continue
            if b"=" in data[i:j]:
                i = j + 1
                continue
            if j + 9 > n:  # a binary field: 64-bit little-endian size, the bytes, a newline
                break
            size = struct.unpack("<Q", data[j + 1:j + 9])[0]
            if j + 9 + size + 1 > n:
                break
            i = j + 9 + size + 1
        if final and data[start:].strip():
            units.append(data[start:])
            return units, n
        return units, start
    if fmt == "journal-json-pretty":
        depth, instr, esc, start, i = 0, False, False, 0, 0
        for i, c in enumerate(data):
            if instr:
                if esc:
                    esc = False
                elif c == 0x5C:  # backslash
                    esc = True
                elif c == 0x22:
                    instr = False
            elif c == 0x22:
                instr = True
            elif c == 0x7B:
                depth += 1
            elif c == 0x7D:
                depth -= 1
                if depth == 0:
                    units.append(data[start:i + 1])
                    start = i + 1
        if final and data[start:].strip():
            units.append(data[start:])
            return units, n
        return units, start
    if fmt == "journal-verbose":
        starts = [m.start() for m in re.finditer(rb"^[A-Z][a-z]{2} \d{4}-\d\d-\d\d ", data, re.M)]
        complete = starts[1:] + ([n] if final else [])
        pos = 0
        for a, b in zip(starts, complete):
            units.append(data[a:b])
            pos = b
        return units, pos
    end = data.rfind(b"\n")
    if final and end < n - 1:
        end = n - 1 if data[-1:] == b"\n" else n
        body = data[:end]
        return body.split(b"\n") if body else [], n
    if end < 0:
        return [], 0
    return data[:end].split(b"\n"), end + 1


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
        self.undated = 0  # lines of a dated form whose stamp could not be read (a month name we do not know)
        self.undated_example = ""
        self.binary = 0  # journal entries whose MESSAGE journalctl printed as '[NB blob data]'
        self._rel: tuple[float, float] | None = None  # dmesg --reltime: wall of the last hh:mm stamp, deltas since

    def restart(self) -> None:
        """The file was replaced or rewritten: per-file state starts over (record numbers go on)."""
        self._rel = None

    def parse(self, line: str) -> Record | None:
        line = line.rstrip("\n")
        if self.fmt == "kmsg":
            return parse_kmsg(line, self.path)
        if not line.strip() or line[0].isspace() or line.startswith("-- "):
            return None  # continuation lines of a multi-line record, journalctl's boot separators
        if self.fmt == "journal-json":
            return self._json(line)
        if self.fmt == "bare":  # no usable time: dmesg -t, journalctl -o cat, dmesg --time-format delta
            self.n += 1
            return Record(self.n, None, None, _RELTIME.sub("", line, count=1))
        m = self.rx.match(line)
        if not m:
            self.skipped += 1
            return None
        g = m.groupdict()
        msg, usec, wall, level, clock = g["msg"], None, None, None, None
        if g.get("prio") is not None:
            level = int(g["prio"]) & 7
        elif g.get("lvl") is not None:
            level = LEVELS.get(g["lvl"])
        if g.get("s") is not None:
            usec = _usec(m)
        f = self.fmt
        if f in ("dmesg-T", "logread"):
            wall = _local(int(g["y"]), MON[g["mon"]], int(g["d"]), g["hms"])
        elif f == "dmesg-T-locale":
            st = parse_stamp(g["stamp"])
            if st is None:
                self._undated(line)
            else:
                wall = _local(st[0], st[1], st[2], st[3])
        elif f == "dmesg-reltime":
            if g.get("minute") is not None:
                st = parse_stamp(g["minute"], need_year=False)
                if st is None:
                    self._undated(line)
                    self._rel = None
                else:
                    self._rel = (_year_for(st[1], st[2], st[3], self.now), 0.0)
            elif self._rel is not None:
                self._rel = (self._rel[0], self._rel[1] + float(g["delta"].replace(",", ".")))
            if self._rel is not None:
                wall, clock = self._rel[0] + self._rel[1], "minute"
            else:
                self._undated(line)
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
            mo = MON.get(g["mon"]) or month_of(g["mon"])
            if mo is None:
                self._undated(line)
            else:
                wall = _year_for(mo, int(g["d"]), g["hms"], self.now) + _frac(g["frac"])
        if (f.startswith("journal-short") or f == "logread") and usec is None:
            inner = _INNER.match(msg)  # syslog kept the console stamp: "kernel: [ 95.178723] igb ..."
            if inner:
                usec, msg = _usec(inner), msg[inner.end():]
        self.n += 1
        return Record(self.n, level, usec, msg, wall, None, clock)

    def _undated(self, line: str) -> None:
        self.undated += 1
        if not self.undated_example:
            self.undated_example = line[:80]

    def unit(self, data: bytes) -> Record | str | None:
        """One unit from split_units(): a Record, a continuation line (str: the lines of a stack trace that a
        dmesg -t / cat form prints indented), or None (a line of no kernel record)."""
        if self.fmt == "journal-export":
            return self._export_entry(data)
        if self.fmt == "journal-json-pretty":
            text = data.decode(errors="replace").strip()
            if not text:
                return None
            return self._json(text)
        if self.fmt == "journal-verbose":
            return self._verbose(data.decode(errors="replace"))
        line = data.decode(errors="replace").rstrip("\r")
        rec = self.parse(line)
        if rec is None and line[:1].isspace() and line.strip():
            return line
        return rec
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
        return Record(self.n, prio, usec, first, wall, cursor_key(d.get("__CURSOR")))

    def _export_entry(self, data: bytes) -> Record | None:
        d = self.export_fields(data)
        return self._entry(d) if d else None

    def export_fields(self, data: bytes) -> dict[str, str]:
        """One `journalctl -o export` entry: KEY=value lines; a value with newlines or binary is `KEY\\n` +
        64-bit little-endian length + bytes + `\\n` (systemd JOURNAL_EXPORT_FORMATS)."""
        d, i, n = {}, 0, len(data)
        while i < n:
            j = data.find(b"\n", i)
            if j < 0:
                j = n
            line = data[i:j]
            k, eq, v = line.partition(b"=")
            if eq:
                d[k.decode(errors="replace")] = v.decode(errors="replace")
                i = j + 1
                continue
            if not line:
                i = j + 1
                continue
            if j + 9 > n:
                raise InputError(self.path, f"journal export: field {k[:40]!r} cut short")
            size = struct.unpack("<Q", data[j + 1:j + 9])[0]
            if j + 9 + size > n:
                raise InputError(self.path, f"journal export: field {k[:40]!r} cut short")
            d[k.decode(errors="replace")] = data[j + 9:j + 9 + size].decode(errors="replace")
            i = j + 9 + size + 1
        return d

    def _verbose(self, text: str) -> Record | None:
        """One `journalctl -o verbose` entry: the header line (its cursor has the seqnum, monotonic and realtime
        in hex), then '    KEY=value' lines; a value journalctl could not print is '[NB blob data]'."""
        lines = text.split("\n")
        m = VERBOSE_HEAD.match(lines[0])
        if not m:
            self.skipped += 1
            return None
        d: dict[str, str] = {}
        last = None
        for ln in lines[1:]:
            fm = re.match(r"^    ([A-Z0-9_]+)=(.*)$", ln)
            if fm:
                last = fm.group(1)
                d[last] = fm.group(2)
            elif last and ln.strip():  # a multi-line value continues, indented
                d[last] += "\n" + ln.strip()
        cur = m.group("cursor")
        fields = dict(x.split("=", 1) for x in cur.split(";") if "=" in x)
        try:
            d.setdefault("__REALTIME_TIMESTAMP", str(int(fields["t"], 16)))
            d.setdefault("__MONOTONIC_TIMESTAMP", str(int(fields["m"], 16)))
        except (KeyError, ValueError):
            pass
        d["__CURSOR"] = cur
        if re.fullmatch(r"\[\d+B blob data\]", d.get("MESSAGE", "")):
            self.binary += 1
        return self._entry(d)
