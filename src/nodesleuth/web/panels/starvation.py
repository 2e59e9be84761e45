"""The victim's side of each second: the longest ksoftirqd wait (ms, and on which CPU), CPU pressure
(ms of the second some task waited), and NET_RX/NET_TX softirqs per second over all CPUs."""

from . import Axis, Panel, Series, panel


def point(tk) -> dict | None:
    out: dict = {}
    sv = tk.starve or {}
    waits = sv.get("ksoftirqd_wait_ms") or {}
    if waits:
        c, ms = max(waits.items(), key=lambda kv: kv[1])
        out.update(ksoftirqd_wait_ms=ms, ksoftirqd_cpu=c)
    if sv.get("psi_cpu_some_ms") is not None:
        out["psi_cpu_some_ms"] = sv["psi_cpu_some_ms"]
    if tk.softirqs:
        iv = max(tk.interval, 1e-3)
        for k in ("NET_RX", "NET_TX"):
            if k in tk.softirqs:
                out[k.lower() + "_per_s"] = round(sum(tk.softirqs[k]) / iv)
    return {"t": tk.time, **out} if out else None


panel(Panel("starve", "Starvation: longest ksoftirqd wait and CPU pressure (ms per second), network softirqs "
            "(per second, all CPUs)", 30, ("starve", "softirqs"),
            (Axis("ms", "ms", "ms / s", 10), Axis("r", "rate", "softirqs / s")),
            (Series("ksoftirqd_wait_ms", "longest ksoftirqd wait", "ms", "#c00",
                    missing="ksoftirqd wait not recorded in this range"),
             Series("psi_cpu_some_ms", "PSI cpu some", "ms", "#80c",
                    missing="CPU pressure (PSI) not recorded in this range"),
             Series("net_rx_per_s", "NET_RX", "r", "#06c", missing="softirq counts not recorded in this range"),
             Series("net_tx_per_s", "NET_TX", "r", "#0a8")),
            point, None, thin="max"))
