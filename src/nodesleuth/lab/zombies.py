"""Make and clear real zombie memory cgroups (cgroup v1 memory controller or v2).

A zombie is made the way the ECS agent made them: a process joins a fresh memory cgroup, charges
page cache to it by writing a file, leaves, and the cgroup is removed. The page cache keeps the
memcg alive (dying) until it is reclaimed.
"""

from __future__ import annotations

import os
import shutil

from ..node.cgroupfs import drop_caches, remove_cgroup_tree


def clear(parent: str, data_dir: str) -> None:
    """Delete the files that pin the zombies, drop caches, and remove the parent cgroup."""
    shutil.rmtree(data_dir, ignore_errors=True)
    drop_caches()
    if os.path.isdir(parent):
        remove_cgroup_tree(parent)


