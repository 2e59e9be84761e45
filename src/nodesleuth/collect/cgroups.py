"""Cgroup census: tracked vs live cgroups per v1 controller, and dying descendants on v2.

Cost model (the tool must not become the problem it hunts):
- every tick reads /proc/cgroups and the v2 root cgroup.stat: both are O(number of controllers),
  the kernel keeps the counters, nothing walks the memcg tree (cgroup.stat does no rstat flush);
- the v1 live-directory count needs a directory walk, which costs O(live cgroups) in the VFS
  (it never touches dying memcgs, they have no directory). It is done at a lower rate
  (`live_every`, default 60 s) and reused between walks; the walk also finds the v2 subtrees
  that hold dying descendants, reading only cgroup.stat files on the way down.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..model import ControllerCount, V2Stat, DyingSubtree, Census  # noqa: F401  (record types live in model.py)
from ..errors import InputError
from .pread import Preader, read_text
from .root import Root, parse_int


@dataclass(frozen=True)
class Mount:
    fstype: str  # "cgroup" (v1) or "cgroup2"
    path: str  # host-absolute mount point
    controllers: tuple[str, ...]  # v1 controllers (super options); empty for cgroup2


def parse_mountinfo(text: str, path: str) -> list[Mount]:
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            left, right = line.split(" - ", 1)
            lf = left.split()
            rf = right.split()
            mnt = lf[4].replace("\\040", " ")
            fstype, opts = rf[0], rf[2] if len(rf) > 2 else ""
        except (ValueError, IndexError):
            raise InputError(path, f"malformed line {line[:80]!r}") from None
        if fstype == "cgroup":
            ctrls = tuple(o for o in opts.split(",") if o not in ("rw", "ro") and "=" not in o)
            out.append(Mount("cgroup", mnt, ctrls))
        elif fstype == "cgroup2":
            out.append(Mount("cgroup2", mnt, ()))
    return out


def parse_proc_cgroups(text: str, path: str) -> list[tuple[str, int, int, int]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4:
            raise InputError(path, f"expected 4 columns, got {len(parts)} in {line!r}")
        name = parts[0]
        rows.append((name, parse_int(path, parts[1], f"hierarchy of {name}"),
                     parse_int(path, parts[2], f"num_cgroups of {name}"),
                     parse_int(path, parts[3], f"enabled of {name}")))
    if not rows:
        raise InputError(path, "no controller rows")
    return rows


def parse_cgroup_stat(text: str, path: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            raise InputError(path, f"malformed line {line!r}")
        out[parts[0]] = parse_int(path, parts[1], parts[0])
    if "nr_dying_descendants" not in out:
        raise InputError(path, "no nr_dying_descendants line")
    return out


def v2_stat(root: Root, mount: str, reader: Preader | None = None) -> V2Stat:
    """`reader` (a loop's) keeps the root cgroup.stat open between ticks."""
    p = os.path.join(mount, "cgroup.stat")
    st = parse_cgroup_stat(root.read(p) if reader is None else read_text(reader, root, p), root.join(p))
    subsys = {}
    for k, v in st.items():
        if k.startswith("nr_subsys_"):
            name = k[len("nr_subsys_"):]
            subsys[name] = (v, st.get(f"nr_dying_subsys_{name}", 0))
    return V2Stat(mount, st.get("nr_descendants", 0), st["nr_dying_descendants"], subsys)


def count_dirs(path: str) -> int:
    """Directories under path, including path itself (what `find -type d | wc -l` prints)."""
    n = 1
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    n += 1
                    stack.append(e.path)
    return n


def dying_subtrees(root: Root, mount: str, max_depth: int = 6, limit: int = 10) -> list[DyingSubtree]:
    """Descend only into v2 children that report dying descendants; return the deepest holders.

    A cgroup whose dying count is not explained by its live children is where the zombies were
    removed from (e.g. /system.slice for crash-looping services).
    """
    out: list[DyingSubtree] = []
    base = root.join(mount)

    def walk(rel: str, dying: int, depth: int) -> None:
        in_children = 0
        if depth < max_depth:
            d = os.path.join(base, rel.lstrip("/"))
            try:
                names = [e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False)]
            except OSError:
                names = []
            for name in names:
                crel = f"{rel.rstrip('/')}/{name}"
                try:
                    st = parse_cgroup_stat(root.read(os.path.join(mount, crel.lstrip("/"), "cgroup.stat")), crel)
                except InputError:
                    continue
                cd = st["nr_dying_descendants"]
                if cd > 0:
                    in_children += cd
                    walk(crel, cd, depth + 1)
        own = dying - in_children
        if own > 0:
            out.append(DyingSubtree(rel or "/", own))

    top = v2_stat(root, mount).nr_dying_descendants
    if top > 0:
        walk("/", top, 0)
    out.sort(key=lambda s: -s.dying)
    return out[:limit]


