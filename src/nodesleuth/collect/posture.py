"""Does this kernel still make zombies? Measured, not assumed from a version number.

What decides it is whether page cache charged to a memory cgroup keeps the cgroup alive after rmdir:
until Linux 7.1 it does (every kernel the incident ran on); the "Eliminate Dying Memory Cgroup" series
reparents a removed memcg's LRU pages (function lru_reparent_memcg; distros may backport it, so the
symbol is looked up in /proc/kallsyms, never inferred from the release). The behaviour probe makes N
memory cgroups under a parent of its own, each charging one page of cache, on tmpfs and on a disk file
system (they can differ: 7.2 was measured to free the tmpfs ones and keep the disk ones), removes
them, and counts how many are still dying after `wait` seconds. Then it deletes the files (their pages
go with them, and with them the cgroups) and removes its parent: nothing is dropped node-wide.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from ..model.errors import InputError
from ..model.procfs import parse_cgroup_stat
from ..model.records import ZombiePosture
from ..node.cgroupfs import Memcg, count_dirs, make_zombies, mounts, remove_cgroup_tree, v1_mount, v2_mount
from ..node.root import Root

REPARENT_SYMBOLS = ("lru_reparent_memcg", "lru_gen_reparent_memcg")


def kallsyms_has(root: Root, names: tuple[str, ...]) -> bool | None:
    """Whether any of `names` is a kernel symbol (None when /proc/kallsyms cannot be read)."""
    p = root.join("/proc/kallsyms")
    want = {n.encode() for n in names}
    try:
        with open(p, "rb") as f:
            for line in f:
                name = line.rstrip().rsplit(b" ", 2)[-1] if b"\t" not in line else line.split(b"\t")[0].rsplit(b" ", 1)[-1]
                if name in want:
                    return True
    except OSError:
        return None
    return False


def hierarchy(root: Root) -> str:
    ms = mounts(root)
    v1, v2 = v1_mount(ms, "memory"), v2_mount(ms)
    return "hybrid" if v1 and v2 else "v1" if v1 else "v2" if v2 else "none"


def read(root: Root) -> ZombiePosture:
    """The static part: kernel, hierarchy, the reparenting symbol, cgroup.stat's per-subsystem counts."""
    release = (root.read_opt("/proc/sys/kernel/osrelease") or os.uname().release).strip()
    try:
        h = hierarchy(root)
    except InputError:
        h = "unknown"
    nds = None
    ms = mounts(root) if h != "unknown" else []
    v2m = v2_mount(ms)
    if v2m:
        st = root.read_opt(os.path.join(v2m, "cgroup.stat"))
        nds = st is not None and "nr_dying_subsys_memory" in st
    return ZombiePosture(release, h, kallsyms_has(root, REPARENT_SYMBOLS), nds)


def _dying_under(mc: Memcg, parent: str, baseline: int | None) -> int | None:
    if mc.version == 2:
        p = os.path.join(parent, "cgroup.stat")
        try:
            with open(p) as f:
                return parse_cgroup_stat(f.read(), p)["nr_dying_descendants"]
        except (OSError, InputError):
            return None
    now = mc.count()  # v1: the kernel counts globally; the probe's are what grew since its baseline
    return None if now is None or baseline is None else max(0, now - baseline - 1)  # less the leaf they leave to


def probe(root: Root, n: int = 50, wait: float = 3.0) -> dict:
    """Make n memcgs per kind of cache, each charging one page, remove them, and count the dying ones
    after `wait` s (both kinds at once: one wait); clean up. {"wait_s", "kinds": {kind: {"made",
    "dying"}}, "exact": v2 (per parent) or not (v1: the global count, which other jobs' cgroups move
    too, and both kinds' together: each kind is then its share)}."""
    if not root.live:
        raise InputError(root.path, "the zombie probe needs the live host, not a recorded tree")
    mc = Memcg(root)
    rel = f"nodesleuth-posture-{os.getpid()}"
    kinds = {k: b for k, b in {"tmpfs": "/dev/shm", "disk": "/var/tmp"}.items() if os.path.isdir(b)}
    out: dict = {"wait_s": wait, "n": n, "kinds": {}, "exact": mc.version == 2}
    made: dict[str, tuple[str, str, int]] = {}
    try:
        baseline = mc.count()
        for kind, base in kinds.items():
            parent = mc.make(f"{rel}/{kind}", children=True)
            data = tempfile.mkdtemp(prefix="nodesleuth-posture-", dir=base)
            made[kind] = (parent, data, make_zombies(n, parent, data, file_bytes=4096, prefix="p"))
        time.sleep(wait)
        if mc.version == 2:
            for kind, (parent, _, k) in made.items():
                out["kinds"][kind] = {"made": k, "dying": _dying_under(mc, parent, None)}
        else:  # v1: the node-wide count's growth, less the probe's own live cgroups (its parents, leaves)
            now = mc.count()
            total = None if now is None or baseline is None else max(0, now - baseline - count_dirs(mc.path(rel)))
            for kind, (_, _, k) in made.items():
                out["kinds"][kind] = {"made": k, "dying": None if total is None else min(k, total)}
                total = None if total is None else max(0, total - k)
    except OSError as e:
        raise InputError(e.filename or mc.path(rel), f"zombie probe: {e.strerror}") from None
    finally:
        for parent, data, _ in made.values():
            shutil.rmtree(data, ignore_errors=True)  # the pages go with the files, the cgroups with them
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any((_dying_under(mc, p, None) or 0) > 0 for p, _, _ in made.values()
                                                  if mc.version == 2):
            time.sleep(0.2)
        remove_cgroup_tree(mc.path(rel))
    return out


def posture(root: Root, run_probe: bool = True, n: int = 50, wait: float = 3.0) -> ZombiePosture:
    p = read(root)
    if run_probe:
        try:
            p.probe = probe(root, n, wait)
        except InputError as e:
            p.problem = str(e)
    else:
        p.problem = "probe not run (--no-probe, or a recorded tree)"
    return p


def describe(p: ZombiePosture) -> list[str]:
    """What a user needs to know, in sentences."""
    out = [f"kernel {p.kernel}, cgroup {p.hierarchy}; reparents a removed memcg's LRU pages: "
           + {True: "yes (lru_reparent_memcg)", False: "no", None: "unknown (/proc/kallsyms unreadable)"}[p.reparents_lru]
           + ("; cgroup.stat counts dying memory cgroups (nr_dying_subsys_memory)" if p.nr_dying_subsys else "")]
    if p.probe:
        kinds = ", ".join(f"{k}: {v['dying'] if v['dying'] is not None else '?'} of {v['made']} still dying"
                          for k, v in p.probe["kinds"].items())
        out.append(f"probe: {p.probe['n']} memcgs per kind of page cache, {p.probe['wait_s']:g} s after removal: {kinds}"
                   + ("" if p.probe.get("exact") else " (cgroup v1: from the node-wide count)"))
        if p.accumulate:
            out.append("page cache keeps removed memory cgroups dying on this kernel: zombies accumulate; "
                       "the remedy is to stop their creator and reclaim the cache (drop_caches / memory.reclaim) "
                       "or reboot")
        elif p.accumulate is False:
            out.append("removed memory cgroups did not stay dying under page cache here: zombies from page cache "
                       "do not accumulate on this kernel; a crash loop costs CPU and restarts, not dying memcgs, "
                       "so stopping it is the whole remedy (no reclaim or reboot needed for them)")
    elif p.problem:
        out.append(f"behaviour not measured: {p.problem}")
    return out
