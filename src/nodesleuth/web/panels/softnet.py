"""The network receive work the kernel could not finish, per second over all CPUs (and which CPU had
most): NAPI squeezes (net_rx_action out of budget or time with work left) and backlog drops, from
/proc/net/softnet_stat (collect/softnet.py)."""

from . import Axis, Panel, Series, panel


def point(tk) -> dict | None:
    s = tk.softnet
    if s is None:
        return None
    iv = max(tk.interval, 1e-3)
    out = {"t": tk.time, "squeezed_per_s": round(sum(s.time_squeeze) / iv, 1),
           "dropped_per_s": round(sum(s.dropped) / iv, 1), "processed_per_s": round(sum(s.processed) / iv)}
    if any(s.time_squeeze):
        i = max(range(len(s.cpus)), key=lambda k: s.time_squeeze[k])
        out["squeeze_cpu"] = s.cpus[i]
    return out


panel(Panel("softnet", "Network receive work left undone: NAPI squeezes and backlog drops (per second, all CPUs; "
            "/proc/net/softnet_stat)", 40, ("softnet",),
            (Axis("ev", "rate", "events / s"), Axis("pk", "rate", "packets / s")),
            (Series("squeezed_per_s", "time_squeeze", "ev", "#c00",
                    missing="softnet_stat not recorded in this range"),
             Series("dropped_per_s", "backlog drops", "ev", "#c60"),
             Series("processed_per_s", "packets processed", "pk", "#06c", (4, 3))),
            point, None, thin="max"))
