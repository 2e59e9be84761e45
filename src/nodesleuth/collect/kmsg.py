"""Kernel log: /dev/kmsg (or a kernel-log file in any form, collect/kernlog.py) matched against
data-driven rules.

The rules file is shaped like node-problem-detector's kernel-monitor config (same keys, so NPD can
load it too); our extra per-rule data lives under "x-nodesleuth", which NPD ignores.
A flood is bounded: at most `max_records` are read per call (NPD #1168 went blind on a flood).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import stat
import time
from dataclasses import dataclass
from importlib import resources

from ..model import KernelEvent  # noqa: F401  (record types live in model.py)
from ..errors import InputError
from ..timeparse import iso
from .kernlog import LABEL, WALL, LineParser, Record, detect, parse_kmsg
from .root import Root

PREFIX = re.compile(r"^(?P<driver>[\w.-]+) (?P<bus>[^\s:]+(?::[^\s:]+)*?)(?: (?P<ifname>[^\s:]+))?: ")


@dataclass(frozen=True)
class Rule:
    reason: str
    type: str
    regex: re.Pattern
    driver: str
    kind: str  # tx_timeout | starvation | reset_start | reset | watchdog | missing_tx | ...
    severity: str
    reset_reason: str | None
    cls: str = "nic"  # nic | lockup | ...: which incident model the rule feeds
    family: str = ""  # driver family (ena, mlx5, ...) or lockup kind; empty = the driver the line names
    follow: tuple = ()  # patterns for the report's next lines (an RCU stall names its CPUs there)
    follow_lines: int = 0


def when(e: KernelEvent) -> str:
    """The event's time as evidence: wall time and how it was derived, or why there is none."""
    up = f"uptime +{e.usec / 1e6:.3f} s" if e.usec is not None else ""
    if e.time is None:
        return f"{up}, wall time unknown (no boot time for this log: give --boot-time)" if up else "time unknown"
    how = {"wall": "as logged", "boot": "boot time + uptime", "read": "when read; the line has no time"}.get(
        e.clock, e.clock)
    return f"{iso(e.time)} ({how}{'; ' + up if up else ''})"


def load_rules(path: str | None = None) -> list[Rule]:
    if path is None:
        text = resources.files("nodesleuth").joinpath("rules/kernel-net.json").read_text()
        path = "nodesleuth/rules/kernel-net.json"
    else:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise InputError(path, e.strerror or str(e)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON: {e}") from None
    rules = []
    for i, r in enumerate(doc.get("rules", [])):
        x = r.get("x-nodesleuth", {})
        try:
            rx = re.compile(r["pattern"])
        except (KeyError, re.error) as e:
            raise InputError(path, f"rule {i} ({r.get('reason')}): bad pattern: {e}") from None
        fol = x.get("follow") or {}
        try:
            follow = tuple(re.compile(p) for p in fol.get("patterns", []))
        except re.error as e:
            raise InputError(path, f"rule {i} ({r.get('reason')}): bad follow pattern: {e}") from None
        rules.append(Rule(r.get("reason", f"rule{i}"), r.get("type", "temporary"), rx, x.get("driver", ""),
                          x.get("kind", "other"), x.get("severity", "warning"), x.get("reset_reason"),
                          x.get("class", "nic"), x.get("family", ""), follow, int(fol.get("lines", 0))))
    return rules


@functools.lru_cache(maxsize=8)
def _reasons(rules_path: str | None, cls: str) -> frozenset[str]:
    return frozenset(r.reason for r in load_rules(rules_path) if r.cls == cls)


def nic_reasons(rules_path: str | None = None) -> frozenset[str]:
    """Rule reasons whose class is "nic" in the rules file: the one list of NIC trouble."""
    return _reasons(rules_path, "nic")


def is_nic(e, rules_path: str | None = None) -> bool:
    """A NIC reset/timeout line. Events recorded before rules had classes are looked up by reason."""
    cls = getattr(e, "category", "")
    return cls == "nic" if cls else e.reason in nic_reasons(rules_path)


def parse_record(line: str, path: str) -> Record | None:
    """One /dev/kmsg record (kept here for callers; the grammar lives in kernlog)."""
    return parse_kmsg(line, path)


def match(rec: Record, rules: list[Rule], boot_wall: float | None) -> KernelEvent | None:
    """The first rule matching the record, as an event; its wall time from the record's own stamp, else
    boot_wall + uptime, else None (clock "none")."""
    for r in rules:
        m = r.regex.match(rec.message)
        if not m:
            continue
        fields = {}
        for k, v in m.groupdict().items():  # old/new format alternatives share one public name
            if v is not None:
                fields.setdefault(re.sub(r"_(?:new|old|v\d+)$", "", k), v)
        pm = PREFIX.match(rec.message)
        driver = fields.pop("driver", None) or r.driver or (pm.group("driver") if pm else "")
        ifname = fields.pop("ifname", None) or (pm.group("ifname") if pm and pm.group("ifname") else "")
        if pm and not fields.get("bus"):
            fields["bus"] = pm.group("bus")
        reset_reason = r.reset_reason
        if r.reason == "ENATxQueuePaused":
            # the driver's own decision: napi scheduled but not run past the threshold = starvation
            napi = int(fields.get("napi_usec", 0))
            starving = fields.get("napi_scheduled") == "1" and napi > int(fields.get("threshold_usec", 0))
            reset_reason = "SUSPECTED_POLL_STARVATION" if starving else "OS_NETDEV_WD"
        if rec.wall is not None:
            t, clock = rec.wall, "wall"
        elif rec.usec is not None and boot_wall is not None:
            t, clock = boot_wall + rec.usec / 1e6, "boot"
        else:
            t, clock = None, "none"
        family = r.family or {"mlx5_core": "mlx5", "r8125": "r8169", "r8168": "r8169", "r8126": "r8169",
                              "": "i40e"}.get(driver, driver)
        return KernelEvent(rec.seq, t, rec.usec, r.reason, r.kind, r.severity, driver, ifname, rec.message,
                           reset_reason, fields, r.cls, family, clock)
    return None


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
    form (detected from its first lines, collect/kernlog.py).

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
