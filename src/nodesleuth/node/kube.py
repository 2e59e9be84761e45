"""Pod identity of processes and cgroups, read from the node (under the root) with no API server.

Three sources, each written by kubelet or the runtime (layouts and their sources: model/kube.py):
the cgroup path (uid, QoS, container id, runtime), the runtime's bundles (names per container id:
containerd's /run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json, CRI-O's
/run/containers/storage/overlay-containers/<id>/userdata/config.json), and kubelet's logs
(/var/log/pods: names and restart counts per pod uid; /var/log/containers: names per container id).
The log directories are looked at once per `refresh()`, and listed and parsed again only
when their mtime moved (an entry came or went). A bundle is read once per container id and kept
in a bounded cache (at most MAX_BUNDLES entries, the oldest dropped first); a bundle that could not be
read (not written yet, being removed, a runtime not mounted) is read again after MISS_RETRY seconds,
never cached as unreadable for good; and `refresh()` drops the entries of containers whose cgroup is
gone from every cgroup hierarchy under the root (short-lived containers leave nothing behind).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import replace

from ..model import kube
from ..model.errors import InputError
from ..model.kube import PodRef
from . import cgroupfs
from .root import Root

MAX_BUNDLES = 1024  # cached bundles (named or not); the oldest read is dropped first beyond this
MISS_RETRY = 10.0  # s: a bundle that could not be read is read again after this long
RACY_NS = 2_000_000_000  # a log directory changed this recently is listed again at the next refresh

BUNDLES = {
    "containerd": ("/run/containerd/io.containerd.runtime.v2.task/k8s.io", "config.json"),
    "cri-o": ("/run/containers/storage/overlay-containers", "userdata/config.json"),
}
POD_LOGS = "/var/log/pods"
CONTAINER_LOGS = "/var/log/containers"


class Pods:
    """Who a pid or a cgroup path belongs to. Cheap to ask repeatedly: bundles are cached by id."""

    def __init__(self, root: Root | str = "/", clock: Callable[[], float] = time.monotonic):
        self.root = root if isinstance(root, Root) else Root(root)
        self.clock = clock
        # container id -> (names or None when unreadable, when read, its cgroup path when known)
        self._bundles: dict[str, tuple[PodRef | None, float, str]] = {}
        self._cg_mounts: list[str] | None = None
        self._by_uid: dict[str, tuple[str, str]] = {}
        self._restarts: dict[tuple[str, str], int] = {}
        self._links: dict[str, tuple[str, str, str]] = {}
        # a log directory's path -> (its mtime, what its listing gave): listed and parsed again only when an
        # entry came or went (a pod, a container, a restart's log file) since
        self._dirs: dict[str, tuple[int, object]] = {}
        self._logs: dict[str, int | None] = {}  # a log file's path under /var/log/pods -> its restart count
        self.refresh()

    def refresh(self) -> None:
        """Re-list kubelet's log directories (pods come and go; a restart adds a log file) and forget the
        bundles of containers whose cgroup is gone."""
        self._forget_gone()
        self._by_uid.clear()
        self._restarts.clear()
        self._links.clear()
        dirs, self._dirs = self._dirs, {}
        logs, self._logs = self._logs, {}
        for d in self._listed(POD_LOGS, dirs, list):
            lp = kube.from_log_path(d)
            if lp is None:
                continue
            self._by_uid[lp.uid] = (lp.namespace, lp.pod)
            for c in self._listed(f"{POD_LOGS}/{d}", dirs, list):
                def restart(files, d=d, c=c):
                    counts = [self._restart_of(f"{d}/{c}/{f}", logs) for f in files]
                    counts = [x for x in counts if x is not None]
                    return max(counts) if counts else None
                n = self._listed(f"{POD_LOGS}/{d}/{c}", dirs, restart)
                if n is not None:
                    self._restarts[(lp.uid, c)] = n
        for name in self._listed(CONTAINER_LOGS, dirs, list):
            link = kube.from_log_link(name)
            if link:
                ns, pod, container, cid = link
                self._links[cid] = (ns, pod, container)

    def _restart_of(self, rel: str, before: dict[str, int | None]) -> int | None:
        """The restart count of a container's log file (its path under /var/log/pods), parsed once: a container
        that restarts often adds a file to a directory of hundreds, and the next refresh parses only that one."""
        if rel in before:
            n = self._logs[rel] = before[rel]
            return n
        lp = kube.from_log_path(rel)
        n = self._logs[rel] = lp.restart if lp is not None else None
        return n

    def _listed(self, abspath: str, before: dict, parse: Callable[[list[str]], object]):
        """parse(the directory's sorted listing), kept while the directory's mtime stays (an entry created
        or removed changes it): a node's pod logs are listed every few seconds and rarely change. A listing
        taken within RACY_NS of its mtime is not kept: an entry made in the same clock tick after it was
        listed would leave the mtime as it was (git's racy-index rule)."""
        path = self.root.join(abspath)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            return parse([])
        hit = before.get(path)
        if hit is not None and hit[0] == mtime:
            self._dirs[path] = hit
            return hit[1]
        value = parse(self._list(abspath))
        if time.time_ns() - mtime > RACY_NS:
            self._dirs[path] = (mtime, value)
        return value

    def _list(self, abspath: str) -> list[str]:
        try:
            return sorted(os.listdir(self.root.join(abspath)))
        except OSError:
            return []

    def bundle(self, cid: str, runtime: str = "", cgroup: str = "") -> PodRef | None:
        """The names a runtime's bundle gives container `cid` (read once; read again MISS_RETRY s after a
        read that found none). `cgroup`: the container's cgroup path, by which refresh() forgets it."""
        hit = self._bundles.get(cid)
        if hit is not None and (hit[0] is not None or self.clock() - hit[1] < MISS_RETRY):
            if cgroup and not hit[2]:
                self._bundles[cid] = (hit[0], hit[1], cgroup)
            return hit[0]
        ref = None
        for rt, (base, rel) in BUNDLES.items():
            if runtime and runtime != rt:
                continue
            text = self.root.read_opt(f"{base}/{cid}/{rel}")
            if text is None:
                continue
            try:
                ann = json.loads(text).get("annotations") or {}
            except (ValueError, AttributeError):
                continue
            ref = kube.from_annotations(ann, cid)
            if ref is not None:
                break
        self._bundles.pop(cid, None)  # re-inserted last: the dict's order is the order of reads
        self._bundles[cid] = (ref, self.clock(), cgroup or (hit[2] if hit else ""))
        while len(self._bundles) > MAX_BUNDLES:
            del self._bundles[next(iter(self._bundles))]
        return ref

    def cached(self) -> int:
        """How many bundles the cache holds (named or not)."""
        return len(self._bundles)

    def _forget_gone(self) -> None:
        """Drop the cached bundles of containers whose cgroup no hierarchy under the root holds any more.
        Kept when that cannot be told (no cgroup path known, no mount table under the root)."""
        if not self._bundles:
            return
        if self._cg_mounts is None:
            try:
                self._cg_mounts = [m.path for m in cgroupfs.mounts(self.root)]
            except InputError:
                self._cg_mounts = []
        if not self._cg_mounts:
            return
        gone = [cid for cid, (_, _, cg) in self._bundles.items() if cg and not any(
            self.root.exists(os.path.join(m, cg.lstrip("/"))) for m in self._cg_mounts)]
        for cid in gone:
            del self._bundles[cid]

    def of_cgroup(self, path: str) -> PodRef | None:
        """The pod and container of a cgroup path, with every name the node holds for it."""
        ref = kube.from_cgroup(path)
        if ref is None:
            return None
        if ref.container_id:
            b = self.bundle(ref.container_id, ref.runtime, path)
            if b is not None:
                ref = replace(ref.named(namespace=b.namespace, pod=b.pod, container=b.container, runtime=b.runtime),
                              sandbox=b.sandbox or ref.sandbox)
            elif ref.container_id in self._links:
                ns, pod, container = self._links[ref.container_id]
                ref = ref.named(namespace=ns, pod=pod, container=container)
        if not ref.pod and ref.uid in self._by_uid:
            ns, pod = self._by_uid[ref.uid]
            ref = ref.named(namespace=ns, pod=pod)
        if ref.container and (ref.uid, ref.container) in self._restarts:
            ref = ref.named(restarts=self._restarts[(ref.uid, ref.container)])
        return ref

    def of_pid(self, pid: int) -> PodRef | None:
        """The pod of a process, from its /proc/PID/cgroup (the v2 line, else the memory controller's)."""
        text = self.root.read_opt(f"/proc/{pid}/cgroup")
        if not text:
            return None
        paths = {}
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) == 3:
                paths[parts[1]] = parts[2]
        for key in ("memory", "", "cpu,cpuacct", "cpu"):
            if key in paths and "kubepods" in paths[key]:
                return self.of_cgroup(paths[key])
        return None

    def listing(self) -> list[dict]:
        """Every pod kubelet keeps logs for: uid, names, and each container's restart count."""
        out = []
        for uid, (ns, pod) in sorted(self._by_uid.items(), key=lambda x: x[1]):
            conts = {c: n for (u, c), n in sorted(self._restarts.items()) if u == uid}
            out.append({"uid": uid, "namespace": ns, "pod": pod, "containers": conts})
        return out

    def restarts(self, uid: str, container: str) -> int | None:
        return self._restarts.get((uid, container))


    def owner(self, uid: str) -> dict:
        """What the node says of pod `uid`: its names and its most restarted container (kubelet's logs:
        the highest restart count of each container's log files)."""
        d: dict = {"uid": uid}
        if uid in self._by_uid:
            d["namespace"], d["pod"] = self._by_uid[uid]
        mine = sorted(((n, c) for (u, c), n in self._restarts.items() if u == uid), reverse=True)
        if mine:
            d["restarts"], d["container"] = mine[0]
        return d


def name_creators(creators, root: Root | str = "/") -> None:
    """Fill in the pod names and the restarting container of churn creators under a pod (in place)."""
    todo = [c for c in creators if c.pod]
    if not todo:
        return
    pods = Pods(root)
    for c in todo:
        c.pod = {**c.pod, **pods.owner(c.pod["uid"])}
