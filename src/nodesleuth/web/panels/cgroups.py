"""Memory cgroups over time: tracked, live and dying (zombie) counts."""

from . import Axis, Panel, Series, panel


def _tick(tk):
    m = tk.census.controller("memory")
    return {"t": tk.time, "tracked": m.tracked if m else None, "live": m.live if m else None,
            "dying": tk.census.memory_dying()}


def _minute(r):
    if not r.mem:
        return {"t": r.t, "dying": r.dying} if r.dying is not None else None
    return {"t": r.t, "tracked": r.mem[0], "live": r.mem[1], "dying": r.mem[2]}


panel(Panel("census", "Memory cgroups (count: tracked, live, dying)", 10, ("census",),
            (Axis("n", "count", "cgroups"),),
            (Series("tracked", "tracked", "n", "#555"), Series("live", "live", "n", "#090"),
             Series("dying", "dying (zombie)", "n", "#c00", (6, 3))),
            _tick, _minute))
