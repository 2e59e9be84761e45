#!/usr/bin/env python3
"""The kernel matrix (issue 27): run tests/vm/matrix_probe.py inside Debian's 5.10 / 6.1 / 6.12 / 7.2
kernels (cgroup v1 or v2) under QEMU TCG and keep the JSON it prints under tests/vm/out/matrix/.

    python3 matrix.py run 5.10:v1:2 pin 200            # one VM: KERNEL:HIERARCHY:CPUS PROBE ARGS...
    python3 matrix.py run 7.2:v2:2 cost 0,1000 perf --disk-mb 1024
    python3 matrix.py plan [NAME...]                    # the standard set (see PLAN), skipping done ones
    python3 matrix.py table [--readme]                  # markdown tables from out/matrix/*.json
                                                        # (--readme: also into README.md's matrix section)
    python3 matrix.py nictable [--readme]               # the NIC runs' table
    python3 matrix.py nic 5.10:v1:2 reclaim 10000 20 --disk-mb 1024 --tag reclaim   # NICs on the hot CPU
                                                        # (nic_probe.py: HOT ZOMBIES SECONDS [PPS])

Each run prints one JSON line: {"config", "probe", "kernel" (guest uname -r), "wall_s", "rc", "out"}.
Host side: stdlib + vmrun.py; the probe's helper zombie_tool.c is built here with gcc -static.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vmrun  # noqa: E402

OUT = HERE / "out" / "matrix"
CONFIGS = ["5.10:v1", "5.10:v2", "6.1:v2", "6.12:v2", "7.2:v2"]


def build_tool() -> str:
    """gcc -O2 -static zombie_tool.c into the VM cache (the guest sees the host's / read-only)."""
    src = HERE / "zombie_tool.c"
    h = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    out = vmrun.CACHE / "matrix" / f"zombie_tool-{h}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        subprocess.run(["gcc", "-O2", "-static", "-o", str(tmp), str(src)], check=True, capture_output=True)
        tmp.rename(out)
    return str(out)


def stage_probe(name: str = "matrix_probe.py") -> str:
    """The guest scripts (matrix_probe.py, nic_probe.py) copied under the cache (a checkout under /tmp
    would be hidden in the guest); returns the staged path of `name`."""
    srcs = [HERE / "matrix_probe.py", HERE / "nic_probe.py"]
    h = hashlib.sha256(b"".join(p.read_bytes() for p in srcs)).hexdigest()[:12]
    out = vmrun.CACHE / "matrix" / f"stage-{h}"
    if not (out / ".done").exists():
        out.mkdir(parents=True, exist_ok=True)
        for p in srcs:
            (out / p.name).write_bytes(p.read_bytes())
        (out / ".done").write_text("")
    return str(out / name)


NIC_QEMU = [  # two QEMU hubs, no host backend: frames never leave the QEMU process
    "-netdev", "hubport,id=h0a,hubid=0", "-device", "virtio-net-pci,netdev=h0a,mac=52:54:00:00:00:01",
    "-netdev", "hubport,id=h0b,hubid=0", "-device", "e1000,netdev=h0b,mac=52:54:00:00:01:01",
    "-netdev", "hubport,id=h1a,hubid=1", "-device", "e1000e,netdev=h1a,mac=52:54:00:00:00:02",
    "-netdev", "hubport,id=h1b,hubid=1", "-device", "e1000,netdev=h1b,mac=52:54:00:00:01:02",
]


def run(config: str, probe: str, args: list[str], disk_mb: int = 0, mem: str = "2G", timeout: float = 3600,
        tag: str = "", save: bool = True) -> dict:
    kernel, hier, cpus = config.split(":")
    tool = build_tool()
    if probe == "nic":
        cmd = f"$VMRUN_PYTHON {stage_probe('nic_probe.py')} {tool} " + " ".join(shlex.quote(a) for a in args)
        extra = NIC_QEMU
    else:
        cmd = f"$VMRUN_PYTHON {stage_probe()} {tool} {probe} " + " ".join(shlex.quote(a) for a in args)
        extra = []
    t0 = time.time()
    load0 = os.getloadavg()
    r = vmrun.run_in_vm(cmd, cpus=int(cpus), mem=mem, timeout=timeout, kernel=kernel, hierarchy=hier,
                        disk_mb=disk_mb, extra_qemu=extra)
    lines = []
    for ln in r.stdout.splitlines():
        try:
            lines.append(json.loads(ln))
        except ValueError:
            lines.append({"raw": ln})
    res = {"config": config, "probe": probe, "args": args, "disk_mb": disk_mb, "mem": mem,
           "kernel": r.kernel, "kernel_name": r.kernel_name, "hierarchy": r.hierarchy, "cpus": int(cpus),
           "rc": r.rc, "wall_s": round(r.wall, 1), "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
           "host_loadavg_start_end": [round(load0[0], 2), round(os.getloadavg()[0], 2)],
           "out": lines, "stderr": r.stderr[-3000:]}
    if save:
        OUT.mkdir(parents=True, exist_ok=True)
        name = f"{kernel}-{hier}-{cpus}cpu-{probe}{('-' + tag) if tag else ''}.json"
        (OUT / name).write_text(json.dumps(res, indent=1) + "\n")
        res["file"] = str((OUT / name).relative_to(HERE))
    return res


# name -> (config, probe, args, disk_mb, mem, tag)
PLAN: dict[str, tuple] = {}
for c in CONFIGS:
    k, h = c.split(":")
    PLAN[f"symbols:{c}"] = (f"{c}:2", "symbols", [], 0, "2G", "")
    PLAN[f"pin:{c}"] = (f"{c}:2", "pin", ["200", "1,5,15,45"], 256, "2G", "")
    PLAN[f"percpu2:{c}"] = (f"{c}:2", "percpu", ["2000"], 0, "2G", "")
    PLAN[f"percpu16:{c}"] = (f"{c}:16", "percpu", ["2000"], 0, "3G", "")
    PLAN[f"cost:{c}"] = (f"{c}:2", "cost", ["0,1000,10000,30000", "perf"], 1024, "3G", "")
for c in ("5.10:v1", "6.12:v2"):  # stats reads at 16 vCPUs (no disk: no reclaim part)
    PLAN[f"cost16:{c}"] = (f"{c}:16", "cost", ["0,10000"], 0, "3G", "")
PLAN["percpu2-socket:7.2:v2"] = ("7.2:v2:2", "percpu", ["2000", "socket"], 0, "2G", "socket")
PLAN["percpu16-socket:7.2:v2"] = ("7.2:v2:16", "percpu", ["2000", "socket"], 0, "3G", "socket")
PLAN["cost-socket:7.2:v2"] = ("7.2:v2:2", "cost", ["0,1000,10000,30000", "perf", "socket"], 1024, "3G", "socket")


def plan_file(name: str) -> Path:
    config, probe, _, _, _, tag = PLAN[name]
    k, h, cpus = config.split(":")
    return OUT / f"{k}-{h}-{cpus}cpu-{probe}{('-' + tag) if tag else ''}.json"


def cmd_plan(names: list[str], force: bool) -> None:
    sel = [n for n in PLAN if not names or any(n == x or n.startswith(x) for x in names)]
    for n in sel:
        if plan_file(n).exists() and not force:
            old = json.loads(plan_file(n).read_text())
            if old.get("rc") == 0:
                continue
        config, probe, args, disk, mem, tag = PLAN[n]
        res = run(config, probe, args, disk, mem, tag=tag)
        summ = res["out"][-1] if res["out"] else {}
        print(json.dumps({"plan": n, "kernel": res["kernel"], "rc": res["rc"], "wall_s": res["wall_s"],
                          "file": res.get("file"), "last": summ})[:3000], flush=True)


# ----------------------------------------------------------------------------- table

def load(config: str, cpus: int, probe: str, tag: str = "") -> dict | None:
    k, h = config.split(":")
    f = OUT / f"{k}-{h}-{cpus}cpu-{probe}{('-' + tag) if tag else ''}.json"
    return json.loads(f.read_text()) if f.exists() else None


def hot(perf: dict | None, n: int = 3) -> str:
    """The hottest kernel functions (self) of a perf report, idle and the reader's own copy skipped."""
    if not perf:
        return "-"
    out = []
    for ln in perf.get("self", []):
        p = ln.split()
        if len(p) >= 3 and p[0].endswith("%") and "[k]" in p:
            sym = p[-1]
            if "idle" in sym or "safe_halt" in sym:
                continue
            out.append(f"{sym} {p[0]}")
        if len(out) == n:
            break
    return ", ".join(out) or "-"


def _last(d: dict | None) -> dict:
    return d["out"][-1] if d and d.get("out") else {}


def cmd_table() -> str:
    """Two markdown tables from out/matrix: what accumulates and what it costs."""
    t1 = ["| kernel (uname -r) / hierarchy | reparenting in /proc/kallsyms | dying of 200 removed memcgs after "
          "1 / 15 / 45 s: tmpfs write; ext4 write; ext4 read; ext4 read, noatime | Percpu kB per zombie, 2 / 16 vCPUs "
          "| Slab kB per zombie, 2 / 16 vCPUs |", "|---|---|---|---|---|"]
    t2 = ["| kernel / hierarchy | zombies | one stats read, kernel us (median of 3): root memory.stat; root "
          "numa_stat; pod memory.stat; pod numa_stat | reclaim walk: kernel ms per MB read | hottest in the "
          "reclaim profile at the largest count |", "|---|---|---|---|---|"]
    for c in CONFIGS:
        sym, pin = _last(load(c, 2, "symbols")), _last(load(c, 2, "pin"))
        p2, p16 = _last(load(c, 2, "percpu")), _last(load(c, 16, "percpu"))
        kern = (load(c, 2, "symbols") or {}).get("kernel", "?")
        name = f"{kern} / {c.split(':')[1]}"
        pres = [k for k in ("lru_reparent_memcg", "lru_gen_reparent_memcg", "memcg_reparent_list_lrus",
                            "reparent_shrinker_deferred") if sym.get("present", {}).get(k)]
        by = {r["fs"]: r for r in pin.get("rows", [])}
        cells = []
        for fs in ("tmpfs-write", "ext4-write", "ext4-read", "ext4-read-noatime"):
            r = by.get(fs)
            cells.append(" / ".join(str(r["after"].get(t, "-")) for t in ("1.0", "15.0", "45.0")) if r else "-")

        def f(x, k):
            v = x.get(k)
            return "-" if v is None else f"{v:.1f}"
        pc = f"{f(p2, 'percpu_kB_per_zombie')} / {f(p16, 'percpu_kB_per_zombie')}"
        sl = f"{f(p2, 'slab_kB_per_zombie')} / {f(p16, 'slab_kB_per_zombie')}"
        if p2 and not p2.get("zombies"):
            s2, s16 = _last(load(c, 2, "percpu", "socket")), _last(load(c, 16, "percpu", "socket"))
            pc = f"no zombies left of {p2.get('n')} (tmpfs pages)"
            sl = "-"
            if s2:
                pc += f"; pinned by sockets: {f(s2, 'percpu_kB_per_zombie')} / {f(s16, 'percpu_kB_per_zombie')}"
                sl = f"sockets: {f(s2, 'slab_kB_per_zombie')} / {f(s16, 'slab_kB_per_zombie')}"
        t1.append(f"| {name} | {', '.join(pres) or 'none'} | {'; '.join(cells)} | {pc} | {sl} |")
        for tag in ("", "socket"):
            cost = load(c, 2, "cost", tag)
            if not cost:
                continue
            rows = [r for r in cost["out"] if r.get("probe") == "cost" and "reads" in r]
            for r in rows:
                rd_ = "; ".join(f"{r['reads'][k]['sys_us']:.0f}" for k in ("root memory.stat", "root memory.numa_stat",
                                                                              "pod memory.stat", "pod memory.numa_stat")
                                if k in r["reads"])
                rec = (r.get("reclaim") or {}).get("sys_ms_per_mb")
                hp = hot((r.get("reclaim") or {}).get("perf")) if r is rows[-1] else ""
                z = f"{r['dying']:,}" + (f" (of {r['zombies_target']:,} made)" if r["dying"] != r["zombies_target"] else "")
                label = name + (" (socket pins)" if tag else "")
                t2.append(f"| {label if r is rows[0] else ''} | {z} | {rd_} | "
                          f"{format(rec, '.1f') if rec is not None else '-'} | {hp} |")
    return "\n".join(t1) + "\n\n" + "\n".join(t2)


def cmd_nictable() -> str:
    """One row per window of every out/matrix/*-nic-*.json."""
    rows = ["| run (kernel / hot on CPU 1 / rates) | window | ICMP RTT to the DUT, ms p50 / p99 / max: virtio-net; e1000e "
            "| ksoftirqd/1 waited (ms of the window) | CPU 1 time_squeeze | CPU 1: busy sys+user / softirq (ticks) "
            "| TX timeouts (sysfs), watchdog / reset lines | host load |", "|---|---|---|---|---|---|---|---|"]
    for f in sorted(OUT.glob("*-nic-*.json")):
        d = json.loads(f.read_text())
        setup = next((o for o in d["out"] if "setup" in o), {})
        wins = [o for o in d["out"] if "window" in o]
        for w in wins:
            t, dl = w["traffic"], w["delta"]

            def ping(k):
                p = t.get(f"{k} ping", {})
                return "/".join(f"{p.get(x, 0) / 1000:.0f}" for x in ("p50_us", "p99_us", "max_us")) if p else "-"
            cpu1 = dl.get("cpu", {}).get("cpu1", {})
            tto = sum(v for q in dl.get("tx_timeout", {}).values() for v in q.values() if isinstance(v, (int, float)))
            sq = dl["softnet"][1]["time_squeeze"] if len(dl.get("softnet", [])) > 1 else "-"
            label = (f"{d['kernel']} / {setup.get('hot_kind')} ({setup.get('zombies')} zombies) / "
                     f"{setup.get('pps')} pps in, {setup.get('tx_pps') or 'max'} out") if w is wins[0] else ""
            rows.append(f"| {label} | {w['window']} | {ping('virtio')}; {ping('e1000e')} | "
                        f"{dl.get('ksoftirqd', {}).get('wait_ms', 0):.0f} | {sq} | "
                        f"{cpu1.get('system', 0) + cpu1.get('user', 0)} / {cpu1.get('softirq', 0)} | "
                        f"{tto}, {len(w.get('kmsg_interesting', []))} | "
                        f"{(d.get('host_loadavg_start_end') or ['?'])[0]} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv[0] in ("run", "nic"):
        disk, mem, tag, rest = 0, "2G", "", []
        it = iter(argv[1:])
        for a in it:
            if a == "--disk-mb":
                disk = int(next(it))
            elif a == "--mem":
                mem = next(it)
            elif a == "--tag":
                tag = next(it)
            else:
                rest.append(a)
        if argv[0] == "nic":
            res = run(rest[0], "nic", rest[1:], disk, mem, tag=tag, save=True)
        else:
            res = run(rest[0], rest[1], rest[2:], disk, mem, save=False)
        print(json.dumps(res, indent=1))
        return 0 if res["rc"] == 0 else 1
    if argv[0] == "plan":
        force = "--force" in argv
        cmd_plan([a for a in argv[1:] if a != "--force"], force)
        return 0
    if argv[0] in ("table", "nictable"):
        t, mark = (cmd_table(), "TABLES") if argv[0] == "table" else (cmd_nictable(), "NICTABLE")
        if "--readme" in argv:  # replace the table between the markers in README.md
            readme = HERE / "README.md"
            text = readme.read_text()
            a, b = f"<!--{mark}-->", f"<!--/{mark}-->"
            i, j = text.index(a), text.index(b) if b in text else -1
            text = text[:i] + a + "\n" + t + "\n" + b + (text[j + len(b):] if j >= 0 else text[i + len(a):])
            readme.write_text(text)
        print(t)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
