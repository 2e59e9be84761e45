"""Kernel-log rules: data, not code. The rules file (rules/kernel-net.json) is shaped like
node-problem-detector's kernel-monitor config (same keys, so NPD can load it as is); our extra
per-rule data (class, family, driver, kind, the printk it was read from) lives under "x-nodesleuth",
which NPD ignores. A record of any log form (model/kernlog.py) matched against the rules becomes a
KernelEvent."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources

from .errors import InputError
from .timeparse import iso
from .kernlog import Record
from .records import KernelEvent


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
