"""idle on Debian's 7.2 (a kernel that reparents LRU pages): only the recorder runs for the whole
window. No incident."""

from idle import EXPECT, run  # noqa: F401 - the same scenario

KERNEL = "7.2"
CPUS = 4
