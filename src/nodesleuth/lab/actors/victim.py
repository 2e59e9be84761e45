"""The work a NIC driver needs, pinned to the hot core: a poller that wants the CPU every millisecond
for a moment (as a NAPI poll does) and records how late it got it. The lab reads its run delay from
/proc/PID/schedstat (the kernel's account), and this file only adds the worst lateness per second.

usage: python -m nodesleuth.lab.actors.victim CPU STATUS_FILE
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None)
    libc.prctl(1, 9, 0, 0, 0)
    libc.prctl(15, b"napi-poll", 0, 0, 0)
    os.sched_setaffinity(0, {int(argv[0])})
    status = argv[1]
    worst, sec = 0.0, int(time.time())
    while True:
        t = time.monotonic()
        time.sleep(0.001)
        late = time.monotonic() - t - 0.001
        worst = max(worst, late)
        now = int(time.time())
        if now != sec:
            with open(status + ".tmp", "w") as f:
                json.dump({"t": sec, "worst_late_ms": round(worst * 1000, 3)}, f)
            os.replace(status + ".tmp", status)
            worst, sec = 0.0, now


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
