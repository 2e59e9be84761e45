"""Kubernetes names from what kubelet and the runtimes write on the node, with no API server.

Each layout is read from its writer's source (kubernetes v1.28-v1.31, containerd 1.6-2.0, CRI-O 1.28):
- pod cgroups: kubelet's pod container manager names a pod's cgroup `pod<UID>` under its QoS class's
  (`kubepods` for Guaranteed, `kubepods/burstable`, `kubepods/besteffort`; pkg/kubelet/cm/
  pod_container_manager_linux.go GetPodContainerName, qos_container_manager_linux.go). With the systemd
  driver the name is turned into nested slices, each `-` of a part becoming `_` (cgroup_manager_linux.go
  ConvertCgroupNameToSystemd): `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
- container cgroups, made by the runtime under the pod's: containerd's CRI plugin uses
  `<parent>/<id>` (cgroupfs) or `<slice>:cri-containerd:<id>`, which runc turns into the scope
  `cri-containerd-<id>.scope` (pkg/cri/server/container_create_linux.go getCgroupsPath; where runc's
  systemd manager falls back to the fs one, /proc/PID/cgroup shows that `<slice>:cri-containerd:<id>`
  form literally, under containerd.service); with kubelet's --cgroup-root every slice takes the root's
  prefix (`kubelet-kubepods-besteffort-pod<uid_>.slice` under `kubelet.slice`, as kind runs it); CRI-O
  `crio-<id>.scope` and its monitor `crio-conmon-<id>.scope` (internal/config/cgmgr); cri-dockerd/
  dockershim `docker-<id>.scope`.
- logs: `/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart count>.log`
  (pkg/kubelet/kuberuntime/helpers.go BuildPodLogsDirectory / BuildContainerLogsDirectory,
  kuberuntime_container.go: the log file's name is the container's restart count) and the symlinks
  `/var/log/containers/<pod>_<namespace>_<container>-<container id>.log` (kuberuntime_container.go
  legacyLogSymlink). Namespace and pod names are DNS labels/subdomains and never hold `_`.
- names in the runtime's state: containerd's OCI bundle config.json annotations
  `io.kubernetes.cri.sandbox-name`, `-namespace`, `-uid`, `io.kubernetes.cri.container-name`,
  `io.kubernetes.cri.container-type` (pkg/cri/annotations/annotations.go); CRI-O's
  `io.kubernetes.pod.name`, `.namespace`, `.uid`, `io.kubernetes.container.name`
  (internal/annotations, kubelet's labels kept as annotations).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

QOS = ("guaranteed", "burstable", "besteffort")

# a kubepods segment anywhere in the path (kubelet's --cgroup-root may put it below other cgroups)
_CGROUPFS = re.compile(r"(?:^|/)kubepods(?:/(?P<qos>burstable|besteffort))?/pod(?P<uid>[0-9a-fA-F][0-9a-fA-F-]+)"
                       r"(?:/(?:(?P<runtime>crio-conmon|crio)-)?(?P<cid>[0-9a-f]{16,128}))?(?:/|$)")
_SYSTEMD = re.compile(r"(?:^|/)(?:[a-z0-9_]+-)?kubepods(?:-(?P<qos>burstable|besteffort))?-pod(?P<uid>[0-9a-fA-F_]+)\.slice"
                      r"(?:(?:/|:)(?P<runtime>cri-containerd|crio-conmon|crio|docker|cri-o)[-:](?P<cid>[0-9a-f]{16,128})"
                      r"(?:\.scope)?)?(?:/|$)")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "crio-conmon": "cri-o", "cri-o": "cri-o",
             "docker": "docker"}
_LOG = re.compile(r"(?:^|/)(?P<ns>[a-z0-9][a-z0-9-]*)_(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<uid>[0-9a-fA-F-]+)"
                  r"(?:/(?P<container>[a-z0-9][a-z0-9-]*)(?:/(?P<restart>\d+)\.log(?:\.\d+)?(?:\.gz)?)?)?/?$")
_LINK = re.compile(r"^(?P<pod>[a-z0-9][a-z0-9.-]*)_(?P<ns>[a-z0-9][a-z0-9-]*)_(?P<container>[a-z0-9][a-z0-9-]*)"
                   r"-(?P<cid>[0-9a-f]{64})\.log$")


@dataclass(frozen=True, slots=True)
class PodRef:
    """Who a process or cgroup belongs to in Kubernetes terms; empty strings where the node does not
    say (a cgroup path gives uid, QoS, container id and runtime; names come from logs or the runtime)."""

    uid: str
    qos: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    container_id: str = ""
    runtime: str = ""
    sandbox: bool = False  # the pod's pause/infra container (or CRI-O's conmon), not a workload
    restarts: int | None = None  # the container's restart count, from its log files

    @property
    def name(self) -> str:
        """namespace/pod/container as an SRE types it into kubectl; the uid where names are unknown."""
        return pod_name(self.to_dict())

    def to_dict(self) -> dict:
        d = {"namespace": self.namespace, "pod": self.pod, "uid": self.uid, "container": self.container,
             "container_id": self.container_id, "qos": self.qos, "runtime": self.runtime}
        if self.sandbox:
            d["sandbox"] = True
        if self.restarts is not None:
            d["restarts"] = self.restarts
        return d

    def named(self, **kw) -> "PodRef":
        return replace(self, **{k: v for k, v in kw.items() if v not in (None, "")})


def from_cgroup(path: str) -> PodRef | None:
    """The pod (and container, when the path goes that deep) a cgroup path belongs to, by kubelet's
    layout for either cgroup driver; None for a path outside kubepods."""
    if "kubepods" not in path:
        return None
    m = _SYSTEMD.search(path)
    if m:
        runtime = m["runtime"] or ""
        return PodRef(uid=m["uid"].replace("_", "-"), qos=m["qos"] or "guaranteed", container_id=m["cid"] or "",
                      runtime=_RUNTIMES.get(runtime, ""), sandbox=runtime == "crio-conmon")
    m = _CGROUPFS.search(path)
    if m:
        runtime = m["runtime"] or ""
        return PodRef(uid=m["uid"], qos=m["qos"] or "guaranteed", container_id=m["cid"] or "",
                      runtime=_RUNTIMES.get(runtime, ""), sandbox=runtime == "crio-conmon")
    return None


@dataclass(frozen=True, slots=True)
class LogPath:
    namespace: str
    pod: str
    uid: str
    container: str = ""
    restart: int | None = None


def from_log_path(path: str) -> LogPath | None:
    """A pod log directory, container directory or log file under /var/log/pods, by kubelet's layout."""
    m = _LOG.search(path.rstrip("/"))
    if not m:
        return None
    return LogPath(m["ns"], m["pod"], m["uid"], m["container"] or "",
                   int(m["restart"]) if m["restart"] is not None else None)


