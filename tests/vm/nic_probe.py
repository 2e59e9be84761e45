"""Runs INSIDE the VM (stdlib only): emulated NICs whose interrupts (and so NAPI) sit on the hot CPU.

usage: python nic_probe.py TOOL HOT ZOMBIES SECONDS [PPS [TX_PPS]]
  PPS      peer -> DUT UDP flood rate (default 3000); TX_PPS: DUT -> peer rate (default 0 = as fast as
           the sender can: fills the TX ring, so the queue stops and only the TX completion path restarts it)
  HOT      none | reclaim | statread | spin   what holds CPU 1 during the second window
  ZOMBIES  dying memcgs made first (reclaim / statread walk them)

QEMU (tests/vm/matrix.py nic) gives the guest two QEMU hubs, nothing else on them (no host backend: no
frame leaves the QEMU process):
  hub 0: virtio-net-pci  52:54:00:00:00:01 (DUT, root netns, 198.18.0.1) <-> e1000 52:54:00:00:01:01 (netns p0, .2)
  hub 1: e1000e          52:54:00:00:00:02 (DUT, root netns, 198.18.1.1) <-> e1000 52:54:00:00:01:02 (netns p1, .2)
(198.18.0.0/15: the benchmarking range; these addresses exist only inside this guest.)
The DUTs' IRQs are pinned to CPU 1, the peers' to CPU 0. Each window: the peers flood UDP to their DUT and
ping it (ICMP, answered in the DUT's NET_RX softirq on CPU 1), the DUTs send UDP to the peers from CPU 0.
Window 1 has nothing else on CPU 1, window 2 has HOT pinned there. Counters per window: softnet_stat
(processed / dropped / time_squeeze per CPU), NET_RX/NET_TX softirqs, DUT IRQs, link stats, per-queue
tx_timeout, e1000e ethtool counters, ksoftirqd/1 run delay, new kernel log lines (NETDEV WATCHDOG,
driver resets, hung-task / soft-lockup / RCU-stall lines).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

TOOL = sys.argv[1]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import matrix_probe as mp  # noqa: E402  (reads TOOL from sys.argv[1] too)

HOT_CPU = "1"
DUTS = {"52:54:00:00:00:01": ("virtio", "198.18.0.1", "198.18.0.2", "p0", "52:54:00:00:01:01"),
        "52:54:00:00:00:02": ("e1000e", "198.18.1.1", "198.18.1.2", "p1", "52:54:00:00:01:02")}


def sh(cmd: str, check: bool = False) -> str:
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if check and p.returncode:
        raise RuntimeError(f"{cmd}: {p.stderr}")
    return p.stdout + p.stderr


def ifaces() -> dict:
    out = {}
    for d in glob.glob("/sys/class/net/*"):
        mac = mp.rd(d + "/address").strip()
        out[mac] = os.path.basename(d)
    return out


def irqs_of(ifname: str) -> list[str]:
    """IRQ numbers of a NIC: MSI-X names (eth0-rx-0, virtio3-input.0 ...) or the PCI device's irq."""
    dev = os.path.realpath(f"/sys/class/net/{ifname}/device")
    names = [ifname]
    virt = os.path.basename(dev) if os.path.basename(dev).startswith("virtio") else None
    if virt:
        names.append(virt + "-")
        dev = os.path.dirname(dev)
    nums = set(os.listdir(dev + "/msi_irqs")) if os.path.isdir(dev + "/msi_irqs") else set()
    out = []
    for ln in mp.rd("/proc/interrupts").splitlines()[1:]:
        p = ln.split()
        n = p[0].rstrip(":")
        if not n.isdigit():
            continue
        if n in nums or any(x in ln for x in names):
            out.append(n)
    if not out:
        out.append(mp.rd(dev + "/irq").strip())
    return sorted(set(out), key=int)


