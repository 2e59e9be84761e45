"""Does a dying memory cgroup hold one of the 65,535 memcg IDs, and does a swap-pinned one? Measured on the
kernel matrix for real: each kernel boots in QEMU (tests/vm/vmrun.py, 2 vCPUs, cgroup v2, an ext4 scratch disk
with a swap file) and tests/vm/memcg_ids.py mkdirs memory cgroups until the kernel says ENOSPC, then frees K
IDs, makes K memcgs that stay dying (page cache; then tmpfs pages pushed to swap) and counts the mkdirs that
fit again. Prints one JSON object (benchmarks/results/memcg_ids.json); docs/memcg-ids.md reads it.

    python -m benchmarks.memcg_ids [--kernels 5.10,6.1,6.12,7.2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.common import emit

HERE = os.path.dirname(os.path.abspath(__file__))
VM = os.path.join(os.path.dirname(HERE), "tests", "vm")
sys.path.insert(0, VM)


def one(kernel: str) -> dict:
    import vmrun

    vmrun.ensure_kernel(kernel=kernel)
    r = vmrun.run_in_vm(f"$VMRUN_PYTHON {VM}/memcg_ids.py $VMRUN_DISK --swap", cpus=2, mem="4G", timeout=1400,
                        kernel=kernel, disk_mb=300)
    lines = r.stdout.strip().splitlines()
    if r.rc != 0 or not lines:
        return {"kernel": kernel, "error": f"rc={r.rc}: {r.stderr[-500:]}", "wall_s": round(r.wall, 1)}
    return {**json.loads(lines[-1]), "wall_s": round(r.wall, 1), "booted": r.kernel}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="5.10,6.1,6.12,7.2")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args()
    runs = [one(k) for k in a.kernels.split(",")]
    emit({"benchmark": "memcg_ids", "id_max": 65535, "runs": runs}, save=not a.no_save)


if __name__ == "__main__":
    main()
