"""Symbols for the direct profiler (profile/stacknames.py): kernel addresses from /proc/kallsyms, user
addresses from the process's maps and the ELF symbol tables of its files, named as `perf script`
(perf 6.1) names them, so a stack read from the kernel's ring buffers folds exactly as
stackcollapse-perf.pl folds perf script's text (tests/test_profile_direct.py compares both on the
same live samples).

What perf does, and so what is done here:
- Kernel: kallsyms symbols of type T/W/D/B (any case), not `$...`; a symbol ends where the next
  starts (the last of the kernel or of a module: the next page), and then of symbols at one address
  the one perf's choose_best_symbol keeps (with a size, not weak, global, fewest leading `_`, longest
  name, first): for aliases in kallsyms the last listed, the only one the first step gave a size. The kernel map
  spans its kept symbols (perf script's map__fixup_start/end after loading kallsyms, wider than the
  [_text, _etext) perf record announces: init text is in it); module maps come from /proc/modules,
  and symbols of a "module" that is not there ([bpf], [__builtin__ftrace]) are dropped, so such
  addresses are `[unknown]`. With a readable /proc/kcore perf maps the kernel from its segments instead and keeps
  those symbols: the same is done then.
- User: the map of the address (MMAP2 records, or /proc/PID/maps for a process that existed before
  the profiler), file offset = ip - start + pgoff; the symbol table of the first file with a .symtab
  among the debug files perf looks at (.gnu_debuglink targets, /usr/lib/debug/PATH[.debug],
  /usr/lib/debug/.build-id/xx/yyyy.debug, all with the same build-id) and the file itself, else its
  .dynsym; FUNC/GNU_IFUNC/OBJECT symbols and NOTYPE labels in text sections; symbols moved to file
  offsets by their program header; `name@plt` symbols synthesized from .rela.plt as perf 6.1
  does; C++ names demangled without parameters (`c++filt -p`, as perf's demangler is called), Rust
  legacy hashes cut. Anonymous executable maps are `/tmp/perf-PID.map` (its symbols if the JIT wrote
  one), [vdso] is read from this process's own vdso (perf script does the same), a deleted file or
  one that cannot be read names nothing (`[unknown]` with the map's name), an address in no map is
  `[unknown]`.
Tables are cached per build-id (the same library in many containers is read once) and per file.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import threading
import weakref
from bisect import bisect_right
from collections import OrderedDict

import numpy as np

from .parse import frame_names

KERNEL_DSO = "[kernel.kallsyms]"
UNKNOWN = "[unknown]"
PAGE = 4096

# ELF constants
PT_LOAD, PT_NOTE = 1, 4
SHT_SYMTAB, SHT_NOTE, SHT_NOBITS, SHT_RELA, SHT_REL, SHT_DYNSYM = 2, 7, 8, 4, 9, 11
SHF_ALLOC = 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_GNU_IFUNC = 0, 1, 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
SHN_UNDEF, SHN_ABS, SHN_LORESERVE = 0, 0xFFF1, 0xFF00
STV_INTERNAL, STV_HIDDEN = 1, 2
ET_EXEC, ET_REL = 2, 1
EM_386, EM_ARM, EM_X86_64, EM_AARCH64 = 3, 40, 62, 183
NT_GNU_BUILD_ID = 3

SYM64 = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                  ("size", "<u8")])
SYM32 = np.dtype([("name", "<u4"), ("value", "<u4"), ("size", "<u4"), ("info", "u1"), ("other", "u1"),
                  ("shndx", "<u2")])


def _underscores(name: str) -> int:
    return len(name) - len(name.lstrip("_"))


def _better(a: tuple, b: tuple) -> bool:
    """perf's choose_best_symbol(a, b) == SYMBOL_A for (start, end, binding, name) rows."""
    la, lb = a[1] - a[0], b[1] - b[0]
    if lb == 0 and la > 0:
        return True
    if la == 0 and lb > 0:
        return False
    wa, wb = a[2] == STB_WEAK, b[2] == STB_WEAK
    if wb and not wa:
        return True
    if wa and not wb:
        return False
    ga, gb = a[2] == STB_GLOBAL, b[2] == STB_GLOBAL
    if ga and not gb:
        return True
    if gb and not ga:
        return False
    ua, ub = _underscores(a[3]), _underscores(b[3])
    if ub > ua:
        return True
    if ua > ub:
        return False
    if len(a[3]) != len(b[3]):
        return len(a[3]) > len(b[3])
    return not a[3].startswith("SyS") and not a[3].startswith("compat_SyS")  # arch__choose_best_symbol


