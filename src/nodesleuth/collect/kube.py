"""The pods of this node and their containers' restart counts, from kubelet's log directories (node/kube.py).

Bounded: kubelet's /var/log/pods is listed at most every REFRESH seconds (one directory per pod and per
container: O(pods), never per cgroup), and a section is handed over only when the listing changed or a
minute passed, so the store holds a snapshot a minute on a quiet node.
"""

from __future__ import annotations

import time

from ..model.records import Kube
from ..node.kube import POD_LOGS, Pods
from ..node.pread import Preader
from ..node.root import Root
from .registry import Collector, collector

REFRESH = 10.0  # seconds between listings
KEEP = 60.0  # seconds between snapshots of an unchanged listing


@collector("kube")
class KubeReader(Collector):
    def __init__(self, root: Root, reader: Preader):
        self.root = root
        self.pods: Pods | None = None
        self.listed = self.kept = float("-inf")
        self.last: list | None = None

    def read(self, interval: float, seen=None) -> Kube | None:
        now = time.monotonic()
        if now - self.listed < REFRESH:
            return None
        self.listed = now
        if not self.root.exists(POD_LOGS):
            return None  # not a Kubernetes node (or kubelet's logs are not mounted under the root)
        if self.pods is None:
            self.pods = Pods(self.root)
        else:
            self.pods.refresh()
        pods = self.pods.listing()
        if pods == self.last and now - self.kept < KEEP:
            return None
        self.last, self.kept = pods, now
        return Kube(pods)
