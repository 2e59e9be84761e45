"""TCP health per second (section `tcp`), and the connections behind a spike (section `sockets`).

The counters (/proc/net/snmp `Tcp:`, /proc/net/netstat `TcpExt:`) are per network namespace: a pod
without host networking has its own, and its retransmits never reach the host's. So `TcpReader` reads
the host's netns every tick and every other netns through one process in it (/proc/PID/net/*, one PID
per distinct /proc/*/ns/net inode, enumerated every ENUM_EVERY ticks): at most MAX_NETNS_PER_TICK a
tick, the longest unread first (a netns whose trouble counters moved at its last read counts its wait
double), so the cost a tick is bounded whatever the number of pods. Through a host root (`--root
/host`, Root.kind "host") the host's netns is ROOT/proc/1/net (ROOT/proc/net is this container's own:
/proc/net is /proc/self/net). A pod's files are opened and closed at each read: an fd held open would
keep a deleted pod's netns alive.

`SocketView` runs only when TcpReader saw a spike in a netns (a counter per second above both a floor
and SPIKE times its own minute-long average): it scans that netns's sockets over inet_diag
(collect/inetdiag.py), at most once per netns every MIN_GAP seconds and MAX_SCANS_PER_TICK a tick (the
worst-hit netns first), each scan stopped after TIME_BOX seconds or MAX_SOCKETS sockets, and resolves
the owner of the KEEP worst connections only (a /proc/*/fd scan limited to that netns's processes and
OWNER_TIME_BOX). Never a scan every second: a walk costs about what `ss -tinOH` does, proportional to
the sockets (benchmarks/socket_view.py; figures in benchmarks/results/summary.md).
"""

from __future__ import annotations

import os
import time
import weakref

from ..model.errors import InputError
from ..model.procfs import parse_netstat
from ..model.records import TCP_COUNTERS, TCP_NETSTAT, TCP_SNMP, Sockets, Tcp
from ..node.pread import Preader, read_text
from ..node.root import HOST, LIVE, Root
from . import inetdiag
from .registry import Collector, collector

MAX_NETNS_PER_TICK = 32  # other network namespaces read a tick (0.14 ms each); the rest wait their turn
ENUM_EVERY = 10  # ticks between enumerations of /proc/*/ns/net
MAX_LABELLED = 64  # namespaces with their own `netns` label in /metrics; the others are summed as "other"
# a spike: per second >= the floor and >= SPIKE x the netns's own average over about a minute
SPIKE = 3.0
FLOORS = {"Tcp_RetransSegs": 10.0, "TcpExt_TCPTimeouts": 1.0, "TcpExt_TCPAbortOnTimeout": 1.0,
          "Tcp_EstabResets": 5.0}
AVERAGE_S = 60.0
MIN_GAP = 10.0  # s between two scans of one netns
MAX_SCANS_PER_TICK = 1  # worst case a tick: TIME_BOX + OWNER_TIME_BOX of CPU
TIME_BOX = 0.25  # s of CPU a scan may walk sockets (collect/inetdiag.py: CPU, not wall time)
MAX_SOCKETS = 200_000
KEEP = 20  # connections kept per scan, worst first
OWNER_TIME_BOX = 0.2  # s of CPU the owner lookup may take
PREV_MAX = 50_000  # cookies remembered per netns for the next scan's per-connection deltas

# TcpReader -> SocketView of the same sampler (both get its Preader): the netns that spiked this tick
_SPIKES: "weakref.WeakKeyDictionary[Preader, list]" = weakref.WeakKeyDictionary()


class _Ns:
    __slots__ = ("ino", "pid", "comm", "cgroup", "prev", "t", "hot", "avg", "label", "total")

    def __init__(self, ino: int, pid: int, comm: str, cgroup: str):
        self.ino, self.pid, self.comm, self.cgroup = ino, pid, comm, cgroup
        self.prev: dict | None = None  # the kernel's counters at the last read
        self.t = 0.0  # when
        self.hot = False  # a trouble counter (not OutSegs) moved at the last read: its wait counts double
        self.avg: dict[str, float] = {}  # per-second average over about AVERAGE_S, for the spike rule
        self.label = ""  # its `netns` label in /metrics ("" for the host's, "other" past MAX_LABELLED)
        self.total: dict = {}


