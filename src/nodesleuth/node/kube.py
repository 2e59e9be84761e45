"""Pod identity of processes and cgroups, read from the node (under the root) with no API server.

Three sources, each written by kubelet or the runtime (layouts and their sources: model/kube.py):
the cgroup path (uid, QoS, container id, runtime), the runtime's bundles (names per container id:
containerd's /run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json, CRI-O's
/run/containers/storage/overlay-containers/<id>/userdata/config.json), and kubelet's logs
(/var/log/pods: names and restart counts per pod uid; /var/log/containers: names per container id).
A bundle is read once per container id; the log directories once per `refresh()`.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

from ..model import kube
from ..model.kube import PodRef
from .root import Root

BUNDLES = {
    "containerd": ("/run/containerd/io.containerd.runtime.v2.task/k8s.io", "config.json"),
    "cri-o": ("/run/containers/storage/overlay-containers", "userdata/config.json"),
}
POD_LOGS = "/var/log/pods"
CONTAINER_LOGS = "/var/log/containers"


class Pods:
    """Who a pid or a cgroup path belongs to. Cheap to ask repeatedly: bundles are cached by id."""

    def __init__(self, root: Root | str = "/"):
        self.root = root if isinstance(root, Root) else Root(root)
        self._bundles: dict[str, PodRef | None] = {}
        self._by_uid: dict[str, tuple[str, str]] = {}
        self._restarts: dict[tuple[str, str], int] = {}
        self._links: dict[str, tuple[str, str, str]] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-list kubelet's log directories (pods come and go; a restart adds a log file)."""
        self._by_uid.clear()
        self._restarts.clear()
        self._links.clear()
        for d in self._list(POD_LOGS):
            lp = kube.from_log_path(d)
            if lp is None:
                continue
            self._by_uid[lp.uid] = (lp.namespace, lp.pod)
            for c in self._list(f"{POD_LOGS}/{d}"):
                counts = [kube.from_log_path(f"{d}/{c}/{f}") for f in self._list(f"{POD_LOGS}/{d}/{c}")]
                counts = [x.restart for x in counts if x is not None and x.restart is not None]
                if counts:
                    self._restarts[(lp.uid, c)] = max(counts)
        for name in self._list(CONTAINER_LOGS):
            link = kube.from_log_link(name)
            if link:
                ns, pod, container, cid = link
                self._links[cid] = (ns, pod, container)

    def _list(self, abspath: str) -> list[str]:
        try:
            return sorted(os.listdir(self.root.join(abspath)))
        except OSError:
            return []

    def bundle(self, cid: str, runtime: str = "") -> PodRef | None:
        """The names a runtime's bundle gives container `cid` (read once)."""
        if cid in self._bundles:
            return self._bundles[cid]
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
        self._bundles[cid] = ref
        return ref

    def of_cgroup(self, path: str) -> PodRef | None:
        """The pod and container of a cgroup path, with every name the node holds for it."""
        ref = kube.from_cgroup(path)
        if ref is None:
            return None
        if ref.container_id:
            b = self.bundle(ref.container_id, ref.runtime)
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