class SymTable:
    """Symbols as perf keeps them after symbols__fixup_end and symbols__fixup_duplicate: sorted
    starts, ends (exclusive), names looked up only for the symbols a stack uses. lookup(addr) -> name
    or None (the nearest start at or below addr, if addr is inside it; a zero-size symbol matches
    only its own start). Built with numpy: a 100,000-symbol library costs milliseconds."""

    __slots__ = ("starts", "ends", "idx", "name_of", "fids", "fids_gen", "extra_bytes", "__weakref__")  # fids: the direct reader's frame ids

    def __init__(self, rows: list[tuple], kallsyms: bool = False, dedup: bool = True):
        """From (start, end, binding, name) rows; kallsyms: names may end in a tab and [module]."""
        names = [r[3] for r in rows]
        self._build(np.array([r[0] for r in rows], dtype=np.uint64), np.array([r[1] for r in rows], dtype=np.uint64),
                    np.array([r[2] for r in rows], dtype=np.int8), names.__getitem__,
                    np.array(["[" in n for n in names], dtype=bool) if kallsyms else None, dedup)

    @classmethod
    def from_arrays(cls, starts, ends, binding, name_of, raw_name=None, dedup: bool = True) -> "SymTable":
        t = cls.__new__(cls)
        t._build(starts.astype(np.uint64), ends.astype(np.uint64), binding.astype(np.int8), name_of, None, dedup,
                 raw_name)
        return t

    def _build(self, starts, ends, binding, name_of, mod, dedup, raw_name=None) -> None:
        """raw_name: indices -> the names perf compares between aliases (default: name_of each)."""
        raw_name = raw_name or (lambda ix: [str(name_of(i)) for i in ix])
        order = np.argsort(starts, kind="stable")  # equal starts keep their order (perf's rb-tree inserts right)
        s, e = starts[order], ends[order].copy()
        n = len(s)
        # perf: symbols__fixup_end, then symbols__fixup_duplicate. So of symbols at one address without
        # a size only the last gets one (up to the next address), and "prefer a symbol with non-zero
        # length" then keeps it: for kallsyms aliases the last one listed wins (__x64_sys_vfork, not
        # __ia32_sys_vfork)
        if n:
            zero = e == s
            fix = s[1:].copy()
            if mod is not None:  # the last symbol of the kernel or of a module: to the next page
                md = mod[order]
                cross = md[:-1] != md[1:]
                page_up = (e[:-1] + np.uint64(2 * PAGE - 1)) // np.uint64(PAGE) * np.uint64(PAGE)
                fix = np.where(cross, page_up, fix)
            e[:-1] = np.where(zero[:-1], fix, e[:-1])
            if e[-1] == s[-1]:
                e[-1] = (int(s[-1]) + PAGE - 1) // PAGE * PAGE + PAGE
        keep = np.ones(n, dtype=bool)
        if dedup and n > 1:
            dup = np.flatnonzero(s[1:] == s[:-1]) + 1
            if len(dup):
                b = binding[order]
                runs = np.split(dup, np.flatnonzero(np.diff(dup) != 1) + 1)
                groups = [[int(run[0]) - 1] + run.tolist() for run in runs]
                flat = [j for g in groups for j in g]
                # perf compares the names it keeps, demangled: all of them at once
                nm = dict(zip(flat, raw_name([int(order[j]) for j in flat])))
                for group in groups:
                    win = group[0]
                    for j in group[1:]:
                        a_ = (int(s[win]), int(e[win]), int(b[win]), nm[win])
                        b_ = (int(s[j]), int(e[j]), int(b[j]), nm[j])
                        if not _better(a_, b_):
                            win = j
                    keep[group] = False
                    keep[win] = True
        self.starts, self.ends, self.idx = s[keep], e[keep], order[keep]
        self.name_of = name_of
        self.fids, self.fids_gen = None, None
        self.extra_bytes = 0

    def __len__(self) -> int:
        return len(self.starts)

    def nbytes(self) -> int:
        """What the table holds, about: its arrays, the direct reader's frame ids (8 bytes a symbol, made
        on first use) and what its names are read from (extra_bytes: an ELF string table, name offsets)."""
        return self.starts.nbytes + self.ends.nbytes + self.idx.nbytes + 8 * len(self.starts) + self.extra_bytes

    def lookup(self, addr: int) -> str | None:
        i = int(self.starts.searchsorted(addr, "right")) - 1
        if i < 0:
            return None
        s, e = int(self.starts[i]), int(self.ends[i])
        if addr < e or addr == s:
            return self.name_of(int(self.idx[i]))
        return None

    def add(self, rows: list[tuple]) -> None:
        """Symbols added after the fix-ups (perf's synthesized PLT entries), kept sorted."""
        if not rows:
            return
        base = self.name_of
        extra = [r[3] for r in rows]
        off = 1 << 40  # their name indices, apart from the table's own

        def name_of(i: int, base=base, extra=extra):
            return extra[i - off] if i >= off else base(i)

        s = np.concatenate([self.starts, np.array([r[0] for r in rows], dtype=np.uint64)])
        e = np.concatenate([self.ends, np.array([r[1] for r in rows], dtype=np.uint64)])
        ix = np.concatenate([self.idx, np.arange(len(rows), dtype=np.int64) + off])
        order = np.argsort(s, kind="stable")
        self.starts, self.ends, self.idx, self.name_of = s[order], e[order], ix[order], name_of
        self.fids, self.fids_gen = None, None


