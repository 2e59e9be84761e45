"""Build fixture trees: a recorded /proc and /sys under a root directory, shaped like the kernel's files.

They stand in for what this machine cannot be: a 96-vCPU AWS node with ENA and 68,680 tracked vs 240
live memory cgroups (cgroup v1), or a cgroup v2 node with dying descendants.
"""

from __future__ import annotations

import os
import random
import uuid

ENA_ETHTOOL = """NIC statistics:
     tx_timeout: {tx_timeout}
     suspend: 0
     resume: 0
     wd_expired: 0
     interface_up: 1
     interface_down: 0
     admin_q_pause: 0
     bw_in_allowance_exceeded: 0
     bw_out_allowance_exceeded: 0
     pps_allowance_exceeded: 0
     conntrack_allowance_available: 5000000
     conntrack_allowance_exceeded: 0
     linklocal_allowance_exceeded: 0
     queue_0_tx_cnt: 81237611
     queue_0_tx_bytes: 39281726351
     queue_0_tx_queue_stop: 0
     queue_0_tx_queue_wakeup: 0
     queue_0_tx_napi_comp: 75112093
     queue_0_tx_tx_poll: 75149917
     queue_0_tx_doorbells: 80112783
     queue_0_tx_missed_tx: 0
     queue_0_tx_unmask_interrupt: 75112093
     queue_0_rx_cnt: 99821733
     queue_0_rx_bytes: 118237811234
     total_resets: {total_resets}
     reset_fail: 0
     bad_tx_req_id: 0
     bad_rx_req_id: 0
     bad_rx_desc_num: 0
     missing_intr: 0
     suspected_poll_starvation: {starvation}
     missing_tx_cmpl: 0
     rx_desc_malformed: 0
     tx_desc_malformed: 0
     invalid_state: 0
     os_netdev_wd: 0
     missing_admin_interrupt: 0
     admin_to: 0
     device_request_reset: 0
     missing_first_intr: 0
     ena_admin_q_aborted_cmd: 0
     ena_admin_q_submitted_cmd: 41
     ena_admin_q_completed_cmd: 41
     ena_admin_q_out_of_space: 0
     ena_admin_q_no_completion: 0
"""

