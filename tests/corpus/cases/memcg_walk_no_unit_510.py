"""The memcg walk without a unit to blame, on 5.10: 6,000 zombies made before the recording by a plain
process (no systemd unit, no restart loop), then the lab's data loader, pinned to CPU 1 in a
memory-limited pod beside them, reads at 8 MB/s: direct reclaim walks the zombies and saturates CPU 1.
The walk is proven (memory-cgroup code on the core), but nothing in the recording ties the zombies to a
unit (they were made before it began): explain must lead with the memcg walk and name no root cause."""

KERNEL = "5.10"
CPUS = 4
DISK_MB = 2048
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "memcg_walk", "root_cause": None}

LAB = "corpus-walk"


def setup(x):
    from _common import dying, zombies

    from nodesleuth.node.cgroupfs import Memcg

    mc = Memcg()
    mc.make(LAB + "/kubepods/job")
    made = zombies(6000, parent=LAB + "/docker")
    x.note(f"{made} zombie memcgs made before the recording under /{LAB}/docker; the kernel counts {dying()}")
    x.sh("truncate -s 200G /run/disk/data.bin")
    x.mc = mc


def run(x):
    from _common import loader_under_limit

    loader_under_limit(x, x.mc, LAB, LAB + "/kubepods/job")