def from_log_link(name: str) -> tuple[str, str, str, str] | None:
    """(namespace, pod, container, container id) of a /var/log/containers symlink's name."""
    m = _LINK.match(name)
    return (m["ns"], m["pod"], m["container"], m["cid"]) if m else None


# the runtime's annotations in an OCI bundle's config.json, per runtime: (namespace, pod, uid, container, type)
ANNOTATIONS = {
    "containerd": ("io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name",
                   "io.kubernetes.cri.sandbox-uid", "io.kubernetes.cri.container-name",
                   "io.kubernetes.cri.container-type"),
    "cri-o": ("io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.pod.uid",
              "io.kubernetes.container.name", "io.kubernetes.cri-o.ContainerType"),
}


def from_annotations(ann: dict, cid: str = "") -> PodRef | None:
    """A PodRef from a bundle's annotations (containerd's or CRI-O's); None when it is not a pod's."""
    for runtime, (ns, pod, uid, cont, kind) in ANNOTATIONS.items():
        if ns in ann and pod in ann:
            sandbox = ann.get(kind) == "sandbox"
            return PodRef(uid=ann.get(uid, ""), namespace=ann[ns], pod=ann[pod],
                          container="" if sandbox else ann.get(cont, ""), container_id=cid, runtime=runtime,
                          sandbox=sandbox)
    return None


def pod_name(d: dict) -> str:
    """namespace/pod/container of a PodRef's dict form (as stored and in JSON); the uid where names are
    unknown."""
    pod = f"{d['namespace']}/{d['pod']}" if d.get("pod") else f"uid {d.get('uid', '?')}"
    return f"{pod}/{d['container']}" if d.get("container") else pod


def pod_owner(d: dict) -> str:
    """A pod as the maker of cgroups: namespace/pod/container, with the container's restart count."""
    return pod_name(d) + (f" ({d['restarts']} restarts per kubelet's logs)" if d.get("restarts") is not None else "")


# kubelet's cAdvisor reads every container's memory.stat and walks the cgroup tree on its housekeeping
# interval (10-15 s), and kubelet's eviction manager reads the root's memory.stat: the incident's reader
KUBELET_READER = ("kubelet (and the cAdvisor inside it) reads every pod's memory.stat and walks the cgroup tree "
                  "on each housekeeping pass: the incident's own reader of the memcgs")


def is_kubelet(comm: str) -> bool:
    """kubelet by its comm (the binary's name; its Go threads share it)."""
    return comm == "kubelet"
