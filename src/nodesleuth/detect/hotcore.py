"""Hot single cores: what 96-core averages hide (the incident's CPU 39 at 100 %sys, node at ~5%).

The rule and the episode type live in detect/incidents.py; this turns episodes into findings, with
who ran there (shares of the core's busy time) and what the NIC's work got there (ksoftirqd wait,
NET_RX rate), so a check can say "ksoftirqd/1 waited 4.8 s of 5 s".
"""

from __future__ import annotations

from ..model.kube import KUBELET_READER, is_kubelet, pod_name
from ..model.records import softnet_on, softnet_text
from ..model.actions import Action, profile_cpu
from .findings import Finding
from .registry import detector
from .window import Window
from .incidents import Episode, episodes, victim


def describe_victim(cpu: int, v: dict) -> list[str]:
    out = []
    if "ksoftirqd_wait_s" in v:
        out.append(f"ksoftirqd/{cpu} waited {v['ksoftirqd_wait_s']:.1f} s of the {v['seconds']:.0f} s for CPU {cpu} "
                   f"({100 * v['ksoftirqd_wait_share']:.0f}%): softirq work (NET_RX) queued behind it")
    r = v.get("net_rx_per_s")
    if r and r.get("during") is not None:
        out.append(f"NET_RX softirqs on CPU {cpu}: " + (f"{r['before']:.0f}/s before, " if r.get("before") is not None
                                                       else "") + f"{r['during']:.0f}/s during")
    if "psi_cpu_some_share" in v:
        out.append(f"CPU pressure: some task waited for a CPU {100 * v['psi_cpu_some_share']:.0f}% of the time")
    if "nic_irq_share" in v:
        out.append(f"CPU {cpu} served {100 * v['nic_irq_share']:.0f}% of the NIC's interrupts")
    return out


def finding(e: Episode, ticks) -> Finding:
    kernel = e.sys_mean + e.soft_mean + e.irq_mean
    est = any(p.estimate for p in e.top)
    procs = ", ".join(f"{p.label} {p.pct:.0f}% of the CPU = {100 * p.share:.0f}% of its busy time"
                      for p in e.top[:5]) or "no process seen"
    v = victim(ticks, e.cpu, e.start, e.end)
    ev = [f"CPU {e.cpu} was {e.busy_mean:.0f}% busy (min {e.busy_min:.0f}%) for {e.seconds:.1f} s "
          f"while the other (unsaturated) CPUs averaged {e.others_mean:.0f}% and the node {e.node_mean:.0f}%",
          f"CPU {e.cpu} split: user {e.usr_mean:.0f}%, sys {e.sys_mean:.0f}%, softirq {e.soft_mean:.0f}%, "
          f"irq {e.irq_mean:.0f}%",
          f"on CPU {e.cpu}: {procs}" + (" (estimate: threads that migrated were split over CPUs)" if est else "")]
    if any(is_kubelet(p.comm) for p in e.top[:3]):
        ev.append(KUBELET_READER + (f": with {e.sys_mean:.0f}% sys on CPU {e.cpu}, check the zombie and live memcg "
                                    "counts (the walk grows with them)" if e.sys_mean >= 50 else ""))
    ev += describe_victim(e.cpu, v)
    sn = softnet_on(ticks, e.cpu, e.start, e.end)  # the network receive work the core left undone
    if sn:
        ev.append(softnet_text(sn))
    rem, acts = [], []
    cmds = [profile_cpu(e.cpu, "or: nodesleuth record --profile, then explain")]
    if e.top:
        p = e.top[0]
        if p.pod:  # a pod's CPUs are kubelet's to set: its owner asks for them, nodesleuth never moves a pod
            cmds.append(f"pod {pod_name(p.pod)} holds CPU {e.cpu}: its owner sets its CPU requests/limits "
                        f"(or the CPU manager's static policy), kubectl -n {p.pod.get('namespace') or '<ns>'} "
                        f"describe pod {p.pod.get('pod') or '<pod>'}")
        else:
            cmds.append(f"if {p.comm} should not run there: taskset -pc <other cpus> {p.pid}")
    if kernel >= 50:
        cmds.append("mostly kernel time: check zombie cgroups and NIC IRQ/NAPI placement "
                    "(grep Tx-Rx /proc/interrupts; IRQBALANCE_BANNED_CPUS)")
    acts.append(Action("investigate", f"cpu {e.cpu}", f"CPU {e.cpu} saturated", commands=cmds))
    rem += acts[-1].text()
    return Finding("hot_core", "warning",
                   f"CPU {e.cpu} pinned at {e.busy_mean:.0f}% for {e.seconds:.0f} s while the node averaged "
                   f"{e.node_mean:.0f}%", ev, rem, {**e.to_dict(), "victim": v, "softnet": sn or None}, acts)


def findings(ticks) -> list[Finding]:
    ticks = list(ticks)
    return [finding(e, ticks) for e in episodes(ticks)]


@detector("hot_core")
def from_window(w: Window) -> list[Finding]:
    return findings(w.ticks)