# --- kernel


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


# --- ELF


class Elf:
    """The parts of an ELF file symbolisation needs, read with pread (a 100 MB library costs its
    headers and symbol tables, not its size)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._parse()
        except Exception:
            os.close(self.fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read(self, off: int, n: int) -> bytes:
        return os.pread(self.fd, n, off)

    def _parse(self) -> None:
        h = self.read(0, 64)
        if len(h) < 52 or h[:4] != b"\x7fELF" or h[5] != 1:
            raise ValueError("not a little-endian ELF file")
        self.is64 = h[4] == 2
        if self.is64:
            (self.type, self.machine, _v, _entry, phoff, shoff, _fl, _eh, phentsize, phnum, shentsize, shnum,
             shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", h, 16)
        else:
            (self.type, self.machine, _v, _entry, phoff, shoff, _fl, _eh, phentsize, phnum, shentsize, shnum,
             shstrndx) = struct.unpack_from("<HHIIIIIHHHHHH", h, 16)
        self.loads: list[tuple[int, int, int]] = []  # (p_offset, p_vaddr, max(p_filesz, p_memsz))
        self.notes: list[tuple[int, int]] = []
        ph = self.read(phoff, phentsize * phnum) if phnum else b""
        for i in range(phnum):
            if self.is64:
                p_type, _f, off, vaddr, _pa, fsz, msz, _al = struct.unpack_from("<IIQQQQQQ", ph, i * phentsize)
            else:
                p_type, off, vaddr, _pa, fsz, msz, _f, _al = struct.unpack_from("<IIIIIIII", ph, i * phentsize)
            if p_type == PT_LOAD and max(fsz, msz):
                self.loads.append((off, vaddr, max(fsz, msz)))  # perf's elf_read_program_header
            elif p_type == PT_NOTE:
                self.notes.append((off, fsz))
        self.sections: list[dict] = []
        if shnum and shoff:
            sh = self.read(shoff, shentsize * shnum)
            for i in range(shnum):
                if self.is64:
                    name, typ, flags, addr, off, size, link, info, _al, entsize = struct.unpack_from(
                        "<IIQQQQIIQQ", sh, i * shentsize)
                else:
                    name, typ, flags, addr, off, size, link, info, _al, entsize = struct.unpack_from(
                        "<IIIIIIIIII", sh, i * shentsize)
                self.sections.append({"name_off": name, "type": typ, "flags": flags, "addr": addr, "offset": off,
                                      "size": size, "link": link, "info": info, "entsize": entsize})
            if shstrndx < len(self.sections):
                st = self.sections[shstrndx]
                strs = self.read(st["offset"], st["size"])
                for s in self.sections:
                    end = strs.find(b"\0", s["name_off"])
                    s["name"] = strs[s["name_off"]:end].decode(errors="replace")
        for s in self.sections:
            s.setdefault("name", "")

    def section(self, name: str) -> dict | None:
        return next((s for s in self.sections if s["name"] == name), None)

    def build_id(self) -> bytes | None:
        spans = [(s["offset"], s["size"]) for s in self.sections if s["type"] == SHT_NOTE] or self.notes
        for off, size in spans:
            data = self.read(off, min(size, 1 << 16))
            p = 0
            while p + 12 <= len(data):
                namesz, descsz, typ = struct.unpack_from("<III", data, p)
                name_at = p + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if typ == NT_GNU_BUILD_ID and data[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
                    return data[desc_at:desc_at + descsz]
                p = desc_at + (descsz + 3) // 4 * 4
        return None

    def debuglink(self) -> str | None:
        s = self.section(".gnu_debuglink")
        if s is None:
            return None
        data = self.read(s["offset"], s["size"])
        return data.split(b"\0", 1)[0].decode(errors="replace") or None

    def has_symtab(self) -> bool:
        s = self.section(".symtab")
        return s is not None and s["type"] == SHT_SYMTAB

    def raw_symbols(self, sec: dict) -> tuple[np.ndarray, bytes]:
        dt = SYM64 if self.is64 else SYM32
        n = sec["size"] // dt.itemsize
        syms = np.frombuffer(self.read(sec["offset"], n * dt.itemsize), dtype=dt, count=n)
        link = self.sections[sec["link"]] if sec["link"] < len(self.sections) else None
        strs = self.read(link["offset"], link["size"]) if link is not None else b""
        return syms, strs

    def phdr_for(self, vaddr: int) -> tuple[int, int, int] | None:
        for off, va, fsz in self.loads:
            if va <= vaddr < va + fsz:
                return off, va, fsz
        return None


def _cstr(strs: bytes, at: int) -> str:
    end = strs.find(b"\0", at)
    return strs[at:end if end >= 0 else len(strs)].decode(errors="replace")


def _col(secs: list[dict], f) -> np.ndarray:
    """One value per section header, as an array indexed by section number."""
    return np.array([f(sh) for sh in secs])


def _symbol_section(syms_elf: Elf, run_elf: Elf) -> tuple[Elf, dict] | None:
    """The table perf reads: the symbol file's .symtab, else the runtime file's .dynsym (None: neither)."""
    sec = syms_elf.section(".symtab") if syms_elf.has_symtab() else None
    if sec is None:
        sec = run_elf.section(".dynsym")
        syms_elf = run_elf
        if sec is None or sec["type"] != SHT_DYNSYM:
            return None
    return syms_elf, sec


def _kept(syms: np.ndarray, strs: bytes, syms_elf: Elf, secs_r: list[dict], typ, shndx, valid, ix, ix_r,
          use_r) -> np.ndarray:
    """Indices of the symbols perf keeps (functions, objects, text labels in allocated sections; no ARM $x)."""
    secs_s = syms_elf.sections
    vis = syms["other"] & 3
    named = (syms["name"] != 0) & (shndx != SHN_UNDEF)
    func = named & ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC) | (typ == STT_OBJECT))
    label = named & (typ == STT_NOTYPE) & (shndx != SHN_ABS) & (vis != STV_HIDDEN) & (vis != STV_INTERNAL)
    alloc = _col(secs_s, lambda sh: bool(sh["flags"] & SHF_ALLOC))[ix]
    text = np.where(use_r, _col(secs_r, lambda sh: "text" in sh["name"])[ix_r] if secs_r else False,
                    _col(secs_s, lambda sh: "text" in sh["name"])[ix])
    keep = (func | label) & valid & alloc & (func | text)
    if syms_elf.machine in (EM_ARM, EM_AARCH64):  # ARM mapping symbols ($a, $d, $t, $x[.*])
        for i in np.flatnonzero(keep).tolist():
            nm = _cstr(strs, int(syms["name"][i]))
            if nm[:1] == "$" and len(nm) >= 2 and nm[1] in "adtx" and (len(nm) == 2 or nm[2] == "."):
                keep[i] = False
    return np.flatnonzero(keep)


def _file_offsets(value: np.ndarray, run_elf: Elf, secs_s: list[dict], secs_r: list[dict], k, ix, ix_r,
                  use_r) -> np.ndarray:
    """The kept symbols' (`k`) addresses moved to file offsets, as perf 6.1's adjust_symbols moves them."""
    # by the program header holding them, else by their section's address minus its offset
    done = np.zeros(len(value), dtype=bool)
    for off, va, fsz in run_elf.loads:
        m = ~done & (value >= np.uint64(va)) & (value < np.uint64(va + fsz))
        value[m] = value[m] - np.uint64(va) + np.uint64(off)
        done |= m
    if not done.all():  # no program header: the section's address minus its offset
        sec_delta = np.where(use_r[k], _col(secs_r, lambda sh: sh["addr"] - sh["offset"])[ix_r[k]]
                             if secs_r else 0, _col(secs_s, lambda sh: sh["addr"] - sh["offset"])[ix[k]])
        value[~done] = (value[~done].astype(np.int64) - sec_delta[~done].astype(np.int64)).astype(np.uint64)
    return value


class _Names:
    """The table's name lookups: one name (cached) and many at once (perf's tie-breaks between aliases, while
    the table is built); then `settle` keeps the winners' names and the string table compressed in blocks."""

    def __init__(self, strs: bytes, name_off: np.ndarray, demangle):
        self.strs, self.name_off, self.demangle = strs, name_off, demangle
        self.cache: dict[int, str] = {}
        self.packed = None  # the string table once the table is built: compressed in blocks

    def name_of(self, i: int) -> str:
        n = self.cache.get(i)
        if n is None:
            off = int(self.name_off[i])
            n = self.packed.cstr(off) if self.packed is not None else _cstr(self.strs, off)
            n = self.cache[i] = self.demangle(n) if n.startswith("_Z") else n
        return n

    def raw_name(self, ix: list[int]) -> list[str]:
        raw = [_cstr(self.strs, int(self.name_off[i])) for i in ix]
        dm = self.demangle.many([r for r in raw if r.startswith("_Z")])
        it = iter(dm)
        out = [next(it) if r.startswith("_Z") else r for r in raw]
        for i, n in zip(ix, out):
            self.cache[i] = n
        return out

    def settle(self, won_idx, n: int) -> int:
        """Names of alias groups were read (and demangled) to pick each group's symbol: the winners' kept; the
        string table compressed. Returns the bytes held beyond the table's arrays."""
        if self.cache:
            won = np.zeros(n, dtype=bool)
            won[won_idx] = True
            for i in [i for i in self.cache if not won[i]]:
                del self.cache[i]
        self.packed = PackedStrings(self.strs)
        self.strs = None
        return self.packed.nbytes() + self.name_off.nbytes


