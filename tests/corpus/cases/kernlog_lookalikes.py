"""Kernel-log look-alikes only: 30 real lines from public reports that mention NIC drivers, resets and
timeouts but are not trouble (ENA's statistics dumps with tx_timeout/reset_fail counters, probe lines,
carrier changes, NFS timeouts), written to the guest's /dev/kmsg on an idle node. Each is a real
report's line (tests/data/kernel-log/corpus.json, must_match false, its source URL beside it).
No incident."""

import json
import os
import re

KERNEL = "6.12"
CPUS = 4
EXPECT = {"incident": False, "family": None, "root_cause": None}
PREFIX = re.compile(r"^(?:\w{3} +\d+ [\d:]+ \S+ kernel: |kernel: )?(?:\[ *[+\d.]+\] )?")


def lines() -> list[tuple[str, str]]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = json.load(open(os.path.join(here, "kernel-log-corpus.json")))
    out, seen = [], set()
    for x in d:
        if x.get("must_match") is False:
            text = PREFIX.sub("", x["line"]).strip()
            if text and text not in seen and len(text) < 200:
                seen.add(text)
                out.append((text, x["source"]))
    step = max(1, len(out) // 30)
    return out[::step][:30]


def run(x):
    chosen = lines()
    with x.episode("quiet"):
        x.sleep(10)
        for text, src in chosen:
            x.kmsg([(4, text)], f"real line from {src} (tests/data/kernel-log/corpus.json, must_match false), "
                   "its timestamp/syslog prefix removed")
        x.sleep(20)
