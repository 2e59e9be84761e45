"""/proc/meminfo: Percpu and Slab are where dying memory cgroups show their cost."""

from __future__ import annotations

from ..errors import InputError
from .pread import Preader, read_text
from .root import Root


def parse_meminfo(text: str, path: str = "/proc/meminfo", keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """Values in bytes (the kernel writes kB). With `keys`, only those lines are parsed (the recorder
    keeps six of ~55, every second); MemTotal is always required."""
    lines = text.splitlines()
    if keys is not None:
        body = "\n" + text
        lines = []
        for k in dict.fromkeys(("MemTotal",) + tuple(keys)):
            i = body.find(f"\n{k}:")
            if i >= 0:
                j = body.find("\n", i + 1)
                lines.append(body[i + 1:j if j >= 0 else len(body)])
    out = {}
    for line in lines:
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


def read_meminfo(root: Root, reader: Preader | None = None, keys: tuple[str, ...] | None = None) -> dict[str, int]:
    """`reader` (the recorder's) keeps the file open between ticks; `keys`: see parse_meminfo."""
    if reader is None:
        return parse_meminfo(root.read("/proc/meminfo"), root.join("/proc/meminfo"), keys)
    return parse_meminfo(read_text(reader, root, "/proc/meminfo"), root.join("/proc/meminfo"), keys)
