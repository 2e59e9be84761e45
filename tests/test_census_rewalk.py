"""The v1 census walks live directories every 60 s and reuses the count between walks; a count that moved
since the walk makes the cached one stale: many cgroups made (pods starting) must not read as dying, many
removed must not make live exceed tracked. Real memory cgroups on this host (cgroup v1)."""

from __future__ import annotations

import time

from conftest import Busy, memcg, missing, needs_root, retry_when_busy
from nodesleuth.collect.cgroups import CgroupCensus
from nodesleuth.node.cgroupfs import remove_cgroup_tree
from nodesleuth.node.root import Root

N = 300  # more than REWALK_MIN and REWALK_SHARE of this host's memcgs


def _tracked() -> int:
    with open("/proc/cgroups") as f:
        return next(int(ln.split()[2]) for ln in f if ln.startswith("memory\t"))


def _memory(c):
    return next(x for x in c.v1 if x.name == "memory")


@needs_root
@retry_when_busy()
def test_made_and_removed_cgroups_do_not_read_as_dying_between_walks():
    mc = memcg()
    if mc.version != 1:
        missing("a cgroup v1 memory hierarchy (the v1 census walks; v2 counts dying in cgroup.stat)")
    top = "nodesleuth-rewalk-test"
    cen = CgroupCensus(Root("/"), live_every=60.0)
    t0 = 1_000_000.0
    before = _memory(cen.sample(now=t0))
    try:
        mc.make(top)
        for i in range(N):
            mc.make(f"{top}/c{i}")
        after = cen.sample(now=t0 + 1)  # within REWALK_AFTER: the cached walk is used
        assert after.live_walked_at == t0 and _memory(after).live == before.live
        made = cen.sample(now=t0 + 6)  # the count moved by N: walked again, the new cgroups are live
        m = _memory(made)
        assert made.live_walked_at == t0 + 6 and m.live >= before.live + N, (before, m)
        assert m.dying <= before.dying + 20, (before, m)  # not N false zombies (others' jobs: a few)
    finally:
        remove_cgroup_tree(mc.path(top))
    # empty memcgs are freed shortly after their removal (RCU, the offline work): wait for the count to fall
    deadline = time.time() + 20
    while _tracked() > m.tracked - N + 20:
        if time.time() > deadline:
            raise Busy(f"the memory cgroup count stayed at {_tracked()} (was {m.tracked} with ours): other jobs "
                       "make cgroups as fast as ours are freed")
        time.sleep(0.2)
    # empty cgroups are freed at removal: the count falls by N (below the cached live, or by more than
    # REWALK_SHARE), so the census walks again instead of keeping N directories that are gone
    gone = cen.sample(now=t0 + 12)
    g = _memory(gone)
    assert gone.live_walked_at == t0 + 12 and g.tracked >= g.live and g.live <= m.live - N + 20, (m, g)
