"""The network receive work per CPU: /proc/net/softnet_stat every tick (O(CPUs), one pread).

The file is global (the same in every network namespace), so a container reads the host's. Deltas
are taken modulo 2^32 (the kernel's counters are u32 and wrap: `processed` at 1 Mpps on a CPU wraps
every 71 minutes); a CPU that went offline and came back starts from its new reading.
"""

from __future__ import annotations

from ..model.procfs import parse_cpu_list, parse_softnet
from ..model.records import Softnet
from ..node.pread import read_text
from .registry import Deltas, collector

WRAP = 1 << 32
COUNTERS = ("processed", "dropped", "time_squeeze", "received_rps", "flow_limit_count")


@collector("softnet")
class SoftnetReader(Deltas):
    prev: dict[int, dict] | None

    def _read(self) -> dict[int, dict]:
        online = None
        text = read_text(self.reader, self.root, "/proc/net/softnet_stat", one_record=False)  # one record a CPU
        if len(text.split("\n", 1)[0].split()) < 13:  # no CPU column: rows are the online CPUs in order
            p = "/sys/devices/system/cpu/online"
            if self.root.live or self.root.exists(p):  # a recorded tree without it: row numbers, as node_exporter
                online = parse_cpu_list(read_text(self.reader, self.root, p), self.root.join(p))
        return parse_softnet(text, online, self.root.join("/proc/net/softnet_stat"))

    def read(self, interval: float, seen=None) -> Softnet | None:
        prev, cur = self.step()
        if prev is None:
            return None
        cpus = sorted(cur)
        cols: dict[str, list[int] | None] = {}
        for k in COUNTERS:
            if any(k not in cur[c] for c in cpus):
                cols[k] = None
                continue
            cols[k] = [(cur[c][k] - prev[c][k]) % WRAP if c in prev and k in prev[c] else 0 for c in cpus]
        backlog = [cur[c]["backlog_len"] for c in cpus] if all("backlog_len" in cur[c] for c in cpus) else None
        totals = {k: [cur[c][k] for c in cpus] for k in COUNTERS if cols[k] is not None}
        return Softnet(cpus=cpus, processed=cols["processed"], dropped=cols["dropped"],
                       time_squeeze=cols["time_squeeze"], received_rps=cols["received_rps"],
                       flow_limit_count=cols["flow_limit_count"], backlog_len=backlog, totals=totals)
