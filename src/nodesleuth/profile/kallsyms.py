"""Kernel addresses named as perf script (perf 6.1) names them, from /proc/kallsyms.

Kallsyms symbols of type T/W/D/B (any case), not `$...`; a symbol ends where the next starts (the
last of the kernel or of a module: the next page), and then of symbols at one address the one perf's
choose_best_symbol keeps (profile/symtable.py): for aliases in kallsyms the last listed, the only one
the first step gave a size. The kernel map spans its kept symbols (perf script's map__fixup_start/end
after loading kallsyms, wider than the [_text, _etext) perf record announces: init text is in it);
module maps come from /proc/modules, and symbols of a "module" that is not there ([bpf],
[__builtin__ftrace]) are dropped, so such addresses are `[unknown]`. With a readable /proc/kcore perf
maps the kernel from its segments instead and keeps those symbols: the same is done then.
"""

from __future__ import annotations

import os
import re
import struct
from bisect import bisect_right

import numpy as np

from .elf import PT_LOAD, STB_GLOBAL, STB_LOCAL, STB_WEAK
from .symtable import SymTable

KERNEL_DSO = "[kernel.kallsyms]"
UNKNOWN = "[unknown]"


def _kallsyms_rows(text: str) -> list[tuple]:
    rows = []
    for ln in text.splitlines():
        parts = ln.split(None, 2)
        if len(parts) < 3:
            continue
        typ = parts[1]
        if typ.upper() not in "TWDB" or len(typ) != 1:
            continue
        name = parts[2]
        if name[:1] == "$":
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError:
            continue
        binding = STB_WEAK if typ == "W" else STB_GLOBAL if typ.isupper() else STB_LOCAL
        rows.append((addr, addr, binding, name))
    return rows


class KernelSymbols:
    """Kernel and module addresses named as perf script names them (see the module docstring)."""

    def __init__(self, kallsyms: str = "/proc/kallsyms", modules: str = "/proc/modules",
                 kcore: str = "/proc/kcore"):
        try:
            with open(kallsyms) as f:
                text = f.read()
        except OSError:
            text = ""
        # kptr_restrict hides every address (all zero); a readable kallsyms may still start with zeros
        # (x86_64's per-CPU symbols, "0000000000000000 A fixed_percpu_data", on Debian's 5.10 and 6.12:
        # tests/data/kallsyms), so hidden means no address is non-zero, not a zero first line
        self.ok = bool(re.search(r"^0*[1-9a-fA-F][0-9a-fA-F]* ", text, re.M))
        rows = _kallsyms_rows(text) if self.ok else []
        mods = []
        try:
            with open(modules) as f:
                for ln in f:
                    p = ln.split()
                    if len(p) >= 6:
                        try:
                            mods.append((int(p[5], 16), int(p[5], 16) + int(p[1]), p[0]))
                        except ValueError:
                            pass
        except OSError:
            pass
        table = SymTable(rows, kallsyms=True)
        t_starts, t_ends = table.starts.tolist(), table.ends.tolist()
        t_names = [rows[i][3] for i in table.idx.tolist()]
        segs = _kcore_segments(kcore)
        # maps: (start, end, dso); the symbols of each, ends clipped to their map
        self.maps: list[tuple[int, int, str]] = []
        if segs:
            self.maps = [(s, e, KERNEL_DSO) for s, e in segs]
        else:
            self.maps += [(s, e, f"[{n}]") for s, e, n in mods]
        self.maps.sort()
        self.map_starts = [m[0] for m in self.maps]
        loaded = {m[2] for m in mods}
        starts, ends, names = [], [], []
        for s, e, n in zip(t_starts, t_ends, t_names):
            name, tab, mod = n.partition("\t")
            if tab and not segs:
                if mod.strip("[]") not in loaded:
                    continue  # perf: "/proc/{kallsyms,modules} inconsistency": the symbol is discarded
            elif not tab and not segs and name == "__entry_SYSCALL_64_trampoline":
                continue
            i = bisect_right(self.map_starts, s) - 1
            if segs:
                if i < 0 or s >= self.maps[i][1]:
                    continue  # in no kcore segment: dropped
                e = min(e, self.maps[i][1])
            starts.append(s)
            ends.append(e)
            names.append(name)
        if not segs and starts:
            # perf's map__fixup_start/end after loading kallsyms: the kernel map spans its symbols (from
            # the first to the end of the last kept one: init text and data included), not just the
            # [_text, _etext) perf record announces
            core = [i for i, n in enumerate(t_names) if "\t" not in n and n != "__entry_SYSCALL_64_trampoline"]
            if core:
                lo, hi = t_starts[core[0]], t_ends[core[-1]]
                self.maps.append((lo, hi, KERNEL_DSO))
                self.maps.sort()
                self.map_starts = [m[0] for m in self.maps]
        # held as arrays and one block of names, not ~120k Python ints and strings each (18 MB of small
        # objects for a Debian 6.12 kernel's, kept for good among the arenas the parse above used)
        self.starts = np.array(starts, dtype=np.uint64)
        self.ends = np.array(ends, dtype=np.uint64)
        raw = [n.encode() for n in names]
        self.name_offs = np.zeros(len(raw) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in raw], out=self.name_offs[1:])
        self.name_blob = b"".join(raw)
        del raw, names, starts, ends, rows, text, t_starts, t_ends, t_names, table

    def name(self, ip: int) -> tuple[str, str]:
        """(symbol or [unknown], dso) of a kernel-context address."""
        i = bisect_right(self.map_starts, ip) - 1
        if i < 0 or ip >= self.maps[i][1]:
            return UNKNOWN, UNKNOWN
        dso = self.maps[i][2]
        j = int(self.starts.searchsorted(np.uint64(ip), "right")) - 1
        if j >= 0:
            s, e = int(self.starts[j]), int(self.ends[j])
            if (ip < e or ip == s) and s >= self.maps[i][0]:
                return self.name_blob[int(self.name_offs[j]):int(self.name_offs[j + 1])].decode(), dso
        return UNKNOWN, dso


def _kcore_segments(path: str) -> list[tuple[int, int]]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return []
    try:
        head = os.pread(fd, 64, 0)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return []
        phoff, = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        ph = os.pread(fd, phentsize * phnum, phoff)
        out = []
        for i in range(phnum):
            p_type, _flags, _off, vaddr, _pa, _fsz, memsz, _al = struct.unpack_from("<IIQQQQQQ", ph, i * phentsize)
            if p_type == PT_LOAD:
                out.append((vaddr, vaddr + memsz))
        return out
    except OSError:
        return []
    finally:
        os.close(fd)
