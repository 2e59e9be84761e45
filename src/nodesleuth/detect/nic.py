"""NIC resets and transmit timeouts, from the kernel log and from driver counters."""

from __future__ import annotations

from collections import Counter

from ..model.actions import Action, remedy_text
from ..model.records import KernelEvent
from ..model.rules import is_nic, when
from ..model.records import NicCounters
from .findings import Finding
from .incidents import describe_event_cpu, event_cpu
from .registry import detector
from .window import Window


def findings(events: list[KernelEvent], first: list[NicCounters] | None, last: list[NicCounters] | None,
             since: float | None = None, ticks: list | None = None) -> list[Finding]:
    out = []
    # events without a wall time (an uptime-only log from elsewhere) are kept: their age is unknown
    # a status or register dump ("info": its printk reports a state, not an event) makes no finding
    evs = [e for e in events if is_nic(e) and e.severity != "info" and (since is None or e.time is None or e.time >= since)]
    # dev_* lines name only the PCI address; netdev_* lines name both: join them on the address
    bus_if = {e.fields["bus"]: e.ifname for e in evs if e.ifname and e.fields.get("bus")}
    bus_if.update({n.bus: n.ifname for n in (last or []) if n.bus})
    by_if: dict[str, list[KernelEvent]] = {}
    for e in evs:
        bus = e.fields.get("bus", "?")
        by_if.setdefault(e.ifname or bus_if.get(bus, bus), []).append(e)
    before = {n.ifname: n for n in first or []}
    counters = {n.ifname: n for n in last or []}
    names = set(by_if) | {n for n, c in counters.items() if c.trouble()}
    for ifname in sorted(names):
        es = by_if.get(ifname, [])
        nic = counters.get(ifname)
        trouble = nic.trouble() if nic else {}
        b = before.get(ifname)
        delta = {k: v - (b.trouble().get(k, 0) if b else v) for k, v in trouble.items()}
        resets = sum(1 for e in es if e.kind == "reset")
        reasons = Counter(e.reset_reason for e in es if e.reset_reason)
        kinds = Counter(e.kind for e in es)
        # a reset done or failed, a driver line its rule calls critical (firmware fatal error, device disabled), or
        # the driver's own starvation verdict
        sev = "critical" if resets or kinds.get("reset_failed") or any(e.severity == "critical" for e in es) or \
            trouble.get("total_resets") or "SUSPECTED_POLL_STARVATION" in reasons else "warning"
        ev = []
        for e in es[-6:]:
            ev.append(f"kernel log seq {e.seq} at {when(e)}: {e.message}")
        cpus = []
        for e in es:  # the CPU each reporting queue's interrupts are served on, and its load then
            ec = event_cpu(ticks or [], e, ifname)
            if ec is not None and ec not in cpus:
                cpus.append(ec)
                ev.append(describe_event_cpu(ifname, ec))
        if trouble:
            ev.append(f"{ifname} driver counters: " + ", ".join(f"{k}={v}" for k, v in sorted(trouble.items()))
                      + (" (changed now: " + ", ".join(f"{k}{d:+d}" for k, d in delta.items() if d) + ")"
                         if any(delta.values()) else ""))
        acts = []  # investigated, never performed (remedy plans no NIC change); model/actions.py renders the lines
        if "SUSPECTED_POLL_STARVATION" in reasons or trouble.get("suspected_poll_starvation"):
            acts.append(Action("investigate", ifname, "its NAPI poll was scheduled but not run", commands=[
                "# the driver says its NAPI poll was scheduled but not run: a CPU is starved. "
                "Find it: nodesleuth explain --incidents (or grep Tx-Rx /proc/interrupts, mpstat -P ALL 1)"]))
        acts.append(Action("investigate", ifname, "the NIC's IRQ CPUs", commands=[
            "# move other work off the NIC's IRQ CPUs (taskset/IRQBALANCE_BANNED_CPUS), "
            "consider RPS and a bigger ring (ethtool -G)"]))
        rem = remedy_text(acts)
        parts = [f"{n} {k}" for k, n in kinds.most_common()]
        title = f"NIC {ifname}: " + (", ".join(parts) if parts else "reset counters non-zero")
        if reasons:
            title += " (reason " + ", ".join(reasons) + ")"
        out.append(Finding("nic_reset", sev, title, ev, rem,
                           {"ifname": ifname, "events": [{"seq": e.seq, "time": e.time, "clock": e.clock,
                                                          "uptime_s": None if e.usec is None else e.usec / 1e6,
                                                          "family": e.family, "reason": e.reason,
                                                          "kind": e.kind, "reset_reason": e.reset_reason,
                                                          "message": e.message, "fields": e.fields}
                                                         for e in es],
                            "families": sorted({e.family for e in es if e.family}), "cpus": cpus,
                            "counters": trouble, "counters_delta": delta,
                            "resets": resets or trouble.get("total_resets", 0)}, acts))
    return out


@detector("nic_reset")
def from_window(w: Window) -> list[Finding]:
    return findings(w.events, w.nics0, w.last.nics, since=w.since, ticks=w.ticks)
