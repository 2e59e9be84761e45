"""Waiting: for file descriptors to become readable, whatever their number; for a signal, whichever
thread the kernel hands it to.

select.select() refuses descriptors numbered 1024 or above (FD_SETSIZE): a long-running recorder, or a
process that embeds nodesleuth and has many files open, gets "filedescriptor out of range" and its
profiler or kernel-log follower dies. poll() has no such limit.
"""
from __future__ import annotations

import errno
import os
import select
import signal
import threading
from typing import Callable


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


def serve_until_signalled(serve: Callable[[], None], name: str = "nodesleuth-serve") -> None:
    """Run `serve` (a loop that sleeps long in select: an HTTP server) on a daemon thread while the main
    thread waits for a signal or for `serve` to end (its exception raised here).

    The kernel may deliver a process-directed signal (SIGTERM from the kubelet, podman, systemd) to any
    thread, and Python runs the handler on the main thread only, once that thread runs again: asleep in
    the server's 60 s select it did not, and the exporter answered SIGTERM with nothing until the SIGKILL
    at 20 s (exit 137: CI; reproduced by sending SIGTERM to one of its other threads). The wakeup fd, which
    the C-level handler writes in whichever thread took the signal, wakes the main thread at once.
    Off the main thread (set_wakeup_fd is refused there), `serve` just runs."""
    if threading.current_thread() is not threading.main_thread():
        serve()
        return
    rfd, wfd = os.pipe()
    for fd in (rfd, wfd):
        os.set_blocking(fd, False)
    old = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    failed: list[BaseException] = []
    ended = threading.Event()

    def run() -> None:
        try:
            serve()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            failed.append(e)
        finally:
            ended.set()  # before the wake: the main thread must see it when it wakes
            os.write(wfd, b"\0")

    try:
        threading.Thread(target=run, name=name, daemon=True).start()
        while not ended.is_set():
            readable([rfd], None)  # a pending handler runs as soon as this returns (SystemExit from SIGTERM)
            try:
                os.read(rfd, 512)
            except BlockingIOError:
                pass
        if failed:
            raise failed[0]
    finally:
        signal.set_wakeup_fd(old)
        os.close(rfd)
        os.close(wfd)
