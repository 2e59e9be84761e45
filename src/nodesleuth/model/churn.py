"""perf's text for the cgroup tracepoints (cgroup:cgroup_mkdir / cgroup_rmdir / cgroup_release) and
the summary of who made which cgroups: grouped by comm and by path pattern, since the tracepoints fire
in the calling task (runc/dockerd with cgroupfs, systemd with the systemd driver). An rmdir -> release
of one id is a cgroup's dying lifetime; an rmdir with no release is one still dying."""

from __future__ import annotations

import re
from collections import Counter

from . import kube
from .records import CgEvent, ChurnSummary, Creator


LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>-?\d+)(?:/(?P<tid>\d+))?\s+(?:\[(?P<cpu>\d+)\]\s+)?"
                  r"(?P<time>\d+\.\d+):\s+cgroup:(?P<ev>cgroup_\w+):\s+root=(?P<root>\d+)\s+id=(?P<id>\d+)\s+"
                  r"level=(?P<level>\d+)\s+path=(?P<path>.*)$")


_HEX = re.compile(r"[0-9a-f]{12,}|\d+")
_POD = re.compile(r"^(?:[a-z0-9_]+-)?(?:kubepods-(?:burstable-|besteffort-)?)?pod[0-9a-fA-F_-]+(?:\.slice)?$")


def path_pattern(path: str) -> str:
    """Group churn by shape: /docker/<64 hex> -> /docker/*, /lab/ecs-123 -> /lab/ecs-*. A Kubernetes pod's
    own cgroup (`pod<uid>`, `kubepods-...-pod<uid>.slice`) is kept whole: the pod is what a restart loop
    is blamed on, so two pods' containers are two creators."""
    return "/".join(p if _POD.match(p) else _HEX.sub("*", p) for p in path.split("/"))


def unit_of_path(path: str) -> str | None:
    """The systemd unit a cgroup path sits under (deepest .service/.scope component); none for a
    Kubernetes container's scope (cri-containerd-<id>.scope is one restart of a container, not a unit:
    its pod is its owner)."""
    if kube.from_cgroup(path) is not None:
        return None
    for comp in reversed(path.split("/")):
        if comp.endswith((".service", ".scope")):
            return comp
    return None


def parse_script(text: str) -> list[CgEvent]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append(CgEvent(float(m["time"]), m["ev"][len("cgroup_"):], m["comm"].strip(), int(m["pid"]),
                               int(m["root"]), int(m["id"]), m["path"].strip()))
    return out


def creators(events: list[CgEvent], trace_end: float, age: float) -> list[Creator]:
    """Per creator (hierarchy, comm, path pattern): what it made and removed, and which of those stayed dying.

    A removed cgroup is lasting when it was still dying `age` seconds after its rmdir (released later,
    or not by the trace's end); freed when released sooner; young when the trace ended less than
    `age` after its rmdir. With age 0 (a check's few seconds, which cannot wait) every cgroup not
    released by the end is lasting. Most lasting first."""
    by: dict[tuple[int, str, str], Creator] = {}  # per hierarchy: runc and systemd make a cgroup in every v1 one
    made_by: dict[tuple[int, int], Creator] = {}
    units: dict[int, Counter] = {}
    rmdir_at: dict[tuple[int, int], tuple[float, Creator]] = {}
    for e in events:
        key = (e.hierarchy, e.cg_id)
        if e.event == "mkdir":
            pat = path_pattern(e.path)
            comm = e.comm
            if comm.startswith(":") and comm[1:].isdigit():  # perf did not know the comm yet: same shape,
                comm = next((k[1] for k in by if k[2] == pat), comm)  # same creator
            c = by.get((e.hierarchy, comm, pat))
            if c is None:
                ref = kube.from_cgroup(e.path)
                c = by[(e.hierarchy, comm, pat)] = Creator(comm=comm, pattern=pat, hierarchy=e.hierarchy, first=e.time,
                                                           pod={"uid": ref.uid, "qos": ref.qos} if ref else None)
            c.mkdir += 1
            c.pids.add(e.pid)
            c.last = e.time
            u = unit_of_path(e.path)
            if u:
                units.setdefault(id(c), Counter())[u] += 1
            made_by[key] = c
        elif e.event == "rmdir":
            c = made_by.get(key)
            if c is not None:
                c.rmdir += 1
                rmdir_at[key] = (e.time, c)
        elif e.event == "release":
            hit = rmdir_at.pop(key, None)
            if hit is not None:
                t0, c = hit
                life = e.time - t0
                c.lifetimes.append(life)
                if age > 0 and life >= age:
                    c.still_dying += 1
                else:
                    c.freed += 1
    for t0, c in rmdir_at.values():
        if trace_end - t0 >= age:
            c.still_dying += 1
        else:
            c.young += 1
    for c in by.values():
        cnt = units.get(id(c))
        c.unit = cnt.most_common(1)[0][0] if cnt else None
    return sorted(by.values(), key=lambda c: (-c.still_dying, -c.mkdir))


def dying_through(events: list[CgEvent], c: Creator, t0: float, t1: float) -> int:
    """How many of creator `c`'s cgroups (same hierarchy and path pattern) were dying through all of
    [t0, t1]: removed at or before t0 and not released before t1. What a walk in that window visited of
    its zombies: ones freed before or during it cost the walk nothing (or only its first seconds)."""
    made, gone, freed = set(), {}, {}
    for e in events:
        key = (e.hierarchy, e.cg_id)
        if e.event == "mkdir" and e.hierarchy == c.hierarchy and path_pattern(e.path) == c.pattern:
            made.add(key)
        elif e.event == "rmdir" and key in made:
            gone[key] = e.time
        elif e.event == "release" and key in gone:
            freed[key] = e.time
    return sum(1 for k, t in gone.items() if t <= t0 and freed.get(k, float("inf")) >= t1)


def summarise(events: list[CgEvent], seconds: float, age: float = 0.0) -> ChurnSummary:
    """A check window's trace: its creators (cgroups still dying at its end are lasting unless `age`
    says otherwise) and the lifetimes of every cgroup freed in it."""
    end = max((e.time for e in events), default=0.0)
    cs = creators(events, end, age)
    lifetimes = [x for c in cs for x in c.lifetimes]
    return ChurnSummary(seconds, cs, sum(c.freed for c in cs), sum(c.still_dying + c.young for c in cs),
                        lifetimes, len(events))
