"""zombies_no_hot_core on Debian's 6.1: 5,000 dying memcgs (each pinned by a page of tmpfs, made before
the recording) on an otherwise idle node for 30 s. A zombie_cgroups finding for check, but no incident
for explain."""

from zombies_no_hot_core import EXPECT, run, setup  # noqa: F401 - the same scenario

KERNEL = "6.1"
CPUS = 4
