"""Wait for file descriptors to become readable, whatever their number.

select.select() refuses descriptors numbered 1024 or above (FD_SETSIZE): a long-running recorder, or a
process that embeds nodesleuth and has many files open, gets "filedescriptor out of range" and its
profiler or kernel-log follower dies. poll() has no such limit.
"""
from __future__ import annotations

import errno
import select


def readable(fds: list[int], timeout: float | None) -> set[int]:
    """The descriptors in `fds` that are readable (or at end of file / hung up) within `timeout` seconds
    (None: wait for ever)."""
    p = select.poll()
    for fd in fds:
        p.register(fd, select.POLLIN | select.POLLPRI)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    got = p.poll(ms)
    for fd, ev in got:
        if ev & select.POLLNVAL:  # as select() does: a closed descriptor is an error, not "readable"
            raise OSError(errno.EBADF, f"descriptor {fd} is not open")
    return {fd for fd, _ in got}
