"""Make and clear real zombie memory cgroups (cgroup v1 memory controller or v2).

A zombie is made the way the ECS agent made them: a process joins a fresh memory cgroup, charges
page cache to it by writing a file, leaves, and the cgroup is removed. The page cache keeps the
memcg alive (dying) until it is reclaimed.
"""

from __future__ import annotations

import os
import shutil

from ..node.cgroupfs import drop_caches, enter, remove_cgroup_tree


def make_zombies(n: int, parent: str, data_dir: str, file_bytes: int = 8192, prefix: str = "z") -> int:
    """Create n dying memcgs under `parent` (a directory of the memory controller's hierarchy, made if
    missing) from a forked child; returns how many were made. The child joins each new cgroup, writes
    its file there, and leaves for a leaf of its own (`parent/_leave`: on cgroup v2 a cgroup whose
    children have controllers may hold no process), so the caller's membership never changes."""
    os.makedirs(parent, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    v2 = os.path.exists(os.path.join(parent, "cgroup.subtree_control"))
    if v2:  # the new cgroups are memcgs only if the parent hands the memory controller down
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if "memory" not in f.read().split():
                with open(os.path.join(parent, "cgroup.subtree_control"), "w") as w:
                    w.write("+memory")
    leave = os.path.join(parent, "_leave")
    os.makedirs(leave, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        made = 0
        try:
            me = os.getpid()
            payload = b"z" * file_bytes
            for i in range(n):
                cg = os.path.join(parent, f"{prefix}{i}-{me}")
                os.mkdir(cg)
                enter(cg, me)
                with open(os.path.join(data_dir, f"{prefix}{i}-{me}"), "wb") as f:
                    f.write(payload)
                enter(leave, me)
                os.rmdir(cg)
                made += 1
        finally:
            os.write(w, str(made).encode())
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 64)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return int(data or b"0")


def clear(parent: str, data_dir: str) -> None:
    """Delete the files that pin the zombies, drop caches, and remove the parent cgroup."""
    shutil.rmtree(data_dir, ignore_errors=True)
    drop_caches()
    if os.path.isdir(parent):
        remove_cgroup_tree(parent)


