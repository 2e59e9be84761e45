"""Runs INSIDE the VM (pure cgroup v2): Debian's containerd driven through CRI (tests/cri) as kubelet
drives it, then nodesleuth on what it made; prints one JSON object.

usage: python kube_scenario.py STAGED_TESTS_DIR BUSY_CPU

1. a Guaranteed pod's container pinned to BUSY_CPU by its cpuset: `check` must name the pod on the hot core;
2. a BestEffort pod's container that writes a file to a hostPath volume and exits, restarted through
   CRI for the length of a `check --seconds 20` with its churn trace: the pod's containers must be proven
   as the zombies' creator. On v2 the kernel's own count of dying memcgs under the pod is read beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(sys.argv[1], "cri"))
import cri  # noqa: E402

CPU = int(sys.argv[2])


def check(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "check", "--json", *args], capture_output=True, text=True,
                       timeout=600)
    return {"rc": p.returncode, "err": p.stderr[-2000:], "doc": json.loads(p.stdout) if p.stdout.strip() else None}


def main() -> None:
    out: dict = {"kernel": os.uname().release, "why_not": cri.available()}
    if out["why_not"]:
        print(json.dumps(out))
        return
    with cri.containerd() as k:
        hot = k.run_pod("ml-train", "ray-worker-0", "guaranteed")
        k.start_container(hot, "spin", ["sh", "-c", "while :; do :; done"], cpuset=str(CPU))
        time.sleep(1)
        out["hot"] = check("--seconds", "5", "--no-trace-churn", "--no-probe")
        out["hot_uid"] = hot.uid
        k.remove_pod(hot)
        data = tempfile.mkdtemp(prefix="crashloop-", dir="/var/tmp")
        pod = k.run_pod("batch", "agent-5f6c", "besteffort")
        with k.crash_loop(pod, "agent", data) as errors:
            out["loop"] = check("--seconds", "40", "--no-probe")
        out["loop_errors"] = [repr(e) for e in errors]
        out["restarts"] = pod.attempts.get("agent", -1)
        out["loop_uid"] = pod.uid
        stat = f"/sys/fs/cgroup{pod.cgroup_parent}/cgroup.stat"
        out["pod_cgroup_stat"] = open(stat).read() if os.path.exists(stat) else None
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
