"""Prometheus/OpenMetrics exporter (official prometheus-client), fed by the same 1 Hz sampler.

A background thread samples every `interval` seconds; a custom collector turns the latest state
into metric families at scrape time. Labels follow node_exporter's conventions (`cpu`, `device`,
no instance/job: Prometheus adds those); per-node facts (zone, kernel) are on an info metric.
"""

from __future__ import annotations

import threading
from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from ..collect.root import Root
from ..collect.sampler import Sampler, Tick
from ..detect.nic import NIC_KINDS

HOT = 90.0


class State:
    """What the sampler thread last saw, plus counts since the exporter started."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tick: Tick | None = None
        self.hot_seconds: dict[int, float] = {}
        self.kernel_events: Counter = Counter()  # (device, reason) -> n
        self.incidents: Counter = Counter()  # kind -> n
        self.units: dict[str, tuple[int, bool]] = {}
        self.nics = []
        self.samples = 0
        self.errors = 0


class NodesleuthCollector(Collector):
    def __init__(self, state: State, info: dict[str, str]):
        self.state = state
        self.info = info

    def collect(self):
        st = self.state
        with st.lock:
            tk, hot = st.tick, dict(st.hot_seconds)
            events, incidents = Counter(st.kernel_events), Counter(st.incidents)
            units, nics = dict(st.units), list(st.nics)
            samples, errors = st.samples, st.errors
        info = InfoMetricFamily("nodesleuth_node", "Facts about this node", value=self.info)
        yield info
        yield CounterMetricFamily("nodesleuth_samples", "Samples taken by the exporter", value=samples)
        yield CounterMetricFamily("nodesleuth_sample_errors", "Samples that failed", value=errors)
        if tk is None:
            return
        busy = GaugeMetricFamily("nodesleuth_cpu_busy_ratio", "Busy fraction of each CPU over the last interval",
                                 labels=["cpu"])
        sys_ = GaugeMetricFamily("nodesleuth_cpu_sys_ratio", "System fraction of each CPU over the last interval",
                                 labels=["cpu"])
        cpus = [u for c, u in sorted(tk.cpu.items()) if c >= 0]
        for u in cpus:
            busy.add_metric([str(u.cpu)], u.busy / 100)
            sys_.add_metric([str(u.cpu)], u.sys / 100)
        yield busy
        yield sys_
        if cpus:
            yield GaugeMetricFamily("nodesleuth_cpu_busy_max_ratio", "Busy fraction of the busiest CPU",
                                    value=max(u.busy for u in cpus) / 100)
        if -1 in tk.cpu:
            yield GaugeMetricFamily("nodesleuth_node_busy_ratio", "Busy fraction of the whole node",
                                    value=tk.cpu[-1].busy / 100)
        hs = GaugeMetricFamily("nodesleuth_hot_core_seconds",
                               f"Consecutive seconds each CPU has been >= {HOT:.0f}% busy", labels=["cpu"])
        for c, s in sorted(hot.items()):
            hs.add_metric([str(c)], s)
        yield hs
        tracked = GaugeMetricFamily("nodesleuth_cgroups_tracked", "Cgroups the kernel tracks (incl. dying)",
                                    labels=["controller", "hierarchy"])
        live = GaugeMetricFamily("nodesleuth_cgroups_live", "Cgroups with a directory", labels=["controller", "hierarchy"])
        dying = GaugeMetricFamily("nodesleuth_cgroups_dying", "Removed cgroups still alive in the kernel",
                                  labels=["controller", "hierarchy"])
        for c in tk.census.v1:
            tracked.add_metric([c.name, "v1"], c.tracked)
            if c.live is not None:
                live.add_metric([c.name, "v1"], c.live)
                dying.add_metric([c.name, "v1"], c.dying)
        v2 = tk.census.v2
        if v2 is not None:
            live.add_metric(["all", "v2"], v2.nr_descendants + 1)
            dying.add_metric(["all", "v2"], v2.nr_dying_descendants)
            for name, (lv, dy) in v2.subsys.items():
                live.add_metric([name, "v2"], lv)
                dying.add_metric([name, "v2"], dy)
        yield tracked
        yield live
        yield dying
        for key, name in (("Percpu", "percpu"), ("Slab", "slab")):
            if key in tk.meminfo:
                yield GaugeMetricFamily(f"nodesleuth_memory_{name}_bytes", f"{key} from /proc/meminfo",
                                        value=tk.meminfo[key])
        resets = CounterMetricFamily("nodesleuth_nic_driver_resets", "NIC driver reset/timeout counters (ethtool -S, "
                                     "per-queue tx_timeout)", labels=["device", "counter"])
        for n in nics:
            for k, v in n.trouble().items():
                resets.add_metric([n.ifname, k], v)
        yield resets
        kev = CounterMetricFamily("nodesleuth_nic_kernel_events", "NIC trouble lines in the kernel log",
                                  labels=["device", "reason"])
        for (dev, reason), n in sorted(events.items()):
            kev.add_metric([dev, reason], n)
        yield kev
        ur = CounterMetricFamily("nodesleuth_unit_restarts", "systemd NRestarts per service", labels=["unit"])
        ul = GaugeMetricFamily("nodesleuth_unit_crash_looping", "1 if the unit is in a restart loop", labels=["unit"])
        for u, (n, loop) in sorted(units.items()):
            ur.add_metric([u], n)
            ul.add_metric([u], 1.0 if loop else 0.0)
        yield ur
        yield ul
        inc = CounterMetricFamily("nodesleuth_incidents", "Incidents seen since start", labels=["kind"])
        for k in ("hot_core", "nic_reset"):
            inc.add_metric([k], incidents.get(k, 0))
        yield inc


class SamplerThread(threading.Thread):
    def __init__(self, root: Root, state: State, interval: float = 1.0, ns_pid: int | None = None,
                 kmsg: bool | str = True):
        super().__init__(daemon=True, name="nodesleuth-exporter")
        self.state = state
        self.interval = interval
        self.sampler = Sampler(root, kmsg=kmsg, ns_pid=ns_pid, units_every=5)
        self.stop_ev = threading.Event()
        self.last_nic_event = 0.0

    def step(self) -> None:
        tk = self.sampler.tick()
        st = self.state
        with st.lock:
            for c, u in tk.cpu.items():
                if c < 0:
                    continue
                before = st.hot_seconds.get(c, 0.0)
                now = before + tk.interval if u.busy >= HOT else 0.0
                if before < 3 <= now:
                    st.incidents["hot_core"] += 1
                st.hot_seconds[c] = now
            self._count(tk.events)
            if tk.units is not None:
                st.units = {u.id: (u.n_restarts, u.crash_looping) for u in tk.units}
            if tk.nics is not None:
                st.nics = tk.nics
            st.tick = tk
            st.samples += 1

    def _count(self, events) -> None:
        """Caller holds the lock. Lines of one reset come within 5 s: one incident."""
        st = self.state
        for e in events:
            if e.kind in NIC_KINDS:
                st.kernel_events[(e.ifname or e.fields.get("bus", ""), e.reason)] += 1
                if e.time - self.last_nic_event > 5:
                    st.incidents["nic_reset"] += 1
                self.last_nic_event = e.time

    def run(self) -> None:
        old = self.sampler.prime()  # what the kernel ring still holds counts too (NPD's lookback)
        with self.state.lock:
            self._count(old)
        while not self.stop_ev.wait(self.interval):
            try:
                self.step()
            except Exception:  # keep serving the last good state; count the failure
                with self.state.lock:
                    self.state.errors += 1


def node_info(root: Root, zone: str | None) -> dict[str, str]:
    from .snapshot import cloud_facts, kernel_release

    facts = cloud_facts(root)
    return {"zone": zone or facts.get("zone", ""), "instance_type": facts.get("instance_type", ""),
            "kernel": kernel_release(root), "root": root.path}
