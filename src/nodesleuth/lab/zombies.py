"""Make and clear real zombie memory cgroups (cgroup v1 memory controller or v2).

A zombie is made the way the ECS agent made them: a process joins a fresh memory cgroup, charges
page cache to it by writing a file, leaves, and the cgroup is removed. The page cache keeps the
memcg alive (dying) until it is reclaimed.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ..collect.cgroups import remove_cgroup_tree

V1_MEMORY = "/sys/fs/cgroup/memory"
CGROUP2 = "/sys/fs/cgroup"


class Memcg:
    """The memory controller's files under either cgroup version: v1's own hierarchy at
    /sys/fs/cgroup/memory (memory.limit_in_bytes, memory.usage_in_bytes) or the unified v2 one
    (memory.max, memory.current, and `+memory` in every ancestor's cgroup.subtree_control)."""

    def __init__(self, base: str = CGROUP2):
        v1 = os.path.join(base, "memory")
        if os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
            self.version, self.mount = 1, v1
        elif "memory" in _read(os.path.join(base, "cgroup.controllers")).split():
            self.version, self.mount = 2, base
        else:
            raise RuntimeError(f"{base}: no cgroup v1 memory hierarchy and no v2 memory controller")

    def path(self, rel: str) -> str:
        return os.path.join(self.mount, rel.strip("/"))

    def make(self, rel: str, children: bool = False) -> str:
        """Create `rel` (and its parents); on v2 enable the memory controller down to it (and, with
        `children`, for its own children: then it may hold no process itself)."""
        parts = [x for x in rel.strip("/").split("/") if x]
        here = self.mount
        for part in parts:
            if self.version == 2 and "memory" not in _read(os.path.join(here, "cgroup.subtree_control")).split():
                _write(os.path.join(here, "cgroup.subtree_control"), "+memory")
            here = os.path.join(here, part)
            os.makedirs(here, exist_ok=True)
        if children and self.version == 2:
            _write(os.path.join(here, "cgroup.subtree_control"), "+memory")
        return here

    def set_limit(self, rel: str, limit: int | None) -> None:
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        _write(os.path.join(self.path(rel), name), str(limit) if limit is not None else
               ("-1" if self.version == 1 else "max"))

    def limit(self, rel: str) -> int | None:
        """The hard limit in bytes, None when unlimited ("max" on v2, a huge number on v1)."""
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        text = _read(os.path.join(self.path(rel), name)).strip()
        return int(text) if text.isdigit() and int(text) < 1 << 60 else None

    def count(self) -> int:
        """Memory cgroups the kernel holds, live and dying: /proc/cgroups on v1; on v2 the root's
        cgroup.stat (nr_subsys_memory + nr_dying_subsys_memory, 6.12+; else all cgroups)."""
        if self.version == 1:
            return memory_num_cgroups()
        st = {}
        for line in _read(os.path.join(self.mount, "cgroup.stat")).splitlines():
            k, _, v = line.partition(" ")
            st[k] = int(v)
        if "nr_subsys_memory" in st:
            return st["nr_subsys_memory"] + st.get("nr_dying_subsys_memory", 0)
        return 1 + st.get("nr_descendants", 0) + st.get("nr_dying_descendants", 0)

    def usage(self, rel: str) -> int:
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(os.path.join(self.path(rel), name)).split()[0])


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def make_zombies(n: int, parent: str, data_dir: str, file_bytes: int = 8192, prefix: str = "z") -> int:
    """Create n dying memcgs under `parent` from a forked child; returns how many were made.

    The child moves itself, so the caller's cgroup membership never changes.
    """
    os.makedirs(parent, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        made = 0
        try:
            me = str(os.getpid())
            payload = b"z" * file_bytes
            for i in range(n):
                cg = os.path.join(parent, f"{prefix}{i}-{os.getpid()}")
                os.mkdir(cg)
                _write(os.path.join(cg, "cgroup.procs"), me)
                with open(os.path.join(data_dir, f"{prefix}{i}-{os.getpid()}"), "wb") as f:
                    f.write(payload)
                _write(os.path.join(parent, "cgroup.procs"), me)
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


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    _write("/proc/sys/vm/drop_caches", "3")


def clear(parent: str, data_dir: str) -> None:
    """Delete the files that pin the zombies, drop caches, and remove the parent cgroup."""
    shutil.rmtree(data_dir, ignore_errors=True)
    drop_caches()
    if os.path.isdir(parent):
        remove_cgroup_tree(parent)


def memory_num_cgroups(proc_cgroups: str = "/proc/cgroups") -> int:
    with open(proc_cgroups) as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] == "memory":
                return int(parts[2])
    raise RuntimeError("no memory controller in /proc/cgroups")
