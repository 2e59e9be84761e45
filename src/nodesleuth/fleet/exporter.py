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

from ..collect.kmsg import is_nic
from ..collect.root import Root
from ..collect.sampler import EXPORTER, Sampler, Tick
from ..detect.incidents import HotCoreTracker, NicGrouper
from ..metrics import METRICS, tick_gauges


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
        yield InfoMetricFamily("nodesleuth_node", METRICS["nodesleuth_node"].help, value=self.info)
        yield CounterMetricFamily("nodesleuth_samples", METRICS["nodesleuth_samples"].help, value=samples)
        yield CounterMetricFamily("nodesleuth_sample_errors", METRICS["nodesleuth_sample_errors"].help, value=errors)
        if tk is None:
            return
        fams: dict[str, GaugeMetricFamily] = {}
        for name, labels, value in tick_gauges(tk, hot):
            f = fams.get(name)
            if f is None:
                m = METRICS[name]
                f = fams[name] = GaugeMetricFamily(name, m.help, labels=list(m.labels) or None)
            f.add_metric(list(labels), value)
        yield from fams.values()
        def counter(name):
            return CounterMetricFamily(name, METRICS[name].help, labels=list(METRICS[name].labels))

        resets = counter("nodesleuth_nic_driver_resets")
        for n in nics:
            for k, v in n.trouble().items():
                resets.add_metric([n.ifname, k], v)
        yield resets
        kev = counter("nodesleuth_nic_kernel_events")
        for (dev, reason), n in sorted(events.items()):
            kev.add_metric([dev, reason], n)
        yield kev
        ur = counter("nodesleuth_unit_restarts")
        ul = GaugeMetricFamily("nodesleuth_unit_crash_looping", METRICS["nodesleuth_unit_crash_looping"].help,
                               labels=["unit"])
        for u, (n, loop) in sorted(units.items()):
            ur.add_metric([u], n)
            ul.add_metric([u], 1.0 if loop else 0.0)
        yield ur
        yield ul
        inc = counter("nodesleuth_incidents")
        for k in ("hot_core", "nic_reset"):
            inc.add_metric([k], incidents.get(k, 0))
        yield inc


class SamplerThread(threading.Thread):
    def __init__(self, root: Root, state: State, interval: float = 1.0, ns_pid: int | None = None,
                 kmsg: bool | str = True):
        super().__init__(daemon=True, name="nodesleuth-exporter")
        self.state = state
        self.interval = interval
        self.sampler = Sampler.preset(root, EXPORTER, kmsg=kmsg, ns_pid=ns_pid)
        self.stop_ev = threading.Event()
        self.tracker = HotCoreTracker()  # the incident rule of detect/incidents.py, fed live
        self.grouper = NicGrouper(keep=False)

    def step(self) -> None:
        tk = self.sampler.tick()
        st = self.state
        closed = self.tracker.feed(tk)
        with st.lock:
            # an episode counts when it ends and qualified (others < 60% over it), as check and explain say
            st.incidents["hot_core"] += len(closed)
            for c in tk.cpu:
                if c >= 0:
                    st.hot_seconds[c] = self.tracker.run_seconds(c)
            if tk.nics is not None:
                st.nics = tk.nics
            self._count(tk.events)
            if tk.units is not None:
                st.units = {u.id: (u.n_restarts, u.crash_looping) for u in tk.units}
            st.tick = tk
            st.samples += 1

    def _count(self, events) -> None:
        """Caller holds the lock. Lines of one reset come within 5 s: one incident."""
        st = self.state
        bus_if = {n.bus: n.ifname for n in st.nics or [] if n.bus}
        for e in sorted(events, key=lambda e: e.time):
            if is_nic(e):
                bus = e.fields.get("bus", "")
                st.kernel_events[(e.ifname or bus_if.get(bus) or bus or "?", e.reason)] += 1
                if self.grouper.add(e):
                    st.incidents["nic_reset"] += 1

    def run(self) -> None:
        old = self.sampler.prime()  # what the kernel ring still holds counts too (NPD's lookback)
        with self.state.lock:
            self.state.nics = self.sampler.nics or []
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