class CgroupCensus:
    """Stateful census: cheap counters every call, the directory walk every `live_every` seconds."""

    def __init__(self, root: Root, live_every: float = 60.0, reader: Preader | None = None):
        self.root = root
        self.reader = reader  # the per-tick files (/proc/cgroups, root cgroup.stat) stay open
        self.live_every = live_every
        # under a host root mounted into a container, "self" is the container: PID 1 is the host
        mi = "/proc/1/mountinfo" if not root.live and root.exists("/proc/1/mountinfo") else "/proc/self/mountinfo"
        self.problems: dict[str, str] = {}
        try:
            self.mounts = parse_mountinfo(root.read(mi), root.join(mi))
        except InputError as e:  # no mount table: no controller can be counted, but the rest goes on
            self.mounts = []
            self.problems["cgroup mounts"] = str(e)
        self._live: dict[str, int | None] = {}
        self._subtrees: tuple[DyingSubtree, ...] = ()
        self._walked_at: float | None = None

    def v1_mount(self, controller: str) -> str | None:
        return next((m.path for m in self.mounts if m.fstype == "cgroup" and controller in m.controllers), None)

    def v2_mount(self) -> str | None:
        return next((m.path for m in self.mounts if m.fstype == "cgroup2"), None)

    def walk(self, now: float | None = None) -> None:
        """The expensive part: count live v1 directories per mounted hierarchy."""
        live: dict[str, int | None] = {}
        for m in self.mounts:
            if m.fstype == "cgroup" and m.path not in live:
                d = self.root.join(m.path)
                if os.path.isdir(d):
                    live[m.path] = count_dirs(d)
                else:  # mountinfo names it but the directory is not there: unknown, not "1 live"
                    live[m.path] = None
        self._live = live
        v2m = self.v2_mount()
        try:
            self._subtrees = tuple(dying_subtrees(self.root, v2m)) if v2m else ()
        except InputError as e:
            self._subtrees = ()
            self.problems.setdefault("cgroup v2", str(e))
        self._walked_at = time.time() if now is None else now

    def sample(self, now: float | None = None, force_walk: bool = False) -> Census:
        now = time.time() if now is None else now
        if force_walk or self._walked_at is None or now - self._walked_at >= self.live_every:
            self.walk(now)
        try:
            text = self.root.read("/proc/cgroups") if self.reader is None else read_text(self.reader, self.root,
                                                                                        "/proc/cgroups")
            rows = parse_proc_cgroups(text, self.root.join("/proc/cgroups"))
        except InputError as e:
            rows = []
            self.problems.setdefault("cgroup v1", str(e))
        v1 = []
        for name, hier, num, enabled in rows:
            if hier == 0 or not enabled:
                continue  # bound to v2 or not mounted: /proc/cgroups cannot tell dying from live
            mnt = self.v1_mount(name)
            if mnt is None:
                self.problems.setdefault(f"cgroup v1 {name}", f"{self.root.join('/proc/cgroups')}: {name} is on "
                                         f"hierarchy {hier} but the mount table does not mount it: "
                                         "live cgroups unknown")
            elif self._live.get(mnt) is None:
                self.problems.setdefault(f"cgroup v1 {name}", f"{self.root.join(mnt)}: mounted per the mount table "
                                         "but the directory is absent: live cgroups unknown")
            v1.append(ControllerCount(name, hier, num, self._live.get(mnt) if mnt else None, mnt))
        v2m = self.v2_mount()
        v2 = None
        if v2m:
            try:
                v2 = v2_stat(self.root, v2m, self.reader)
            except InputError as e:  # cgroup2 is mounted but its root cgroup.stat cannot be read
                self.problems.setdefault("cgroup v2", str(e))
        return Census(now, tuple(v1), v2, self._subtrees, self._walked_at, tuple(self.problems.items()))


def pids_in_cgroup(root: Root, path: str) -> set[int]:
    """Processes in a cgroup and its descendants, on whichever mounted hierarchy has that path
    (v1 memory, the v1 name=systemd tree, or v2)."""
    mounts = parse_mountinfo(root.read("/proc/self/mountinfo"), root.join("/proc/self/mountinfo"))
    order = sorted(mounts, key=lambda m: (m.fstype != "cgroup2", "memory" not in m.controllers))
    for m in order:
        base = root.join(os.path.join(m.path, path.lstrip("/")))
        if not os.path.isdir(base):
            continue
        pids: set[int] = set()
        for dp, _, files in os.walk(base):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(dp, "cgroup.procs")) as f:
                        pids |= {int(x) for x in f.read().split()}
                except OSError:
                    pass
        return pids
    raise InputError(path, "no such cgroup on any mounted hierarchy")


def remove_cgroup_tree(path: str) -> None:
    """rmdir `path` and every cgroup below it, deepest first; what cannot be removed (a process still
    in it) stays, quietly: callers check the count they care about."""
    for dp, dn, _ in sorted(os.walk(path), key=lambda t: -t[0].count("/")):
        for d in dn:
            try:
                os.rmdir(os.path.join(dp, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass
