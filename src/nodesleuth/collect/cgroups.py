"""Cgroup census: tracked vs live cgroups per v1 controller, and dying descendants on v2 (the registered `census`
collector).

Cost model (the tool must not become the problem it hunts):
- every tick reads /proc/cgroups and the v2 root cgroup.stat: both are O(number of controllers),
  the kernel keeps the counters, nothing walks the memcg tree (cgroup.stat does no rstat flush);
- the v1 live-directory count needs a directory walk, which costs O(live cgroups) in the VFS
  (it never touches dying memcgs, they have no directory). It is done at a lower rate
  (`live_every`, default 60 s) and reused between walks; the walk also finds the v2 subtrees
  that hold dying descendants, reading only cgroup.stat files on the way down. A cached count that
  no longer fits /proc/cgroups (fewer tracked than it, or tracked moved >= 5% and >= 50 since the
  walk, at most every 5 s) is walked again: pods starting must not read as zombies.
"""

from __future__ import annotations

import os
import time

from ..model.errors import InputError
from ..model.procfs import parse_proc_cgroups
from ..model.records import Census, ControllerCount, DyingSubtree
from ..node.cgroupfs import count_dirs, dying_subtrees, mounts, v1_mount, v2_mount, v2_stat
from ..node.pread import Preader, read_text
from ..node.root import Root
from .registry import Collector, collector


REWALK_MIN, REWALK_SHARE, REWALK_AFTER = 50, 0.05, 5.0  # when a moved count makes the cached walk stale
UNMOUNTED = "cgroup v1 controllers not mounted"  # a note, not an unread section (see sample())


@collector("census", options=("live_every",))
class CgroupCensus(Collector):
    """Stateful census: cheap counters every call, the directory walk every `live_every` seconds, at prime() (the
    census a check's window opens with: Sampler.primed) and on a tick whose caller asks (Seen.walk: the check's last)."""

    def __init__(self, root: Root, reader: Preader | None = None, live_every: float = 60.0):
        super().__init__(root, reader)  # the per-tick files (/proc/cgroups, root cgroup.stat) stay open
        self.live_every = live_every
        self.problems: dict[str, str] = {}
        try:
            self.mounts = mounts(root)
        except InputError as e:  # no mount table: no controller can be counted, but the rest goes on
            self.mounts = []
            self.problems["cgroup mounts"] = str(e)
        self._live: dict[str, int | None] = {}
        self._subtrees: tuple[DyingSubtree, ...] = ()
        self._walked_at: float | None = None
        self._num_at_walk: dict[str, int] = {}  # /proc/cgroups' count per controller when last walked

    def v1_mount(self, controller: str) -> str | None:
        return v1_mount(self.mounts, controller)

    def v2_mount(self) -> str | None:
        return v2_mount(self.mounts)

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

    def _rows(self) -> list:
        try:
            text = self.root.read("/proc/cgroups") if self.reader is None else read_text(self.reader, self.root,
                                                                                        "/proc/cgroups")
            return parse_proc_cgroups(text, self.root.join("/proc/cgroups"))
        except InputError as e:
            self.problems.setdefault("cgroup v1", str(e))
            return []

    def _stale(self, rows: list, now: float) -> bool:
        """Whether the cached live counts no longer fit /proc/cgroups: a controller tracks fewer cgroups
        than were live at the walk (cgroups were removed since), or its count moved by REWALK_SHARE (at
        least REWALK_MIN) since the walk and REWALK_AFTER s have passed: mass creation (pods starting)
        would otherwise read as dying, mass removal as fewer zombies than there are."""
        for name, hier, num, enabled in rows:
            mnt = self.v1_mount(name) if hier and enabled else None
            live, then = self._live.get(mnt) if mnt else None, self._num_at_walk.get(name)
            if live is not None and num < live:
                return True
            if then is not None and abs(num - then) >= max(REWALK_MIN, REWALK_SHARE * then) \
                    and now - (self._walked_at or 0) >= REWALK_AFTER:
                return True
        return False

    def sample(self, now: float | None = None, force_walk: bool = False) -> Census:
        now = time.time() if now is None else now
        rows = self._rows()
        if force_walk or self._walked_at is None or now - self._walked_at >= self.live_every or self._stale(rows, now):
            self.walk(now)
            self._num_at_walk = {name: num for name, _, num, _ in rows}
            if self._stale(rows, now):  # removed while walked: the counter read after the walk fits it
                rows = self._rows()
        v1 = []
        unmounted = []
        for name, hier, num, enabled in rows:
            if hier == 0 or not enabled:
                continue  # bound to v2 or not mounted: /proc/cgroups cannot tell dying from live
            mnt = self.v1_mount(name)
            if mnt is None and name == "memory":
                self.problems.setdefault(f"cgroup v1 {name}", f"{self.root.join('/proc/cgroups')}: {name} is on "
                                         f"hierarchy {hier} but the mount table does not mount it: "
                                         "live cgroups unknown")
            elif mnt is None:
                unmounted.append(name)
            elif self._live.get(mnt) is None:
                self.problems.setdefault(f"cgroup v1 {name}", f"{self.root.join(mnt)}: mounted per the mount table "
                                         "but the directory is absent: live cgroups unknown")
            v1.append(ControllerCount(name, hier, num, self._live.get(mnt) if mnt else None, mnt))
        if unmounted:  # one line for them all; not memory, so what costs CPU is still counted
            self.problems.setdefault(UNMOUNTED, f"{self.root.join('/proc/cgroups')}: {', '.join(unmounted)} "
                                     "are on hierarchies the mount table does not mount: their live cgroups are "
                                     "unknown (they are not memory cgroups, which are what the kernel walks)")
        v2m = self.v2_mount()
        v2 = None
        if v2m:
            try:
                v2 = v2_stat(self.root, v2m, self.reader)
            except InputError as e:  # cgroup2 is mounted but its root cgroup.stat cannot be read
                self.problems.setdefault("cgroup v2", str(e))
        return Census(now, tuple(v1), v2, self._subtrees, self._walked_at, tuple(self.problems.items()))

    def prime(self) -> Census:
        return self.sample(force_walk=True)

    def read(self, interval: float, seen) -> Census:
        return self.sample(force_walk=seen.walk)


def census(root: Root) -> Census:
    """One census now, with the live directories walked: the count `check` reports, and the one
    remedy and the lab print before and after they act (so they never disagree)."""
    return CgroupCensus(root).sample(force_walk=True)
