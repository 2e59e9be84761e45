"""Pieces several corpus cases share (imported by the cases inside the VM; not a case itself)."""

from __future__ import annotations

import os
import time

# ENA 2.11 lines built from the format strings of amzn-drivers ena_netdev.c (check_for_rx_interrupt_queue /
# check_missing_comp_in_tx_queue, ena_fw_reset_device): GENERATED, not a real report's lines. Written to
# the guest's /dev/kmsg after a marker line that says so (there is no ENA device in the VM).
ENA = [
    (4, "ena 0000:00:05.0 ens5: TX q 3 is paused for too long (threshold 5000000). Time since last napi "
        "6596000 usec. napi scheduled: 1"),
    (4, "ena 0000:00:05.0 ens5: napi handler hasn't been called for a long time but is scheduled"),
    (6, "ena 0000:00:05.0: Trigger reset is on"),
    (6, "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]
ENA_ORIGIN = ("generated from amzn-drivers ena_netdev.c 2.11 format strings (see rules/kernel-net.json, family "
              "ena); written to the guest's /dev/kmsg by the scenario: there is no ENA device in the VM")
ENA_MARKER = "nodesleuth-corpus: the next ENA lines are written by the corpus scenario (no ENA device here)"


def ena(x) -> float:
    return x.kmsg(ENA, ENA_ORIGIN, ENA_MARKER)


# A unit that, like an ECS agent that cannot reach its cluster, makes a container cgroup per start and
# fails; it charges nothing to them, so the kernel frees each at once: a crash loop without zombies.
FREED_AT_ONCE = r'''
import ctypes, os, sys
ctypes.CDLL(None).prctl(15, b"ecs-agent", 0, 0, 0)
CG = "/sys/fs/cgroup"
parent = os.path.join(CG, sys.argv[1], "docker")
os.makedirs(parent, exist_ok=True)
home = next(l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if l.startswith("0::"))
for _ in range(20):
    cg = os.path.join(parent, os.urandom(32).hex())
    os.mkdir(cg)
    open(os.path.join(cg, "cgroup.procs"), "w").write(str(os.getpid()))
    open(os.path.join(CG + home, "cgroup.procs"), "w").write(str(os.getpid()))
    os.rmdir(cg)
print('level=critical msg="Unable to register as a container instance with ECS"', flush=True)
sys.exit(1)
'''


def freed_crash_loop(x, parent: str, restart_sec: str):
    """The namespace's systemd with ecs.service installed and enabled: FREED_AT_ONCE under `parent`,
    restarted every `restart_sec` (a crash loop that leaves no zombies); returns the systemd."""
    ns = systemd(x)
    path = "/run/corpus-agent.py"
    with open(path, "w") as f:
        f.write(FREED_AT_ONCE)
    ns.install_unit("ecs.service", unit(f"{x.python} {path} {parent}", restart_sec=restart_sec))
    ns.systemctl("enable", "ecs.service", check=False)
    return ns


def unit(exec_start: str, restart_sec: str = "300ms") -> str:
    return f"""[Unit]
Description=Amazon ECS Agent (nodesleuth corpus: cannot reach its cluster)
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart={exec_start}
Restart=on-failure
RestartSec={restart_sec}

[Install]
WantedBy=multi-user.target
"""


def systemd(x):
    """A real systemd as PID 1 of a PID namespace (nodesleuth.lab.systemd); the recorder reads its units."""
    from nodesleuth.lab.systemd import SystemdNamespace

    ns = SystemdNamespace()
    ns.start(timeout=400)
    x.cleanup.append(ns.stop)
    x.record_args += ["--systemd-pid", str(ns.pid)]
    x.note(f"systemd {ns.pid} in a PID namespace (basic.target)")
    return ns


def busy(cpu: int) -> float:
    """CPU's busy % over the last second (from /proc/stat)."""
    def read():
        for ln in open("/proc/stat"):
            if ln.startswith(f"cpu{cpu} "):
                v = list(map(int, ln.split()[1:9]))
                return sum(v), v[3] + v[4]
    a = read()
    time.sleep(1.0)
    b = read()
    tot = b[0] - a[0]
    return 100.0 * (tot - (b[1] - a[1])) / tot if tot else 0.0


def zombies(n: int, parent: str = "corpus-zombies", data: str = "/run/corpus-zdata") -> int:
    """n dying memcgs under /sys/fs/cgroup/PARENT, each pinned by a page of tmpfs (no swap): made
    by a forked child (nodesleuth.node.cgroupfs.make_zombies)."""
    from nodesleuth.node.cgroupfs import make_zombies

    with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:  # the parent gets the memory controller
        f.write("+memory")
    return make_zombies(n, os.path.join("/sys/fs/cgroup", parent), data, file_bytes=4096)


def dying() -> int | None:
    from nodesleuth.node.cgroupfs import Memcg

    return Memcg().count()
