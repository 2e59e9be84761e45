"""A bounded inet_diag (NETLINK_SOCK_DIAG) client for the per-connection view, standard library only.

Written for nodesleuth from the kernel's UAPI headers (include/uapi/linux/{inet_diag,sock_diag,netlink,
tcp}.h of Debian's linux-source 5.10/6.1/6.12/7.2), adapted from the reference client the issue-29
research wrote and measured in this project (its persocket/inetdiag.py): fixed offsets into tcp_info and
no object for a socket that is not kept, because pyroute2's DiagSocket decodes everything (about 30x
slower there) and `ss -p` resolves every socket's owner.

What one reply carries: `inet_diag_msg` (state, idiag_timer 1 = retransmit/loss-probe timer, idiag_retrans,
the 4-tuple, uid, inode, the socket cookie that identifies it across scans), `INET_DIAG_INFO` (struct
tcp_info; its first 104 bytes, up to tcpi_total_retrans, are the same on every kernel since 3.x) and,
where CONFIG_SOCK_CGROUP_DATA is set (Debian 5.10 on), `INET_DIAG_CGROUP_ID` (the socket's cgroup v2
id, sent unasked). A dump sees only the network namespace the netlink socket was created in: to scan a
pod's, the socket is made after setns() into /proc/PID/ns/net (CAP_SYS_ADMIN) and the thread returns.
No attribute names the owning process: `owners()` scans /proc/*/fd for the few inodes asked, and only in
processes of that netns.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import time
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO = 2
INET_DIAG_CGROUP_ID = 21
CLONE_NEWNET = 0x40000000

TCP_STATES = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2", 6: "TIME_WAIT",
              7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN", 11: "CLOSING", 12: "NEW_SYN_RECV"}
# `ss state connected`: every state but LISTEN, CLOSE, TIME_WAIT and SYN_RECV (request sockets)
CONNECTED = 0xFFF & ~((1 << 10) | (1 << 7) | (1 << 6) | (1 << 3))

_REQ = struct.Struct("=BBBBI" "HH16s16sI8s")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid
_NLH = struct.Struct("=IHHII")  # nlmsghdr
_HDR = struct.Struct("=IH")
_U32 = struct.Struct("=I")
_ATTR = struct.Struct("=HH")
_U64 = struct.Struct("=Q")
_UIDINO = struct.Struct("=II")
MSG = 72  # sizeof(struct inet_diag_msg)
# tcp_info offsets (bytes): u8 state, ca_state, retransmits, probes, backoff, ...; u32 rto at 8, lost 32,
# retrans 36, total_retrans 100
TI_RETRANSMITS, TI_BACKOFF, TI_RTO, TI_LOST, TI_RETRANS, TI_TOTAL = 2, 4, 8, 32, 36, 100

_libc = ctypes.CDLL(None, use_errno=True)
WALL_FACTOR = 4  # a time box in CPU seconds also ends after this many times as much wall time


def _over(cpu0: float, wall0: float, box: float) -> bool:
    return time.thread_time() - cpu0 > box or time.perf_counter() - wall0 > WALL_FACTOR * box


@dataclass(slots=True)
class Conn:
    """One TCP socket with retransmission evidence."""

    state: int
    timer: int  # idiag_timer: 1 retransmit/RTO/loss probe, 2 keepalive, 3 TIME_WAIT, 4 zero-window probe
    src: str
    dst: str
    inode: int
    uid: int
    cookie: int
    retransmits: int  # tcpi_retransmits: consecutive RTOs now (0 once an ACK came)
    backoff: int
    rto_us: int
    lost: int  # tcpi_lost: segments now presumed lost
    retrans: int  # tcpi_retrans: retransmitted segments in flight now
    total_retrans: int  # tcpi_total_retrans: over the connection's life, in segments
    cgroup_id: int | None


@dataclass
class Scan:
    walked: int  # sockets the kernel handed over
    truncated: str  # "" or why the scan stopped early (time box, socket cap)
    conns: list[Conn]
    wall_s: float
    cpu_s: float


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def diag_socket(netns: str | None = None) -> socket.socket:
    """A NETLINK_SOCK_DIAG socket of this thread's netns, or of `netns` (a /proc/PID/ns/net path): the
    thread enters it only to create the socket, and is back in its own before this returns."""
    def make() -> socket.socket:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        s.settimeout(2.0)  # the kernel always answers a dump; never hang a sampler if it does not
        return s

    if netns is None:
        return make()
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                return make()
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def _addr(family: int, raw: bytes, port: int) -> str:
    if family == socket.AF_INET:
        return f"{socket.inet_ntop(family, raw[:4])}:{port}"
    return f"[{socket.inet_ntop(family, raw)}]:{port}"


def scan(sock: socket.socket, families=(socket.AF_INET, socket.AF_INET6), states: int = CONNECTED,
         time_box: float = 0.25, max_sockets: int = 200_000, interesting=None) -> Scan:
    """Walk the TCP sockets of the netlink socket's netns and keep those with retransmission evidence
    (retransmit timer armed, consecutive RTOs, segments lost or retransmitted in flight, or retransmits
    over their life); `interesting(cookie, total_retrans)` may keep more. Stops after `time_box`
    seconds of this thread's CPU (or WALL_FACTOR times that of wall time) or `max_sockets` sockets
    (closing the socket drops the rest of the dump): say so in `truncated`. CPU, not wall time: on the
    starved node this runs on, a wall-clock box would cut the scan short for the waiting, not the work."""
    t0, c0, tc0 = time.perf_counter(), time.process_time(), time.thread_time()
    out: list[Conn] = []
    walked = 0
    truncated = ""
    seq = 0
    for fam in families:
        seq += 1
        req = _REQ.pack(fam, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, states, 0, 0, b"", b"", 0,
                        b"\xff" * 8)
        sock.send(_NLH.pack(_NLH.size + len(req), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + req)
        done = False
        while not done:
            if walked >= max_sockets or _over(tc0, t0, time_box):
                truncated = (f"stopped after {walked} sockets (cap {max_sockets})" if walked >= max_sockets
                             else f"stopped after {time_box * 1000:.0f} ms of CPU and {walked} sockets")
                return Scan(walked, truncated, out, time.perf_counter() - t0, time.process_time() - c0)
            data = sock.recv(1 << 20)
            off, n = 0, len(data)
            while off < n:
                ln, typ = _HDR.unpack_from(data, off)
                if typ == NLMSG_DONE:
                    done = True
                    break
                if typ == NLMSG_ERROR:
                    err = struct.unpack_from("=i", data, off + 16)[0]
                    if err == 0:
                        off += (ln + 3) & ~3
                        continue
                    raise OSError(-err, f"inet_diag dump: {os.strerror(-err)}")
                walked += 1
                m = off + 16
                timer, tretr = data[m + 2], data[m + 3]
                a, end = m + MSG, off + ln
                info = None
                cg = None
                while a + 4 <= end:
                    alen, atyp = _ATTR.unpack_from(data, a)
                    if alen < 4:
                        break
                    atyp &= 0x3FFF
                    if atyp == INET_DIAG_INFO and alen - 4 >= TI_TOTAL + 4:
                        info = a + 4
                    elif atyp == INET_DIAG_CGROUP_ID and alen >= 12:
                        cg = _U64.unpack_from(data, a + 4)[0]
                    a += (alen + 3) & ~3
                if info is not None:
                    total = _U32.unpack_from(data, info + TI_TOTAL)[0]
                    lost = _U32.unpack_from(data, info + TI_LOST)[0]
                    inflight = _U32.unpack_from(data, info + TI_RETRANS)[0]
                    rtx = data[info + TI_RETRANSMITS]
                else:
                    total = lost = inflight = rtx = 0
                cookie = int.from_bytes(data[m + 56:m + 64], "little")
                keep = total or timer == 1 or tretr or lost or inflight or rtx
                if not keep and interesting is not None:
                    keep = interesting(cookie, total)
                if keep:
                    f = data[m]
                    uid, ino = _UIDINO.unpack_from(data, m + 64)
                    out.append(Conn(data[m + 1], timer, _addr(f, data[m + 8:m + 24], int.from_bytes(data[m + 4:m + 6], "big")),
                                    _addr(f, data[m + 24:m + 40], int.from_bytes(data[m + 6:m + 8], "big")), ino, uid,
                                    cookie, rtx, data[info + TI_BACKOFF] if info else 0,
                                    _U32.unpack_from(data, info + TI_RTO)[0] if info else 0, lost, inflight, total, cg))
                off += (ln + 3) & ~3
    return Scan(walked, truncated, out, time.perf_counter() - t0, time.process_time() - c0)


def owners(inodes: set[int], proc: str = "/proc", netns: str | None = None, time_box: float = 0.2
           ) -> tuple[dict[int, list[tuple[int, str]]], str]:
    """socket inode -> [(pid, comm)] by reading /proc/*/fd links (what `ss -p` does for every socket),
    for these inodes only, and only in processes whose /proc/PID/ns/net is `netns` (its readlink
    "net:[N]", when given): a process of another netns cannot hold the socket... unless it was passed
    over a unix socket, which this misses. Stops after `time_box` s of CPU (as scan()): the second value
    says so."""
    want = {f"socket:[{i}]": i for i in inodes}
    out: dict[int, list[tuple[int, str]]] = {}
    if not want:
        return out, ""
    t0, tc0 = time.perf_counter(), time.thread_time()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return out, f"{proc}: not readable"
    for i, pid in enumerate(pids):
        if _over(tc0, t0, time_box):
            return out, f"owner scan stopped after {time_box * 1000:.0f} ms of CPU ({i} of {len(pids)} processes)"
        base = f"{proc}/{pid}"
        if netns is not None:
            try:
                if os.readlink(f"{base}/ns/net") != netns:
                    continue
            except OSError:
                continue
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:
            continue
        comm = None
        for fd in fds:
            try:
                ino = want.get(os.readlink(f"{base}/fd/{fd}"))
            except OSError:
                continue
            if ino is None:
                continue
            if comm is None:
                try:
                    with open(f"{base}/comm") as f:
                        comm = f.read().strip()
                except OSError:
                    comm = "?"
            lst = out.setdefault(ino, [])
            if not lst or lst[-1][0] != int(pid):
                lst.append((int(pid), comm))
        if len(out) == len(want):
            break
    return out, ""
