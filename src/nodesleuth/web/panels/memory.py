"""Percpu and Slab from /proc/meminfo: what the dying memcgs hold."""

from . import Axis, Panel, Series, panel

panel(Panel("memory", "Percpu and Slab memory (bytes, /proc/meminfo)", 20, ("meminfo",),
            (Axis("b", "bytes", "bytes"),),
            (Series("percpu", "Percpu", "b", "#c60"), Series("slab", "Slab", "b", "#06c")),
            lambda tk: {"t": tk.time, "percpu": tk.meminfo.get("Percpu"), "slab": tk.meminfo.get("Slab")}))
