"""Every kernel-log rule against the drivers' real line formats (old and new), and near misses."""

from __future__ import annotations

import json
import os

import pytest

from nodesleuth.model.kernlog import Record
from nodesleuth.model.rules import load_rules, match

RULES = load_rules()

CASES = [
    ("ena 0000:20:03.0 eth0: TX q 5 is paused for too long (threshold 5000000). Time since last napi 6596000 usec. "
     "napi scheduled: 1", "ENATxQueuePaused", "eth0", "SUSPECTED_POLL_STARVATION"),
    # 2.12-2.16 appends the interrupt age; below the threshold it is a plain netdev watchdog
    ("ena 0000:00:05.0 ens5: TX q 2 is paused for too long (threshold 5000000). Time since last napi 1200 usec. "
     "napi scheduled: 0 msecs since last interrupt: 5012", "ENATxQueuePaused", "ens5", "OS_NETDEV_WD"),
    # 2.17 format
    ("ena 0000:00:05.0 ens5: TX q 1 is paused for too long (threshold 5000000). usecs since napi 7000000. "
     "napi scheduled: 1. napi CPU: 39. msecs since interrupt: 7001", "ENATxQueuePaused", "ens5",
     "SUSPECTED_POLL_STARVATION"),
    ("ena 0000:20:03.0 eth0: napi handler hasn't been called for a long time but is scheduled",
     "ENASuspectedPollStarvation", "eth0", "SUSPECTED_POLL_STARVATION"),
    ("ena 0000:20:03.0: Trigger reset is on", "ENATriggerReset", "", None),
    ("ena 0000:20:03.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g",
     "ENADeviceReset", "", None),
    ("ena 0000:20:03.0: Device reset completed, status: 0, Driver info: Elastic Network Adapter (ENA) v2.14.1g",
     "ENADeviceReset", "", None),
    ("ena 0000:20:03.0 eth0: Keep alive watchdog timeout.", "ENAKeepAliveTimeout", "eth0", "KEEP_ALIVE_TO"),
    ("ena 0000:20:03.0 eth0: Lost TX completions are above the threshold (129 > 128). Completion transmission "
     "timeout: 5000 (msec). 12 msecs since last interrupt, 7000 msecs since last napi execution.",
     "ENALostTxThreshold", "eth0", "MISS_TX_CMPL"),
    ("ena 0000:20:03.0 eth0: [1/2] 3 new missed TX completions, qid: 4, 7000 msecs since last interrupt",
     "ENAMissingTxCompletion", "eth0", "MISS_TX_CMPL"),
    ("NETDEV WATCHDOG: eth2 (igb): transmit queue 5 timed out", "NetdevWatchdog", "eth2", "OS_NETDEV_WD"),
    ("NETDEV WATCHDOG: eth2 (igb): transmit queue 5 timed out 5120 ms", "NetdevWatchdog", "eth2", "OS_NETDEV_WD"),
    ("r8125 0000:22:04.0 eth4: NETDEV WATCHDOG: CPU: 3: transmit queue 0 timed out 5010 ms", "NetdevWatchdog",
     "eth4", "OS_NETDEV_WD"),
    ("mlx5_core 0000:3b:00.0 ens1f0np0: TX timeout on queue: 7, SQ: 0x1c4, CQ: 0x4a6, SQ Cons: 0x0 SQ Prod: 0x3, "
     "usecs since last trans: 5184000", "Mlx5TxTimeout", "ens1f0np0", None),
    ("virtio_net virtio1 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 6120000 usecs ago",
     "VirtioNetTxTimeout", "eth0", None),
    ("ixgbe 0000:01:00.0 eth1: Detected Tx Unit Hang", "IxgbeTxHang", "eth1", None),
    ("ixgbe 0000:01:00.0 eth1: tx hang 3 detected on queue 6, resetting adapter", "IxgbeTxHang", "eth1", None),
    ("ixgbe 0000:01:00.0 eth1: initiating reset due to tx timeout", "IxgbeReset", "eth1", None),
    ("watchdog: BUG: soft lockup - CPU#30 stuck for 23s! [kubelet:810499]", "SoftLockup", "", None),
]


@pytest.mark.parametrize("line,reason,ifname,reset_reason", CASES)
def test_rule_matches_driver_line(line, reason, ifname, reset_reason):
    ev = match(Record(1, 4, 10_000_000, line), RULES, 1000.0)
    assert ev is not None, line
    assert ev.reason == reason and ev.ifname == ifname and ev.reset_reason == reset_reason
    assert ev.time == pytest.approx(1010.0)


def test_fields_are_extracted():
    ev = match(Record(1, 4, 0, CASES[2][0]), RULES, 0.0)
    assert ev.fields["queue"] == "1" and ev.fields["napi_usec"] == "7000000" and ev.fields["bus"] == "0000:00:05.0"
    ev = match(Record(1, 4, 0, CASES[12][0]), RULES, 0.0)
    assert ev.fields["cpu"] == "3" and ev.fields["queue"] == "0" and ev.fields["ms"] == "5010"


