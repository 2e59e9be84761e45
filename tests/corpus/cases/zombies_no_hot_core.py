"""Zombies without a hot core: 5,000 dying memcgs (each pinned by a page of tmpfs, made before the
recording) on an otherwise idle node for 30 s. A zombie_cgroups finding for check, but no incident for
explain."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}


def setup(x):
    from _common import dying, zombies

    made = zombies(5000)
    x.note(f"{made} zombie memcgs made before the recording; the kernel counts {dying()} memory cgroups")


def run(x):
    with x.episode("quiet"):
        x.sleep(30)
