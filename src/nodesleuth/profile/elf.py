"""The parts of an ELF file symbol tables need (profile/elfsyms.py): its program and section
headers, notes (the GNU build-id), .gnu_debuglink and raw symbol tables, read with pread."""

from __future__ import annotations

import os
import struct

import numpy as np

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


def cstr(strs: bytes, at: int) -> str:
    end = strs.find(b"\0", at)
    return strs[at:end if end >= 0 else len(strs)].decode(errors="replace")
