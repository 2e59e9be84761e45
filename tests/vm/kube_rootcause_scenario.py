"""Runs INSIDE the VM (pure cgroup v2): the incident end to end through CRI (tests/cri/incident.py), as
tests/test_kube.py makes it on the v1 host: a pod's container crash-looping through containerd leaves its
cgroups dying, a loader pod's reads under kubelet's allocatable limit walk them on CPU 1, recorded by
`nodesleuth record --trace-churn --profile`; prints one JSON object with what was made and explain's answer.

usage: python kube_rootcause_scenario.py STAGED_TESTS_DIR ZOMBIES LOOP_MAX_S
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(sys.argv[1], "cri"))
import cri  # noqa: E402
import incident  # noqa: E402


def main() -> None:
    from nodesleuth.node.cgroupfs import Memcg

    out: dict = {"kernel": os.uname().release, "why_not": cri.available()}
    if out["why_not"]:
        print(json.dumps(out))
        return
    mc = Memcg()
    disk = os.environ.get("VMRUN_DISK", "/run/disk")  # ext4: the loader reads a sparse file's holes there
    store = os.path.join(disk, "store")
    t0 = time.monotonic()
    with cri.containerd() as kubelet:
        out["made"] = incident.make(kubelet, mc, store, disk, int(sys.argv[2]), float(sys.argv[3]))
    out["made"]["wall_s"] = round(time.monotonic() - t0, 1)
    with open("/sys/fs/cgroup/cgroup.stat") as f:
        out["root_cgroup_stat"] = f.read()
    out["doc"], out["text"] = incident.explain(store)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
