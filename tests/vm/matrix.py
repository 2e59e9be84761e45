#!/usr/bin/env python3
"""The kernel matrix (issue 27): run tests/vm/matrix_probe.py inside Debian's 5.10 / 6.1 / 6.12 / 7.2
kernels (cgroup v1 or v2) under QEMU TCG and keep the JSON it prints under tests/vm/out/matrix/.

    python3 matrix.py run 5.10:v1:2 pin 200            # one VM: KERNEL:HIERARCHY:CPUS PROBE ARGS...
    python3 matrix.py run 7.2:v2:2 cost 0,1000 perf --disk-mb 1024
    python3 matrix.py plan [NAME...]                    # the standard set (see PLAN), skipping done ones
    python3 matrix.py table                             # markdown table from out/matrix/*.json
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
    PLAN[f"pin:{c}"] = (f"{c}:2", "pin", ["200", "1,5,15"], 256, "2G", "")
    PLAN[f"percpu2:{c}"] = (f"{c}:2", "percpu", ["2000"], 0, "2G", "")
    PLAN[f"percpu16:{c}"] = (f"{c}:16", "percpu", ["2000"], 0, "3G", "")
    PLAN[f"cost:{c}"] = (f"{c}:2", "cost", ["0,1000,10000,30000", "perf"], 1024, "3G", "")
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


def hot(perf: dict | None, prefer: tuple[str, ...]) -> str:
    """The hottest kernel function in a perf report (self), skipping idle and the reader's own copy."""
    if not perf:
        return "-"
    for ln in perf.get("self", []):
        p = ln.split()
        if len(p) >= 3 and p[0].endswith("%") and "[k]" in p:
            sym = p[-1]
            if sym in ("default_idle", "pv_native_safe_halt", "native_safe_halt", "acpi_safe_halt") or "idle" in sym:
                continue
            return f"{sym} {p[0]}"
    return "-"


def cmd_table() -> str:
    rows = ["| kernel / hierarchy | reparent symbols | page-cache zombies left after 15 s: tmpfs / ext4 (of 200) "
            "| Percpu kB per zombie: 2 / 16 CPUs | Slab kB per zombie (2 CPUs) | stats read, kernel us: 0 -> N zombies "
            "(root memory.stat; root numa_stat; pod memory.stat) | reclaim walk ms/MB: 0 -> N zombies "
            "| hottest function (reads at N; reclaim at N) |", "|" + "---|" * 8]
    for c in CONFIGS:
        sym = load(c, 2, "symbols")
        pin = load(c, 2, "pin")
        p2, p16 = load(c, 2, "percpu"), load(c, 16, "percpu")
        cost = load(c, 2, "cost")
        cells = [c.replace(":", " / ")]
        if sym and sym["out"]:
            s = sym["out"][-1]
            cells[0] += f" ({sym['kernel']})"
            pres = [k for k in ("lru_reparent_memcg", "memcg_reparent_objcgs", "memcg_reparent_list_lrus")
                    if s["present"].get(k)]
            cells.append(", ".join(pres) + ("; nr_dying_subsys_memory" if s.get("has_nr_dying_subsys_memory") else ""))
        else:
            cells.append("-")
        if pin and pin["out"]:
            s = pin["out"][-1]
            by = {r["fs"]: r for r in s.get("rows", [])}
            cells.append(" / ".join(str(by[f]["after"]["15.0"]) if f in by else "-" for f in ("tmpfs", "ext4")))
        else:
            cells.append("-")

        def pc(x, key):
            return (str(x["out"][-1].get(key)) if x and x["out"] else "-")
        cells.append(f"{pc(p2, 'percpu_kB_per_zombie')} / {pc(p16, 'percpu_kB_per_zombie')}")
        cells.append(pc(p2, "slab_kB_per_zombie"))
        if cost and cost["out"] and cost["out"][-1].get("summary"):
            t = cost["out"][-1]["table"]
            a, b = t[0], t[-1]
            names = ("root memory.stat", "root memory.numa_stat", "pod memory.stat")
            cells.append(f"{a['zombies']} -> {b['zombies']}: " + "; ".join(
                f"{a['read_sys_us'].get(n, 0):.0f} -> {b['read_sys_us'].get(n, 0):.0f}" for n in names
                if n in a["read_sys_us"]))
            ra, rb = a["reclaim_sys_ms_per_mb"], b["reclaim_sys_ms_per_mb"]
            cells.append(f"{ra} -> {rb}" if ra is not None else "-")
            rows_ = [r for r in cost["out"] if r.get("probe") == "cost" and "reads" in r]
            lastr = rows_[-1] if rows_ else {}
            pr = (lastr.get("perf_reads") or {}).get("root memory.stat")
            pc_ = (lastr.get("reclaim") or {}).get("perf")
            cells.append(f"{hot(pr, ())}; {hot(pc_, ())}")
        else:
            cells += ["-", "-", "-"]
        rows.append("| " + " | ".join(cells) + " |")
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
    if argv[0] == "table":
        print(cmd_table())
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
