"""A mapped file's symbol table read as perf 6.1's dso__load_sym reads it: the chosen file's .symtab,
else the runtime file's .dynsym; FUNC/GNU_IFUNC/OBJECT symbols and NOTYPE labels in text sections;
symbols moved to file offsets by their program header; `name@plt` symbols synthesized from .rela.plt
as perf 6.1 does. Names are read (and demangled, profile/demangle.py) when a stack uses them, from the
string table held compressed (PackedStrings)."""

from __future__ import annotations

import struct
import threading

import numpy as np

from .elf import (EM_AARCH64, EM_ARM, SHF_ALLOC, SHN_ABS, SHN_LORESERVE, SHN_UNDEF, SHT_DYNSYM, SHT_NOBITS,
                  STB_GLOBAL, STB_LOCAL, STB_WEAK, STT_FUNC, STT_GNU_IFUNC, STT_NOTYPE, STT_OBJECT, STV_HIDDEN,
                  STV_INTERNAL, Elf, cstr)
from .symtable import SymTable


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
            nm = cstr(strs, int(syms["name"][i]))
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
            n = self.packed.cstr(off) if self.packed is not None else cstr(self.strs, off)
            n = self.cache[i] = self.demangle(n) if n.startswith("_Z") else n
        return n

    def raw_name(self, ix: list[int]) -> list[str]:
        raw = [cstr(self.strs, int(self.name_off[i])) for i in ix]
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


def load_table(syms_elf: Elf, run_elf: Elf, demangle) -> SymTable | None:
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


def plt_rows(run: Elf, demangle) -> list[tuple]:
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
        name = cstr(strs, int(syms["name"][symidx])) if symidx < len(syms) else ""
        rows.append((off, off + ent, STB_GLOBAL, demangle.lazy_plt(name)))
        off += ent
    return rows
