"""Issue 38 part 4 on a real kernel: a 2-vCPU QEMU guest (tests/vm/vmrun.py, Debian's 5.10, the incident's generation, cgroup v2) whose
memory cgroups are driven to the 65,535-ID limit by real mkdirs (tests/vm/memcg_ids.py): the next mkdir fails
with ENOSPC, and `nodesleuth check` there reports the memcg_ids finding and says why pods fail."""

from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "vm"))
import vmrun  # noqa: E402
from conftest import missing

REPO = os.path.dirname(HERE)


@pytest.mark.slow
@pytest.mark.long  # ~6.5 min: 65,531 mkdirs under TCG
def test_ids_exhausted_in_a_vm_fail_mkdir_and_check_says_why_pods_fail():
    try:
        vmrun.ensure_host_tools()
        vmrun.ensure_kernel(kernel="5.10")
    except vmrun.VMUnavailable as e:
        missing(f"no VM can run here: {e}")
    staged = vmrun.stage_source(REPO)
    check = f"cd / && PYTHONPATH={staged}/src $VMRUN_PYTHON -m nodesleuth check"
    hold = f"{check} --json --seconds 1 --no-probe; echo =====; {check} --npd --seconds 1 --no-probe"
    r = vmrun.run_in_vm(f"$VMRUN_PYTHON {staged}/vm/memcg_ids.py $VMRUN_DISK --hold '{hold}'", cpus=2, mem="4G",
                        timeout=1200, kernel="5.10", disk_mb=64)
    assert r[0] == 0, r[2][-3000:]
    out = json.loads(r[1].strip().splitlines()[-1])
    # the kernel's own answer: the mkdir after the last that fit failed with ENOSPC, at the ID limit
    assert out["fill_error"] == "ENOSPC", out
    assert out["ids_used_at_limit"] >= 0.9 * 65535, out
    body, npd = out["hold"]["stdout"].split("=====")
    doc = json.loads(body)
    f = next(x for x in doc["findings"] if x["kind"] == "memcg_ids")
    assert f["severity"] == "critical"
    assert f["data"]["ids_held_high"] >= 0.9 * 65535 and f["data"]["dying_hold"] == "swap"
    text = " ".join(f["evidence"])
    assert "mkdir of a new memory cgroup fails with ENOSPC" in text and "why pods fail" in text
    assert "memory cgroup IDs" in npd
    print(f"fill: {out['live_filled']} mkdirs in {out['fill_seconds']} s; held {f['data']['ids_held_high']}; "
          f"VM wall {r.wall:.0f} s")
