"""Re-reading the same kernel files every second without opening them every second.

procfs and sysfs regenerate a file's content on every read from offset 0, so a file opened once and
read with pread(fd, n, 0) each tick gives the same bytes as open+read+close for a fraction of the
cost (benchmarks/results/summary.md, design measurements). A fixture tree's
files may be replaced (os.replace) between reads: under a root other than "/" each read checks the
open file's link count and re-opens a replaced (unlinked) file. Errors are the caller's: OSError as from open().
"""

from __future__ import annotations

import os
from ..model.errors import InputError


class Preader:
    """Keeps one fd per path; `read(path)` returns the whole current content as bytes."""

    def __init__(self, live: bool = True, bufsize: int = 65536):
        self.live = live
        self.bufsize = bufsize
        self.fds: dict[str, int] = {}  # path -> fd
        self.sizes: dict[str, int] = {}  # path -> buffer that held it last time

    def _open(self, path: str) -> int:
        fd = os.open(path, os.O_RDONLY)
        self.fds[path] = fd
        return fd

    def read(self, path: str, one_record: bool = False) -> bytes:
        """`one_record`: the kernel makes the whole file in one go (single_open procfs files such as
        meminfo, softirqs, uptime, PID/schedstat, pressure/*, and sysfs attributes), so a read that
        does not fill the buffer is all of it and the read at EOF is skipped."""
        fd = self.fds.get(path)
        if fd is None:
            fd = self._open(path)
        elif not self.live and os.fstat(fd).st_nlink == 0:  # replaced by a rename over it
            self.drop(path)
            fd = self._open(path)
        n = self.sizes.get(path, self.bufsize)
        try:
            data = os.pread(fd, n, 0)
            if not data or (one_record and len(data) < n):
                return data
            # a seq_file hands out about a page of records per read (/proc/interrupts): read on to EOF
            parts = [data]
            off = len(data)
            while True:
                more = os.pread(fd, n, off)
                if not more:
                    break
                parts.append(more)
                off += len(more)
            if len(parts) > 1:
                data = b"".join(parts)
                self.sizes[path] = max(n, len(data) + 4096)
            return data
        except OSError:
            self.drop(path)  # e.g. ESRCH: the task is gone; ENODEV: the device went away
            raise

    def read_opt(self, path: str, one_record: bool = False) -> bytes | None:
        """None when the file does not exist (or stopped existing)."""
        try:
            return self.read(path, one_record)
        except FileNotFoundError:
            return None

    def drop(self, path: str) -> None:
        fd = self.fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        for path in list(self.fds):
            self.drop(path)


def read_text(reader: Preader, root, abspath: str, one_record: bool = True) -> str:
    """`root.read(abspath)` through `reader`: the file stays open between ticks; an OS error is a
    one-line InputError naming the file, as from Root.read."""
    p = root.join(abspath)
    try:
        data = reader.read(p, one_record)
    except OSError as e:
        raise InputError(p, e.strerror or str(e)) from None
    return data.decode(errors="replace")


