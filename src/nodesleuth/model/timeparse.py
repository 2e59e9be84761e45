"""Times as users type them: ISO-8601, epoch seconds, relative ("10m ago", "-90s"), "now"."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from .errors import InputError

UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60,
         "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
         "days": 86400}
REL = re.compile(r"^\s*-?\s*((?:\d+(?:\.\d+)?\s*[a-z]+\s*)+?)\s*(?:ago)?\s*$")
PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")


def parse_time(text: str, now: float | None = None) -> float:
    now = time.time() if now is None else now
    s = text.strip().lower()
    if s == "now":
        return now
    try:
        return float(s)  # epoch seconds
    except ValueError:
        pass
    m = REL.match(s)
    if m and (s.endswith("ago") or s.startswith("-")):
        total = 0.0
        for num, unit in PART.findall(m.group(1)):
            if unit not in UNITS:
                raise InputError(text, f"unknown time unit {unit!r}")
            total += float(num) * UNITS[unit]
        return now - total
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(text, "not a time: use ISO-8601, epoch seconds, '10m ago' or 'now'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