@pytest.mark.parametrize("line", [
    "ena 0000:20:03.0 eth0: Elastic Network Adapter (ENA) found at mem f5000000, mac addr 02:aa:bb:cc:dd:ee",
    "ena 0000:20:03.0 eth0: creating 8 io queues. rx queue size: 1024 tx queue size: 1024.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "mlx5_core 0000:3b:00.0: E-Switch: Total vports 2, per vport: max uc(128) max mc(2048)",
])
def test_ordinary_driver_lines_do_not_match(line):
    assert match(Record(1, 6, 0, line), RULES, 0.0) is None


CORPUS = os.path.join(os.path.dirname(__file__), "data", "kernel-log", "corpus.json")


def _corpus() -> list[dict]:
    with open(CORPUS) as f:
        return json.load(f)


def test_real_look_alike_lines_never_match():
    """Real lines from public bug reports that look like trouble but are not (link up/down, ENA statistics
    dumps, version banners, watchdog/RCU boot lines, hang-dump continuation lines): no rule may fire."""
    looks = [c for c in _corpus() if not c["must_match"]]
    assert len(looks) >= 179
    hits = [(c["line"], c["source"]) for c in looks if match(Record(1, 4, 0, c["line"]), RULES, 0.0)]
    assert not hits, hits


# every family issue 12 names; the number is the real lines collected for it (tests/data/kernel-log/README.md)
FAMILIES = {"ena": 21, "mlx5": 8, "bnxt_en": 1, "ixgbe": 9, "igb": 9, "e1000": 5, "e1000e": 6, "i40e": 6, "ice": 2,
            "virtio_net": 4, "r8169": 6, "r8152": 6, "tg3": 3, "netdev_watchdog": 45, "soft_lockup": 7,
            "hard_lockup": 6, "rcu_stall": 8, "hung_task": 13}
LOCKUPS = {"soft_lockup", "hard_lockup", "rcu_stall", "hung_task"}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_real_line_of_a_family_matches_its_rule(family):
    """Each real reset/timeout/hang/lockup line (verbatim, with whatever prefix its reporter's tool put in
    front, source beside it in corpus.json) is matched, by a rule of its own family and class."""
    real = [c for c in _corpus() if c["must_match"] and c["family"] == family]
    assert len(real) >= FAMILIES[family], len(real)
    wrong = []
    for c in real:
        ev = match(Record(1, 4, 0, c["line"]), RULES, 0.0)
        if ev is None or ev.family != family or (ev.category == "lockup") != (family in LOCKUPS):
            wrong.append((c["line"], c["source"], ev and (ev.reason, ev.family)))
    assert not wrong, wrong


def test_every_rule_family_has_a_rule():
    """vmxnet3 and gve have no public log line in the corpus: their rules exist, read from the driver source."""
    fams = {r.family for r in RULES}
    assert fams >= set(FAMILIES) | {"vmxnet3", "gve"}, set(FAMILIES) - fams


def _render(fmt: str, prefix: str) -> str:
    """A printk format string's first line with every conversion filled: the driver's text from source, used
    only where no public log line exists. Not a log line; the literal text is the driver's."""
    import re

    first = fmt.split("\\n")[0]
    if first.startswith("%s =="):  # r8169 rtl_loop_wait(): %s is the condition's name (DECLARE_RTL_COND)
        first = "rtl_txcfg_empty_cond" + first[2:]
    return prefix + re.sub(r"%[-+ #0]*\d*(?:l{0,2}|h{0,2}|z)?([sdiuxXpc%])",
                           lambda m: {"s": "eth0", "p": "ffff", "%": "%"}.get(m.group(1), "7"), first)


def test_driver_format_strings_from_source_match_their_family():
    """Every reset/timeout/hang/lockup printk format read from driver and kernel source (format-strings.json,
    60 entries with file and line) renders to a line its family's rule matches (since issue 28 also the ENA
    admin-queue hang and the failed reset); statistics/context ones do not match any rule."""
    with open(os.path.join(os.path.dirname(CORPUS), "format-strings.json")) as f:
        fs = json.load(f)["formats"]
    bad = []
    for e in fs:
        call = e.get("log_prefix", "")
        drv = {"mlx5": "mlx5_core", "netdev_watchdog": "virtio_net"}.get(e["family"], e["family"])
        prefix = (f"{drv} 0000:00:05.0 eth0: " if call.startswith("netdev_") else
                  f"{drv} 0000:00:05.0: " if call.startswith("dev_") else
                  call.split('"')[1] if call.startswith('"') else "")
        ev = match(Record(1, 4, 0, _render(e["format"], prefix)), RULES, 0.0)
        should = e["kind"] not in ("none", "context")
        if should and (ev is None or ev.family != e["family"]):
            bad.append((e["family"], e["format"][:70], ev and ev.reason))
        if not should and ev is not None:
            bad.append(("should not match", e["format"][:70], ev.reason))
    assert not bad, bad


def test_counts_per_family_are_reported():
    """The per-family numbers issue 12's closing note quotes: collected real lines and how many match."""
    rows = {}
    for c in _corpus():
        if c["must_match"]:
            ev = match(Record(1, 4, 0, c["line"]), RULES, 0.0)
            n, ok = rows.get(c["family"], (0, 0))
            rows[c["family"]] = (n + 1, ok + (ev is not None and ev.family == c["family"]))
    assert all(n == ok for n, ok in rows.values()), rows
    assert sum(n for n, _ in rows.values()) >= 165
