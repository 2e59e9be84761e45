"""An ECS-agent-like program that cannot reach its cluster: at each start it makes `per_start` fresh
memory cgroups (`<parent>/docker/<64 hex>`, as a new agent container would), charges a page of
state to each on a tmpfs (unreclaimable without swap, as logs in /run are), leaves them, removes
them (they stay dying), logs the registration failure and exits 1.

usage: python -m nodesleuth.lab.actors.ecs_agent PARENT_CGROUP STATE_DIR PER_START [CONTROL_FILE]

CONTROL_FILE, when given and present, holds "PER_START REGISTER_SECONDS": the lab builds its zombie
population fast, then lets the agent behave like the real one (try to register for a while, fail).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

CG = "/sys/fs/cgroup"
V1 = CG + "/memory"  # cgroup v1's memory hierarchy; absent on a pure v2 host (one hierarchy at CG)


def main(argv: list[str]) -> int:
    ctypes.CDLL(None).prctl(15, b"ecs-agent", 0, 0, 0)
    mem = V1 if os.path.isdir(V1) else CG
    parent, state, per_start = os.path.join(mem, argv[0], "docker"), argv[1], int(argv[2])
    register = 0.0
    if len(argv) > 3 and os.path.exists(argv[3]):
        with open(argv[3]) as f:
            conf = f.read().split()
        per_start, register = int(conf[0]), float(conf[1])
    me = str(os.getpid())
    mine = (lambda ln: ":memory:" in ln) if mem == V1 else (lambda ln: ln.startswith("0::"))
    home = next(ln.split(":", 2)[2].strip() for ln in open("/proc/self/cgroup") if mine(ln))
    home_procs = os.path.join(mem + home, "cgroup.procs")
    os.makedirs(parent, exist_ok=True)  # on v2 the lab made it with +memory for its children
    os.makedirs(state, exist_ok=True)
    page = b"s" * 4096
    for _ in range(per_start):
        cid = os.urandom(32).hex()
        cg = os.path.join(parent, cid)
        os.mkdir(cg)
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(me)
        with open(os.path.join(state, cid), "wb") as f:  # agent state: one page charged to the container
            f.write(page)
        with open(home_procs, "w") as f:
            f.write(me)
        os.rmdir(cg)
    time.sleep(register)  # trying to reach the ECS endpoint
    print('level=critical msg="Unable to register as a container instance with ECS: ClientException: '
          'Cluster not found."', flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
