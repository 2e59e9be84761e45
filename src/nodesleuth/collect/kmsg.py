"""Kernel log: /dev/kmsg records (with sequence numbers) matched against data-driven rules.

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
from dataclasses import dataclass, field
from importlib import resources

from ..errors import InputError
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


@dataclass(frozen=True)
class Record:
    seq: int
    level: int
    usec: int  # since boot
    message: str


@dataclass(frozen=True)
class KernelEvent:
    seq: int
    time: float  # wall clock, seconds
    usec: int
    reason: str
    kind: str
    severity: str
    driver: str
    ifname: str
    message: str
    reset_reason: str | None = None
    fields: dict = field(default_factory=dict)
    category: str = ""  # the rule's class (nic, lockup); empty in recordings made before it existed


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
        rules.append(Rule(r.get("reason", f"rule{i}"), r.get("type", "temporary"), rx, x.get("driver", ""),
                          x.get("kind", "other"), x.get("severity", "warning"), x.get("reset_reason"),
                          x.get("class", "nic")))
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
    """One kmsg record `prio,seq,usec,flags[,..];message`; continuation lines are ignored."""
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


def match(rec: Record, rules: list[Rule], boot_wall: float) -> KernelEvent | None:
    for r in rules:
        m = r.regex.match(rec.message)
        if not m:
            continue
        fields = {k: v for k, v in m.groupdict().items() if v is not None}
        pm = PREFIX.match(rec.message)
        driver = r.driver or (fields.get("driver") or (pm.group("driver") if pm else ""))
        ifname = fields.pop("ifname", None) or (pm.group("ifname") if pm and pm.group("ifname") else "")
        if pm and not fields.get("bus"):
            fields["bus"] = pm.group("bus")
        for k in list(fields):  # old/new format alternatives share one public name
            if k.endswith("_new"):
                fields.setdefault(k[:-4], fields.pop(k))
        reset_reason = r.reset_reason
        if r.reason == "ENATxQueuePaused":
            # the driver's own decision: napi scheduled but not run past the threshold = starvation
            napi = int(fields.get("napi_usec", 0))
            starving = fields.get("napi_scheduled") == "1" and napi > int(fields.get("threshold_usec", 0))
            reset_reason = "SUSPECTED_POLL_STARVATION" if starving else "OS_NETDEV_WD"
        return KernelEvent(rec.seq, boot_wall + rec.usec / 1e6, rec.usec, r.reason, r.kind, r.severity,
                           driver, ifname, rec.message, reset_reason, fields, r.cls)
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
    """Reads new kernel-log records since the last call; works on /dev/kmsg or a recorded file."""

    def __init__(self, root: Root, path: str | None = None, rules: list[Rule] | None = None,
                 max_records: int = 10000):
        self.path = path or root.join("/dev/kmsg")
        self.rules = rules if rules is not None else load_rules()
        self.max_records = max_records
        self.boot_wall = boot_wall_time(root)
        self.last_seq = -1
        self.lost = 0  # records overwritten in the ring before we read them
        self.truncated = 0  # records left unread because of the flood bound
        self._fd: int | None = None
        self._file = None
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise InputError(self.path, e.strerror or str(e)) from None
        self.is_device = stat.S_ISCHR(st.st_mode)

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

    def _records_file(self):
        if self._file is None:
            try:
                self._file = open(self.path, encoding="utf-8", errors="replace")
            except OSError as e:
                raise InputError(self.path, e.strerror or str(e)) from None
        n = 0
        for line in self._file:
            rec = parse_record(line, self.path)
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
        return recs, events

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._file is not None:
            self._file.close()
            self._file = None
