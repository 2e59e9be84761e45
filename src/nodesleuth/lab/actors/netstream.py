"""The network victims of the lab: TCP streams like a pod's traffic, and a UDP flood, each run inside a
network namespace (it enters /run/netns/NAME itself, so its pid is the one the kernel charges).

usage: python -m nodesleuth.lab.actors.netstream MODE NETNS CPU STATUS [args]
  sink HOST PORT                 accept connections, read everything; per second: bytes per stream and
                                 the longest gap between two reads (a stall the application sees)
  send HOST PORT STREAMS MBIT S  STREAMS connections, each paced to MBIT Mbit/s by the kernel
                                 (SO_MAX_PACING_RATE), for S seconds (0: until killed); per second: bytes,
                                 and the sender's own tcpi_total_retrans / tcpi_retransmits (TCP_INFO)
  flood HOST PORT PPS S          64-byte UDP datagrams to a port that is bound but never read, at PPS per
                                 second (0: as fast as it can) for S seconds
  echo-pid                       write {"pid": PID} to STATUS and sleep (a process that holds the netns)

CPU -1: not pinned. STATUS is rewritten every second (JSON, atomically).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import socket
import struct
import sys
import time

SO_MAX_PACING_RATE = 47
TCP_INFO = 11
CLONE_NEWNET = 0x40000000


def _enter(netns: str, cpu: int, name: bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: dies with the lab
    libc.prctl(15, name, 0, 0, 0)
    if netns != "-":
        fd = os.open(netns, os.O_RDONLY)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
        os.close(fd)
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def _status(path: str, doc: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".tmp", path)


def sink(host: str, port: int, status: str) -> None:
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a UDP port that is bound and never read:
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a flood there is dropped at the socket
    hole.bind((host, port))
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(64)
    ls.setblocking(False)
    conns: dict[int, dict] = {}
    poll = select.epoll()
    poll.register(ls.fileno(), select.EPOLLIN)
    socks = {}
    sec = int(time.time())
    per: list[dict] = []
    _status(status, {"pid": os.getpid(), "listening": True, "seconds": []})
    while True:
        for fd, _ in poll.poll(0.05):
            if fd == ls.fileno():
                while True:
                    try:
                        c, addr = ls.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    poll.register(c.fileno(), select.EPOLLIN)
                    socks[c.fileno()] = c
                    conns[c.fileno()] = {"peer": f"{addr[0]}:{addr[1]}", "bytes": 0, "last": time.monotonic(),
                                         "gap": 0.0, "sec_bytes": 0}
                continue
            c, st = socks.get(fd), conns.get(fd)
            if c is None:
                continue
            try:
                while True:
                    b = c.recv(1 << 18)
                    if not b:
                        raise ConnectionResetError("closed")
                    now = time.monotonic()
                    st["gap"] = max(st["gap"], now - st["last"])
                    st["last"] = now
                    st["bytes"] += len(b)
                    st["sec_bytes"] += len(b)
            except BlockingIOError:
                pass
            except OSError:
                poll.unregister(fd)
                c.close()
                del socks[fd]
                st["closed"] = True
        now = int(time.time())
        if now != sec:
            mono = time.monotonic()
            row = {"t": sec, "streams": [{"peer": s["peer"], "bytes": s["sec_bytes"],
                                          "gap_ms": round(1000 * max(s["gap"], 0 if s.get("closed") else mono - s["last"]), 1)}
                                         for s in conns.values() if not s.get("reported_closed")]}
            for s in conns.values():
                s["sec_bytes"], s["gap"] = 0, 0.0
                if s.get("closed"):
                    s["reported_closed"] = True
            per = (per + [row])[-600:]
            _status(status, {"pid": os.getpid(), "listening": True, "seconds": per})
            sec = now


def send(host: str, port: int, streams: int, mbit: float, seconds: float, status: str) -> None:
    socks = []
    for _ in range(streams):
        s = socket.create_connection((host, port), timeout=10)
        if mbit > 0:
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(mbit * 1e6 / 8))
        s.setblocking(False)
        socks.append(s)
    names = [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in socks]
    buf = b"\0" * (1 << 16)
    sent = [0] * streams
    until = time.time() + seconds if seconds > 0 else None
    sec = int(time.time())
    per: list[dict] = []
    poll = select.epoll()
    for s in socks:
        poll.register(s.fileno(), select.EPOLLOUT)
    byfd = {s.fileno(): i for i, s in enumerate(socks)}
    errors: dict[int, str] = {}

    def info(s) -> tuple[int, int]:
        raw = s.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)
        return struct.unpack_from("=I", raw, 100)[0], raw[2]  # tcpi_total_retrans, tcpi_retransmits

    _status(status, {"pid": os.getpid(), "streams": names, "seconds": []})
    while until is None or time.time() < until:
        for fd, _ in poll.poll(0.05):
            i = byfd[fd]
            try:
                n = socks[i].send(buf)
                sent[i] += n
            except BlockingIOError:
                pass
            except OSError as e:
                errors[i] = os.strerror(e.errno or 0)
                poll.unregister(fd)
        now = int(time.time())
        if now != sec:
            rows = []
            for i, s in enumerate(socks):
                try:
                    total, cur = info(s)
                except OSError:
                    total, cur = None, None
                rows.append({"src": names[i], "bytes": sent[i], "total_retrans": total, "retransmits": cur,
                             "error": errors.get(i)})
            per = (per + [{"t": sec, "streams": rows}])[-600:]
            _status(status, {"pid": os.getpid(), "streams": names, "seconds": per})
            sec = now
    for s in socks:
        s.close()


def flood(host: str, port: int, pps: float, seconds: float, status: str) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"\0" * 64
    dst = (host, port)
    sent, t0 = 0, time.monotonic()
    until = t0 + seconds if seconds > 0 else None
    _status(status, {"pid": os.getpid(), "sent": 0})
    last = t0
    while until is None or time.monotonic() < until:
        if pps > 0:
            due = int((time.monotonic() - t0) * pps) - sent
            if due <= 0:
                time.sleep(0.0005)
                continue
        else:
            due = 256
        for _ in range(min(due, 256)):
            try:
                s.sendto(payload, dst)
                sent += 1
            except OSError:
                break
        if time.monotonic() - last >= 1:
            last = time.monotonic()
            _status(status, {"pid": os.getpid(), "sent": sent})
    _status(status, {"pid": os.getpid(), "sent": sent, "done": True})


def main(argv: list[str]) -> int:
    mode, netns, cpu, status = argv[0], argv[1], int(argv[2]), argv[3]
    rest = argv[4:]
    _enter(netns, cpu, {"sink": b"ns-tcp-sink", "send": b"ns-tcp-send", "flood": b"ns-udp-flood"}.get(mode, b"ns-holder"))
    if mode == "sink":
        sink(rest[0], int(rest[1]), status)
    elif mode == "send":
        send(rest[0], int(rest[1]), int(rest[2]), float(rest[3]), float(rest[4]), status)
    elif mode == "flood":
        flood(rest[0], int(rest[1]), float(rest[2]), float(rest[3]), status)
    elif mode == "echo-pid":
        _status(status, {"pid": os.getpid()})
        while True:
            time.sleep(3600)
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
