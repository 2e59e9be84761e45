"""`ethtool -S IF` text: "NIC statistics:" then "name: value" lines."""

from __future__ import annotations


def parse_ethtool_s(text: str, path: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("NIC statistics") or ":" not in s:
            continue
        k, _, v = s.rpartition(":")
        try:
            out[k.strip()] = int(v.strip())
        except ValueError:
            continue  # ethtool prints some non-numeric lines on some drivers
    return out
