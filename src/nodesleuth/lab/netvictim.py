"""The lab's network victims: what a hot core does to real connections, measured, not assumed.

Two network namespaces joined by a veth pair stand for two pods on the node. Their receive processing
is steered to one CPU (RPS on both veths' rx queue, the way a NIC queue's IRQ affinity puts its NAPI
poll on one core), so every packet of the streams is processed (NET_RX softirq: netif_receive_skb ->
ip_rcv -> tcp_v4_rcv) on that CPU, the hot one. The senders and the reader run on another CPU, as
pods elsewhere on the node. Measured, per phase (before the hot core and during it):

* /proc/net/softnet_stat on the steered CPU: time_squeeze, dropped, processed (the file is global);
* the TCP counters of the sender's netns (RetransSegs, TCPTimeouts, ...: per netns, the host's stay 0);
* the senders' own tcpi_total_retrans (TCP_INFO), bytes per second per stream, and the longest gap
  between two reads the receiver saw (a stall the application feels).

veth is not a NAPI device: its packets go through the per-CPU backlog (netif_rx -> enqueue_to_backlog
on the RPS CPU), whose `dropped` counts a full backlog (net.core.netdev_max_backlog). A real NIC's
NAPI poll is squeezed the same way, but drops in its own ring (ethtool rx_missed/no_buffer).
Every setting is undone by close(): the namespaces (and the veths in them) deleted, the sysctls this
changed restored, the processes killed (they also die with the lab: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from ..model.procfs import parse_netstat, parse_softnet
from ..model.records import TCP_COUNTERS
from ..node.children import run as run_child, spawn

NETNS_DIR = "/run/netns"


class NetLabError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = run_child(["ip", *args], timeout=30)
    if check and p.returncode != 0:
        raise NetLabError(f"ip {' '.join(args)}: {p.stderr.strip()[-200:]}")
    return p


def softnet() -> dict[int, dict]:
    with open("/proc/net/softnet_stat") as f:
        text = f.read()
    online = None
    if len(text.split("\n", 1)[0].split()) < 13:
        from ..model.procfs import parse_cpu_list

        with open("/sys/devices/system/cpu/online") as f:
            online = parse_cpu_list(f.read(), "/sys/devices/system/cpu/online")
    return parse_softnet(text, online)


def netns_counters(pid: int) -> dict[str, int]:
    """Every Tcp/TcpExt/Udp counter of the netns `pid` is in (its /proc/PID/net files)."""
    out: dict[str, int] = {}
    for name in ("snmp", "netstat"):
        with open(f"/proc/{pid}/net/{name}") as f:
            out.update(parse_netstat(f.read(), f"/proc/{pid}/net/{name}"))
    return out


class NetLab:
    """Context manager: `with NetLab() as n: n.rps(1); s = n.streams(...)`."""

    def __init__(self, tag: str = "nsl", workdir: str | None = None):
        u = os.getpid() % 100000
        self.snd, self.rcv = f"{tag}-snd-{u}", f"{tag}-rcv-{u}"
        self.if_snd, self.if_rcv = f"{tag}s{u}"[:15], f"{tag}r{u}"[:15]
        k = os.getpid() % 250 + 1
        self.a, self.b = f"10.231.{k}.1", f"10.231.{k}.2"
        self.dir = workdir or tempfile.mkdtemp(prefix="nodesleuth-netlab-")
        self.own_dir = workdir is None
        self.procs: list[subprocess.Popen] = []
        self.saved: dict[str, str] = {}  # sysctl path -> value before
        self.holders: dict[str, int] = {}  # netns -> pid of a process that sits in it
        self.up = False

    # --- setup and teardown ----------------------------------------------------------------------

    def __enter__(self) -> "NetLab":
        self.setup()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def setup(self) -> None:
        if os.geteuid() != 0:
            raise NetLabError("the network victims need root (network namespaces, RPS, sysctls)")
        if not shutil.which("ip"):
            raise NetLabError("no `ip` (iproute2)")
        try:
            _ip("netns", "add", self.snd)
            _ip("netns", "add", self.rcv)
            self.up = True
            _ip("link", "add", self.if_snd, "netns", self.snd, "type", "veth", "peer", "name", self.if_rcv,
                "netns", self.rcv)
            for ns, ifname, addr in ((self.snd, self.if_snd, self.a), (self.rcv, self.if_rcv, self.b)):
                _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", ifname)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", ifname, "up")
            for ns in (self.snd, self.rcv):  # a process in each: how nodesleuth (and a reader here) finds the netns
                p, st = self.actor("echo-pid", ns, -1)
                self.holders[ns] = self.wait_status(st)["pid"]
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        for path, value in self.saved.items():
            try:
                with open(path, "w") as f:
                    f.write(value)
            except OSError:
                pass
        self.saved.clear()
        if self.up:
            for ns in (self.snd, self.rcv):
                _ip("netns", "del", ns, check=False)
            self.up = False
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def left(self) -> list[str]:
        """Namespaces of this lab still present (a test asserts none after close)."""
        try:
            return [n for n in os.listdir(NETNS_DIR) if n in (self.snd, self.rcv)]
        except OSError:
            return []

    # --- settings ----------------------------------------------------------------------------------

    def sysctl(self, name: str, value: int | str) -> None:
        """Set a global sysctl (net.core.*), keeping the value to restore at close()."""
        path = "/proc/sys/" + name.replace(".", "/")
        with open(path) as f:
            old = f.read().strip()
        self.saved.setdefault(path, old)
        with open(path, "w") as f:
            f.write(str(value))

    def rps(self, cpu: int) -> None:
        """Both veths' receive processing to `cpu` (RPS on rx-0, written through the netns's own /sys)."""
        mask = format(1 << cpu, "x")
        for ns, ifname in ((self.rcv, self.if_rcv), (self.snd, self.if_snd)):
            p = run_child(["ip", "netns", "exec", ns, "sh", "-c",
                           f"echo {mask} > /sys/class/net/{ifname}/queues/rx-0/rps_cpus && "
                           f"cat /sys/class/net/{ifname}/queues/rx-0/rps_cpus"], timeout=30)
            if p.returncode != 0 or int(p.stdout.strip().replace(",", ""), 16) != 1 << cpu:
                raise NetLabError(f"RPS on {ifname}: {p.stderr.strip() or p.stdout.strip()}")

    def threaded_napi(self, cpu: int) -> list[int]:
        """Both veths' receive NAPI in a kernel thread (GRO on makes veth a NAPI device; `threaded` 1,
        5.12+), pinned to `cpu`: an ordinary SCHED_OTHER task there, as ksoftirqd is when softirqs are
        deferred, so a task that holds that CPU in the kernel can make it wait. Returns the threads' pids."""
        pids = []
        for ns, ifname in ((self.rcv, self.if_rcv), (self.snd, self.if_snd)):
            p = run_child(["ip", "netns", "exec", ns, "sh", "-c",
                           f"ethtool -K {ifname} gro on && echo 1 > /sys/class/net/{ifname}/threaded && "
                           f"cat /sys/class/net/{ifname}/threaded"], timeout=30)
            if p.returncode != 0 or p.stdout.strip() != "1":
                raise NetLabError(f"threaded NAPI on {ifname}: {(p.stderr or p.stdout).strip()[-200:]}")
            mine = []
            for d in os.listdir("/proc"):
                if d.isdigit():
                    try:
                        with open(f"/proc/{d}/comm") as f:
                            if f.read().strip().startswith(f"napi/{ifname}-"):
                                mine.append(int(d))
                    except OSError:
                        pass
            if not mine:
                raise NetLabError(f"no napi/{ifname}-* kernel thread")
            for pid in mine:
                os.sched_setaffinity(pid, {cpu})
            pids += mine
        return pids

    def loss(self, port: int, probability: float) -> None:
        """Drop that share of the TCP segments arriving for `port` in the receiver's netns (iptables
        statistic: this kernel has no sch_netem)."""
        p = run_child(["ip", "netns", "exec", self.rcv, "iptables", "-A", "INPUT", "-p", "tcp", "--dport",
                       str(port), "-m", "statistic", "--mode", "random", "--probability", f"{probability:g}",
                       "-j", "DROP"], timeout=30)
        if p.returncode != 0:
            raise NetLabError(f"iptables statistic: {p.stderr.strip()[-200:]}")

    # --- actors --------------------------------------------------------------------------------------

    def actor(self, mode: str, ns: str, cpu: int, *args) -> tuple[subprocess.Popen, str]:
        st = os.path.join(self.dir, f"{mode}-{len(self.procs)}.json")
        p = spawn([sys.executable, "-m", "nodesleuth.lab.actors.netstream", mode, os.path.join(NETNS_DIR, ns),
                   str(cpu), st, *map(str, args)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                  stderr=subprocess.PIPE)
        self.procs.append(p)
        return p, st

    def wait_status(self, path: str, timeout: float = 30.0, key: str | None = None) -> dict:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with open(path) as f:
                    d = json.load(f)
                if key is None or d.get(key):
                    return d
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise NetLabError(f"{path}: no status after {timeout:.0f} s")

    @staticmethod
    def status(path: str) -> dict:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def streams(self, n: int = 4, mbit: float = 50.0, port: int = 5301, cpu: int = -1,
                seconds: float = 0) -> "Streams":
        sink, sst = self.actor("sink", self.rcv, cpu, self.b, port)
        self.wait_status(sst, key="listening")
        send, tst = self.actor("send", self.snd, cpu, self.b, port, n, mbit, seconds)
        self.wait_status(tst, key="streams")
        return Streams(self, sink, sst, send, tst)

    def flood(self, pps: float, seconds: float, port: int = 5399, cpu: int = -1) -> tuple[subprocess.Popen, str]:
        sink, sst = self.actor("sink", self.rcv, -1, self.b, port)
        self.wait_status(sst, key="listening")
        return self.actor("flood", self.snd, cpu, self.b, port, pps, seconds)

    def counters(self, ns: str) -> dict[str, int]:
        return netns_counters(self.holders[ns])


class Streams:
    """Running TCP streams; snapshot() now and then, report(a, b) between two snapshots."""

    def __init__(self, lab: NetLab, sink, sink_status: str, send, send_status: str):
        self.lab, self.sink, self.sink_status, self.send, self.send_status = lab, sink, sink_status, send, send_status

    @property
    def pid(self) -> int:
        return self.send.pid

    def snapshot(self) -> dict:
        snd = self.lab.status(self.send_status).get("seconds") or [{}]
        return {"t": time.time(), "softnet": softnet(), "snd": self.lab.counters(self.lab.snd),
                "rcv": self.lab.counters(self.lab.rcv), "init": _own_counters(),
                "sender": snd[-1].get("streams", [])}

    def report(self, a: dict, b: dict, cpu: int) -> dict:
        """What happened to the streams between two snapshots, with the numbers."""
        sa, sb = a["softnet"].get(cpu, {}), b["softnet"].get(cpu, {})
        secs = b["t"] - a["t"]
        rows = [r for r in self.lab.status(self.sink_status).get("seconds", [])  # whole seconds inside [a, b]
                if a["t"] <= r["t"] and r["t"] + 1 <= b["t"]]
        gaps = [s["gap_ms"] for r in rows for s in r["streams"]]
        mbit = {}
        for r in rows:
            for s in r["streams"]:
                mbit.setdefault(s["peer"], []).append(s["bytes"] * 8 / 1e6)
        ta = {s["src"]: s.get("total_retrans") or 0 for s in a["sender"]}
        tb = {s["src"]: s.get("total_retrans") or 0 for s in b["sender"]}
        keys = ("Tcp_RetransSegs", "TcpExt_TCPTimeouts", "TcpExt_TCPLostRetransmit", "Tcp_EstabResets",
                "TcpExt_TCPAbortOnTimeout", "TcpExt_TCPRcvQDrop", "TcpExt_TCPBacklogDrop")
        return {
            "seconds": round(secs, 1), "cpu": cpu,
            "softnet": {k: (sb.get(k, 0) - sa.get(k, 0)) % (1 << 32) for k in ("processed", "time_squeeze", "dropped",
                                                                              "received_rps")},
            "sender_netns": {k: b["snd"].get(k, 0) - a["snd"].get(k, 0) for k in keys if k in TCP_COUNTERS},
            "receiver_netns": {k: b["rcv"].get(k, 0) - a["rcv"].get(k, 0) for k in keys if k in TCP_COUNTERS},
            "host_netns": {k: b["init"].get(k, 0) - a["init"].get(k, 0) for k in ("Tcp_RetransSegs",)},
            "sender_tcp_info_retrans": sum(tb.get(k, 0) - ta.get(k, 0) for k in tb),
            "streams": len(tb),
            "mbit_per_stream": {k: round(sum(v) / len(v), 1) for k, v in mbit.items()},
            "max_gap_ms": max(gaps, default=None),
            "stalls_200ms": sum(1 for g in gaps if g >= 200),
            "stalled_stream_seconds": sum(1 for g in gaps if g >= 1000),
        }


def _own_counters() -> dict[str, int]:
    out: dict[str, int] = {}
    for name in ("snmp", "netstat"):
        with open(f"/proc/self/net/{name}") as f:
            out.update(parse_netstat(f.read(), f"/proc/self/net/{name}"))
    return out


def describe(r: dict) -> str:
    """A report in one paragraph, every figure from the kernel or the streams' own sockets."""
    sn, tx = r["softnet"], r["sender_netns"]
    rates = ", ".join(f"{v:.0f}" for v in r["mbit_per_stream"].values()) or "?"
    return (f"{r['streams']} TCP streams over {r['seconds']:.0f} s (Mbit/s each: {rates}): CPU {r['cpu']} processed "
            f"{sn['processed']} packets, time_squeeze {sn['time_squeeze']}, backlog drops {sn['dropped']}; "
            f"sender netns RetransSegs {tx.get('Tcp_RetransSegs', 0)}, RTO timeouts {tx.get('TcpExt_TCPTimeouts', 0)}, "
            f"resets {tx.get('Tcp_EstabResets', 0)} (senders' tcpi_total_retrans +{r['sender_tcp_info_retrans']}; the "
            f"host's netns +{r['host_netns'].get('Tcp_RetransSegs', 0)}); longest read gap "
            f"{r['max_gap_ms'] if r['max_gap_ms'] is not None else '?'} ms, {r['stalls_200ms']} stream-seconds with a "
            f"gap >= 200 ms")


def verdict(before: dict, during: dict) -> str:
    """Did the hot core do anything to them? Per second, during vs before; 'nothing' when no figure rose."""
    def rate(r, f):
        return f(r) / max(r["seconds"], 1e-3)

    figures = [("time_squeeze", lambda r: r["softnet"]["time_squeeze"]),
               ("backlog drops", lambda r: r["softnet"]["dropped"]),
               ("retransmitted segments", lambda r: r["sender_netns"].get("Tcp_RetransSegs", 0)),
               ("RTO timeouts", lambda r: r["sender_netns"].get("TcpExt_TCPTimeouts", 0)),
               ("stalls >= 200 ms", lambda r: r["stalls_200ms"])]
    rose = [f"{name} {rate(before, f):.1f}/s -> {rate(during, f):.1f}/s" for name, f in figures
            if rate(during, f) > max(2 * rate(before, f), 0.2)]
    if rose:
        return "the hot core hurt the streams: " + "; ".join(rose)
    gb, gd = before.get("max_gap_ms"), during.get("max_gap_ms")
    return ("the hot core did nothing measurable to the streams: no squeeze, drop, retransmit or stall rate rose "
            f"(longest read gap {gb} ms before, {gd} ms during)")
