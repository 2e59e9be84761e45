#!/usr/bin/env python3
"""The time to a verdict, measured live: in a QEMU guest (4 vCPUs, Debian 6.12), `nodesleuth record
--profile --trace-churn` runs as in the corpus (profile batches every 5 s); episodes are made one after
the other (a user-space loop, a /dev/zero reader, a softirq storm steered by RPS), and after each one
ends `nodesleuth explain --store S --json --from WINDOW_START` is run again and again (each run a new
process, as an operator or an alert hook would) until it shows the incident with its final verdict
(the expected root cause). Written to tests/data/corpus/live-verdict.json:

* per episode: when it ended, when explain first showed the incident at all, when it first showed
  the expected root cause, each as seconds after the episode's end, and how long each explain took;
* verdict_after_end_s: the worst episode's seconds from its end to its verdict.

    python3 tests/corpus/live.py            # boots the VM (about 8 minutes here)
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(REPO, "tests", "data", "corpus", "live-verdict.json")

GUEST = r'''
import json, os, re, signal, subprocess, sys, time
sys.path.insert(0, os.path.join(os.environ["STAGE"], "corpus"))
import harness
x = harness.Ctx("live", "/run/vmrun/out")
store = harness.STORE
os.makedirs(os.path.dirname(store), exist_ok=True)
rec = subprocess.Popen([sys.executable, "-m", "nodesleuth", *harness.RECORD], stdout=subprocess.DEVNULL,
                       stderr=open("/run/vmrun/recorder.log", "wb"))
x.veth(rps_cpus=1 << 2)
from softirq_rps_storm import rules
rules(x, "cb")
ready = harness.wait_ready(rec)
start = time.time()
episodes = [("user loop", lambda: x.tool("spin-user", "spin", 20, 2), 2, r"^spin-user \(pid \d+\), in user space$"),
            ("kernel loop", lambda: x.tool("readzero", "readzero", 20, 1, 65536), 1, r"^readzero \(pid \d+\), in the kernel"),
            ("softirq storm", lambda: [x.tool("udp-sink", "udpsink", 30, 3, 9000, netns="cb"),
                                       x.tool("udp-flood", "udpflood", 20, 0, "10.99.0.2", 9000, 64, netns="ca")][1],
             2, r"NET_RX softirq on CPU 2")]
out = []
for name, go, cpu, want in episodes:
    t_start = time.time()
    p = go()
    p.wait()
    t_end = time.time()
    row = {"episode": name, "cpu": cpu, "expected_root_cause": want, "seconds": round(t_end - t_start, 1),
           "polls": []}
    while time.time() - t_end < 120:
        t = time.time()
        q = subprocess.run([sys.executable, "-m", "nodesleuth", "explain", "--store", store, "--json", "--from",
                            str(start)], capture_output=True, text=True)
        took = time.time() - t
        try:
            incs = json.loads(q.stdout)["incidents"]
        except (ValueError, KeyError):
            incs = []
        # the episode's incident: on its CPU, overlapping it (the polls' own explain runs, a vCPU each for
        # seconds under emulation, can make later hot cores of their own)
        mine = [i for i in incs if (i["links"][1].get("data") or {}).get("cpu") == cpu
                and i["end"] >= t_start and i["start"] <= t_end + 1]
        mine.sort(key=lambda i: min(i["end"], t_end) - max(i["start"], t_start))
        rc = mine[-1]["root_cause"] if mine else None
        row["polls"].append([round(t - t_end, 1), round(took, 1), bool(mine), rc])
        if mine and "seen_s" not in row:
            row["seen_s"] = round(time.time() - t_end, 1)
        if rc and re.search(want, rc):
            row["verdict_s"] = round(time.time() - t_end, 1)
            row["root_cause"] = rc
            break
        time.sleep(1)
    out.append(row)
    time.sleep(15)
rec.send_signal(signal.SIGTERM)
rec.wait(timeout=600)
for fn in reversed(x.cleanup):
    fn()
json.dump({"ready_s": ready, "episodes": out}, sys.stdout)
'''


def main() -> int:
    sys.path.insert(0, os.path.join(REPO, "tests", "vm"))
    sys.path.insert(0, HERE)
    import vmrun

    from make import stage

    st = stage()
    guest = os.path.join(st, "corpus", "live_guest.py")
    if not os.path.exists(guest):
        with open(guest, "w") as f:
            f.write(GUEST)
    cmd = (f"cd / && STAGE={st} CORPUS_TOOL={st}/corpus/corpus_tool PYTHONPATH={st}/src:{st}/corpus/cases "
           f"$VMRUN_PYTHON {guest}")
    r = vmrun.run_in_vm(cmd, cpus=4, timeout=2400, kernel="6.12")
    if r.rc != 0:
        print(r.stdout[-2000:], r.stderr[-4000:], file=sys.stderr)
        return 1
    d = json.loads(r.stdout)
    eps = d["episodes"]
    d.update(kernel=r.kernel, vcpus=4, profile_rotate=5, date=time.strftime("%Y-%m-%d"),
             command="python3 tests/corpus/live.py",
             verdict_after_end_s=max(e["verdict_s"] for e in eps) if all("verdict_s" in e for e in eps) else None,
             all_verdicts=all("verdict_s" in e for e in eps))
    with open(OUT, "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in d.items() if k != "episodes"}), file=sys.stderr)
    for e in eps:
        print(f"{e['episode']}: seen {e.get('seen_s')} s, verdict {e.get('verdict_s')} s after the end "
              f"({len(e['polls'])} polls)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
