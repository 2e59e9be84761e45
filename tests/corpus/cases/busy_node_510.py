"""busy_node on Debian's 5.10 with the cgroup v1 hierarchies (the seed host's generation): a user-space
loop on each of the 4 CPUs for 25 s; every core saturated, none starved alone. No incident."""

from busy_node import EXPECT, run  # noqa: F401 - the same scenario

KERNEL = "5.10"
HIERARCHY = "v1"
CPUS = 4