def _load_table(syms_elf: Elf, run_elf: Elf, demangle) -> SymTable | None:
    """perf 6.1's dso__load_sym over the chosen table, in bulk: FUNC/GNU_IFUNC/OBJECT symbols and
    NOTYPE labels in text sections, of allocated sections; symbols moved to file offsets by their
    program header (perf does so for every user-space file since 5.19: a binary whose text is not
    at its file offset, as lld links Chromium, names right). Names are read (and demangled) when
    looked up."""
    chosen = _symbol_section(syms_elf, run_elf)
    if chosen is None:
        return None
    syms_elf, sec = chosen
    syms, strs = syms_elf.raw_symbols(sec)
    if not len(syms):
        return None
    typ = syms["info"] & 0xF
    bind = (syms["info"] >> 4).astype(np.int8)
    shndx = syms["shndx"].astype(np.int64)
    secs_s, secs_r = syms_elf.sections, run_elf.sections
    if not secs_s:
        return None
    valid = (shndx < len(secs_s)) & (shndx < SHN_LORESERVE)
    ix = np.where(valid, shndx, 0)
    nobits = _col(secs_s, lambda sh: sh["type"] == SHT_NOBITS)[ix]
    use_r = nobits & (ix < len(secs_r))  # perf takes a NOBITS section's header from the runtime file
    ix_r = np.minimum(ix, max(0, len(secs_r) - 1))
    k = _kept(syms, strs, syms_elf, secs_r, typ, shndx, valid, ix, ix_r, use_r)
    if not len(k):
        return None
    value = syms["value"][k].astype(np.uint64)
    if syms_elf.machine == EM_ARM:
        value = np.where(typ[k] == STT_FUNC, value & ~np.uint64(1), value)
    value = _file_offsets(value, run_elf, secs_s, secs_r, k, ix, ix_r, use_r)
    size = syms["size"][k].astype(np.uint64)
    end = np.where(size > 0, value + size, value)
    b = bind[k]
    b = np.where((b == STB_GLOBAL) | (b == STB_WEAK), b, STB_LOCAL).astype(np.int8)
    name_off = syms["name"][k]
    names = _Names(strs, name_off, demangle)
    del strs
    t = SymTable.from_arrays(value, end, b, names.name_of, names.raw_name)
    t.extra_bytes = names.settle(t.idx, len(k))
    return t


