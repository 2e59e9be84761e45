"""Every kernel-log rule against the drivers' real line formats (old and new), and near misses.

corpus.json holds REAL lines (each with the URL it was published at): must_match lines of every family, and
look-alikes (must_match false). generated.json holds lines GENERATED from the printk format strings read in the
kernel sources (issue 28): never seen in a log, each with its format and source, tested separately."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

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


# every family issue 12 names; the number is the real lines collected for it (tests/data/kernel-log/README.md);
# issue 28 added real lines of more families (and of these), all in corpus.json
FAMILIES = {"ena": 21, "mlx5": 8, "bnxt_en": 1, "ixgbe": 9, "igb": 9, "e1000": 5, "e1000e": 6, "i40e": 6, "ice": 2,
            "virtio_net": 4, "r8169": 6, "r8152": 6, "tg3": 3, "netdev_watchdog": 45, "soft_lockup": 7,
            "hard_lockup": 6, "rcu_stall": 8, "hung_task": 13}
LOCKUPS = {"soft_lockup", "hard_lockup", "rcu_stall", "hung_task", "workqueue_lockup"}
CORPUS_FAMILIES = sorted({c["family"] for c in json.load(open(os.path.join(
    os.path.dirname(__file__), "data", "kernel-log", "corpus.json"))) if c["must_match"]})


@pytest.mark.parametrize("family", CORPUS_FAMILIES)
def test_every_real_line_of_a_family_matches_its_rule(family):
    """Each real reset/timeout/hang/lockup line (verbatim, with whatever prefix its reporter's tool put in
    front, source beside it in corpus.json) is matched, by a rule of its own family and class."""
    real = [c for c in _corpus() if c["must_match"] and c["family"] == family]
    assert real and len(real) >= FAMILIES.get(family, 1), len(real)
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


# ---- issue 28: rules from every NIC driver's source, lines generated from their formats, NPD, the prefilter

GENERATED = os.path.join(os.path.dirname(CORPUS), "generated.json")


def _generated() -> list[dict]:
    with open(GENERATED) as f:
        return json.load(f)["lines"]


def test_generated_lines_from_format_strings_match_their_family():
    """GENERATED lines, not real ones: each rendered from a printk format string read in a kernel tree (Debian
    linux-source 5.10/6.1/6.12/7.2, 4.4/4.19 snapshots, amzn-drivers; format and file in generated.json). Every
    reset/timeout/hang/recovery/lockup format renders to a line a rule of its own family matches (first match), and
    the same drivers' other messages (link up/down, probe banners, statistics, PTP 'hang's) match no rule."""
    gen = _generated()
    assert all(g["generated"] is True and g.get("source") for g in gen)
    must = [g for g in gen if g["must_match"]]
    looks = [g for g in gen if not g["must_match"]]
    assert len(must) >= 590 and len(looks) >= 2800, (len(must), len(looks))
    miss = []
    for g in must:
        ev = match(Record(1, 4, 0, g["line"]), RULES, 0.0)
        if ev is None or ev.family != g["family"]:
            miss.append((g["family"], g["line"], ev and ev.reason))
    assert not miss, miss
    false = [(g["line"], ev.reason) for g in looks if (ev := match(Record(1, 4, 0, g["line"]), RULES, 0.0))]
    assert not false, false


def test_rules_cover_sixty_driver_families_with_unique_reasons():
    """Reasons are unique (NPD keys conditions and metrics on them); NIC rules span >= 60 driver families, each
    rule naming the printk formats it was read from (file, function, kernel versions)."""
    doc = json.load(open(os.path.join(os.path.dirname(__file__), "..", "src", "nodesleuth", "rules", "kernel-net.json")))
    reasons = [r["reason"] for r in doc["rules"]]
    assert len(reasons) == len(set(reasons)) >= 500
    fams = {r["x-nodesleuth"]["family"] for r in doc["rules"] if r["x-nodesleuth"]["class"] == "nic"}
    assert len(fams) >= 60, len(fams)
    for r in doc["rules"]:
        x = r["x-nodesleuth"]
        assert x.get("source"), r["reason"]
        for f in x.get("formats", []):
            assert f["format"] and f["file"] and f["function"] and f["versions"] and f["refs"], (r["reason"], f)


def test_rules_readme_table_is_current():
    """src/nodesleuth/rules/README.md's table (rules, sources, real/generated line counts per driver family) is what
    scripts/kernel_rules/rules_readme.py writes from the rules file and the corpora."""
    import sys

    tool = os.path.join(os.path.dirname(__file__), "..", "scripts", "kernel_rules", "rules_readme.py")
    p = subprocess.run([sys.executable, tool, "--check"], capture_output=True, text=True)
    assert p.returncode == 0, "run python3 scripts/kernel_rules/rules_readme.py " + p.stderr


