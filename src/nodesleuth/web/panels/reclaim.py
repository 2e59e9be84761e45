"""Memory reclaim per second, node-wide (/proc/vmstat): pages scanned directly by allocating tasks (what
puts reclaim on their CPU) and by kswapd, allocation stalls, OOM kills."""

from . import Axis, Panel, Series, panel


def point(tk) -> dict | None:
    v = tk.vmstat
    if v is None:
        return None
    iv = max(tk.interval, 1e-3)
    d = v.deltas
    return {"t": tk.time, **{k: round(d.get(k, 0) / iv, 1) for k in ("pgscan_direct", "pgscan_kswapd", "allocstall")},
            "oom_kill": d.get("oom_kill", 0)}


panel(Panel("reclaim", "Memory reclaim: pages scanned per second (direct by allocating tasks, and by kswapd), "
            "allocation stalls, OOM kills (/proc/vmstat)", 50, ("vmstat",),
            (Axis("pg", "rate", "pages / s"), Axis("ev", "count", "events")),
            (Series("pgscan_direct", "scanned directly", "pg", "#c00", missing="vmstat not recorded in this range"),
             Series("pgscan_kswapd", "scanned by kswapd", "pg", "#06c"),
             Series("allocstall", "allocation stalls / s", "ev", "#c60", (4, 3)),
             Series("oom_kill", "OOM kills", "ev", "#000")),
            point, None, thin="max"))