def _ino(link: str) -> int | None:
    """'net:[4026531840]' -> 4026531840."""
    if link.startswith("net:[") and link.endswith("]"):
        return int(link[5:-1])
    return None


def spikes(ns: _Ns, d: dict, secs: float) -> list[str]:
    """The counters of this read that spiked (see the module's rule), updating the netns's averages;
    the worst first (by how many times its floor the rate is)."""
    out = []
    w = min(1.0, secs / AVERAGE_S)
    for k, floor in FLOORS.items():
        if k not in d:
            continue
        rate = d[k] / max(secs, 1e-3)
        avg = ns.avg.get(k, 0.0)
        if rate >= floor and rate >= SPIKE * avg:
            out.append((rate / floor, f"{k} {rate:.0f}/s (average {avg:.1f}/s)"))
        ns.avg[k] = avg + w * (rate - avg)
    return [why for _, why in sorted(out, reverse=True)]


def severity(why: list[str]) -> float:
    """How many times its floor the worst counter of a spike was (from spikes()' own text)."""
    k, rate = why[0].split()[0], float(why[0].split()[1].split("/")[0])
    return rate / FLOORS[k]


@collector("tcp")
class TcpReader(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader
        self.kind = root.kind
        self.host = _Ns(0, 1, "(host)", "")
        self.host.label = ""
        self.ns: dict[int, _Ns] = {}
        self.n = 0
        self.init_ino = self._init_ino()
        # the host's netns: ours on "/" (unless PID 1 is visibly elsewhere), PID 1's through a mount
        self.init_dir = "/proc/net"
        if self.kind == HOST or (self.kind == LIVE and self.init_ino is not None
                                 and self.init_ino != self._own_ino()):
            self.init_dir = "/proc/1/net"
        self.other: dict[str, int] = {}  # summed deltas of namespaces past MAX_LABELLED
        self.last_read = 0

    @staticmethod
    def _own_ino() -> int | None:
        try:
            return _ino(os.readlink("/proc/thread-self/ns/net"))
        except OSError:
            return None

    def _init_ino(self) -> int | None:
        """The host's netns inode: PID 1's through the root; when that link cannot be read (this sandbox's
        PID 1 refuses even root) and the root is our own `/`, ours. None on a recorded tree."""
        if self.kind not in (LIVE, HOST):
            return None
        try:
            return _ino(os.readlink(self.root.ns(1, "net")))
        except OSError:
            return self._own_ino() if self.kind == LIVE else None

    def _counters(self, base: str, keep_open: bool) -> dict:
        out: dict[str, int] = {}
        for name, keys in (("snmp", TCP_SNMP), ("netstat", TCP_NETSTAT)):
            if keep_open:
                text = read_text(self.reader, self.root, f"{base}/{name}", one_record=False)
            else:
                text = self.root.read(f"{base}/{name}")
            out.update(parse_netstat(text, self.root.join(f"{base}/{name}"), set(keys)))
        return out

    def enumerate(self) -> None:
        """One process per network namespace other than the host's, from /proc/*/ns/net (a recorded tree
        has none; namespaces whose processes are all gone are forgotten)."""
        if self.init_ino is None:
            return
        proc = self.root.join("/proc")
        try:
            pids = sorted((int(p) for p in os.listdir(proc) if p.isdigit()))
        except OSError:
            return
        seen: dict[int, int] = {}
        for pid in pids:
            try:
                ino = _ino(os.readlink(f"{proc}/{pid}/ns/net"))
            except OSError:
                continue  # gone, or a kernel thread / a process we may not look into
            if ino is not None and ino != self.init_ino and ino not in seen:
                seen[ino] = pid
        for ino in [i for i in self.ns if i not in seen]:
            del self.ns[ino]
        for ino, pid in seen.items():
            cur = self.ns.get(ino)
            if cur is None or cur.pid != pid:
                try:
                    comm = (self.root.read_opt(f"/proc/{pid}/comm") or "?").strip()
                except InputError:
                    comm = "?"
                self.ns[ino] = ns = _Ns(ino, pid, comm, _cgroup(self.root, pid))
                if cur is not None:
                    ns.prev, ns.t, ns.avg, ns.label, ns.total = cur.prev, cur.t, cur.avg, cur.label, cur.total
                elif sum(1 for n in self.ns.values() if n.label not in ("", "other")) < MAX_LABELLED:
                    ns.label = str(ino)  # a label a gone pod freed is taken again
                else:
                    ns.label = "other"

    def prime(self) -> None:
        self.host.prev = self._counters(self.init_dir, True)
        self.host.t = time.time()
        self.host.total = self.host.prev
        self.enumerate()
        self._read_some(time.time(), first=True)

    def _pick(self, now: float) -> list[_Ns]:
        """At most MAX_NETNS_PER_TICK, never-read first, then by how long since their last read, a
        namespace whose counters moved at its last read (hot) counting that time double: a spiking pod
        is read about twice as often as a quiet one, and every one comes round."""
        def wait(n: _Ns) -> float:
            return float("inf") if n.prev is None else (now - n.t) * (2.0 if n.hot else 1.0)

        return sorted(self.ns.values(), key=lambda n: (-wait(n), n.ino))[:MAX_NETNS_PER_TICK]

    def _read_some(self, now: float, first: bool = False) -> tuple[list[dict], list]:
        moved, spiked = [], []
        self.last_read = 0
        for ns in self._pick(now):
            base = f"/proc/{ns.pid}/net"
            try:
                if _ino(os.readlink(self.root.ns(ns.pid, "net"))) != ns.ino:
                    raise InputError(base, "the process left the namespace")
                cur = self._counters(base, False)
            except (InputError, OSError):
                del self.ns[ns.ino]  # gone: the next enumeration finds another process if the netns lives
                continue
            self.last_read += 1
            prev, secs = ns.prev, now - ns.t
            ns.prev, ns.t = cur, now
            if ns.label == "other" and prev is not None:
                for k, v in cur.items():
                    self.other[k] = self.other.get(k, 0) + max(0, v - prev.get(k, v))
            ns.total = cur
            if prev is None:
                ns.hot = False
                continue
            d = {k: max(0, v - prev[k]) for k, v in cur.items() if k in prev}
            ns.hot = any(v for k, v in d.items() if k != "Tcp_OutSegs")  # trouble, not just traffic
            if any(d.values()):
                moved.append({"ns": ns.ino, "pid": ns.pid, "comm": ns.comm, "cgroup": ns.cgroup,
                              "s": round(secs, 3), "d": {k: v for k, v in d.items() if v}})
            why = spikes(ns, d, secs)
            if why:
                spiked.append((ns.ino, ns.pid, why))
        return moved, spiked

    def read(self, interval: float, seen=None) -> Tcp | None:
        now = time.time()
        self.n += 1
        cur = self._counters(self.init_dir, True)
        prev, secs = self.host.prev, now - self.host.t
        self.host.prev, self.host.t, self.host.total = cur, now, cur
        if self.n % ENUM_EVERY == 0:
            self.enumerate()
        moved, spiked = self._read_some(now)
        init = None
        if prev is not None:
            init = {k: max(0, v - prev[k]) for k, v in cur.items() if k in prev}
            why = spikes(self.host, init, secs)
            if why:
                spiked.insert(0, (0, 1, why))
        if spiked:  # the worst-hit netns first: SocketView scans MAX_SCANS_PER_TICK of them a tick
            _SPIKES[self.reader] = sorted(spiked, key=lambda x: -severity(x[2]))
        totals = {"": dict(cur)}
        for ns in self.ns.values():
            if ns.label and ns.label != "other" and ns.total:
                totals[ns.label] = dict(ns.total)
        if self.other:
            totals["other"] = dict(self.other)
        missing = sorted(k for k in TCP_COUNTERS if k not in cur)
        return Tcp(init, moved, len(self.ns), self.last_read, missing, totals)

    def close(self) -> None:
        _SPIKES.pop(self.reader, None)


def _cgroup(root: Root, pid: int) -> str:
    """The process's cgroup (v2 path, else the memory controller's): a pod's netns is named by it."""
    text = root.read_opt(f"/proc/{pid}/cgroup") or ""
    v1 = ""
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hier == "0" and ctrls == "" and path not in ("", "/"):
            return path
        if "memory" in ctrls.split(","):
            v1 = path
    return v1


@collector("sockets", uses=("check", "record"))
class SocketView(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader
        self.last: dict[int, float] = {}  # netns -> when last scanned
        self.prev: dict[int, dict[int, int]] = {}  # netns -> cookie -> total_retrans at its last scan
        self.scans = 0
        self.cpu_s = 0.0

    def prime(self) -> None:
        _SPIKES.pop(self.reader, None)

    def _netns_path(self, ino: int, pid: int) -> str | None:
        """The netns file to scan from; None: this thread's own (the host's on `/`)."""
        if ino == 0 and self.root.kind == LIVE and self.root.same_ns("net"):
            return None
        return self.root.ns(pid, "net")

    def scan(self, ino: int, pid: int, why: list[str]) -> dict:
        path = self._netns_path(ino, pid)
        c0 = time.process_time()
        try:
            sock = inetdiag.diag_socket(path)
        except OSError as e:
            raise InputError(path or "/proc/self/ns/net", f"setns/inet_diag: {e.strerror or e}") from None
        prev = self.prev.get(ino, {})
        try:
            sc = inetdiag.scan(sock, time_box=TIME_BOX, max_sockets=MAX_SOCKETS,
                               interesting=lambda cookie, total: total != prev.get(cookie, total))
        except OSError as e:
            raise InputError(path or "/proc/self/ns/net", f"inet_diag: {e.strerror or e}") from None
        finally:
            sock.close()
        now = {c.cookie: c.total_retrans for c in sc.conns}
        self.prev[ino] = dict(list(now.items())[:PREV_MAX])

        def delta(c):
            return c.total_retrans - prev[c.cookie] if c.cookie in prev else None

        ranked = sorted(sc.conns, key=lambda c: (-(delta(c) if delta(c) is not None else c.total_retrans),
                                                 -c.retransmits, -c.lost))
        worst = [c for c in ranked if (delta(c) or 0) > 0 or c.retransmits or c.timer == 1 or c.lost or c.retrans
                 or (delta(c) is None and c.total_retrans)][:KEEP]
        netns_link = None
        if path is not None:
            try:
                netns_link = os.readlink(path)
            except OSError:
                netns_link = None
        elif self.root.kind == LIVE:
            netns_link = os.readlink("/proc/thread-self/ns/net")
        who, note = inetdiag.owners({c.inode for c in worst if c.inode}, self.root.join("/proc"), netns_link,
                                    OWNER_TIME_BOX)
        conns = []
        for c in worst:
            o = who.get(c.inode, [])
            conns.append({"src": c.src, "dst": c.dst, "state": inetdiag.TCP_STATES.get(c.state, str(c.state)),
                          "retrans_total": c.total_retrans, "retrans_delta": delta(c), "retransmits": c.retransmits,
                          "backoff": c.backoff, "lost": c.lost, "in_flight_retrans": c.retrans,
                          "rto_ms": round(c.rto_us / 1000, 1), "timer": c.timer, "cgroup_id": c.cgroup_id,
                          "inode": c.inode, "uid": c.uid, "cookie": c.cookie,
                          "pid": o[0][0] if o else None, "comm": o[0][1] if o else None,
                          "pids": [p for p, _ in o][:8]})
        cpu = time.process_time() - c0
        self.scans += 1
        self.cpu_s += cpu
        return {"ns": ino, "pid": pid, "why": why, "walked": sc.walked, "kept": len(sc.conns),
                "truncated": "; ".join(x for x in (sc.truncated, note) if x), "ms": round(sc.wall_s * 1000, 2),
                "cpu_ms": round(cpu * 1000, 2), "conns": conns}

    def read(self, interval: float, seen=None) -> Sockets | None:
        todo = _SPIKES.pop(self.reader, None)
        if not todo or not self.root.live:
            return None
        now = time.monotonic()
        scans = []
        for ino, pid, why in todo:
            if len(scans) >= MAX_SCANS_PER_TICK:
                break
            if now - self.last.get(ino, -1e18) < MIN_GAP:
                continue
            self.last[ino] = now
            scans.append(self.scan(ino, pid, why))
        if not scans:
            return None
        return Sockets(scans, {"scans": self.scans, "cpu_s": self.cpu_s})

    def close(self) -> None:
        _SPIKES.pop(self.reader, None)
