"""Processes started per second, and by whom: /proc/stat's `processes` counter every tick (one line
of a file the sampler reads anyway), and, on a second with at least MIN_FORKS started, a listing of
/proc: the processes not in the previous listing are read once (/proc/PID/stat: command, parent) and
grouped by parent and command; the parent's command and cgroup are read once per parent, and the cgroup
of one caught child per (parent, command) a listing: a runtime's shim starts a pod's exec probes from
its own cgroup, so only the children's cgroup says which pod they run in.

Bounded: a quiet node pays the counter only. A storm costs one listing of /proc a second plus a stat
read per process caught alive (a listing catches the few alive at that instant, not every process
started: the counter says how many started). A process that starts and exits between two listings
is never caught; its CPU time reaches the recording through its parent's cutime/cstime
(collect/procs.py "exited children"). docs/groups.md says what explain makes of it.
"""

from __future__ import annotations

import os

from ..model.errors import InputError
from ..model.procfs import parse_processes
from ..model.records import Spawns
from ..node.pread import Preader, read_text
from ..node.root import Root
from .hogs import cgroup_of
from .registry import Collector, collector

MIN_FORKS = 10  # per second: a second with fewer started lists nothing (exec probes, cron: a few a second)
PARENTS = 256  # parents' command and cgroup kept (read once each); forgotten beyond


def _stat(data: bytes) -> tuple[str, int, int] | None:
    """(comm, ppid, starttime) of a /proc/PID/stat line."""
    try:
        lp, rp = data.index(b"("), data.rindex(b")")
        rest = data[rp + 2:].split(None, 20)
        return data[lp + 1:rp].decode(errors="replace"), int(rest[1]), int(rest[19])
    except (ValueError, IndexError):
        return None


@collector("spawns", uses=("record",))
class SpawnReader(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root, self.reader = root, reader
        self.proc = root.join("/proc")
        self.prev: int | None = None
        # pid -> (starttime, comm, ppid, new in the last listing) of the last listing; None: not listed
        self.alive: dict[int, tuple] | None = None
        self.parents: dict[tuple[int, int], tuple[str, str | None]] = {}  # (pid, start) -> (comm, cgroup)

    def _total(self) -> int:
        return parse_processes(read_text(self.reader, self.root, "/proc/stat"),  # single_open: one read
                               self.root.join("/proc/stat"))

    def prime(self) -> None:
        self.prev = self._total()

    def _read(self, pid: int) -> tuple[str, int, int] | None:
        try:
            with open(f"{self.proc}/{pid}/stat", "rb") as f:
                return _stat(f.read())
        except OSError:
            return None  # gone between the listing and the read

    def _cgroup(self, pid: int) -> str | None:
        """The process's cgroup: the v2 path, or (v1 only) the first hierarchy's line; None when gone."""
        try:
            text = self.root.read(f"/proc/{pid}/cgroup")
        except (InputError, OSError):
            return None
        cg = cgroup_of(text, None)
        if cg is None:
            first = text.split("\n", 1)[0].split(":", 2)
            cg = first[2] if len(first) == 3 else None
        return cg

    def _parent(self, ppid: int) -> tuple[str, str | None]:
        st = self._read(ppid)
        key = (ppid, st[2] if st else -1)
        got = self.parents.get(key)
        if got is None:
            cg = self._cgroup(ppid)
            if len(self.parents) >= PARENTS:
                self.parents.clear()
            got = self.parents[key] = (st[0] if st else "?", cg)
        return got

    def _list(self) -> list[dict]:
        try:
            pids = [int(x) for x in os.listdir(self.proc) if x.isdigit()]
        except OSError as e:
            raise InputError(self.proc, e.strerror or str(e)) from None
        before, now = self.alive, {}
        rows: dict[tuple[int, str], dict] = {}
        tried: set[tuple[int, str]] = set()

        def row(ppid: int, comm: str) -> dict:
            r = rows.get((ppid, comm))
            if r is None:
                pcomm, cg = self._parent(ppid)
                r = rows[(ppid, comm)] = {"ppid": ppid, "pcomm": pcomm, "comm": comm, "new": 0, "brief": 0,
                                          "lasting": 0, "cgroup": cg}
            return r

        for pid in pids:
            old = before.get(pid) if before is not None else None
            if old is not None:
                now[pid] = (*old[:3], False)
                if old[3]:
                    row(old[2], old[1])["lasting"] += 1
                continue
            st = self._read(pid)
            if st is None:
                continue
            fresh = before is not None  # the first listing's processes were there before it: a baseline
            now[pid] = (st[2], st[0], st[1], fresh)
            if fresh:
                r = row(st[1], st[0])
                r["new"] += 1
                if (st[1], st[0]) not in tried:  # one child's per (parent, command) and listing
                    tried.add((st[1], st[0]))
                    cg = self._cgroup(pid)
                    if cg is not None and cg != r["cgroup"]:
                        r["child_cgroup"] = cg
        if before is not None:
            for pid, (start, comm, ppid, was_new) in before.items():
                if was_new and pid not in now:
                    row(ppid, comm)["brief"] += 1
        self.alive = now
        return sorted(rows.values(), key=lambda r: (-r["new"], -r["brief"]))[:Spawns.MAX]

    def read(self, interval: float, seen=None) -> Spawns | None:
        total = self._total()
        prev, self.prev = self.prev, total
        if prev is None:
            return None
        forks = max(0, total - prev)
        if forks < MIN_FORKS * max(interval, 1e-3):
            self.alive = None  # the next storm starts from a baseline listing
            return Spawns(forks, total)
        listed = self.alive is not None
        rows = self._list()
        return Spawns(forks, total, rows if listed else [], listed)

    def close(self) -> None:
        self.alive = None