def pin(irqs: list[str], cpu: str) -> dict:
    res = {}
    for n in irqs:
        try:
            mp.wr(f"/proc/irq/{n}/smp_affinity_list", cpu)
            res[n] = mp.rd(f"/proc/irq/{n}/effective_affinity_list").strip() or mp.rd(
                f"/proc/irq/{n}/smp_affinity_list").strip()
        except OSError as e:
            res[n] = f"error: {e}"
    return res


def softnet() -> list[dict]:
    rows = []
    for ln in mp.rd("/proc/net/softnet_stat").splitlines():
        v = [int(x, 16) for x in ln.split()]
        rows.append({"processed": v[0], "dropped": v[1], "time_squeeze": v[2]})
    return rows


def softirqs() -> dict:
    out = {}
    for ln in mp.rd("/proc/softirqs").splitlines()[1:]:
        p = ln.split()
        if p and p[0].rstrip(":") in ("NET_RX", "NET_TX"):
            out[p[0].rstrip(":")] = [int(x) for x in p[1:]]
    return out


def irq_counts(nums: list[str]) -> dict:
    out = {}
    for ln in mp.rd("/proc/interrupts").splitlines()[1:]:
        p = ln.split()
        if p and p[0].rstrip(":") in nums:
            ncpu = os.cpu_count() or 1
            out[p[0].rstrip(":")] = {"per_cpu": [int(x) for x in p[1:1 + ncpu]], "name": " ".join(p[1 + ncpu:])}
    return out


def link(ifname: str) -> dict:
    try:
        j = json.loads(sh(f"ip -s -j link show dev {ifname}"))[0]
        st = j.get("stats64", j.get("stats", {}))
        return {"rx": st.get("rx", {}), "tx": st.get("tx", {})}
    except (ValueError, IndexError):
        return {}


def tx_timeouts(ifname: str) -> dict:
    return {os.path.basename(q): int(mp.rd(q + "/tx_timeout", "-1").strip() or -1)
            for q in sorted(glob.glob(f"/sys/class/net/{ifname}/queues/tx-*"))}


def ethtool(ifname: str) -> dict:
    out = {}
    for ln in sh(f"ethtool -S {ifname}").splitlines():
        m = re.match(r"\s*([\w.]+):\s*(-?\d+)$", ln)
        if m and re.search(r"timeout|restart|hang|reset|busy|drop|miss|fail|napi|poll", m.group(1)):
            out[m.group(1)] = int(m.group(2))
    return out


def ksoftirqd_delay() -> dict:
    """ksoftirqd/1: (run ns, wait-on-runqueue ns, timeslices) from /proc/PID/schedstat."""
    for d in glob.glob("/proc/[0-9]*"):
        if mp.rd(d + "/comm").strip() == f"ksoftirqd/{HOT_CPU}":
            v = mp.rd(d + "/schedstat").split()
            return {"run_ms": int(v[0]) / 1e6, "wait_ms": int(v[1]) / 1e6, "slices": int(v[2])}
    return {}


def cpu_times() -> dict:
    """Per-CPU /proc/stat in USER_HZ ticks: user, system, idle, irq, softirq."""
    out = {}
    for ln in mp.rd("/proc/stat").splitlines():
        p = ln.split()
        if p and p[0].startswith("cpu") and p[0] != "cpu":
            v = [int(x) for x in p[1:]]
            out[p[0]] = {"user": v[0] + v[1], "system": v[2], "idle": v[3] + v[4], "irq": v[5], "softirq": v[6]}
    return out


def affinity(irqs: list[str]) -> dict:
    return {n: mp.rd(f"/proc/irq/{n}/effective_affinity_list").strip() for n in irqs}


def snapshot(duts: dict, irqs: list[str]) -> dict:
    return {"cpu": cpu_times(), "softnet": softnet(), "softirqs": softirqs(), "irqs": irq_counts(irqs),
            "links": {n: link(n) for n in duts}, "tx_timeout": {n: tx_timeouts(n) for n in duts},
            "ethtool": {n: ethtool(n) for n in duts}, "ksoftirqd": ksoftirqd_delay(), "t": time.monotonic()}