class PackedStrings:
    """An ELF string table held compressed, in blocks (zstd level 1), for the few names a profile uses:
    a big C++ binary's names are most of its table's bytes (playwright's node: 18 of 24 MB), and 4-6x
    smaller so. A name costs its block's decompression (~0.1 ms for 64 KB), once: names are cached by
    the table's user."""

    BLOCK = 1 << 16
    _local = threading.local()

    def __init__(self, strs: bytes):
        import zstandard

        c = zstandard.ZstdCompressor(level=1, write_content_size=True, write_checksum=False)
        mv = memoryview(strs)
        self.blocks = [c.compress(mv[i:i + self.BLOCK]) for i in range(0, len(strs), self.BLOCK)]
        mv.release()
        self.size = len(strs)

    def nbytes(self) -> int:
        return sum(len(b) for b in self.blocks) + 56 * len(self.blocks)

    def _block(self, j: int) -> bytes:
        loc = self._local
        d = getattr(loc, "dctx", None)
        if d is None:
            import zstandard

            d = loc.dctx = zstandard.ZstdDecompressor()
        return d.decompress(self.blocks[j])

    def cstr(self, at: int) -> str:
        j, off = divmod(at, self.BLOCK)
        out = b""
        while j < len(self.blocks):
            blk = self._block(j)
            e = blk.find(b"\0", off)
            if e >= 0:
                return (out + blk[off:e]).decode(errors="replace")
            out += blk[off:]
            j, off = j + 1, 0
        return out.decode(errors="replace")


