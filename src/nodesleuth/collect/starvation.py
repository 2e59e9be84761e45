"""How long the work a NIC driver needs waited for its CPU, from what the kernel exposes without eBPF.

- `ksoftirqd/N` run delay: /proc/PID/schedstat field 2 is the time the task spent runnable but
  waiting for a CPU (ns). When softirq work overflows into ksoftirqd (NET_RX under load, or softirqs
  raised outside interrupt context) and CPU N is held by something else, this is the wait of the
  packet processing itself. A NAPI poll that is "scheduled but not run" (ENA's
  SUSPECTED_POLL_STARVATION) is this wait.
- /proc/pressure/cpu `some total=` (µs): time at least one task on the node waited for a CPU.
- per-CPU NET_RX/NET_TX softirq counts come from /proc/softirqs (collect/irqs.py).

Cost: one small read per CPU per tick (ksoftirqd threads are found once, from kthreadd's children,
and looked up again only when one disappears), plus one read of /proc/pressure/cpu.
"""

from __future__ import annotations

import os

from ..model.records import Starve
from ..node.pread import Preader
from ..node.root import Root
from ..model.procfs import parse_psi_some_total
from .registry import Collector, collector


@collector("starve")
class StarvationReader(Collector):
    def __init__(self, root: Root, reader: Preader | None = None):
        self.root = root
        self.proc = root.join("/proc")
        self.ksoftirqd: dict[int, int] = {}  # cpu -> pid
        self.reader = reader or Preader(root.live)  # schedstat files stay open: 96 CPUs, 96 preads a tick
        self.psi_path = root.join("/proc/pressure/cpu")
        self.prev: dict | None = None
        self._find()

    def prime(self) -> None:
        self.prev = self.counters()

    def read(self, interval: float, seen=None) -> Starve | None:
        """This interval's figures (deltas of the counters), None on the first read or when nothing is known."""
        prev, self.prev = self.prev, self.counters()
        got = deltas(prev, self.prev, interval)
        return None if got is None else Starve(got)

    def _comm(self, pid: str) -> str:
        try:
            with open(f"{self.proc}/{pid}/comm") as f:
                return f.read().strip()
        except OSError:
            return ""

    def _find(self) -> None:
        try:
            with open(f"{self.proc}/2/task/2/children") as f:  # kthreadd's children: kernel threads
                pids = f.read().split()
        except OSError:
            try:
                pids = [p for p in os.listdir(self.proc) if p.isdigit()]
            except OSError:
                pids = []
        found = {}
        for pid in pids:
            comm = self._comm(pid)
            if comm.startswith("ksoftirqd/"):
                try:
                    found[int(comm.split("/", 1)[1])] = int(pid)
                except ValueError:
                    pass
        self.ksoftirqd = found
        self._paths = [(cpu, f"{self.proc}/{pid}/schedstat") for cpu, pid in found.items()]

    def counters(self) -> dict:
        """Cumulative counters: {"ksoftirqd": {cpu: (run_ns, wait_ns)}, "psi_some_us": int|None}."""
        ks: dict[int, tuple[int, int]] = {}
        missing = False
        read = self.reader.read
        for cpu, path in self._paths:  # 96+ CPUs every second: bytes in, no decode, two ints out
            try:
                parts = read(path, True).split(None, 2)
                ks[cpu] = int(parts[0]), int(parts[1])
            except OSError:
                missing = True
            except (ValueError, IndexError):  # malformed: that CPU is left out, as before
                pass
        if missing:  # a CPU went offline or the thread was replaced: look again next time
            self._find()
        try:
            psi = self.reader.read_opt(self.psi_path, True)
        except OSError:  # PSI compiled in but disabled (psi=0) reads as EOPNOTSUPP
            psi = None
        return {"ksoftirqd": ks, "psi_some_us": parse_psi_some_total(psi.decode(errors="replace")) if psi else None}


def deltas(prev: dict, cur: dict, interval: float) -> dict | None:
    """Per-interval figures: ksoftirqd wait and run per CPU (ms), and CPU pressure (ms)."""
    if not prev or not cur:
        return None
    wait, run = {}, {}
    for cpu, (r1, w1) in cur["ksoftirqd"].items():
        r0w0 = prev["ksoftirqd"].get(cpu)
        if r0w0 is None:
            continue
        r0, w0 = r0w0
        if w1 >= w0 and r1 >= r0:
            wait[cpu] = round((w1 - w0) / 1e6, 3)
            run[cpu] = round((r1 - r0) / 1e6, 3)
    psi = None
    if cur.get("psi_some_us") is not None and prev.get("psi_some_us") is not None:
        psi = round(max(0, cur["psi_some_us"] - prev["psi_some_us"]) / 1e3, 3)
    if not wait and psi is None:
        return None
    return {"ksoftirqd_wait_ms": wait, "ksoftirqd_run_ms": run, "psi_cpu_some_ms": psi,
            "interval": round(interval, 3)}

