"""Containers in a restart loop (CrashLoopBackOff): the Kubernetes form of a crash-looping unit. kubelet
makes a new container cgroup under the pod's for every restart and removes the old one, whose page cache
(the image files it read first, its logs) can keep it dying. Restart counts are kubelet's own (the N of
its N.log files: collect/kube.py); nodesleuth names the pod's owner's next step and never deletes,
restarts or scales a pod itself."""

from __future__ import annotations

from ..model.records import Kube
from ..model.actions import Action, owner_commands
from .findings import Finding
from .registry import detector
from .window import Window


def snapshots(ticks) -> list[Kube]:
    return [t.kube for t in ticks if getattr(t, "kube", None) is not None]


def findings(ticks, seconds: float) -> list[Finding]:
    snaps = snapshots(ticks)
    if not snaps:
        return []
    first, last = snaps[0], snaps[-1]
    before = {(p["uid"], c): n for p in first.pods for c, n in p.get("containers", {}).items()}
    out = []
    for pod, c, n in last.loops():
        grew = n - before.get((pod["uid"], c), n)
        who = f"{pod.get('namespace', '')}/{pod.get('pod', '')}/{c}"
        ev = [f"container {c} of pod {pod.get('namespace', '')}/{pod.get('pod', '')} (uid {pod['uid']}) restarted "
              f"{n} times ({grew:+d} in {seconds:.0f} s): kubelet's logs hold {c}/0.log .. {c}/{n}.log",
              "each restart is a new container cgroup under the pod's; the old one is removed and stays dying "
              "while page cache charged to it lasts (a zombie maker only when a churn trace proves it: see the "
              "zombie finding)"]
        act = Action("investigate", who, f"container {who} restarted {n} times", commands=owner_commands(pod, c))
        out.append(Finding("container_restart_loop", "warning",
                           f"container {who} is in a restart loop: {n} restarts", ev, act.text(),
                           {"namespace": pod.get("namespace", ""), "pod": pod.get("pod", ""), "uid": pod["uid"],
                            "container": c, "restarts": n, "restarts_delta": grew}, [act]))
    return out


@detector("container_restart_loop")
def from_window(w: Window) -> list[Finding]:
    return findings(w.ticks, w.seconds)
