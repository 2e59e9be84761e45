"""The one metric vocabulary: names, types, help and labels of every series nodesleuth exposes, and
the per-tick gauges computed from a Tick. The exporter (/metrics) and `dump --format openmetrics`
both go through `tick_gauges`, so a dump backfilled with promtool matches the alert rules and the
dashboard exactly. Prometheus conventions: base units, `_ratio` for 0..1, `_bytes`, `_seconds`,
counters end in `_total` (prometheus-client adds the suffix to counter families).

Labels: `cpu` is the CPU number; `device` is the interface name (a kernel-log line that names only
its PCI address is mapped to the interface that has that address); `controller`, `hierarchy`
(v1 | v2); `unit` a systemd unit; `kind` an incident kind. Info metrics (`*_info`, value 1) carry
configuration facts in low-cardinality labels, bounded as fleet/facts.py documents.
"""

from __future__ import annotations

from .memcg_ids import id_use
from .metric import Metric
from .records import SECTIONS
from .thresholds import HOT_BUSY

METRICS = {m.name: m for m in (
    Metric("nodesleuth_cpu_busy_ratio", "gauge", "Busy fraction of each CPU over the last interval", ("cpu",)),
    Metric("nodesleuth_cpu_sys_ratio", "gauge", "System (kernel) fraction of each CPU over the last interval", ("cpu",)),
    Metric("nodesleuth_cpu_softirq_ratio", "gauge", "Softirq fraction of each CPU over the last interval", ("cpu",)),
    Metric("nodesleuth_cpu_busy_max_ratio", "gauge", "Busy fraction of the busiest CPU"),
    Metric("nodesleuth_node_busy_ratio", "gauge", "Busy fraction of the whole node"),
    Metric("nodesleuth_hot_core_seconds", "gauge", f"Consecutive seconds each CPU has been >= {HOT_BUSY:.0f}% busy",
           ("cpu",)),
    Metric("nodesleuth_hot_core_others_busy_ratio", "gauge", "Mean busy fraction of the other CPUs (those not saturated "
           "themselves) over each hot "
           "CPU's current run (the incident rule wants it low: one starved core, not a busy node)", ("cpu",)),
    Metric("nodesleuth_samples", "counter", "Samples taken by the exporter"),
    # the exporter's profile (--profile): share of each CPU's time per code family over the last window
    # (families fixed: memcg, softirq, kernel, user, idle; profile/families.py), so cardinality is CPUs x 5
    Metric("nodesleuth_profile_cpu_share_ratio", "gauge", "Share of each CPU's time in a code family (memcg: "
           "memory-cgroup walk/reclaim; softirq: softirq/NAPI/IRQ; kernel: other kernel; user; idle) over the last "
           "profile window, from cpu-clock samples with kernel stacks", ("cpu", "family")),
    Metric("nodesleuth_profile_window_seconds", "gauge", "Seconds of profile behind nodesleuth_profile_cpu_share_ratio "
           "(less than the window while the profile fills)"),
    Metric("nodesleuth_profile_age_seconds", "gauge", "Seconds since the newest sample behind the profile shares"),
    Metric("nodesleuth_profile_samples", "counter", "Samples the exporter's own profiler (--profile run) took, every "
           "CPU (idle included): its rate is --profile-freq x CPUs while it keeps up"),
    Metric("nodesleuth_sample_errors", "counter", "Samples that failed"),
    # info metrics: value 1, the fact in the labels; bounds on label values in fleet/facts.py
    Metric("nodesleuth_node", "info", "Facts about this node", ("zone", "instance_type", "kernel", "os_image", "cgroup")),
    Metric("nodesleuth_unit", "info", "A service unit that is enabled or crash-looping", ("unit", "unit_file_state", "state")),
    Metric("nodesleuth_sysctl", "info", "A selected sysctl and its value", ("sysctl", "value")),
    Metric("nodesleuth_package", "info", "A selected installed package and its version", ("package", "version")),
    Metric("nodesleuth_zombie_posture", "info", "Whether this kernel keeps removed memory cgroups dying: the "
           "reparenting symbol, cgroup.stat's counts, and the behaviour probe's answer (true, false, unknown)",
           ("kernel", "hierarchy", "reparents_lru", "nr_dying_subsys", "accumulate")),
)}


for _cls in SECTIONS.values():  # a registered collector's record declares its own metrics (model/section.py)
    METRICS.update({m.name: m for m in _cls.METRICS})

# Where each field of a second (model.Tick) shows in the exporter, or why it does not: a new field
# must be added here (tests/test_model.py fails otherwise), so no collector's data is silently dropped.
FROM_TICK = {
    "cpu": ("nodesleuth_cpu_busy_ratio", "nodesleuth_cpu_sys_ratio", "nodesleuth_cpu_softirq_ratio",
            "nodesleuth_node_busy_ratio", "nodesleuth_hot_core_seconds", "nodesleuth_hot_core_others_busy_ratio"),
    **{name: tuple(m.name for m in cls.METRICS) for name, cls in SECTIONS.items() if cls.METRICS},
}
NOT_FROM_TICK = {
    "time": "the scrape's own timestamp",
    "interval": "rates are over the scrape interval",
    **{name: cls.NO_METRICS for name, cls in SECTIONS.items() if not cls.METRICS},
}


def tick_gauges(t, hot: dict[int, tuple[float, float | None]] | None = None, ids: tuple | None = None):
    """(metric name, label values, value) for every gauge (and section counter) one tick gives; `hot`: per CPU (seconds hot,
    the others' mean busy %) from the incident rule's tracker (detect/incidents.HotCoreTracker.gauges); `ids`:
    (model.memcg_ids.IdRule or None, SwapTotal KiB or None) of the node, for the memcg-ID gauges (a tick does not
    carry the kernel release: without it they are left out rather than guessed)."""
    cpus = [u for c, u in sorted(t.cpu.items()) if c >= 0]
    for u in cpus:
        yield "nodesleuth_cpu_busy_ratio", (str(u.cpu),), round(u.busy / 100, 4)
        yield "nodesleuth_cpu_sys_ratio", (str(u.cpu),), round(u.sys / 100, 4)
        yield "nodesleuth_cpu_softirq_ratio", (str(u.cpu),), round(u.soft / 100, 4)
    if cpus:
        yield "nodesleuth_cpu_busy_max_ratio", (), round(max(u.busy for u in cpus) / 100, 4)
    if -1 in t.cpu:
        yield "nodesleuth_node_busy_ratio", (), round(t.cpu[-1].busy / 100, 4)
    for c, (s, others) in sorted((hot or {}).items()):
        yield "nodesleuth_hot_core_seconds", (str(c),), s
        if others is not None:
            yield "nodesleuth_hot_core_others_busy_ratio", (str(c),), round(others / 100, 4)
    if ids is not None:
        live, dying = t.census.memory_live(), t.census.memory_dying()
        if live is not None:
            use = id_use(live, dying or 0, ids[0], ids[1])
            yield "nodesleuth_memcg_ids_used", (), use.high
            yield "nodesleuth_memcg_ids_used_ratio", (), round(use.ratio, 4)
    for name in SECTIONS:
        sec = getattr(t, name, None)
        if sec is not None:
            yield from sec.samples()


def label_text(name: str, values: tuple) -> str:
    labels = METRICS[name].labels
    if not labels:
        return ""
    esc = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values)
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, esc)) + "}"
