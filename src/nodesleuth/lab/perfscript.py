"""Synthetic `perf script` captures shaped exactly like perf's output
(`perf script -F comm,pid,tid,cpu,time,period,event,ip,sym,dso`), for machines we are not:
a 96-CPU node where one CPU spends seconds in the kernel walking memory cgroups.
"""

from __future__ import annotations

import random

IDLE = [("ffffffff81f2a8ab", "pv_native_safe_halt"), ("ffffffff81f2c3b5", "default_idle"),
        ("ffffffff81f2c674", "default_idle_call"), ("ffffffff811301b4", "do_idle"),
        ("ffffffff81130415", "cpu_startup_entry"), ("ffffffff8105e8a1", "start_secondary"),
        ("ffffffff81000145", "secondary_startup_64_no_verify")]
SOFTIRQ_ON_IDLE = [("ffffffffc0412a10", "ena_io_poll", "[ena]"), ("ffffffff81c0e2f1", "__napi_poll"),
                   ("ffffffff81c0e6f2", "net_rx_action"), ("ffffffff82000e11", "__do_softirq"),
                   ("ffffffff810d3a45", "irq_exit_rcu"), ("ffffffff81f2a0b2", "common_interrupt"),
                   ("ffffffff82000c86", "asm_common_interrupt")] + IDLE
MEMCG_WALK = [("ffffffff812f1c22", "mem_cgroup_nr_lru_pages"), ("ffffffff812f5a13", "memcg_numa_stat_show"),
              ("ffffffff813a8b5c", "seq_read_iter"), ("ffffffff8136a6d4", "vfs_read"),
              ("ffffffff8136b0f7", "ksys_read"), ("ffffffff81f1d3a8", "do_syscall_64"),
              ("ffffffff82000099", "entry_SYSCALL_64_after_hwframe"),
              ("4a1b2c", "syscall.Syscall", "/usr/bin/kubelet"),
              ("4c3d21", "github.com/opencontainers/runc/libcontainer/cgroups/fs.getPageUsageByNUMA",
               "/usr/bin/kubelet"), ("0", "[unknown]", "[unknown]")]
USER_STACKS = {
    "python3": [("7f3a1c2b1a10", "_PyEval_EvalFrameDefault", "/usr/bin/python3.10"),
                ("7f3a1c2b0000", "PyEval_EvalCode", "/usr/bin/python3.10"),
                ("7f3a1c200000", "[unknown]", "/usr/lib/x86_64-linux-gnu/libpython3.10.so.1.0")],
    "containerd": [("55d1a2b3c4d5", "runtime.scanobject", "/usr/bin/containerd"),
                   ("55d1a2b3c000", "runtime.gcBgMarkWorker", "/usr/bin/containerd")],
    "ray::Worker Actor": [("7f00aa001122", "cudaStreamSynchronize", "/usr/lib/libcudart.so.12"),
                          ("7f00aa000000", "[unknown]", "[unknown]")],
}


def _sample(comm: str, pid: int, tid: int, cpu: int, t: float, frames, rng: random.Random,
            period: int = 20408163) -> str:
    """One sample as perf prints it; the leaf's instruction pointer varies within its function, as
    real samples' do, so consecutive stacks are not byte-identical."""
    head = f"{comm:>16} {pid:>6}/{tid:<6} [{cpu:03d}] {t:12.6f}: {period:>10} cpu-clock:ppp: \n"
    lines = []
    for i, fr in enumerate(frames):
        addr, sym = fr[0], fr[1]
        dso = fr[2] if len(fr) > 2 else "[kernel.kallsyms]"
        if i == 0 and sym != "[unknown]":
            addr = f"{int(addr, 16) + rng.randrange(0, 0x60):x}"
        lines.append(f"\t{addr:>16} {sym} ({dso})\n")
    return head + "".join(lines) + "\n"


def make_capture(path: str, cpus: int = 96, seconds: int = 20, hz: int = 49, hot_cpu: int = 39,
                 hot_from: float = 8.0, hot_to: float = 13.0, busy: float = 0.15, t0: float = 5000.0,
                 seed: int = 5, truncate: bool = False, hot_pid: int = 2345) -> dict:
    """Write a capture; returns facts to assert against (counts of the hot episode)."""
    rng = random.Random(seed)
    period = 1.0 / hz
    out = []
    hot_samples = 0
    kworker = f"kworker/{hot_cpu}:1"
    for i in range(int(seconds * hz)):
        for cpu in range(cpus):
            t = t0 + i * period + cpu * 1e-6 + rng.random() * 1e-4
            rel = t - t0
            if cpu == hot_cpu and hot_from <= rel < hot_to:
                if rng.random() < 0.97:
                    out.append(_sample("kubelet", hot_pid, hot_pid + rng.randrange(1, 40), cpu, t, MEMCG_WALK, rng))
                    hot_samples += 1
                else:
                    out.append(_sample(kworker, 412, 412, cpu, t, [("ffffffff810b7e21", "process_one_work"),
                                                                   ("ffffffff810b8a10", "worker_thread"),
                                                                   ("ffffffff810c0f55", "kthread"),
                                                                   ("ffffffff81002a3c", "ret_from_fork")], rng))
                continue
            r = rng.random()
            if r < busy:
                comm = rng.choice(list(USER_STACKS))
                pid = {"python3": 8801, "containerd": 1201, "ray::Worker Actor": 9911}[comm]
                out.append(_sample(comm, pid, pid + rng.randrange(0, 8), cpu, t, USER_STACKS[comm], rng))
            elif cpu == 5 and r < busy + 0.3:
                out.append(_sample("swapper", 0, 0, cpu, t, SOFTIRQ_ON_IDLE, rng))
            else:
                out.append(_sample("swapper", 0, 0, cpu, t, IDLE, rng))
    text = "".join(out)
    if truncate:
        text = text[: len(text) - 137]  # cut inside the last sample's stack
    with open(path, "w") as f:
        f.write(text)
    return {"samples": len(out), "hot_samples": hot_samples, "hot_cpu": hot_cpu, "t0": t0,
            "hot_from": t0 + hot_from, "hot_to": t0 + hot_to}
