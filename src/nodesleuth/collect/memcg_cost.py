"""What one memory cgroup costs in kernel memory on this node: measured here, not assumed.

A dying memcg keeps its per-CPU statistics (memcg->vmstats_percpu and each node's
lruvec_stats_percpu) until its last charged page is freed, so it costs the Percpu of a live one,
and that cost grows with the number of *possible* CPUs (measured on Debian's 6.12: 3.6 KB at 2,
29 KB at 16, 175 KB at 96). The probe makes N empty memory cgroups under a parent of its own
(nothing is charged to them, so they are freed as soon as they are removed), reads /proc/meminfo's
Percpu and Slab as it goes, and removes them (see probe() for why in batches). Slab is an
upper bound for a dying memcg: a live one also holds the kernfs nodes of its files, freed at rmdir.
"""

from __future__ import annotations

import os
import time

from ..model.errors import InputError
from ..model.procfs import cpu_list_count, parse_meminfo
from ..model.records import MemcgCost
from ..node.cgroupfs import Memcg, remove_cgroup_tree, scratch_tree
from ..node.root import Root

BUDGET = 1 << 20  # bytes of Percpu per batch, roughly
MAX_BATCHES = 12
GROWING = 4  # consecutive batches that must grow Percpu; the first of them may still fill free room


def possible_cpus(root: Root) -> int:
    """Count of /sys/devices/system/cpu/possible ("0-15", "0-3,8-11")."""
    path = "/sys/devices/system/cpu/possible"
    return cpu_list_count(root.read(path), root.join(path))


def _meminfo(root: Root) -> tuple[int, int]:
    vals = parse_meminfo(root.read("/proc/meminfo"), root.join("/proc/meminfo"), ("Percpu", "Slab"))
    if "Percpu" not in vals or "Slab" not in vals:
        raise InputError(root.join("/proc/meminfo"), "no Percpu or Slab line (kernel older than 4.16?)")
    return vals["Percpu"], vals["Slab"]


def _settle(mc: Memcg, before: int | None, timeout: float = 5.0) -> None:
    """Empty memcgs are freed asynchronously after rmdir: wait until the kernel's count is back, so
    the probe's own cgroups are never counted as zombies by what reads next (check's census, an exporter)."""
    if before is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = mc.count()
        if now is None or now <= before:
            return
        time.sleep(0.05)


def probe(root: Root, budget: int = BUDGET, max_batches: int = MAX_BATCHES) -> MemcgCost:
    """Measure Percpu/Slab per memory cgroup on the live host (root needed); InputError otherwise.

    The percpu allocator reports *populated* pages and reuses free room in them first (room left by
    memcgs freed a moment ago), so a single before/after difference can read 0. The probe adds
    batches of empty memcgs, all kept until the end, until GROWING consecutive batches each grew
    Percpu, and takes the cost from the last GROWING-1 of them only. A batch is sized to ~`budget` bytes (from
    ~1.8 KB per possible CPU, used for sizing only), so a 96-CPU node makes a few dozen, not thousands.
    """
    if not root.live:
        raise InputError(root.path, "the memcg cost probe needs the live host, not a recorded tree")
    mc = Memcg(root)
    cpus = possible_cpus(root)
    batch = max(8, -(-budget // (1843 * cpus)))
    with scratch_tree(mc, "probe") as rel:
        return _probe(root, mc, rel, batch, cpus, max_batches)


def _probe(root: Root, mc: Memcg, rel: str, batch: int, cpus: int, max_batches: int) -> MemcgCost:
    parent = mc.path(rel)
    before = mc.count()
    made: list[str] = []
    rows: list[tuple[int, int]] = []
    try:
        mc.make(rel, children=True)
        prev = _meminfo(root)
        for b in range(max_batches):
            for i in range(batch):
                d = os.path.join(parent, f"p{b}-{i}")
                os.mkdir(d)
                made.append(d)
            cur = _meminfo(root)
            rows.append((cur[0] - prev[0], cur[1] - prev[1]))
            prev = cur
            if len(rows) >= GROWING and all(r[0] > 0 for r in rows[-GROWING:]):
                break
    except OSError as e:
        raise InputError(e.filename or parent, f"memcg cost probe: {e.strerror}") from None
    finally:
        remove_cgroup_tree(parent)
        _settle(mc, before)
    if len(rows) < GROWING or not all(r[0] > 0 for r in rows[-GROWING:]):
        raise InputError("/proc/meminfo", f"memcg cost probe: Percpu did not grow in {GROWING} consecutive batches "
                         f"of {batch} memcgs ({len(made)} made)")
    grown = rows[-GROWING + 1:]
    n = batch * len(grown)
    return MemcgCost(sum(r[0] for r in grown) / n, max(0.0, sum(r[1] for r in grown) / n), len(made), len(rows),
                     cpus, mc.name)