def _plt_rows(run: Elf, demangle) -> list[tuple]:
    """perf 6.1's dso__synthesize_plt_symbols: `name@plt` per .rela.plt/.rel.plt entry, in order, from
    .plt's file offset + its header."""
    dyn = run.section(".dynsym")
    if dyn is None:
        return []
    rel = run.section(".rela.plt") or run.section(".rel.plt")
    plt = run.section(".plt")
    if rel is None or plt is None or rel["link"] != run.sections.index(dyn) or not rel["entsize"]:
        return []
    if run.machine == EM_ARM:
        head, ent = 20, 12
    elif run.machine == EM_AARCH64:
        head, ent = 32, 16
    else:
        head = ent = plt["entsize"]
    if not ent:
        return []
    syms, strs = run.raw_symbols(dyn)
    data = run.read(rel["offset"], rel["size"])
    n = rel["size"] // rel["entsize"]
    off = plt["offset"] + head
    rows = []
    for i in range(n):
        if run.is64:
            (info,) = struct.unpack_from("<Q", data, i * rel["entsize"] + 8)
            symidx = info >> 32
        else:
            (info,) = struct.unpack_from("<I", data, i * rel["entsize"] + 4)
            symidx = info >> 8
        name = _cstr(strs, int(syms["name"][symidx])) if symidx < len(syms) else ""
        rows.append((off, off + ent, STB_GLOBAL, demangle.lazy_plt(name)))
        off += ent
    return rows


