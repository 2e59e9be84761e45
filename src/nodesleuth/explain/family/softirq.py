"""Family softirq: the core's softirq time (mpstat %soft); the cause is named when one softirq is >= half
of them and what raised it is seen (the NIC's line, RPS, or a device line)."""

from __future__ import annotations

from collections import Counter

from ...detect.incidents import _window
from ...detect.proof import verdict
from ...model.thresholds import PROVE, PROVEN
from .common import Context, Hypothesis, excess, irq_lines, pct, ticks
from .registry import family


def _softirq_rates(rec, ep) -> Counter:
    rates: Counter = Counter()
    secs = 0.0
    for t in ticks(rec, ep):
        if t.softirqs:
            secs += t.interval
            for name, row in t.softirqs.items():
                if ep.cpu < len(row):
                    rates[name] += row[ep.cpu]
    return Counter({k: v / secs for k, v in rates.items()}) if secs else Counter()


def _nic_lines(rec, ep) -> list:
    """The NIC's interrupt lines (Tick.nic_irqs, counted every second) on the core over the episode:
    [line, name, per_s], busiest first."""
    counts: Counter = Counter()
    names: dict = {}
    secs = 0.0
    for t in ticks(rec, ep):
        if t.nic_irqs is None:
            continue
        secs += t.interval
        for key, row in t.nic_irqs.items():
            line, _, name = key.partition(":")
            if ep.cpu < len(row):
                counts[line] += row[ep.cpu]
                names[line] = name or line
    if not secs:
        return []
    return sorted(([k, names[k], round(n / secs, 1)] for k, n in counts.items() if n), key=lambda x: -x[2])


def _device_lines(lines: list) -> list:
    """Device (numbered) lines only: the per-CPU system vectors (LOC, RES, CAL, TLB ...) are not a device's."""
    return [x for x in lines if str(x[0]).isdigit()]


def _dominant(lines: list):
    """The line that is at least half of these lines' interrupts, if one is."""
    total = sum(r for _, _, r in lines)
    return lines[0] if lines and total and lines[0][2] >= 0.5 * total else None


def _softnet(rec, ep) -> dict:
    """The core's softnet_stat over the episode, and the RPS IPIs it received from a minute before it on
    (a backlog kept busy needs few: one IPI wakes it, the packets keep coming)."""
    sq = [t.softnet.of(ep.cpu) for t in ticks(rec, ep) if getattr(t, "softnet", None) is not None]
    if not sq:
        return {}
    out = {k: sum(x.get(k) or 0 for x in sq) for k in ("processed", "received_rps", "time_squeeze", "dropped")}
    out["received_rps_since_minute_before"] = sum(
        t.softnet.of(ep.cpu).get("received_rps") or 0 for t in _window(rec.ticks, ep.start - 60, ep.end)
        if getattr(t, "softnet", None) is not None)
    return out


@family("softirq", rank=30)
def softirq(ctx: Context) -> Hypothesis:
    rec, ep = ctx.rec, ctx.ep
    rule = (f"softirq time (mpstat %soft) >= {pct(PROVE)} of the core's excess busy time; the cause is named when "
            "one softirq is >= half of the core's softirqs and what raised it is seen: for NET_RX the NIC's interrupt "
            "line that is >= half of the NIC's interrupts on the core, else packets steered to the core by RPS "
            "(softnet_stat received_rps); for any softirq a device line that is >= half of the core's device "
            "interrupts (the per-CPU system vectors LOC, RES, CAL... are not a device's)")
    share = min(1.0, (ep.soft_mean / 100) / excess(ep))
    rates = _softirq_rates(rec, ep)
    secs = max(1e-9, sum(t.interval for t in ticks(rec, ep)))
    ev = [f"CPU {ep.cpu}: softirq {ep.soft_mean:.0f}% of its time, irq {ep.irq_mean:.0f}%"]
    top = rates.most_common(3)
    if top:
        ev.append("softirqs per second on it: " + ", ".join(f"{k} {v:.0f}" for k, v in top))
    lines = irq_lines(rec, ep)
    nic = _nic_lines(rec, ep)
    dev = _device_lines(lines)
    if lines:
        ev.append("interrupt lines it served: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in lines[:4]))
    if nic:
        ev.append("the NIC's lines on it: " + ", ".join(f"{k} ({n}) {r:.0f}/s" for k, n, r in nic[:3]))
    sn = _softnet(rec, ep)
    if sn:
        ev.append(f"softnet_stat on CPU {ep.cpu}: processed {sn['processed']} ({sn['processed'] / secs:.0f}/s), "
                  f"received_rps {sn['received_rps']}, time_squeeze {sn['time_squeeze']}, dropped {sn['dropped']}")
    vd = verdict(share)
    cause = None
    which = top[0][0] if top else "softirq"
    how = ""
    if vd == PROVEN and top and top[0][1] >= 0.5 * sum(rates.values()):
        line = _dominant(nic) if which in ("NET_RX", "NET_TX") else None
        if line is None and which == "NET_RX" and sn.get("received_rps_since_minute_before") and sn.get("processed"):
            how = (f": packets steered to it by RPS ({sn['processed'] / secs:.0f} packets/s processed there, "
                   f"{sn['received_rps_since_minute_before']} RPS IPIs received since a minute before), no NIC "
                   "interrupt line on it")
        else:
            line = line or _dominant(dev)
            if line is not None:
                how = f" from interrupt line {line[0]} ({line[1]})"
        if how:
            cause = f"{which} softirq on CPU {ep.cpu}{how}"
    shown = nic or dev or lines
    summary = (f"{which} softirq {ep.soft_mean:.0f}% of CPU {ep.cpu}" + (f", {top[0][1]:.0f}/s" if top else "")
               + (how if how else f"; interrupts from {shown[0][1]} (line {shown[0][0]})" if shown else ""))
    return Hypothesis("softirq", share, vd, summary, cause, rule, ev,
                      {"softirqs_per_s": {k: round(v) for k, v in top}, "irq_lines": (nic or dev or lines)[:3],
                       "softnet": sn})
