"""User-space addresses' symbols, per mapped file, as perf script (perf 6.1) names them.

The map of the address (MMAP2 records, or /proc/PID/maps for a process that existed before the
profiler), file offset = ip - start + pgoff; the symbol table of the first file with a .symtab among
the debug files perf looks at (profile/debuginfo.py) and the file itself, else its .dynsym
(profile/elfsyms.py). [vdso] is read from this process's own vdso (perf script does the same); a
deleted file or one that cannot be read names nothing. Tables are cached per build-id (the same
library in many containers is read once) and per file.
"""

from __future__ import annotations

import struct
import weakref
from collections import OrderedDict

from .debuginfo import symbol_file
from .demangle import Demangler, named
from .elf import Elf
from .elfsyms import load_table, plt_rows
from .symtable import SymTable


class FileSymbols:
    """One mapped file's symbols: lookup by file offset (ip - map start + pgoff)."""

    def __init__(self, table: SymTable | None, build_id: bytes | None):
        self.table = table
        self.build_id = build_id

    def lookup(self, off: int) -> str | None:
        if self.table is None:
            return None
        n = self.table.lookup(off)
        return None if n is None else named(n)

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
            syms = symbol_file(path, root, run, bid)
            try:
                table = load_table(syms or run, run, self.demangle)
                if table is not None:
                    plt = plt_rows(run, self.demangle)
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
                                    table = load_table(run, run, self.demangle)
                                finally:
                                    run.close()
                            break
            except (OSError, ValueError, struct.error):
                table = None
            self.vdso = FileSymbols(table, None)
        return self.vdso
