"""A symbol table as perf keeps one (symbols__fixup_end, symbols__fixup_duplicate): sorted starts
and ends, of symbols at one address the one perf's choose_best_symbol keeps (with a size, not weak,
global, fewest leading `_`, longest name, first), names looked up only for the symbols a stack uses.
Kernel (profile/kallsyms.py), ELF (profile/elfsyms.py) and JIT (profile/perfmap.py) tables are all
this."""

from __future__ import annotations

import numpy as np

from .elf import STB_GLOBAL, STB_WEAK

PAGE = 4096


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