def _lines() -> list[str]:
    return [c["line"] for c in _corpus()] + [g["line"] for g in _generated()]


def test_prefilter_gives_the_same_events_as_every_rule_in_turn():
    """The prefilter (one word scan picks the candidate rules) finds, on every corpus and generated line, exactly
    the event the plain loop over all 500+ rules finds: same rule, fields, driver, interface, family."""
    diff = []
    for line in _lines():
        rec = Record(7, 4, 5_000_000, line)
        a, b = match(rec, RULES, 100.0), match(rec, RULES, 100.0, naive=True)
        if a != b:
            diff.append((line, a and a.reason, b and b.reason))
    assert not diff, diff[:10]
    # and on the look-alike words alone: no candidate is skipped because of tokenisation at odd characters
    odd = ["ena 0000:00:05.0 eth0:Trigger reset is on", "xNETDEV WATCHDOG: eth0 (e1000): transmit queue 0 timed out",
           "\tINFO: task a b:1 blocked for more than 120 seconds.", "igb 0000:03:00.0: Detected Tx Unit Hang\x0a"]
    for line in odd:
        assert match(Record(1, 4, 0, line), RULES, 0.0) == match(Record(1, 4, 0, line), RULES, 0.0, naive=True)


def test_explicit_literal_keys_the_prefilter(tmp_path):
    """A rule may name its required literal ("x-nodesleuth": {"literal": ...}) when the derived one is poor."""
    from nodesleuth.model.rules import requirement

    doc = {"rules": [{"reason": "A", "pattern": ".*(?:foo|ba[rz]) qux.*", "x-nodesleuth": {"literal": "qux"}},
                     {"reason": "B", "pattern": ".*zz.*"}]}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    rules = load_rules(str(p))
    assert requirement(rules[0]) == frozenset({("s", "qux")}) and rules.always == [1]
    assert match(Record(1, 4, 0, "x baz qux"), rules, 0.0).reason == "A"
    assert match(Record(1, 4, 0, "x zz"), rules, 0.0).reason == "B"


def test_a_line_matches_one_rule_except_identical_texts_of_two_drivers():
    """NPD raises every rule that matches a line, nodesleuth the first: the same as long as no line matches two
    rules. The only exceptions are printk texts two old drivers share word for word with no driver prefix
    (natsemi/starfire 'Transmit timed out, status ..., resetting...', sunhme/sunqe/sgiseeq 'transmit timed out,
    resetting'): the NETDEV WATCHDOG line before them names the driver."""
    shared = {("NatsemiTransmitTimedOutStatus", "StarfireTransmitTimedOutStatus"),
              ("SunhmeTransmitTimedOutResetting", "SunqeTransmitTimedOutResetting", "SgiseeqTransmitTimedOutResetting")}
    multi = {}
    for line in _lines():
        hits = tuple(r.reason for r in RULES if r.regex.match(line))
        if len(hits) > 1:
            multi[line] = hits
    assert set(multi.values()) <= shared, multi


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        from conftest import missing

        missing("go is not installed: NPD's Go regexp check of the rules not run (scripts/setup-tests.sh)")
    return go


