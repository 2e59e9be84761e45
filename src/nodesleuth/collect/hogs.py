"""A closer look at the processes that took a large share of a CPU this tick (at most MAX): their
scheduling class and real-time priority (/proc/PID/stat fields 41 and 40: a SCHED_FIFO task at 100%
of a CPU starves that CPU's ksoftirqd), and their cgroup's CPU quota throttling (cpu.stat: v2
nr_throttled and throttled_usec; v1 cpu controller nr_throttled and throttled_time in ns), and the
Kubernetes pod and container they run in (node/kube.py: from the cgroup path, the runtime's bundle and
kubelet's log directories). Bounded: a few files per hot process per tick, a bundle read once per
container, kubelet's log directories listed at most every REFRESH seconds; nothing per cgroup of the node."""

from __future__ import annotations

import os
import time

from ..model.errors import InputError
from ..model.records import Hogs
from ..node.cgroupfs import mounts, v1_mount, v2_mount
from ..node.kube import Pods
from ..node.pread import Preader
from ..node.root import Root
from .registry import Collector, collector

MIN_PCT = 20.0
MAX = 8
REFRESH = 10.0  # seconds between listings of kubelet's log directories (pods and restart counts)
POLICY = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}


def sched_of(stat: bytes) -> tuple[int, int]:
    """(policy, rt_priority) from a /proc/PID/stat line (fields 41 and 40; comm may hold spaces)."""
    rest = stat[stat.rindex(b")") + 2:].split()
    return int(rest[38]), int(rest[37])


def cgroup_of(text: str, controller: str | None) -> str | None:
    """The cgroup path of a process on the v1 hierarchy of `controller`, or on v2 when None."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if controller is None and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if controller is not None and controller in parts[1].split(","):
            return parts[2]
    return None


def parse_cpu_stat(text: str) -> tuple[int, float]:
    """(nr_throttled, throttled ms) of a cpu.stat (v2 throttled_usec, v1 throttled_time in ns)."""
    kv = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    n = int(kv.get("nr_throttled", 0))
    if "throttled_usec" in kv:
        return n, int(kv["throttled_usec"]) / 1000
    return n, int(kv.get("throttled_time", 0)) / 1e6


@collector("hogs")
class HogsReader(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader
        self.prev: dict[str, tuple[int, float]] = {}  # cgroup -> last (nr_throttled, ms)
        self.pods: Pods | None = None
        self.pods_at = 0.0
        try:
            ms = mounts(root)
            v1 = v1_mount(ms, "cpu")
            self.cpu_mount, self.controller = (v1, "cpu") if v1 else (v2_mount(ms), None)
        except InputError:
            self.cpu_mount, self.controller = None, None

    def _row(self, u) -> dict | None:
        base = f"/proc/{u.pid}"
        try:
            with open(self.root.join(f"{base}/stat"), "rb") as f:
                policy, prio = sched_of(f.read())
            cg = cgroup_of(self.root.read(f"{base}/cgroup"), self.controller) if self.cpu_mount else None
        except (OSError, InputError, ValueError, IndexError):
            return None  # it exited between the scan and now
        row = {"pid": u.pid, "comm": u.comm, "cpu": u.cpu, "pct": round(u.pct, 1),
               "policy": POLICY.get(policy, str(policy)), "rt_priority": prio, "cgroup": cg}
        pod = self._pod(cg)
        if pod is not None:
            row["pod"] = pod.to_dict()
        if cg is not None:
            st = self.root.read_opt(os.path.join(self.cpu_mount, cg.lstrip("/"), "cpu.stat"))
            if st is not None:
                n, ms = parse_cpu_stat(st)
                p = self.prev.get(cg)
                self.prev[cg] = (n, ms)
                row["nr_throttled"] = n - p[0] if p else None
                row["throttled_ms"] = round(ms - p[1], 1) if p else None
        return row

    def _pod(self, cg: str | None):
        if not cg or "kubepods" not in cg:
            return None
        now = time.monotonic()
        if self.pods is None:
            self.pods, self.pods_at = Pods(self.root), now
        elif now - self.pods_at >= REFRESH:
            self.pods.refresh()
            self.pods_at = now
        return self.pods.of_cgroup(cg)

    def read(self, interval: float, seen=None) -> Hogs | None:
        hot = sorted((u for u in (seen.procs if seen else []) if u.pct >= MIN_PCT), key=lambda u: -u.pct)[:MAX]
        rows = [r for r in (self._row(u) for u in hot) if r is not None]
        if len(self.prev) > 4 * MAX:  # forget cgroups no longer hot
            keep = {r["cgroup"] for r in rows}
            self.prev = {k: v for k, v in self.prev.items() if k in keep}
        return Hogs(rows) if rows else None
