"""Kernel lock contention: eight threads pinned to CPU 1 append a byte at a time to one file on tmpfs,
each through its own open file (O_APPEND: the inode's rwsem for write), while a ninth thread pinned to
CPU 2 appends 256 KiB at a time and so holds the lock most of the time. CPU 1's threads spin on the
lock (osq_lock, rwsem_spin_on_owner); CPU 2 is the holder, busy copying in the kernel. explain must
lead with lock spinning on CPU 1 (no root cause: the lock's holder is not in the data) and name the
holder, in the kernel, on CPU 2."""

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": True, "kind": "hot_core", "cpu": 1, "family": "lock", "root_cause": None,
          "also": [{"kind": "hot_core", "cpu": 2, "family": "kernel",
                    "root_cause": r"^lock-holder \(pid \d+\), in the kernel"}]}


def run(x):
    with x.episode():
        x.wait(x.tool("lock-spin", "lockfile2", 25, 1, 8, 2, "/run/corpus-lockfile"))
