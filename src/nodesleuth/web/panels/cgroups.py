"""Memory cgroups over time: tracked, live and dying (zombie) counts."""

from . import Axis, Panel, Series, panel


def _tick(tk):
    m = tk.census.controller("memory")
    return {"t": tk.time, "tracked": m.tracked if m else None, "live": m.live if m else None,
            "dying": tk.census.memory_dying()}


panel(Panel("census", "Memory cgroups (count: tracked, live, dying)", 10, ("census",),
            (Axis("n", "count", "cgroups"),),
            (Series("tracked", "tracked", "n", "#555"), Series("live", "live", "n", "#090"),
             Series("dying", "dying (zombie)", "n", "#c00", (6, 3))),
            _tick))
