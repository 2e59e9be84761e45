"""Make and clear real zombie memory cgroups (cgroup v1 memory controller or v2).

A zombie is made the way the ECS agent made them: a process joins a fresh memory cgroup, charges
page cache to it by writing a file, leaves, and the cgroup is removed. The page cache keeps the
memcg alive (dying) until it is reclaimed.
"""

from __future__ import annotations

import os
import shutil
import subprocess

V1_MEMORY = "/sys/fs/cgroup/memory"


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
        for d in sorted((os.path.join(dp, x) for dp, dn, _ in os.walk(parent) for x in dn), reverse=True):
            try:
                os.rmdir(d)
            except OSError:
                pass
        try:
            os.rmdir(parent)
        except OSError:
            pass


def memory_num_cgroups(proc_cgroups: str = "/proc/cgroups") -> int:
    with open(proc_cgroups) as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] == "memory":
                return int(parts[2])
    raise RuntimeError("no memory controller in /proc/cgroups")
