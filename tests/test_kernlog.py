"""Kernel-log files in every form (model/kernlog.py), on real samples, and `check --kmsg` on real public
lines: lockups become findings of their own, and every event says its wall time or why there is none.

Samples: tests/data/kernel-log/formats/ — dmesg/journalctl output captured on this machine from one ring
buffer (each `.source` says how), plus public-real-samples.txt (every real public line, grouped by the
form it was posted in, source after the TAB) and a public old-style `journalctl -o json` sample.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import nodesleuth
from nodesleuth.model.kernlog import detect
from nodesleuth.collect.kmsg import KmsgReader
from nodesleuth.node.root import Root

DATA = os.path.join(os.path.dirname(__file__), "data", "kernel-log", "formats")

FORMS = {
    "dev-kmsg-records.txt": "kmsg", "dmesg.txt": "dmesg", "dmesg-r.txt": "dmesg-r", "dmesg-x.txt": "dmesg-x",
    "dmesg-T.txt": "dmesg-T", "dmesg-time-format-iso.txt": "dmesg-iso", "dmesg-notime.txt": "bare",
    "dmesg-reltime.txt": "bare", "dmesg-H-nopager.txt": "bare", "dmesg-delta.txt": "bare",
    "journalctl-k-o-short.txt": "journal-short", "journalctl-k-o-short-precise.txt": "journal-short",
    "journalctl-k-o-short-nohostname.txt": "journal-short", "journalctl-k-o-short-iso.txt": "journal-short-iso",
    "journalctl-k-o-short-iso-precise.txt": "journal-short-iso", "journalctl-k-o-short-full.txt": "journal-short-full",
    "journalctl-k-o-short-unix.txt": "journal-short-unix",
    "journalctl-k-o-short-monotonic.txt": "journal-short-monotonic",
    "journalctl-k-o-json.jsonl": "journal-json", "journalctl-k-o-export.txt": "journal-export",
    "journalctl-k-o-cat.txt": "bare", "public-journalctl-o-json-old-style.jsonl": "journal-json",
}


@pytest.fixture
def utc(monkeypatch):
    """dmesg -T and syslog print local time: read them in the zone they were captured in (TZ=UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _sample(tmp_path, name: str) -> str:
    """The capture without the '...' line the collector put between its two windows (not tool output)."""
    with open(os.path.join(DATA, name), "rb") as f:
        data = f.read()
    out = tmp_path / name
    out.write_bytes(b"".join(ln for ln in data.splitlines(keepends=True) if ln.rstrip(b"\n") != b"..."))
    return str(out)


def _read(path: str, boot=None):
    r = KmsgReader(Root("/"), path=path, boot=boot)
    recs, events = r.read()
    r.close()
    return r, recs, events


@pytest.mark.parametrize("name,form", sorted(FORMS.items()))
def test_each_form_is_detected_and_read(tmp_path, utc, name, form):
    r, recs, _ = _read(_sample(tmp_path, name))
    assert r.format == form
    assert recs and r._parser.skipped == 0 if form not in ("kmsg", "journal-export") else recs
    assert any("oom" in x.message.lower() or "Tasks state" in x.message or "EXT4-fs" in x.message for x in recs)


def test_forms_of_one_ring_agree(tmp_path, utc):
    """The same 27 kernel records read from /dev/kmsg, dmesg, dmesg -r/-x, journalctl short-monotonic and
    -o json: same messages, same since-boot microseconds; and the wall times agree across forms."""
    base = _read(_sample(tmp_path, "dev-kmsg-records.txt"))[1]
    assert len(base) == 27 and base[0].usec == 930426015 and base[0].seq == 78111
    for name in ("dmesg.txt", "dmesg-r.txt", "dmesg-x.txt", "journalctl-k-o-short-monotonic.txt",
                 "journalctl-k-o-json.jsonl"):
        recs = _read(_sample(tmp_path, name))[1]
        assert [(x.usec, x.message) for x in recs] == [(x.usec, x.message) for x in base], name
    assert [x.level for x in _read(_sample(tmp_path, "dmesg-r.txt"))[1]] == [x.level for x in base]
    iso = _read(_sample(tmp_path, "dmesg-time-format-iso.txt"))[1]
    ctime = _read(_sample(tmp_path, "dmesg-T.txt"))[1]
    js = _read(_sample(tmp_path, "journalctl-k-o-json.jsonl"))[1]
    assert iso[0].wall == pytest.approx(1796287121.426015)  # 2026-12-03T08:38:41,426015+00:00
    assert [int(x.wall) for x in ctime] == [int(x.wall) for x in iso]
    # journald stamps kernel entries when it read them (08:39:43, its start-up import); the kernel's time is
    # boot (realtime - monotonic) + _SOURCE_MONOTONIC_TIMESTAMP, which lands on dmesg's time
    assert all(abs(a.wall - b.wall) < 0.5 for a, b in zip(js, iso))
    unix = _read(_sample(tmp_path, "journalctl-k-o-short-unix.txt"))[1]
    assert unix[0].wall == pytest.approx(1796287183.839999) and unix[0].wall - js[0].wall > 60
    for name in ("journalctl-k-o-short-precise.txt", "journalctl-k-o-short-iso-precise.txt"):
        assert [x.wall for x in _read(_sample(tmp_path, name))[1]] == pytest.approx([x.wall for x in unix])
    for name in ("journalctl-k-o-short.txt", "journalctl-k-o-short-iso.txt", "journalctl-k-o-short-full.txt",
                 "journalctl-k-o-short-nohostname.txt"):
        assert [x.wall for x in _read(_sample(tmp_path, name))[1]] == [int(x.wall) for x in unix], name


def test_journal_export_and_old_json(tmp_path, utc):
    """-o export (binary-safe KEY=value framing) gives the same records as -o json; a public 2020 journal
    in the old spaced JSON layout reads too (its kernel entry: level 2, the kernel's own time)."""
    ex = _read(_sample(tmp_path, "journalctl-k-o-export.txt"))[1]
    js = {x.usec: x for x in _read(_sample(tmp_path, "journalctl-k-o-json.jsonl"))[1]}
    assert [x.usec for x in ex] == [930962891, 950200834]
    assert ex[0].message.startswith("zmk invoked oom-killer") and ex[0].level == 4
    for x in ex:
        if x.usec in js:
            assert x.wall == pytest.approx(js[x.usec].wall) and x.message == js[x.usec].message
    old = _read(_sample(tmp_path, "public-journalctl-o-json-old-style.jsonl"))[1]
    assert old[0].level == 2 and old[0].message.startswith("EXT4-fs error (device sdc2)")
    assert old[0].usec == 108101136410
    assert old[0].wall == pytest.approx((1599541804928338 - 108101422325 + 108101136410) / 1e6)


def test_bare_and_unknown_forms_keep_messages_without_time(tmp_path):
    recs = _read(_sample(tmp_path, "dmesg-reltime.txt"))[1]
    assert recs[0].message == "Tasks state (memory values in pages):" and recs[0].usec is None
    assert all(x.wall is None for x in recs)
    assert detect(["hrtimer: interrupt took 8720 ns", "2019-11-08T03:14:22.530Z cpu3:2097575)WARNING: x",
                   "random: crng init done"]) == "bare"  # one stamped line does not make a form


# ---- check --kmsg on real public lines, in the form they were posted in ----

def _public(section: str) -> list[str]:
    out, cur = [], None
    with open(os.path.join(DATA, "public-real-samples.txt")) as f:
        for ln in f:
            if ln.startswith("## "):
                cur = ln[3:].split(" (")[0].strip()
            elif cur == section and "\t|\t" in ln:
                out.append(ln.split("\t|\t")[0])
    assert out, section
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A small healthy fixture node (btime 1764600000): only the kernel log can make `check` unhappy."""
    from fixtures.trees import make_v2_node

    return make_v2_node(str(tmp_path_factory.mktemp("kl") / "n"), dying=0)


def _check(root: str, path: str, *extra: str):
    p = nodesleuth("check", "--root", root, "--kmsg", path, "--no-trace-churn", "--seconds", "1", "--lookback", "1e12",
                   "--json", *extra)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, json.loads(p.stdout)


def _kinds(doc) -> dict:
    return {f["kind"]: f for f in doc["findings"]}


def test_look_alikes_alone_leave_the_node_healthy(node, tmp_path):
    with open(os.path.join(os.path.dirname(DATA), "corpus.json")) as f:
        looks = [c["line"] for c in json.load(f) if not c["must_match"] and c["line"].startswith("[")]
    path = tmp_path / "looks.txt"
    path.write_text("\n".join(looks) + "\n")
    rc, doc = _check(node, str(path))
    assert rc == 0 and doc["findings"] == [], [f["title"] for f in doc["findings"]]
    assert any("read as dmesg" in n for n in doc["notes"])


def test_syslog_soft_lockups_are_a_finding_with_cpu_process_and_duration(node, tmp_path, utc):
    """The real soft-lockup lines of a syslog file (docker-linux-build-1-dh, 'NMI watchdog: BUG: soft lockup -
    CPU#48 stuck for 22s! [java:40646]', https://github.com/awslabs/amazon-eks-ami/issues/454 era format)."""
    path = tmp_path / "syslog"
    path.write_text("\n".join(_public("syslog file")) + "\n")
    rc, doc = _check(node, str(path))
    assert rc == 1 and doc["status"] == "problem"
    soft = _kinds(doc)["soft_lockup"]
    assert soft["severity"] == "critical" and soft["data"]["count"] == 2
    ev = soft["data"]["events"][0]
    assert (ev["cpu"], ev["comm"], ev["pid"], ev["duration_s"]) == (48, "java", 40646, 22)
    assert ev["uptime_s"] == pytest.approx(20074223.938094) and ev["clock"] == "wall"
    year = time.gmtime().tm_year
    assert time.strftime("%m-%d %H:%M:%S", time.gmtime(ev["time"])) == "07-12 15:12:04"
    assert time.gmtime(ev["time"]).tm_year in (year, year - 1)  # syslog prints no year
    assert "CPU 48 stuck for 22 s in java:40646" in soft["title"]
    assert any("as logged" in e and "uptime +20074223.938 s" in e for e in soft["evidence"])


def test_dmesg_rcu_stalls_and_hung_tasks_with_wall_time_from_btime(node, tmp_path):
    """Plain dmesg lines from public reports: RCU stalls and hung tasks each become their own finding; the
    fixture's /proc/stat btime turns uptime into wall time (and says so)."""
    path = tmp_path / "dmesg"
    path.write_text("\n".join(_public("dmesg")) + "\n")
    rc, doc = _check(node, str(path))
    k = _kinds(doc)
    assert rc == 1 and {"rcu_stall", "hung_task", "nic_reset"} <= set(k)
    assert k["rcu_stall"]["severity"] == "critical" and k["rcu_stall"]["data"]["count"] == 3
    rcu = k["rcu_stall"]["data"]["events"]
    assert {e.get("flavor") for e in rcu} == {"rcu_sched"}
    # the report's next lines ('\t85-....: (59999 ticks this GP) ...', '\t(t=60013 jiffies g=...)') name CPU and time
    assert [(e["stalled_cpus"], e.get("duration_jiffies")) for e in rcu] == [([85], 60013), ([8], 21000), ([3], None)]
    assert "stall on CPU 85, t=60013 jiffies" in k["rcu_stall"]["evidence"][0]
    hung = k["hung_task"]["data"]["events"]
    assert [(e["comm"], e["pid"], e["duration_s"]) for e in hung] == [
        ("kworker/2:1", 166, 120), ("master", 3497, 120), ("msgctl11", 21576, 120), ("msgctl11", 21602, 120)]
    assert hung[0]["time"] == pytest.approx(1764600000 + 12124.201919) and hung[0]["clock"] == "boot"
    assert any("boot time + uptime; uptime +12124.202 s" in e for e in k["hung_task"]["evidence"])


def test_messages_without_time_hard_lockups_and_soft_lockups(node, tmp_path):
    """Bare messages (as many reports paste them): hard and soft lockups are found; no time is invented."""
    path = tmp_path / "bare"
    path.write_text("\n".join(_public("no prefix")) + "\n")
    rc, doc = _check(node, str(path))
    k = _kinds(doc)
    assert rc == 1 and {"soft_lockup", "hard_lockup", "rcu_stall"} <= set(k)
    assert [e["cpu"] for e in k["hard_lockup"]["data"]["events"]] == [0]
    soft = k["soft_lockup"]["data"]["events"]
    assert [(e["cpu"], e["comm"], e["duration_s"]) for e in soft] == [
        (3, "grep", 21), (0, "kbd", 61), (2, "startpar", 61), (0, "instperf", 26)]
    assert all(e["time"] is None and e["clock"] == "none" for e in soft)
    assert any("time unknown" in e for e in k["soft_lockup"]["evidence"])


def test_uptime_only_log_from_another_host_says_wall_time_unknown(tmp_path):
    """On a live host a --kmsg file with uptime stamps came from elsewhere: its wall time is unknown until
    --boot-time is given (then boot time + uptime)."""
    lines = [ln for ln in _public("dmesg") if "blocked for more than" in ln]
    path = tmp_path / "dmesg"
    path.write_text("\n".join(lines) + "\n")
    rc, doc = _check("/", str(path))
    hung = _kinds(doc)["hung_task"]
    assert rc == 1 and all(e["time"] is None for e in hung["data"]["events"])
    assert any("uptime +12124.202 s, wall time unknown" in e for e in hung["evidence"])
    assert any("no boot time is known" in n for n in doc["notes"])
    rc, doc = _check("/", str(path), "--boot-time", "2024-05-01T00:00:00Z")
    ev = _kinds(doc)["hung_task"]["data"]["events"][0]
    assert ev["time"] == pytest.approx(1714521600 + 12124.201919) and ev["clock"] == "boot"


def test_dmesg_T_and_logread_forms(node, tmp_path, utc):
    path = tmp_path / "T"
    path.write_text("\n".join(_public("dmesg -T")) + "\n")
    rc, doc = _check(node, str(path))
    rcu = _kinds(doc)["rcu_stall"]["data"]["events"][0]
    assert rc == 1 and rcu["time"] == pytest.approx(1630654200.0)  # [Fri Sep  3 07:30:00 2021]
    path = tmp_path / "logread"
    path.write_text("\n".join(_public("OpenWrt logread")) + "\n")
    rc, doc = _check(node, str(path))
    nics = [f for f in doc["findings"] if f["kind"] == "nic_reset"]
    assert rc == 1 and any(e["family"] == "r8152" and e["uptime_s"] == pytest.approx(211255.742299)
                           for f in nics for e in f["data"]["events"])
    assert any("OpenWrt logread" in n for n in doc["notes"])


def test_broken_journal_files_are_one_line_errors(node, tmp_path):
    """A journal JSON line cut in the middle, an export whose binary field is cut short: exit 2 and one line
    naming the file and the problem, never a traceback."""
    with open(os.path.join(DATA, "journalctl-k-o-json.jsonl")) as f:
        head = [next(f) for _ in range(3)]
    bad = tmp_path / "cut.jsonl"
    bad.write_text("".join(head) + '{"MESSAGE": "cut\n')
    with open(os.path.join(DATA, "journalctl-k-o-export.txt"), "rb") as f:
        export = f.read()
    cut = tmp_path / "cut.export"
    cut.write_bytes(export.split(b"\n\n")[0] + b"\n\nMESSAGE\n\x10\x00")  # a binary field: 8-byte size, cut
    for path, what in ((bad, "line 4: not a journal JSON object"), (cut, "journal export: field b'MESSAGE' cut short")):
        p = nodesleuth("check", "--root", node, "--kmsg", str(path), "--no-trace-churn", "--seconds", "1")
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"nodesleuth: error: {path}: {what}"), p.stderr


def test_record_and_exporter_follow_any_form_with_the_roots_boot_time(node, tmp_path):
    """record/exporter read --kmsg through the same Sampler: a dmesg file is dated from the root's btime; a
    line whose form carries no time (dmesg -t) is dated when read, and says so."""
    from nodesleuth.collect.sampler import Sampler

    path = tmp_path / "dmesg"
    path.write_text("\n".join(ln for ln in _public("dmesg") if "blocked for more than" in ln) + "\n")
    s = Sampler(Root(node), kmsg=str(path), irqs=False)
    try:
        evs = s.prime()
    finally:
        s.close()
    assert [e.clock for e in evs] == ["boot"] * 4 and evs[0].time == pytest.approx(1764600000 + 12124.201919)
    bare = tmp_path / "bare"
    bare.write_text("BUG: soft lockup - CPU#0 stuck for 61s! [kbd:3360]\n")  # corpus.json, no-prefix form
    before = time.time()
    s = Sampler(Root(node), kmsg=str(bare), irqs=False)
    try:
        (ev,) = s.prime()
    finally:
        s.close()
    assert ev.clock == "read" and ev.time >= before and ev.fields["comm"] == "kbd"


def test_public_dmesg_iso_lines(tmp_path):
    """The two e1000 hang lines cilium/cilium#7374 posted in `dmesg --time-format iso` form (+0000 zone)."""
    with open(os.path.join(os.path.dirname(DATA), "corpus.json")) as f:
        lines = [c["line"] for c in json.load(f) if c["source"] == "https://github.com/cilium/cilium/pull/7374"]
    path = tmp_path / "iso"
    path.write_text("\n".join(lines) + "\n")
    r, recs, events = _read(str(path))
    assert r.format == "dmesg-iso" and len(events) == 2
    assert [(e.family, e.ifname, e.clock) for e in events] == [("e1000", "enp0s3", "wall")] * 2
    assert events[0].time == pytest.approx(1552063632.290474)  # 2019-03-08T16:47:12,290474+0000