class Demangler:
    """C++ (and Rust legacy) names as perf 6.1 prints them: `c++filt -p` (libiberty without
    DMGL_PARAMS, perf's flags), a Rust legacy hash cut. A long-lived c++filt started with a
    parent-death signal; names are demangled when a stack first uses them (most symbols never are)."""

    RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
    # names kept demangled: a node's new builds and programs bring new names all day; past this the
    # cache starts over (a name asked again is demangled again)
    LIMIT = 50_000

    def __init__(self):
        self.cache: dict[str, str] = {}
        self.proc = None
        self.lock = threading.Lock()
        self.missing = shutil.which("c++filt") is None

    def lazy_plt(self, name: str) -> str:
        return Lazy(name, self, "@plt") if name.startswith("_Z") else name + "@plt"

    def many(self, names: list[str], chunk: int = 400) -> list[str]:
        """Names demangled in bulk (a table's aliases): each chunk's lines written by a thread of its
        own while this one reads the answers. Written first and read after, a chunk of long C++ names
        (a browser's, kilobytes each) filled both pipes: c++filt blocked writing its answers, this
        process blocked writing the rest of the names, and the profiler stopped for good (3 recorders
        on this host at once, in the soak of issue 38)."""
        out = []
        if len(self.cache) > self.LIMIT:
            self.cache = {}
        todo = [n for n in names if n not in self.cache]
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            got = list(part)
            if not self.missing:
                try:
                    with self.lock:
                        self._ensure()
                        got = self._exchange(part)
                except (OSError, ValueError):
                    self.missing = True
            for n, d in zip(part, got):
                if d != n and self.RUST_HASH.search(d):
                    d = _rust_legacy(self.RUST_HASH.sub("", d))
                self.cache[n] = d
        return [self.cache.get(n, n) for n in names] if names else out

    def _exchange(self, part: list[str]) -> list[str]:
        proc = self.proc
        text = "".join(n.replace("\n", " ") + "\n" for n in part)
        failed: list[BaseException] = []

        def feed():
            try:
                proc.stdin.write(text)
                proc.stdin.flush()
            except (OSError, ValueError) as e:
                failed.append(e)

        writer = threading.Thread(target=feed, name="nodesleuth-c++filt-in", daemon=True)
        writer.start()
        got = []
        for n in part:
            ln = proc.stdout.readline()
            if not ln:  # c++filt gone: what is left stays mangled
                failed.append(EOFError())
                break
            got.append(ln.rstrip("\n") or n)
        writer.join()
        if failed:
            raise OSError("c++filt stopped answering")
        return got

    def _ensure(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            from ..node.children import spawn

            self.proc = spawn(["c++filt", "-p"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def __call__(self, name: str) -> str:
        got = self.cache.get(name)
        if got is not None:
            return got
        out = name
        if not self.missing:
            try:
                with self.lock:
                    self._ensure()
                    self.proc.stdin.write(name.replace("\n", " ") + "\n")
                    self.proc.stdin.flush()
                    out = self.proc.stdout.readline().rstrip("\n") or name
            except (OSError, ValueError):
                self.missing = True
        if out != name and self.RUST_HASH.search(out):
            out = _rust_legacy(self.RUST_HASH.sub("", out))
        if len(self.cache) > self.LIMIT:
            self.cache = {}
        self.cache[name] = out
        return out

    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
                self.proc.kill()
                self.proc.wait()
                self.proc.stdout.close()
                self.proc = None


class Lazy(str):
    """A mangled name in a symbol table, demangled (plus `suffix`) by resolve() when a stack uses it."""

    def __new__(cls, name: str, dm: Demangler, suffix: str = ""):
        s = super().__new__(cls, name)
        s.dm, s.suffix = dm, suffix
        return s

    def resolve(self) -> str:
        return self.dm(str.__str__(self)) + self.suffix


_RUST_ESC = {"$SP$": "@", "$BP$": "*", "$RF$": "&", "$LT$": "<", "$GT$": ">", "$LP$": "(", "$RP$": ")",
             "$C$": ",", "$u7e$": "~", "$u20$": " ", "$u27$": "'", "$u5b$": "[", "$u5d$": "]", "$u7b$": "{",
             "$u7d$": "}", "$u3b$": ";", "$u2b$": "+", "$u22$": '"'}


def _rust_legacy(s: str) -> str:
    s = s.replace("..", "::")
    for k, v in _RUST_ESC.items():
        s = s.replace(k, v)
    return s


def _named(name) -> str:
    return name.resolve() if isinstance(name, Lazy) else name


class FileSymbols:
    """One mapped file's symbols: lookup by file offset (ip - map start + pgoff)."""

    def __init__(self, table: SymTable | None, build_id: bytes | None):
        self.table = table
        self.build_id = build_id

    def lookup(self, off: int) -> str | None:
        if self.table is None:
            return None
        n = self.table.lookup(off)
        return None if n is None else _named(n)


def _candidates(path: str, root: str, link: str | None, bid: bytes | None) -> list[str]:
    """Where perf looks for a .symtab, in its order (binary_type_symtab), the file itself last."""
    d = os.path.dirname(path)
    out = []
    if link:
        out += [os.path.join(d, link), os.path.join(d, ".debug", link), "/usr/lib/debug" + os.path.join(d, link)]
    out += ["/usr/lib/debug" + path + ".debug", "/usr/lib/debug" + path]
    if bid:
        h = bid.hex()
        out.append(f"/usr/lib/debug/.build-id/{h[:2]}/{h[2:]}.debug")
    return [root + p for p in out]


class UserSymbols:
    """Symbol tables of mapped files, cached per (path, device, inode) and per build-id, least recently
    used first out: at most LIMIT files and about MAX_BYTES of tables (a busy node maps thousands of
    distinct files in a day: new builds, containers, test binaries; tables of big binaries are tens of
    MB). A file dropped is read again when a stack next uses it: the same names, some CPU."""

    LIMIT = 4096  # files kept
    # of tables kept (SymTable.nbytes, a table shared by files counted once per file): every executable
    # file mapped on the busy test host at one moment weighed 18 MB of tables (243 files; containerd 5.5
    # MB, and playwright's node 10 MB more while a browser test ran), and only those a profile samples
    # are read: 32 MB holds them all, and past it a file sampled again costs its read (0.02-0.15 s)
    MAX_BYTES = 32 << 20
    # and by age: a file no stack used for this many batches (expire(): ~5 min of the recorder's 10 s
    # batches) is dropped. A node running tests or jobs maps new programs all day, each sampled for a
    # while and then never again: held until the byte bound pushed them out, their tables (and the
    # names read from them) grew the recorder by tens of MB over its first hour (issue 38's soak)
    MAX_IDLE = 30

    def __init__(self, demangle: Demangler | None = None, max_bytes: int | None = None, limit: int | None = None,
                 max_idle: int | None = None):
        self.demangle = demangle or Demangler()
        self.max_bytes = self.MAX_BYTES if max_bytes is None else max_bytes
        self.limit = self.LIMIT if limit is None else limit
        self.max_idle = self.MAX_IDLE if max_idle is None else max_idle
        self.batch = 0  # expire() calls so far
        self.last: dict[tuple, int] = {}  # key of by_file -> the batch it was last used in
        self.by_file: OrderedDict[tuple, FileSymbols] = OrderedDict()
        self.by_bid: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # tables files still hold
        self.bytes = 0  # of the tables by_file holds
        self.vdso: FileSymbols | None = None
        self.files_read = 0
        self.evicted = 0

    @staticmethod
    def _size(fs: FileSymbols) -> int:
        return fs.table.nbytes() if fs.table is not None else 0

    def file(self, path: str, root: str, ident: tuple) -> FileSymbols:
        key = (path, ident)
        fs = self.by_file.get(key)
        self.last[key] = self.batch
        if fs is not None:
            self.by_file.move_to_end(key)
            return fs
        fs = self.by_file[key] = self._load(path, root)
        self.bytes += self._size(fs)
        while len(self.by_file) > 1 and (self.bytes > self.max_bytes or len(self.by_file) > self.limit):
            self._drop_oldest()
        return fs

    def _drop_oldest(self) -> None:
        k, old = self.by_file.popitem(last=False)
        self.last.pop(k, None)
        self.bytes -= self._size(old)
        self.evicted += 1

    def expire(self) -> None:
        """After a batch: the files no stack used for max_idle batches are dropped (least recently used
        first: by_file is in that order)."""
        self.batch += 1
        while self.by_file:
            k = next(iter(self.by_file))
            if self.batch - self.last.get(k, 0) <= self.max_idle:
                break
            self._drop_oldest()

    def _load(self, path: str, root: str) -> FileSymbols:
        try:
            run = Elf(root + path)
        except (OSError, ValueError, struct.error):
            try:
                run = Elf(path) if root else None
            except (OSError, ValueError, struct.error):
                run = None
            if run is None:
                return FileSymbols(None, None)
        try:
            bid = run.build_id()
            if bid is not None:
                held = self.by_bid.get(bid)
                if held is not None:
                    return FileSymbols(held, bid)
            self.files_read += 1
            syms = None
            for cand in _candidates(path, root, run.debuglink(), bid):
                try:
                    if not os.path.isfile(cand):
                        continue
                    e = Elf(cand)
                except (OSError, ValueError, struct.error):
                    continue
                if bid is not None and e.build_id() != bid or not e.has_symtab():
                    e.close()
                    continue
                syms = e
                break
            try:
                table = _load_table(syms or run, run, self.demangle)
                if table is not None:
                    plt = _plt_rows(run, self.demangle)
                    if plt:
                        table.add(plt)
            finally:
                if syms is not None:
                    syms.close()
            if bid is not None and table is not None:
                self.by_bid[bid] = table
            return FileSymbols(table, bid)
        except Exception:  # noqa: BLE001 - a file this reader cannot make sense of names nothing, as perf
            return FileSymbols(None, None)
        finally:
            run.close()

    def vdso_symbols(self) -> FileSymbols:
        """This process's own vdso, as perf script uses its own (vdso__dso_findnew)."""
        if self.vdso is None:
            table = None
            try:
                with open("/proc/self/maps") as f:
                    for ln in f:
                        if ln.rstrip().endswith("[vdso]"):
                            a, b = (int(x, 16) for x in ln.split()[0].split("-"))
                            with open("/proc/self/mem", "rb") as m:
                                m.seek(a)
                                img = m.read(b - a)
                            import tempfile

                            with tempfile.NamedTemporaryFile(prefix="nodesleuth-vdso-") as tf:
                                tf.write(img)
                                tf.flush()
                                run = Elf(tf.name)
                                try:
                                    table = _load_table(run, run, self.demangle)
                                finally:
                                    run.close()
                            break
            except (OSError, ValueError, struct.error):
                table = None
            self.vdso = FileSymbols(table, None)
        return self.vdso


def perf_map_symbols(path: str) -> SymTable | None:
    """A JIT's /tmp/perf-PID.map (`START SIZE name` in hex), as perf reads it."""
    rows = []
    try:
        with open(path, errors="replace") as f:
            for ln in f:
                p = ln.rstrip("\n").split(" ", 2)
                if len(p) < 3:
                    continue
                try:
                    s, n = int(p[0], 16), int(p[1], 16)
                except ValueError:
                    continue
                rows.append((s, s + n, STB_GLOBAL, p[2]))
    except OSError:
        return None
    return SymTable(rows, dedup=True) if rows else None


def frame(ip: int, sym: str, dso: str) -> tuple[str, ...]:
    """The folded frame names of one address perf script would print as `ip sym (dso)`."""
    return frame_names(f"\t{ip:x} {sym} ({dso})") or ()