def diff(a, b):
    if isinstance(a, dict):
        return {k: diff(a[k], b.get(k)) for k in a if k in b}
    if isinstance(a, list):
        return [diff(x, y) for x, y in zip(a, b)]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return round(b - a, 3)
    return b


def kmsg_lines(since: int) -> tuple[list[str], int]:
    lines = sh("dmesg").splitlines()
    return lines[since:], len(lines)


INTERESTING = re.compile(r"watchdog|WATCHDOG|timed out|timeout|Reset adapter|Hang|reset|soft lockup|rcu.*stall|"
                         r"hung_task|blocked for more than|NOHZ|too long", re.I)


def window(name: str, duts: dict, irqs: list[str], secs: float, pps: int, hot: list[str] | None,
           tx_pps: int = 0) -> dict:
    procs = []
    hot_p = None
    if hot:
        hot_p = subprocess.Popen(hot, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)  # let it reach its steady state (reclaim: the limit)
    _, k0 = kmsg_lines(0)
    s0 = snapshot(duts, irqs)
    for ifn, (kind, ip, peer_ip, ns, _) in duts.items():
        # peer -> DUT: UDP flood (RX on the DUT, NAPI on CPU 1) and ICMP echo every 10 ms
        procs.append((f"{kind} rx flood", subprocess.Popen(
            ["ip", "netns", "exec", ns, "taskset", "-c", "0", TOOL, "udpsend", ip, "9", str(secs), str(pps), "512"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        procs.append((f"{kind} ping", subprocess.Popen(
            ["ip", "netns", "exec", ns, "taskset", "-c", "0", TOOL, "icmpping", ip, str(int(secs * 100)), "10"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        # DUT -> peer: UDP from CPU 0 (TX completions come back on the DUT's IRQ, CPU 1)
        procs.append((f"{kind} tx", subprocess.Popen(
            ["taskset", "-c", "0", TOOL, "udpsend", peer_ip, "9", str(secs), str(tx_pps), "1200"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    res = {}
    for label, p in procs:
        out, err = p.communicate()
        try:
            res[label] = json.loads(out)
        except ValueError:
            res[label] = {"error": (out + err)[-300:]}
    s1 = snapshot(duts, irqs)
    new, _ = kmsg_lines(k0)
    hot_out = None
    if hot_p:
        hot_p.terminate()
        try:
            o, e = hot_p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            hot_p.kill()
            o, e = hot_p.communicate()
        hot_out = (o + e)[-500:]
    d = diff(s0, s1)
    return {"window": name, "hot": hot, "seconds": secs, "traffic": res, "delta": d, "affinity": affinity(irqs),
            "kmsg_new": new[-60:], "kmsg_interesting": [ln for ln in new if INTERESTING.search(ln)][-40:],
            "hot_output": hot_out}


def main() -> None:
    hot_kind = sys.argv[2]
    zombies = int(sys.argv[3])
    secs = float(sys.argv[4])
    pps = int(sys.argv[5]) if len(sys.argv) > 5 else 3000
    tx_pps = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    info = mp.setup()
    info["preempt"] = mp.rd("/sys/kernel/debug/sched/preempt").strip() or mp.rd("/sys/kernel/debug/sched_preempt").strip()
    base = os.environ["VMRUN_MODBASE"]
    info["modprobe"] = sh(f"modprobe -d {base} -a virtio_net e1000e e1000 2>&1; echo rc=$?").strip()
    time.sleep(2)
    macs = ifaces()
    duts, irqs, setup = {}, [], {}
    sh("ip link set lo up")
    for mac, (kind, ip, peer_ip, ns, peer_mac) in DUTS.items():
        dut, peer = macs.get(mac), macs.get(peer_mac)
        if not dut or not peer:
            setup[kind] = f"missing interface (have {macs})"
            continue
        sh(f"ip netns add {ns}")
        sh(f"ip link set {peer} netns {ns}")
        sh(f"ip netns exec {ns} ip link set lo up; ip netns exec {ns} ip addr add {peer_ip}/24 dev {peer}; "
           f"ip netns exec {ns} ip link set {peer} up")
        sh(f"ip addr add {ip}/24 dev {dut}; ip link set {dut} up")
        setup[kind] = {"dut": dut, "peer": peer,
                       "driver": os.path.basename(os.path.realpath(f"/sys/class/net/{dut}/device/driver")),
                       "watchdog_timeo_note": "netdev watchdog: 5 s for both drivers (dev->watchdog_timeo)",
                       "rps": {q: mp.rd(q + "/rps_cpus").strip() for q in glob.glob(f"/sys/class/net/{dut}/queues/rx-*")}}
        duts[dut] = (kind, ip, peer_ip, ns, peer_mac)
    time.sleep(3)  # links up (e1000e autonegotiation); MSI-X vectors exist only once the device is open
    for ifn, (kind, ip, peer_ip, ns, _) in duts.items():
        peer = setup[kind]["peer"]
        pirqs = sh(f"ip netns exec {ns} cat /sys/class/net/{peer}/device/irq").strip()
        dirqs = irqs_of(ifn)
        setup[kind]["dut_irqs"] = pin(dirqs, HOT_CPU)
        setup[kind]["dut_irq_names"] = {n: v["name"] for n, v in irq_counts(dirqs).items()}
        setup[kind]["peer_irqs"] = pin([pirqs], "0") if pirqs.isdigit() else pirqs
        irqs += dirqs
    for ifn, (kind, ip, peer_ip, ns, _) in duts.items():
        setup[kind]["link"] = sh(f"ip -br link show dev {ifn}").strip()
        setup[kind]["arp_ok"] = sh(f"ip netns exec {ns} {TOOL} icmpping {ip} 3 200").strip()
    mp.emit({"probe": "nic", "setup": setup, **info, "hot_kind": hot_kind, "zombies": zombies, "pps": pps,
             "tx_pps": tx_pps})

    hot = None
    holders = []
    if hot_kind in ("reclaim", "statread"):
        fdir = mp.fresh_tmpfs("/run/ztmp")
        node = mp.mkcg("node")
        zp = mp.mkcg("node/docker", True)
        ctr = mp.mkcg("node/kubepods/pod1/ctr")
        res, h = mp.make_zombies(zp, 0, zombies, fdir)
        mp.emit({"probe": "nic", "zombies_made": res, "dying": mp.dying(zp)})
        if hot_kind == "reclaim":
            disk = os.environ.get("VMRUN_DISK")
            data = disk + "/data.bin"
            with open(data, "wb") as f:
                f.truncate(512 << 20)
            mp.set_limit(node, mp.usage(node) + (48 << 20))
            hot = mp.in_cgroup(ctr, ["taskset", "-c", HOT_CPU, TOOL, "stream", data, str(secs + 60)])
        else:
            hot = ["taskset", "-c", HOT_CPU, TOOL, "readloop", mp.MEM + "/memory.numa_stat", str(secs + 60)]
    elif hot_kind == "spin":
        hot = ["taskset", "-c", HOT_CPU, TOOL, "spin", str(secs + 60)]
    for label, h in (("quiet", None), (hot_kind, hot)):
        if label != "quiet" and h is None:
            continue
        w = window(label, duts, irqs, secs, pps, h, tx_pps)
        mp.emit({"probe": "nic", **w})
    for h in holders:
        h.kill()
    mp.emit({"probe": "nic", "summary": True, "dmesg_tail": sh("dmesg | tail -30").splitlines()})


if __name__ == "__main__":
    main()