def test_every_pattern_means_the_same_in_node_problem_detector():
    """NPD's kmsg monitor (pkg/systemlogmonitor/log_buffer.go) compiles `pattern + \\z` with Go's regexp and searches
    the last bufferSize lines joined by newlines. tests/tools/npdregexp does exactly that: every pattern compiles, the
    appended anchor binds every top-level alternative, nothing in a pattern can match a newline (so a match never
    spans two log lines), and on every corpus and generated line the patterns Go matches are the ones Python's
    re.match (with re.ASCII, as load_rules compiles them) matches."""
    go = _go()
    doc = json.load(open(os.path.join(os.path.dirname(__file__), "..", "src", "nodesleuth", "rules", "kernel-net.json")))
    pats = [r["pattern"] for r in doc["rules"]]
    lines = _lines()
    env = dict(os.environ, GOFLAGS="-mod=mod", GO111MODULE="off")
    env.setdefault("GOCACHE", os.path.join(os.environ.get("TMPDIR", "/tmp"), "nodesleuth-gocache"))
    tool = os.path.join(os.path.dirname(__file__), "tools", "npdregexp", "main.go")
    p = subprocess.run([go, "run", tool], input=json.dumps({"patterns": pats, "lines": lines}), capture_output=True,
                       text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    bad = [(doc["rules"][i]["reason"], x) for i, x in enumerate(out["patterns"])
           if x.get("error") or not x["anchor_binds"] or not x["one_line"]]
    assert not bad, bad
    diff = []
    for line, gomatch in zip(lines, out["matches"]):
        py = [i for i, r in enumerate(RULES) if r.regex.match(line)]
        if py != gomatch:
            diff.append((line, [RULES[i].reason for i in py], [RULES[i].reason for i in gomatch]))
    assert not diff, diff[:10]


def test_rules_file_rebuilds_byte_for_byte_from_the_committed_inputs():
    """scripts/kernel_rules/build.py makes kernel-net.json from inputs.json.gz (the printk formats with file,
    function, versions and code context) and rules.json (the rule definitions): the shipped file is exactly that."""
    import sys

    tool = os.path.join(os.path.dirname(__file__), "..", "scripts", "kernel_rules", "build.py")
    p = subprocess.run([sys.executable, tool, "--check"], capture_output=True, text=True)
    assert p.returncode == 0, "run python3 scripts/kernel_rules/build.py: " + p.stdout + p.stderr


def _classify():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts", "kernel_rules"))
    import classify

    return classify


def test_every_rule_has_a_path_class_and_its_severity_follows_it():
    """Each format carries the class its code path gives it, each rule the class of its formats, and the severity
    follows the class: a status or register dump is info (it never makes a finding), a failed reset critical."""
    cl = _classify()
    doc = json.load(open(os.path.join(os.path.dirname(__file__), "..", "src", "nodesleuth", "rules", "kernel-net.json")))
    by = {}
    for r in doc["rules"]:
        x = r["x-nodesleuth"]
        assert x["path_class"] in cl.CLASSES, r["reason"]
        assert x["severity"] in cl.SEVERITY[x["path_class"]], (r["reason"], x["path_class"], x["severity"])
        assert x["formats"] and all(f["path_class"] in cl.CLASSES for f in x["formats"]), r["reason"]
        assert x["path_class"] == cl.rule_class([f["path_class"] for f in x["formats"]]), r["reason"]
        by[r["reason"]] = x
    # read in the code: e100 prints scb.status in its TX-timeout task at debug level, 0x00 included
    assert (by["E100ScbStatus"]["path_class"], by["E100ScbStatus"]["severity"]) == ("status_dump", "info")
    assert by["FecTXRingDump"]["severity"] == by["ForcedethDumpingTxRegisters"]["severity"] == "info"
    assert by["ENATriggerReset"]["path_class"] == "reset_started"  # ena_timer_service queues reset_task after it
    assert by["ENADeviceReset"]["path_class"] == "reset_done"
    assert by["I40ePFResetFailed"]["path_class"] == "reset_failed"
    assert by["NetdevWatchdog"]["path_class"] == "tx_timeout"
    assert by["Mlx5HealthIssueObservedSeverity"]["path_class"] == "firmware_health"
    assert by["HungTask"]["path_class"] == "hang_detected"


def test_path_class_reads_the_text_function_and_code_after_the_printk():
    cl = _classify()
    f = {"format": "scb.status=0x%02X\n", "function": "e100_tx_timeout_task"}
    assert cl.classify(f, "tx_timeout") == "status_dump"
    f = {"format": "tx_timeout count: %llu, queue id: %d, SW_NTU: 0x%x\n", "function": "hns3_dump_queue_stats"}
    assert cl.classify(f, "tx_timeout") == "status_dump"  # the word is a field name of a dump
    f = {"format": "Initiating reset due to tx timeout\n", "function": "be_tx_timeout"}
    assert cl.classify(f, "tx_timeout") == "reset_started"
    f = {"format": "Trigger reset is on\n", "function": "ena_timer_service"}
    assert cl.classify(f, "reset_start") == "reset_started"
    # no event word: the code after the printk decides (a reset work queued there)
    code = ["x"] * 12 + ['\tnetif_err(adapter, drv, netdev, "Foo %d\\n", q);', "\tqueue_work(ena_wq, &adapter->reset_task);"]
    f = {"format": "Foo %d\n", "function": "ena_check", "context": {"code": code, "before": 12}}
    assert cl.classify(f, "hang") == "reset_started"
    assert cl.classify({**f, "context": {}}, "hang") == "hang_detected"


def test_a_status_dump_line_makes_no_nic_finding():
    """E100ScbStatus still matches (the line is kept as an informational event) but makes no finding."""
    from nodesleuth.detect.nic import findings

    line = "e100 0000:00:0e.0: eth0: scb.status=0x00"
    ev = match(Record(1, 4, 0, line), RULES, 0.0)
    assert ev is not None and ev.reason == "E100ScbStatus" and ev.severity == "info"
    assert findings([ev], None, None) == []
    line = "ena 0000:20:03.0: Trigger reset is on"
    ev2 = match(Record(2, 4, 0, line), RULES, 0.0)
    assert ev2 is not None and len(findings([ev, ev2], None, None)) == 1
