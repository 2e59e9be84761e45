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
import re
import time

from ..model.errors import InputError
from ..model.records import ZombiePosture
from ..node.cgroupfs import (Memcg, count_dirs, drop_pin_dir, dying_under, held_pages, make_zombies, mounts,
                             pin_dir, remove_cgroup_tree, remove_stale_pins, retire_tree, scratch_tree, v1_mount, v2_mount)
from ..node.root import Root, fstype

REPARENT_SYMBOLS = ("lru_reparent_memcg", "lru_gen_reparent_memcg")


def kallsyms_has(root: Root, names: tuple[str, ...]) -> bool | None:
    """Whether any of `names` is a kernel symbol (None when /proc/kallsyms cannot be read).
    Lines are `ADDR TYPE NAME` or `ADDR TYPE NAME\t[MODULE]`: a name is a match where it follows a space
    and ends the line or meets the tab. Searched a megabyte at a time with one regular expression (a
    Python loop over its ~120,000 lines cost check 0.1 s of CPU); a chunk's partial last line is carried."""
    p = root.join("/proc/kallsyms")
    rx = re.compile(rb" (?:" + b"|".join(re.escape(n.encode()) for n in names) + rb")(?:\t|\n)")
    carry = b""
    try:
        with open(p, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    return rx.search(carry + b"\n") is not None if carry else False
                buf = carry + chunk
                cut = buf.rfind(b"\n") + 1
                if rx.search(buf, 0, cut):
                    return True
                carry = buf[cut:]
    except OSError:
        return None


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


MEMORY_FS = ("tmpfs", "ramfs", "devtmpfs")
DISK_DIRS = ("/var/tmp", "/var/lib", "/tmp", "/root")


def disk_dir() -> str | None:
    """A writable directory on a disk file system (not tmpfs) for the probe's disk page cache:
    $NODESLEUTH_PROBE_DIR, else the first of DISK_DIRS that is on one; None when none is."""
    for d in ([os.environ["NODESLEUTH_PROBE_DIR"]] if os.environ.get("NODESLEUTH_PROBE_DIR") else []) + list(DISK_DIRS):
        if os.path.isdir(d) and os.access(d, os.W_OK) and fstype(d) not in MEMORY_FS:
            return d
    return None


def _quiet_count(mc: Memcg, quiet: float = 1.0, limit: float = 10.0) -> int | None:
    """v1's node-wide count once it has not moved for `quiet` s: cgroups removed a moment ago (the cost
    probe's) are freed asynchronously and must not be in the baseline the probe's own are counted from."""
    t0 = time.monotonic()
    last, since = mc.count(), t0
    while time.monotonic() - t0 < limit:
        time.sleep(0.1)
        now = mc.count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def _writeback_window(root: Root) -> float:
    """Seconds until the kernel has written back a file dirtied now and the flusher has passed again:
    vm.dirty_expire_centisecs + 2 x vm.dirty_writeback_centisecs (3000 and 500 by default: 40 s)."""
    def cs(name: str, default: int) -> float:
        try:
            return int((root.read_opt(f"/proc/sys/vm/{name}") or str(default)).strip()) / 100
        except ValueError:
            return default / 100
    return cs("dirty_expire_centisecs", 3000) + 2 * cs("dirty_writeback_centisecs", 500)


def probe(root: Root, n: int = 50, wait: float = 3.0) -> dict:
    """Make n memcgs per kind of cache, each charging one page, remove them, and count the dying ones
    after `wait` s (both kinds at once: one wait); clean up. {"wait_s", "kinds": {kind: {"made",
    "dying"[, "after_writeback": {"dying", "seconds"}]}}, "exact": v2 (per parent) or not (v1: the
    global count, which other jobs' cgroups move too, and both kinds' together: each kind is then its
    share), "left": still dying after the cleanup}.

    When one kind was freed and another was not (7.2: tmpfs freed at once, a written file kept), the
    kept ones are watched through writeback: a memcg that dirtied an inode holds a reference through
    its writeback structure until the inode is clean and a later memcg offline runs the kernel's
    cleanup of offline writebacks (mm/backing-dev.c cleanup_offline_cgwbs_workfn). A crash loop
    offlines memcgs all the time, so the probe offlines one every 2 s and waits up to the writeback
    window (_writeback_window, 40 s by default): what is still dying then accumulates."""
    if not root.live:
        raise InputError(root.path, "the zombie probe needs the live host, not a recorded tree")
    mc = Memcg(root)
    kinds = _kinds()
    for base in kinds.values():
        remove_stale_pins(root, base, "posture")
    with scratch_tree(mc, "posture") as rel:
        return _probe(root, mc, rel, kinds, n, wait)


def _kinds() -> dict[str, str]:
    """Where each kind of page cache is written: tmpfs (/dev/shm) and a disk file system."""
    return {k: b for k, b in {"tmpfs": "/dev/shm", "disk": disk_dir()}.items() if b and os.path.isdir(b)}


def _probe(root: Root, mc: Memcg, rel: str, kinds: dict[str, str], n: int, wait: float) -> dict:
    out: dict = {"wait_s": wait, "n": n, "kinds": {}, "exact": mc.version == 2}
    made: dict[str, tuple[str, str, int]] = {}
    baseline = mc.count() if mc.version == 2 else _quiet_count(mc)

    def dying(which: list[str]) -> dict[str, int | None]:
        if mc.version == 2:
            return {k: dying_under(made[k][0]) for k in which}
        # v1: the node-wide count's growth, less the probe's own live cgroups (its parents, leaves),
        # shared out over the kinds in order
        now = mc.count()
        total = None if now is None or baseline is None else max(0, now - baseline - count_dirs(mc.path(rel)))
        got = {}
        for k in made:
            got[k] = None if total is None else min(made[k][2], total)
            total = None if total is None else max(0, total - made[k][2])
        return {k: got[k] for k in which}

    pins: list[str] = []
    try:
        for kind, base in kinds.items():
            parent = mc.make(f"{rel}/{kind}", children=True)
            data = pin_dir(base, "posture")
            pins.append(data)
            made[kind] = (parent, data, make_zombies(n, parent, data, file_bytes=4096, prefix="p"))
        time.sleep(wait)
        for kind, d in dying(list(made)).items():
            out["kinds"][kind] = {"made": made[kind][2], "dying": d}
        kept = [k for k, v in out["kinds"].items() if v["dying"] is not None and v["dying"] > 0.5 * v["made"]]
        if kept and len(kept) < len(made):
            _through_writeback(mc, root, rel, made, kept, out, dying)
    except OSError as e:
        raise InputError(e.filename or mc.path(rel), f"zombie probe: {e.strerror}") from None
    finally:
        for data in pins:
            drop_pin_dir(data)

        def left() -> int | None:
            if mc.version == 1 and all(held_pages(made[k][0]) == 0 for k in made):
                # v1 has no per-parent dying count, and the node-wide one moves with other jobs' cgroups:
                # but a kind's parent counts its dying children's pages (memory.stat total_*), and with no
                # page charged under it nothing pins them (6.x reparents their kernel objects): none left
                return 0
            d = list(dying(list(made)).values())
            # a dying memcg pins its parent: the kind's parent and the probe's own top stay dying with it
            return None if None in d else sum(d) + sum(1 for x in d if x) + (1 if any(d) else 0)

        # what it leaves: the tree is drained (the CPUs' charge stocks) and reclaimed (pages its child was
        # first to fault in, which deleting its files does not free) until nothing under it is dying,
        # then removed (node/cgroupfs.retire_tree); on v1 with pages still held, the node-wide estimate
        still = left() if mc.version == 1 else None
        gone = retire_tree(mc.path(rel), patience=20)
        still = gone if gone is not None else still
    out["left"] = still
    return out


def _through_writeback(mc: Memcg, root: Root, rel: str, made: dict, kept: list[str], out: dict, dying) -> None:
    """Offline an empty memcg every 2 s until the kept kinds are freed or the writeback window ends."""
    t0 = time.monotonic()
    limit = _writeback_window(root) + 5
    now = dying(kept)
    i = 0
    while time.monotonic() - t0 < limit and any(v for v in now.values()):
        time.sleep(2)
        t = mc.make(f"{rel}/_offline{i}")  # an empty memcg's offline runs the kernel's cleanup
        remove_cgroup_tree(t)
        i += 1
        time.sleep(0.5)
        now = dying(kept)
    for k in kept:
        out["kinds"][k]["after_writeback"] = {"dying": now[k], "seconds": round(time.monotonic() - t0, 1)}


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
                   + ("" if p.probe.get("exact") else " (cgroup v1: from the node-wide count)")
                   + (f"; {p.probe['left']} of its memcgs still dying after it deleted its files (pages it was "
                      "first to charge that stay cached)" if p.probe.get("left") else ""))
        kinds = p.probe["kinds"]
        wb = {k: v["after_writeback"] for k, v in kinds.items() if v.get("after_writeback")}
        if wb:
            freed = [k for k in kinds if k not in wb]
            out.append("writeback: " + ", ".join(f"{k}: {v['dying'] if v['dying'] is not None else '?'} of "
                                                   f"{kinds[k]['made']} still dying after {v['seconds']:g} s"
                                                   for k, v in wb.items()))
        if wb and p.accumulate is False:
            out.append(f"this kernel frees a removed memcg's {' and '.join(freed)} page cache at once, and one that "
                       f"wrote to {' or '.join(wb)} once its file is written back and another memcg goes offline "
                       f"(within {max(v['seconds'] for v in wb.values()):g} s here): zombies do not accumulate on "
                       "this kernel beyond the starts of the last minute; stopping their creator is the whole remedy "
                       "(no reclaim or reboot needed for them)")
        elif wb and p.accumulate:
            out.append(f"this kernel frees a removed memcg's {' and '.join(freed)} page cache at once, but one that "
                       f"wrote to {' or '.join(wb)} stayed dying through writeback: zombies from written files "
                       "accumulate; the remedy is to stop their creator and evict the inodes (drop_caches) or reboot")
        elif p.accumulate:
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
