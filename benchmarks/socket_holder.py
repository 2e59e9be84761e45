"""Hold N TCP sockets open in a network namespace, for benchmarks/socket_view.py.

usage: python -m benchmarks.socket_holder NETNS_PATH N READY_FILE [MAX_SECONDS]

N/2 loopback connections (a client and an accepted socket each) plus one listener per worker, spread
over worker processes of at most 9,000 connections (18,000 fds: the fd hard limit here is 20,000).
Enters the netns itself (setns), writes READY_FILE when every connection is up, then sleeps until
SIGTERM or MAX_SECONDS; the workers die with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time

PER_WORKER = 9000
libc = ctypes.CDLL(None, use_errno=True)


def worker(idx: int, conns: int, wfd: int, max_s: float) -> None:
    libc.prctl(1, 9, 0, 0, 0)
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 21000 + idx))
    ls.listen(4096)
    accepted, clients = [], []

    def acceptor():
        while len(accepted) < conns:
            c, _ = ls.accept()
            accepted.append(c)

    t = threading.Thread(target=acceptor, daemon=True)
    t.start()
    for _ in range(conns):
        c = socket.socket()
        c.connect(("127.0.0.1", 21000 + idx))
        clients.append(c)
    t.join(300)
    os.write(wfd, f"{len(clients)}:{len(accepted)}\n".encode())
    os.close(wfd)
    time.sleep(max_s)
    os._exit(0)


def main(argv: list[str]) -> int:
    netns, n, ready = argv[0], int(argv[1]), argv[2]
    max_s = float(argv[3]) if len(argv) > 3 else 900.0
    libc.prctl(1, 9, 0, 0, 0)
    fd = os.open(netns, os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:
        raise OSError(ctypes.get_errno(), f"setns {netns}")
    os.close(fd)
    lo = socket.socket()
    os.system("ip link set lo up")  # in this netns (the setns above)
    lo.close()
    r, w = os.pipe()
    pids, left, idx = [], max(1, n // 2), 0
    while left > 0:
        k = min(PER_WORKER, left)
        pid = os.fork()
        if pid == 0:
            os.close(r)
            worker(idx, k, w, max_s)
        pids.append(pid)
        left -= k
        idx += 1
    os.close(w)
    with os.fdopen(r) as rf:
        made = [line.strip() for line in rf]

    def stop(*_):
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in pids:
            try:
                os.waitpid(p, 0)
            except ChildProcessError:
                pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    with open(ready + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {' '.join(made)}\n")
    os.replace(ready + ".tmp", ready)
    time.sleep(max_s)
    stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
