"""Kernel-log rule matching with 500+ rules: every rule in turn (naive) against the prefilter (model/rules.py RuleSet:
one word scan picks the candidate rules), on the corpus (tests/data/kernel-log/corpus.json and generated.json) and
on a 60,000-line flood; then the whole path, a KmsgReader reading the flood as a dmesg file (parse + match + the
lockup report scan), against the target of 60,000 lines in 3 s.

The flood is built from real line shapes, repeated with rising dmesg stamps (the lines themselves are not one real
log): link flaps of corpus.json's look-alikes (openwrt/openwrt#14707, openbmc/openbmc#3626, lore linux-acpi
9906d02b..., luigirizzo/netmap#261), the OOM-killer report captured on this project's VM
(tests/data/kernel-log/formats/dmesg.txt), 'perf: interrupt took too long' (a public forum post, 2020-05-04,
"Logitech Bluetooth Keyboard goes Unresponsive"), and, 1 in 1,000 lines, a real ENA 'TX q ... paused' line and a
soft lockup report (tests/data/kernel-log/multiline/02.txt).

`python -m benchmarks.kmsg_match` prints one JSON object. Timings are wall seconds on this machine (no assertion).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from nodesleuth.collect.kmsg import KmsgReader  # noqa: E402
from nodesleuth.model.kernlog import Record  # noqa: E402
from nodesleuth.model.rules import load_rules, match  # noqa: E402
from nodesleuth.node.root import Root  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "kernel-log")
FLOOD = [
    "rk_gmac-dwmac ff540000.ethernet eth0: Link is Up - 1Gbps/Full - flow control off",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "ftgmac100 1e680000.ethernet eth0: Link is Up - 100Mbps/Full - flow control rx/tx",
    "r8169 0000:01:00.0 eth0: Link is Down",
    "igb 0000:02:00.1 enp2s0f1: igb: enp2s0f1 NIC Link is Up 100 Mbps Full Duplex, Flow Control: RX/TX",
    "zmk invoked oom-killer: gfp_mask=0x400dc0(GFP_KERNEL_ACCOUNT|__GFP_ZERO), order=0, oom_score_adj=0",
    "Out of memory and no killable processes...",
    "perf: interrupt took too long (2528 > 2500), lowering kernel.perf_event_max_sample_rate to 79000",
    "perf: interrupt took too long (3175 > 3160), lowering kernel.perf_event_max_sample_rate to 63000",
]
ENA = ("ena 0000:20:03.0 eth0: TX q 5 is paused for too long (threshold 5000000). Time since last napi 6596000 usec. "
       "napi scheduled: 1")


def _lines() -> list[str]:
    with open(os.path.join(DATA, "corpus.json")) as f:
        out = [c["line"] for c in json.load(f)]
    with open(os.path.join(DATA, "generated.json")) as f:
        out += [g["line"] for g in json.load(f)["lines"]]
    return out


def _flood(n: int = 60000) -> list[str]:
    """n messages (no stamp): the flood shapes in turn, an ENA line and a soft lockup report every 1,000."""
    with open(os.path.join(DATA, "multiline", "02.txt")) as f:
        report = [ln.split("] ", 1)[1] for ln in f.read().splitlines() if ln.startswith("[ ") and "] " in ln]
    out: list[str] = []
    i = 0
    while len(out) < n:
        if i % 1000 == 999:
            out.append(ENA)
            out += report
        else:
            out.append(FLOOD[i % len(FLOOD)])
        i += 1
    return out[:n]


def _rate(rules, msgs: list[str], naive: bool, repeat: int = 1) -> tuple[float, int]:
    best, hits = float("inf"), 0
    for _ in range(repeat):
        t = time.perf_counter()
        hits = sum(1 for m in msgs if match(Record(1, 4, 0, m), rules, 0.0, naive=naive) is not None)
        best = min(best, time.perf_counter() - t)
    return round(len(msgs) / best), hits


def main() -> dict:
    t = time.perf_counter()
    rules = load_rules()
    load_s = time.perf_counter() - t
    corpus = _lines()
    flood = _flood()
    res = {"benchmark": "kmsg_match", "rules": len(rules), "rules_load_s": round(load_s, 3),
           "prefilter_always_tried": len(rules.always)}
    for name, msgs, rep in (("corpus", corpus, 3), ("flood_60k", flood, 1)):
        pre, hits_pre = _rate(rules, msgs, False, rep)
        sample = msgs if len(msgs) <= 5000 else msgs[:6000]  # the naive loop is slow: time a slice of the flood
        naive, _ = _rate(rules, sample, True, 1)
        res[name] = {"lines": len(msgs), "events": hits_pre, "prefiltered_lines_per_s": pre,
                     "naive_lines_per_s": naive, "speedup": round(pre / naive, 1),
                     "naive_timed_on_lines": len(sample)}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "flood.dmesg")
        with open(path, "w") as f:
            for i, m in enumerate(flood):
                f.write(f"[{100 + i * 0.001:12.6f}] {m}\n")
        os.utime(path, (time.time() - 60, time.time() - 60))
        t = time.perf_counter()
        r = KmsgReader(Root("/"), path=path, boot=None, max_records=len(flood) + 1)
        recs, events = r.read()
        r.close()
        el = time.perf_counter() - t
        tied = sum(1 for e in events if e.fields.get("nic_driver"))
        res["reader_flood_60k"] = {"lines": len(recs), "events": len(events), "lockups_tied_to_nic": tied,
                                   "seconds": round(el, 3), "lines_per_s": round(len(recs) / el),
                                   "target": "60,000 lines in 3 s", "meets_target": el <= 3.0}
    return res


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