ENA_KMSG = [
    (4, "ena 0000:20:03.0 eth0: TX q 5 is paused for too long (threshold 5000000). Time since last napi 6596000 usec. napi scheduled: 1"),
    (4, "ena 0000:20:03.0 eth0: napi handler hasn't been called for a long time but is scheduled"),
    (6, "ena 0000:20:03.0: Trigger reset is on"),
    (6, "ena 0000:20:03.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]

CGROUP_CONTROLLERS = [  # name, hierarchy (v1 node)
    ("cpuset", 9), ("cpu", 3), ("cpuacct", 3), ("blkio", 12), ("memory", 10), ("devices", 6), ("freezer", 4),
    ("net_cls", 2), ("perf_event", 8), ("net_prio", 2), ("hugetlb", 11), ("pids", 7), ("rdma", 5), ("misc", 13),
]


def _w(root: str, rel: str, text: str) -> None:
    p = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def proc_stat(ncpu: int, rng: random.Random, busy_cpu: int | None = None, uptime: float = 864000.0,
              btime: int = 1764600000) -> str:
    hz = 100
    lines = []
    rows = []
    for c in range(ncpu):
        total = int(uptime * hz)
        if c == busy_cpu:
            user, system = int(total * 0.05), int(total * 0.60)
        else:
            user, system = int(total * rng.uniform(0.02, 0.08)), int(total * rng.uniform(0.01, 0.03))
        nice, iowait, irq, soft, steal = int(total * 0.001), int(total * 0.002), 0, int(total * 0.004), 0
        guest = gnice = 0
        idle = total - user - system - nice - iowait - irq - soft - steal
        rows.append((user, nice, system, idle, iowait, irq, soft, steal, guest, gnice))
    agg = [sum(col) for col in zip(*rows)]
    lines.append("cpu  " + " ".join(map(str, agg)))
    for c, r in enumerate(rows):
        lines.append(f"cpu{c} " + " ".join(map(str, r)))
    lines.append("intr 1234567890 " + " ".join(["0"] * 64))
    lines += ["ctxt 98765432100", f"btime {btime}", "processes 12345678", "procs_running 3",
              "procs_blocked 0", "softirq 123456789 1 2 3 4 5 6 7 8 9 10"]
    return "\n".join(lines) + "\n"


SOFTIRQS = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU")


def softirqs(ncpu: int, rng: random.Random) -> str:
    head = " " * 20 + "".join(f"{'CPU' + str(c):<11}" for c in range(ncpu))
    lines = [head.rstrip()]
    for name in SOFTIRQS:
        vals = "".join(f"{rng.randrange(10 ** 7):>11}" for _ in range(ncpu))
        lines.append(f"{name + ':':>12}{vals}")
    return "\n".join(lines) + "\n"


def interrupts(ncpu: int, rng: random.Random, ifname: str = "eth0", queues: int = 8) -> str:
    """Shaped like a Nitro instance's: ENA's management and Tx-Rx lines among NVMe and local ones."""
    head = " " * 11 + "".join(f"{'CPU' + str(c):<11}" for c in range(ncpu))
    lines = [head.rstrip()]

    def row(irq: str, desc: str, hot: int | None = None) -> str:
        vals = "".join(f"{(rng.randrange(10 ** 8) if c == hot else rng.randrange(100)):>11}" for c in range(ncpu))
        return f"{irq:>4}:{vals}  {desc}"

    lines.append(row("0", "IO-APIC   2-edge      timer"))
    lines.append(row("4", "IO-APIC   4-edge      ttyS0"))
    lines.append(row("24", "PCI-MSI 81920-edge      ena-mgmnt@pci:0000:20:03.0", 0))
    for q in range(queues):
        lines.append(row(str(25 + q), f"PCI-MSI 81921-edge      {ifname}-Tx-Rx-{q}", (q * 13) % ncpu))
    for q in range(8):
        lines.append(row(str(40 + q), f"PCI-MSI 65536-edge      nvme0q{q}", q))
    for name, desc in (("NMI", "Non-maskable interrupts"), ("LOC", "Local timer interrupts"),
                       ("RES", "Rescheduling interrupts"), ("CAL", "Function call interrupts"),
                       ("TLB", "TLB shootdowns")):
        lines.append(row(name, desc))
    lines.append(f"{'ERR':>4}:{0:>11}")
    return "\n".join(lines) + "\n"


def meminfo(total_kb: int, percpu_kb: int, slab_kb: int) -> str:
    sunreclaim = slab_kb * 2 // 3
    rows = [("MemTotal", total_kb), ("MemFree", total_kb // 2), ("MemAvailable", total_kb * 3 // 4),
            ("Buffers", 123456), ("Cached", total_kb // 5), ("SwapCached", 0), ("Active", total_kb // 8),
            ("Inactive", total_kb // 9), ("Shmem", 65536), ("Slab", slab_kb), ("SReclaimable", slab_kb - sunreclaim),
            ("SUnreclaim", sunreclaim), ("KernelStack", 51200), ("PageTables", 81920), ("Percpu", percpu_kb),
            ("HugePages_Total", None), ("Hugepagesize", 2048)]
    out = []
    for k, v in rows:
        if v is None:
            out.append(f"{k + ':':<16}{0:>8}")
        else:
            out.append(f"{k + ':':<16}{v:>8} kB")
    return "\n".join(out) + "\n"


def task_stat(pid: int, comm: str, cpu: int, ticks: int, start: int, ppid: int = 1) -> str:
    utime, stime = ticks // 3, ticks - ticks // 3
    f = [str(pid), f"({comm})", "S", str(ppid), str(pid), str(pid), "0", "-1", "4194560", "1000", "0", "0", "0",
         str(utime), str(stime), "0", "0", "20", "0", "1", "0", str(start), "123456789", "2048", "18446744073709551615",
         "1", "1", "0", "0", "0", "0", "0", "0", "0", "0", "0", "0", "17", str(cpu), "0", "0", "0", "0", "0"]
    return " ".join(f) + "\n"


def write_procs(root: str, nprocs: int, ncpu: int, rng: random.Random, threads_per: int = 1) -> None:
    comms = ["kubelet", "containerd", "dockerd", "python3", "ray::Worker", "nvidia-persiste", "sshd", "systemd-journal",
             "node_exporter", "fluent-bit", "kworker/3:1", "ksoftirqd/39", "raylet", "gcs_server", "bash"]
    for i in range(nprocs):
        pid = 100 + i
        comm = comms[i % len(comms)]
        _w(root, f"/proc/{pid}/stat", task_stat(pid, comm, rng.randrange(ncpu), rng.randrange(10 ** 6), 1000 + i))
        for t in range(threads_per):
            tid = pid if t == 0 else 100000 + i * threads_per + t
            _w(root, f"/proc/{pid}/task/{tid}/stat",
               task_stat(tid, comm, rng.randrange(ncpu), rng.randrange(10 ** 5), 1000 + i, ppid=1))


def v1_tree(root: str, live: int, rng: random.Random, mount: str = "memory") -> None:
    """`live` directories (root included) under sys/fs/cgroup/MOUNT shaped like a kubelet node."""
    base = os.path.join(root, "sys/fs/cgroup", mount)
    dirs = ["system.slice", "user.slice", "kubepods", "kubepods/burstable", "kubepods/besteffort"]
    for svc in ("kubelet", "containerd", "docker", "sshd", "systemd-journald", "nvidia-persistenced"):
        dirs.append(f"system.slice/{svc}.service")
    while len(dirs) < live - 1:
        pod = f"kubepods/{rng.choice(['burstable', 'besteffort'])}/pod{uuid.UUID(int=rng.getrandbits(128))}"
        dirs.append(pod)
        for _ in range(2):
            if len(dirs) < live - 1:
                dirs.append(f"{pod}/{rng.getrandbits(256):064x}")
    for d in [""] + dirs[: live - 1]:
        p = os.path.join(base, d)
        os.makedirs(p, exist_ok=True)
        for fname, content in (("cgroup.procs", ""), ("memory.usage_in_bytes", "104857600\n"),
                               ("memory.limit_in_bytes", "9223372036854771712\n")):
            with open(os.path.join(p, fname), "w") as f:
                f.write(content)


def nic(root: str, ifname: str = "eth0", driver: str = "ena", queues: int = 8, resets: int = 3,
        starvation: int = 3, tx_timeout: int = 3, kmsg_lines: list[tuple[int, str]] | None = None,
        boot_offset_usec: int = 863_990_000_000) -> None:
    d = f"/sys/class/net/{ifname}"
    stats = {"rx_bytes": 118237811234, "tx_bytes": 39281726351, "rx_packets": 99821733, "tx_packets": 81237611,
             "rx_errors": 0, "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0, "collisions": 0,
             "rx_missed_errors": 0, "tx_aborted_errors": 0, "tx_carrier_errors": 0}
    for k, v in stats.items():
        _w(root, f"{d}/statistics/{k}", f"{v}\n")
    for q in range(queues):
        _w(root, f"{d}/queues/tx-{q}/tx_timeout", f"{tx_timeout if q == 5 else 0}\n")
        _w(root, f"{d}/queues/rx-{q}/rps_cpus", "0\n")
    drv_dir = os.path.join(root, f"sys/bus/pci/drivers/{driver}")
    os.makedirs(drv_dir, exist_ok=True)
    dev = os.path.join(root, d.lstrip("/"), "device")
    os.makedirs(dev, exist_ok=True)
    with open(os.path.join(dev, "uevent"), "w") as f:
        f.write(f"DRIVER={driver}\nPCI_CLASS=20000\nPCI_ID=1D0F:EC20\nPCI_SLOT_NAME=0000:20:03.0\n"
                "MODALIAS=pci:v00001D0Fd0000EC20sv00001D0Fsd0000EC20bc02sc00i00\n")
    link = os.path.join(dev, "driver")
    if not os.path.islink(link):
        os.symlink(os.path.relpath(drv_dir, dev), link)
    _w(root, f"/run/nodesleuth/ethtool/{ifname}",
       ENA_ETHTOOL.format(total_resets=resets, starvation=starvation, tx_timeout=tx_timeout))
    lines = ENA_KMSG if kmsg_lines is None else kmsg_lines
    recs = ["6,0,0,-;Linux version 5.15.0-1051-aws (buildd@lcy02-amd64-042) #56~20.04.1-Ubuntu SMP"]
    for i, (lvl, msg) in enumerate(lines):
        recs.append(f"{lvl},{i + 1},{boot_offset_usec + i * 1000},-;{msg}")
    _w(root, "/dev/kmsg", "\n".join(recs) + "\n")


def mountinfo(v1: bool, v2_path: str | None) -> str:
    lines = ["22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,discard",
             "23 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
             "24 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw"]
    mid = 30
    if v1:
        lines.append("30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755")
        groups: dict[int, list[str]] = {}
        for name, h in CGROUP_CONTROLLERS:
            groups.setdefault(h, []).append(name)
        for h, names in sorted(groups.items()):
            mid += 1
            mnt = ",".join(names)
            lines.append(f"{mid} 30 0:{mid} / /sys/fs/cgroup/{mnt} rw,nosuid,nodev,noexec,relatime shared:{mid} "
                         f"- cgroup cgroup rw,{mnt}")
    if v2_path:
        mid += 1
        lines.append(f"{mid} 24 0:{mid} / {v2_path} rw,nosuid,nodev,noexec,relatime shared:{mid} - cgroup2 cgroup2 "
                     "rw,nsdelegate,memory_recursiveprot")
    return "\n".join(lines) + "\n"


def make_v1_node(root: str, ncpu: int = 96, tracked: int = 68680, live: int = 240, nprocs: int = 200,
                 busy_cpu: int | None = 39, threads_per: int = 1, seed: int = 7, nic_resets: int = 3) -> str:
    """The incident's node: AWS 96 vCPUs, cgroup v1, ENA, 68,680 tracked vs 240 live memcgs."""
    rng = random.Random(seed)
    _w(root, "/proc/stat", proc_stat(ncpu, rng, busy_cpu))
    _w(root, "/proc/uptime", "864000.12 81234567.89\n")
    _w(root, "/proc/softirqs", softirqs(ncpu, rng))
    _w(root, "/proc/interrupts", interrupts(ncpu, rng))
    rows = ["#subsys_name\thierarchy\tnum_cgroups\tenabled"]
    for name, h in CGROUP_CONTROLLERS:
        n = tracked if name == "memory" else (live if name in ("cpu", "cpuacct", "pids") else 1)
        rows.append(f"{name}\t{h}\t{n}\t1")
    _w(root, "/proc/cgroups", "\n".join(rows) + "\n")
    _w(root, "/proc/self/mountinfo", mountinfo(True, "/sys/fs/cgroup/unified"))
    # a 68,680-memcg node on 96 CPUs: ~4 KiB Percpu and ~14 KiB Slab per memcg (measured on a live kernel)
    _w(root, "/proc/meminfo", meminfo(780 * 1024 * 1024, tracked * 4 * 96 // 24, 2_000_000 + tracked * 14))
    os.makedirs(os.path.join(root, "sys/fs/cgroup/memory"), exist_ok=True)
    v1_tree(root, live, random.Random(seed))
    v1_tree(root, live, random.Random(seed), "cpu,cpuacct")
    v1_tree(root, live, random.Random(seed), "pids")
    for mnt in ("cpuset", "blkio", "devices", "freezer", "net_cls,net_prio", "perf_event", "hugetlb", "rdma",
                "misc"):
        os.makedirs(os.path.join(root, f"sys/fs/cgroup/{mnt}"), exist_ok=True)
    _w(root, "/sys/fs/cgroup/unified/cgroup.stat", "nr_descendants 0\nnr_dying_descendants 0\n")
    write_procs(root, nprocs, ncpu, rng, threads_per)
    nic(root, resets=nic_resets, starvation=nic_resets, tx_timeout=nic_resets, kmsg_lines=None if nic_resets else [])
    return root


def make_v2_node(root: str, ncpu: int = 8, dying: int = 5000, seed: int = 11) -> str:
    """A cgroup v2 node (kernel >= 6.12) whose /system.slice holds `dying` dying memory cgroups."""
    rng = random.Random(seed)
    _w(root, "/proc/stat", proc_stat(ncpu, rng))
    _w(root, "/proc/uptime", "86400.00 600000.00\n")
    _w(root, "/proc/softirqs", softirqs(ncpu, rng))
    _w(root, "/proc/interrupts", interrupts(ncpu, rng, "ens5"))
    rows = ["#subsys_name\thierarchy\tnum_cgroups\tenabled"]
    for name in ("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"):
        rows.append(f"{name}\t0\t{dying + 40}\t1")
    _w(root, "/proc/cgroups", "\n".join(rows) + "\n")
    _w(root, "/proc/self/mountinfo", mountinfo(False, "/sys/fs/cgroup"))
    _w(root, "/proc/meminfo", meminfo(64 * 1024 * 1024, dying * 4 * ncpu // 24, 500_000 + dying * 14))
    tree = {"": None, "system.slice": None, "user.slice": None, "init.scope": None,
            "system.slice/ecs.service": None, "system.slice/containerd.service": None,
            "system.slice/kubelet.service": None, "kubepods.slice": None}
    dying_at = {"system.slice": dying - 7, "kubepods.slice": 7}
    live_children = {k: [c for c in tree if c and os.path.dirname(c) == k] for k in tree}

    def stat(path: str) -> tuple[int, int]:
        desc = sum(1 + stat(c)[0] for c in live_children[path])
        dd = dying_at.get(path, 0) + sum(stat(c)[1] for c in live_children[path])
        return desc, dd

    for path in tree:
        desc, dd = stat(path)
        lines = [f"nr_descendants {desc}", f"nr_subsys_cpu {desc + 1}", f"nr_subsys_memory {desc + 1}",
                 f"nr_subsys_pids {desc + 1}", f"nr_dying_descendants {dd}", "nr_dying_subsys_cpu 0",
                 f"nr_dying_subsys_memory {dd}", "nr_dying_subsys_pids 0"]
        _w(root, f"/sys/fs/cgroup/{path}/cgroup.stat".replace("//", "/"), "\n".join(lines) + "\n")
        _w(root, f"/sys/fs/cgroup/{path}/cgroup.procs".replace("//", "/"), "")
    write_procs(root, 50, ncpu, rng)
    nic(root, ifname="ens5", resets=0, starvation=0, tx_timeout=0, kmsg_lines=[])
    return root


class Animator:
    """Advances a fixture node's counters as a real kernel would, one step per second.

    Used to measure the recorder on a 96-CPU node this machine is not: /proc/stat per-CPU
    jiffies, a fraction of the processes' stat lines, softirqs and interrupts all move; one CPU
    can be pinned at ~100 %sys (the incident's CPU 39) with a named process on it.
    """

    def __init__(self, root: str, hz: int = 100, active_fraction: float = 0.1, busy_cpu: int | None = None,
                 busy_pid: int | None = None, seed: int = 3):
        self.root = root
        self.hz = hz
        self.rng = random.Random(seed)
        self.active_fraction = active_fraction
        self.busy_cpu = busy_cpu
        self.busy_pid = busy_pid
        with open(os.path.join(root, "proc/stat")) as f:
            self.stat_lines = f.read().splitlines()
        self.cpus = []
        for line in self.stat_lines:
            if line.startswith("cpu") and line[3] != " ":
                self.cpus.append([int(x) for x in line.split()[1:]])
        self.pids = sorted(int(p) for p in os.listdir(os.path.join(root, "proc")) if p.isdigit())
        self.si = self._read_table("proc/softirqs")
        self.irq = self._read_table("proc/interrupts")
        ncpu = len(self.cpus)
        self.irq_affinity = {int(name): (i * 13) % ncpu for i, (name, _) in enumerate(self.irq[1])
                             if name.strip().isdigit()}
        self.irq_cpus = set(self.irq_affinity.values())

    def _read_table(self, rel: str) -> tuple[list[str], list[list]]:
        with open(os.path.join(self.root, rel)) as f:
            lines = f.read().splitlines()
        return lines[0], [ln.split(":", 1) for ln in lines[1:]]

    def _write_table(self, rel: str, table, ncpu: int, bump) -> None:
        """Rewrite a per-CPU counter table; bump(row_name, cpu) says how much each cell grows."""
        head, rows = table
        out = [head]
        for i, (name, rest) in enumerate(rows):
            parts = rest.split()
            if len(parts) < ncpu or not all(p.isdigit() for p in parts[:ncpu]):
                out.append(f"{name}:{rest}")
                continue
            vals = [int(v) + bump(name.strip(), c) for c, v in enumerate(parts[:ncpu])]
            tail = " ".join(parts[ncpu:])
            rest = "".join(f"{v:>11}" for v in vals) + (f"  {tail}" if tail else "")
            rows[i] = [name, rest]
            out.append(f"{name}:{rest}")
        tmp = os.path.join(self.root, rel + ".tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(out) + "\n")
        os.replace(tmp, os.path.join(self.root, rel))

    def _softirq(self, name: str, cpu: int) -> int:
        """Timer/scheduler softirqs tick on every CPU; NET_RX/NET_TX where the NIC's IRQs land."""
        r = self.rng
        if name in ("TIMER", "SCHED", "RCU"):
            return r.randrange(200, 260) if cpu == self.busy_cpu else r.randrange(0, 30)
        if name in ("NET_RX", "NET_TX"):
            return r.randrange(500, 3000) if cpu in self.irq_cpus else 0
        if name == "HRTIMER":
            return r.randrange(0, 3)
        return 0

    def _irq(self, name: str, cpu: int) -> int:
        """Device IRQs are affined: each line counts on its one CPU (as irqbalance leaves them)."""
        n = int(name) if name.isdigit() else -1
        if n in self.irq_affinity:
            return self.rng.randrange(500, 3000) if self.irq_affinity[n] == cpu else 0
        if name == "LOC":
            return self.rng.randrange(200, 260) if cpu == self.busy_cpu else self.rng.randrange(0, 40)
        if name in ("RES", "CAL"):
            return self.rng.randrange(0, 5)
        return 0

    def step(self, seconds: float = 1.0) -> None:
        j = int(self.hz * seconds)
        for c, v in enumerate(self.cpus):
            if c == self.busy_cpu:
                sys_, usr, soft = j * 94 // 100, j * 5 // 100, 0
            else:
                usr = self.rng.randrange(0, j // 10 + 1)
                sys_ = self.rng.randrange(0, j // 30 + 1)
                soft = self.rng.randrange(0, 2)
            v[0] += usr
            v[2] += sys_
            v[6] += soft
            v[3] += max(0, j - usr - sys_ - soft)
        agg = [sum(col) for col in zip(*self.cpus)]
        lines = ["cpu  " + " ".join(map(str, agg))] + [f"cpu{c} " + " ".join(map(str, v))
                                                       for c, v in enumerate(self.cpus)]
        lines += [ln for ln in self.stat_lines if not ln.startswith("cpu")]
        tmp = os.path.join(self.root, "proc/stat.tmp")
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(self.root, "proc/stat"))
        active = self.rng.sample(self.pids, max(1, int(len(self.pids) * self.active_fraction)))
        if self.busy_pid is not None and self.busy_pid not in active:
            active.append(self.busy_pid)
        for pid in active:
            p = os.path.join(self.root, f"proc/{pid}/stat")
            with open(p) as f:
                parts = f.read().split()
            comm_end = next(i for i, x in enumerate(parts) if x.endswith(")"))
            off = comm_end - 1  # fields after a comm with spaces shift
            if pid == self.busy_pid and self.busy_cpu is not None:
                parts[14 + off] = str(int(parts[14 + off]) + j * 94 // 100)
                parts[38 + off] = str(self.busy_cpu)
            else:
                parts[13 + off] = str(int(parts[13 + off]) + self.rng.randrange(1, 5))
                parts[38 + off] = str(self.rng.randrange(len(self.cpus)))
            with open(p, "w") as f:
                f.write(" ".join(parts) + "\n")
        ncpu = len(self.cpus)
        self._write_table("proc/softirqs", self.si, ncpu, self._softirq)
        self._write_table("proc/interrupts", self.irq, ncpu, self._irq)
