"""/proc/meminfo: Percpu and Slab are where dying memory cgroups show their cost."""

from __future__ import annotations

from ..errors import InputError
from .pread import Preader
from .root import Root


def parse_meminfo(text: str, path: str = "/proc/meminfo") -> dict[str, int]:
    """Values in bytes (the kernel writes kB)."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            key, rest = line.split(":", 1)
            parts = rest.split()
            val = int(parts[0])
        except (ValueError, IndexError):
            raise InputError(path, f"malformed line {line!r}") from None
        out[key] = val * 1024 if len(parts) > 1 and parts[1] == "kB" else val
    if "MemTotal" not in out:
        raise InputError(path, "no MemTotal line")
    return out


def read_meminfo(root: Root, reader: Preader | None = None) -> dict[str, int]:
    """`reader` (the recorder's) keeps the file open between ticks."""
    if reader is None:
        return parse_meminfo(root.read("/proc/meminfo"), root.join("/proc/meminfo"))
    p = root.join("/proc/meminfo")
    try:
        data = reader.read(p, one_record=True)
    except OSError as e:
        raise InputError(p, e.strerror or str(e)) from None
    return parse_meminfo(data.decode(errors="replace"), p)
