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
    "dmesg-reltime.txt": "dmesg-reltime", "dmesg-H-nopager.txt": "dmesg-reltime", "dmesg-delta.txt": "bare",
    "journalctl-k-o-short.txt": "journal-short", "journalctl-k-o-short-precise.txt": "journal-short",
    "journalctl-k-o-short-nohostname.txt": "journal-short", "journalctl-k-o-short-iso.txt": "journal-short-iso",
    "journalctl-k-o-short-iso-precise.txt": "journal-short-iso", "journalctl-k-o-short-full.txt": "journal-short-full",
    "journalctl-k-o-short-unix.txt": "journal-short-unix",
    "journalctl-k-o-short-monotonic.txt": "journal-short-monotonic",
    "journalctl-k-o-json.jsonl": "journal-json", "journalctl-k-o-export.txt": "journal-export",
    "journalctl-k-o-cat.txt": "bare", "public-journalctl-o-json-old-style.jsonl": "journal-json",
    "journalctl-k-o-verbose.txt": "journal-verbose",
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


def test_bare_and_unknown_forms_keep_messages_without_time(tmp_path, utc):
    """dmesg --reltime: lines before the first '[Dec 3 08:39]' minute stamp cannot be dated; from it on the wall
    time is that minute (year assumed as for syslog) plus the deltas, to the minute (clock 'minute')."""
    recs = _read(_sample(tmp_path, "dmesg-reltime.txt"))[1]
    assert recs[0].message == "Tasks state (memory values in pages):" and recs[0].usec is None
    k = next(i for i, x in enumerate(recs) if x.message.startswith("opcost (28055): drop_caches: 1"))
    assert k > 0 and all(x.wall is None for x in recs[:k])
    assert all(x.wall is not None and x.clock == "minute" for x in recs[k:])
    assert time.strftime("%m-%d %H:%M", time.gmtime(recs[k].wall)) == "12-03 08:39"
    assert recs[-1].wall >= recs[k].wall
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


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
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


# ---- issue 28: every lockup wording, a lockup tied to the NIC driver its stack runs, forms followed and localized

MULTI = os.path.join(os.path.dirname(DATA), "multiline")
LOCALES = os.path.join(DATA, "locales")
JOURNAL = os.path.join(DATA, "journal")
LOCKUP_FAMILIES = ("soft_lockup", "hard_lockup", "rcu_stall", "hung_task", "workqueue_lockup")


def test_every_real_lockup_wording_gives_cpu_task_and_duration():
    """Every real lockup/stall header line of corpus.json (x86, arm64, powerpc old and new, sparc-era wording, RCU
    self/other/expedited/tasks/2.6 one-line, hung task incl. 7.2 'blocked in I/O wait', workqueue lockup): the
    finding's facts carry the CPU(s), the task comm:pid and the duration each wording prints."""
    from nodesleuth.detect.lockups import _fact
    from nodesleuth.model.kernlog import Record
    from nodesleuth.model.rules import load_rules, match

    rules = load_rules()
    with open(os.path.join(os.path.dirname(DATA), "corpus.json")) as f:
        real = [c for c in json.load(f) if c["must_match"] and c["family"] in LOCKUP_FAMILIES]
    assert len(real) >= 85
    bad = []
    for c in real:
        ev = match(Record(1, 4, 0, c["line"]), rules, 0.0)
        d = _fact(ev)
        fam = c["family"]
        line = c["line"]
        if fam == "soft_lockup":
            ok = {"cpu", "comm", "pid", "duration_s"} <= set(d)
        elif fam == "hung_task":
            ok = {"comm", "pid", "duration_s"} <= set(d) and d.get("in_io_wait", False) == ("I/O wait" in line)
        elif fam == "workqueue_lockup":
            ok = "stalled_cpus" in d and "duration_s" in d
        elif fam == "hard_lockup":
            ok = "cpu" in d or "stalled_cpus" in d
        else:  # rcu: the flavor always; CPUs and jiffies when the line itself names them
            ok = "flavor" in d and (("{" not in line and "on CPU " not in line) or "stalled_cpus" in d) and (
                "jiffies" not in line or "duration_jiffies" in d)
        if not ok:
            bad.append((fam, line, d))
    assert not bad, bad[:5]
    from nodesleuth.model.kernlog import Record as R

    d = _fact(match(R(1, 4, 0, "[  252.645789] Watchdog CPU:15 detected Hard LOCKUP other CPUS:9-11,48"), rules, 0))
    assert d["stalled_cpus"] == [9, 10, 11, 48] and d["reporter"] == 15
    d = _fact(match(R(1, 4, 0, "[  584.319520][   T31] INFO: task udevd:5612 blocked in I/O wait for more than 143 "
                                "seconds."), rules, 0))
    assert (d["comm"], d["pid"], d["duration_s"], d["in_io_wait"]) == ("udevd", 5612, 143, True)


def _multiline(name: str) -> str:
    """A report as published. 01 is quoted in a mail: its '> ' quote marks, the replier's inline comment (not
    kernel output) and the mail client's wrap of the header line are undone here, in the test, not in the file."""
    with open(os.path.join(MULTI, name)) as f:
        text = f.read()
    if name == "01.txt":
        lines = [ln[2:] for ln in text.splitlines() if ln.startswith("> ")]
        text = "\n".join(lines).replace("stuck \nfor 23s!", "stuck for 23s!") + "\n"
    return text


def _tied(tmp_path, name: str):
    path = tmp_path / name
    path.write_text(_multiline(name))
    r, recs, events = _read(str(path))
    locks = [e for e in events if e.category == "lockup"]
    assert locks, name
    return r, locks


@pytest.mark.parametrize("name,driver,family,frame", [
    ("01.txt", "mlx5_core", "mlx5", "mlx5e_sq_xmit"),  # lore lkml 2022: 5.4.56 soft lockup in mlx5 transmit
    ("02.txt", "virtio_net", "virtio_net", "virtnet_poll"),  # qemu-devel 2024: 6.8.7 soft lockup, RIP virtnet_poll
    ("03.txt", "virtio_net", "virtio_net", "start_xmit"),  # syzkaller 535: arm64, virtio_net built in (no tag)
])
def test_lockup_running_nic_code_is_tied_to_the_driver(tmp_path, name, driver, family, frame):
    """Real lockup reports whose stack runs a NIC driver's NAPI poll or transmit code (multiline/NN.source): the
    event's fields and the lockup finding name the driver and its frames. The frame -> module map is read from
    the drivers' sources (rules/nic-frames.json), not from these reports."""
    from nodesleuth.detect.lockups import findings

    _, locks = _tied(tmp_path, name)
    ev = locks[0]
    assert ev.fields["nic_driver"] == driver and ev.fields["nic_family"] == family
    assert frame in ev.fields["nic_frames"].split(","), ev.fields
    (f,) = findings(locks)
    assert f.data["nic_drivers"] == [driver] and f.data["events"][0]["nic"]["driver"] == driver
    assert f"running {driver} driver code" in f.title and any(driver in r for r in f.remediation)


@pytest.mark.parametrize("name", ["20.txt", "21.txt", "22.txt", "23.txt", "24.txt", "25.txt", "26.txt"])
def test_lockups_without_nic_driver_code_stay_untied(tmp_path, name):
    """Decoys (multiline/NN.source): block-device, dcache, ext4, RCU-synchronize, workqueue stacks; 25 runs the
    network stack (net_rx_action -> process_backlog) but no NIC driver; 26 follows a real ENA line but its stack
    is a writeback kworker. None is tied to a driver."""
    _, locks = _tied(tmp_path, name)
    assert all("nic_driver" not in e.fields for e in locks), [e.fields for e in locks]


def test_a_tied_lockup_names_the_device_from_a_nic_line_of_its_driver(tmp_path):
    """Two real excerpts in one plain-dmesg file (NOT one real log; it exercises the join): the NETDEV WATCHDOG
    line of lore lkml 20250911015109-mutt-send-email-mst (virtio_net virtio0 eth0), then report 02 (a soft lockup
    in virtnet_poll that names no device). The lockup gets the device of the nearest virtio_net line."""
    wd = "[  124.118050] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 1: transmit queue 0 timed out 16776 ms"
    path = tmp_path / "joined.txt"
    path.write_text(wd + "\n" + _multiline("02.txt"))
    r, recs, events = _read(str(path))
    lock = next(e for e in events if e.category == "lockup")
    assert lock.fields["nic_driver"] == "virtio_net"
    assert (lock.fields["nic_ifname"], lock.fields["nic_device"]) == ("eth0", "virtio0")
    assert lock.fields["nic_device_from"].startswith("kernel log seq 1:")


def test_frame_map_is_read_from_the_driver_sources():
    """rules/nic-frames.json: every ndo_start_xmit and NAPI poll function of drivers/net in Debian's 5.10-7.2
    trees, with its module; driver function-name prefixes; the helpers those functions call."""
    from nodesleuth.model.rules import nic_frames

    fm = nic_frames()
    f = fm["functions"]
    assert len(f) >= 400 and len(fm["prefixes"]) >= 150 and len(fm["modules"]) >= 200
    for fn, mod in (("ixgbe_poll", "ixgbe"), ("mlx5e_napi_poll", "mlx5_core"), ("mlx5e_xmit", "mlx5_core"),
                    ("ena_io_poll", "ena"), ("ena_start_xmit", "ena"), ("virtnet_poll", "virtio_net"),
                    ("igb_poll", "igb"), ("bnxt_poll", "bnxt_en"), ("i40e_napi_poll", "i40e"), ("gve_napi_poll", "gve")):
        assert mod in f[fn]["modules"], fn
    assert fm["prefixes"]["mlx5e_"] == ["mlx5_core"] and set(fm["prefixes"]["e1000_"]) == {"e1000", "e1000e"}
    assert "virtio_net" in fm["calls"]["free_old_xmit_skbs"]["modules"]


# ---- following a file that grows, is rewritten, or repeats journal entries

def _settle(path) -> None:
    """Make the file look finished (not written for a while): a last line without newline is then complete."""
    old = time.time() - 60
    os.utime(path, (old, old))


def _drop_caches_rules(tmp_path) -> str:
    """A rule file for the journal captures' own records ('drop_caches', 'renamed from'), so that they are events."""
    p = tmp_path / "rules.json"
    p.write_text(json.dumps({"rules": [
        {"type": "temporary", "reason": "DropCaches", "pattern": ".*drop_caches: (?P<n>\\d+).*"},
        {"type": "temporary", "reason": "Renamed", "pattern": ".*renamed from (?P<old>\\S+).*"}]}))
    return str(p)


def test_growing_export_file_reports_each_event_once(tmp_path):
    """`journalctl -o export` appended to between ticks (forms/journal/k-o-export.C.txt, 4 real entries): read
    over five ticks with the file cut inside an entry, then the same entries written again (a second `journalctl
    --since ... -o export >> file` overlapping the first), then the file replaced by a fresh export: each event
    is reported once (byte offset for what is new, __CURSOR for entries seen)."""
    from nodesleuth.model.rules import load_rules

    with open(os.path.join(JOURNAL, "k-o-export.C.txt"), "rb") as f:
        data = f.read()
    entries = [e + b"\n\n" for e in data.split(b"\n\n") if e.strip()]
    assert len(entries) == 4
    path = tmp_path / "k.export"
    path.write_bytes(b"")
    r = KmsgReader(Root("/"), path=str(path), rules=load_rules(_drop_caches_rules(tmp_path)), boot=None)
    seen = []
    cut = entries[1][:len(entries[1]) // 2]
    steps = [entries[0] + cut, entries[1][len(cut):], entries[2], entries[0] + entries[1] + entries[2] + entries[3]]
    for chunk in steps:
        with open(path, "ab") as f:
            f.write(chunk)
        seen += r.read()[1]
    assert [e.reason for e in seen] == ["DropCaches", "DropCaches", "Renamed", "DropCaches"]
    assert r.repeated == 3
    path.write_bytes(data)  # the file replaced by a whole new export of the same journal
    assert r.read()[1] == [] and r.rewrites == 1
    r.close()


@pytest.mark.parametrize("name", ["dmesg.txt", "dmesg-T.txt", "journalctl-k-o-short-precise.txt",
                                  "journalctl-k-o-json.jsonl", "dev-kmsg-records.txt",
                                  "journal/k-o-json-pretty.C.txt", "journal/k-o-verbose.de_DE.txt",
                                  "locales/withlocales-dmesg-T.de_DE.txt", "locales/withlocales-dmesg-reltime.fr_FR.txt"])
def test_every_form_followed_reports_each_record_once(tmp_path, utc, name):
    """A file in each form written in three pieces (the second ending inside a line or entry), read after each,
    then rewritten whole (as `dmesg > file` or `journalctl -o json-pretty > file` again): every record is read
    exactly once, the same as reading the finished file in one go."""
    src = _sample(tmp_path, name.replace("/", "_")) if "/" not in name else None
    if src is None:
        with open(os.path.join(DATA, name), "rb") as f:
            whole = f.read()
    else:
        with open(src, "rb") as f:
            whole = f.read()
    ref = tmp_path / "ref"
    ref.write_bytes(whole)
    _settle(ref)
    r0 = KmsgReader(Root("/"), path=str(ref), boot=None)
    want = [(x.usec, x.wall, x.message) for x in r0.read()[0]]
    r0.close()
    assert len(want) >= 3
    path = tmp_path / "growing"
    path.write_bytes(b"")
    r = KmsgReader(Root("/"), path=str(path), boot=None)
    got = []
    a, b = len(whole) // 3, 2 * len(whole) // 3 + 7
    for piece in (whole[:a], whole[a:b], whole[b:]):
        with open(path, "ab") as f:
            f.write(piece)
        got += r.read()[0]
    _settle(path)
    got += r.read()[0]
    path.write_bytes(whole)  # rewritten in place with the same records
    _settle(path)
    got += r.read()[0]
    r.close()
    assert [(x.usec, x.wall, x.message) for x in got] == want


# ---- dmesg -T / ctime / reltime / delta in other languages; journalctl verbose and json-pretty

@pytest.mark.parametrize("name", sorted(n for n in os.listdir(LOCALES) if n.endswith(".txt") and (
    "dmesg-T." in n or "dmesg-ctime." in n)))
def test_localized_dmesg_T_keeps_its_wall_time(monkeypatch, utc, name):
    """dmesg -T / --time-format ctime captured under C, de_DE, fr_FR, es_ES, ru_RU, ja_JP, zh_CN, with and without
    Debian's util-linux-locales (which also reorders: '[Fr,  4. Dez 2026, 23:02:15]', '[ven.  4 déc. 23:02:15
    2026]'): every line dated 2026-12-04 23:02:15 UTC, as the C capture (tz-: captured with TZ=Asia/Tokyo)."""
    if "Tokyo" in name:
        monkeypatch.setenv("TZ", "Asia/Tokyo")
        time.tzset()
    r, recs, _ = _read(os.path.join(LOCALES, name))
    assert r.format in ("dmesg-T", "dmesg-T-locale") and len(recs) == (3 if name.startswith("tz-") else 8)
    assert all(x.wall == 1796425335.0 for x in recs), [x.wall for x in recs]
    assert r._parser.undated == 0 and r.time_notes == []


def test_localized_stamps_in_another_zone_and_reltime_with_decimal_commas(monkeypatch, utc):
    """TZ=Asia/Tokyo ja_JP dmesg -T names the same instant; reltime's '[ 4. Dez 23:02]' / '[ 4déc. 23:02]' / '[12月 4
    23:02]' minute stamps and '[  +0,000000]' deltas (decimal comma) date lines to the minute; --time-format delta
    ('[<    0,000000>]') carries no time at all and the reader says so."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    r, recs, _ = _read(os.path.join(LOCALES, "tz-dmesg-T.ja_JP.Tokyo.txt"))
    assert [x.wall for x in recs] == [1796425335.0] * len(recs)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    for loc in ("C", "de_DE", "fr_FR", "es_ES", "ru_RU", "ja_JP", "zh_CN"):
        r, recs, _ = _read(os.path.join(LOCALES, f"withlocales-dmesg-reltime.{loc}.txt"))
        assert r.format == "dmesg-reltime" and all(x.clock == "minute" for x in recs), loc
        assert time.strftime("%m-%d %H:%M", time.gmtime(recs[0].wall)) == "12-04 23:02", loc
        assert recs[-1].wall >= recs[0].wall
        r, recs, _ = _read(os.path.join(LOCALES, f"withlocales-dmesg-delta.{loc}.txt"))
        assert r.format == "bare" and all(x.wall is None for x in recs)
        assert any("no time stamp" in n for n in r.time_notes)


def test_a_stamp_in_an_unknown_language_is_undated_and_said(node, tmp_path, utc):
    """GENERATED line (not a capture): util-linux's Croatian format '%a %e %b %H:%M:%S %Y' with 'lis', which is
    October in Croatian and November in Polish: it cannot be dated. The event's clock is 'none' and check's notes
    say why; the lines before it keep their times."""
    path = tmp_path / "hr.txt"
    path.write_text("[pet  4 lis 23:02:15 2026] watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:99]\n"
                    "[Fri Dec  4 23:02:16 2026] watchdog: BUG: soft lockup - CPU#3 stuck for 23s! [kworker/3:1:99]\n")
    rc, doc = _check(node, str(path))
    ev = _kinds(doc)["soft_lockup"]["data"]["events"]
    assert [e["clock"] for e in ev] == ["none", "wall"] and ev[0]["time"] is None
    assert any("could not be dated" in n and "pet  4 lis" in n for n in doc["notes"]), doc["notes"]


def test_journal_verbose_json_pretty_json_and_export_agree(utc):
    """The same 4 kernel entries as journalctl -o json, json-pretty, export and verbose (C and 6 other locales:
    verbose's header is English everywhere): same messages, kernel times, cursors; localized -o short and
    short-precise (month 'Dez', 'déc.', '12月', 'дек') give the same wall times as C."""
    def recs(name):
        p = os.path.join(JOURNAL, name)
        r = KmsgReader(Root("/"), path=p, boot=None)
        out = r.read()[0] + r.read()[0]
        r.close()
        return r, out

    base = [(x.usec, x.wall, x.message, x.cursor) for x in recs("k-o-json.C.txt")[1]]
    assert len(base) == 4 and all(c for *_, c in base)
    for name in ["k-o-json-pretty.C.txt", "k-o-export.C.txt"] + [
            f"k-o-verbose.{loc}.txt" for loc in ("C", "de_DE", "fr_FR", "es_ES", "ru_RU", "ja_JP", "zh_CN")]:
        r, got = recs(name)
        assert r.format in ("journal-json-pretty", "journal-export", "journal-verbose")
        assert [(x.usec, x.wall, x.message, x.cursor) for x in got] == base, name
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    try:
        for form in ("short", "short-precise"):
            c = [x.wall for x in recs(f"k-o-{form}.C.txt")[1]]
            assert int(c[0]) == 1796425680  # 'Dec 05 00:08:00' Berlin = 2026-12-04 23:08:00 UTC
            for loc in ("de_DE", "fr_FR", "es_ES", "ru_RU", "ja_JP", "zh_CN"):
                assert [x.wall for x in recs(f"k-o-{form}.{loc}.txt")[1]] == c, (form, loc)
    finally:
        os.environ["TZ"] = "UTC"
        time.tzset()


def test_journal_binary_fields():
    """A binary MESSAGE (newline and \\x01 inside) as export writes it (NAME, 64-bit length, bytes), as json (an
    array of bytes) and as verbose ('[46B blob data]'): read without error; a non-kernel entry is skipped."""
    from nodesleuth.model.kernlog import LineParser, split_units

    with open(os.path.join(JOURNAL, "native-binary-o-export.bin"), "rb") as f:
        data = f.read()
    units, used = split_units("journal-export", data, final=False)
    assert len(units) == 1 and used == len(data)
    fields = LineParser("journal-export", "x").export_fields(units[0])
    assert fields["MESSAGE"] == "nodesleuth forms test: line one\nline two \x01 end"
    assert split_units("journal-export", data[:40], final=False) == ([], 0)  # cut inside the binary field: wait
    for name in ("native-binary-o-json.txt", "native-binary-o-json-pretty.txt", "native-binary-o-verbose.txt"):
        r, recs, _ = _read(os.path.join(JOURNAL, name))
        assert recs == [] and r._parser.skipped == 1


@pytest.mark.parametrize("name", ["journal/k-o-export.C.txt", "journal/k-o-json-pretty.C.txt",
                                  "journal/k-o-verbose.C.txt", "dmesg-r.txt", "journalctl-k-o-short-iso.txt"])
def test_a_flood_bound_read_resumes_after_the_last_record(tmp_path, utc, name):
    """With at most one record per read (the flood bound), repeated reads hand over every record once, in order,
    in line forms and in the multi-line journal forms alike."""
    path = _sample(tmp_path, name.replace("/", "_")) if "/" not in name else os.path.join(DATA, name)
    whole = KmsgReader(Root("/"), path=path, boot=None)
    want = [x.message for x in whole.read()[0] + whole.read()[0]]
    whole.close()
    r = KmsgReader(Root("/"), path=path, boot=None, max_records=1)
    got = []
    for _ in range(len(want) + 3):
        got += [x.message for x in r.read()[0]]
    r.close()
    assert got == want and r.truncated >= len(want) - 1


# ---------------------------------------------------------------- whole real files (issue 41 part 4)

WHOLE = os.path.join(os.path.dirname(__file__), "data", "kernel-log", "whole")


def _whole(name: str):
    return _read(os.path.join(WHOLE, name))


def test_a_journal_opening_with_userland_lines_keeps_wall_times_and_reads_only_kernel_lines(utc):
    """journalctl-homeserver-userland-first.txt: 50+ systemd/acpid/NetworkManager lines before the first kernel line
    (the first 50 lines hold none). Its form comes from all its lines: journal short, each kernel line with its wall
    time; the 253 userland lines are skipped, never matched against the kernel rules."""
    path = os.path.join(WHOLE, "journalctl-homeserver-userland-first.txt")
    lines = open(path, encoding="utf-8").read().split("\n")
    assert not any(" kernel: " in x for x in lines[:51])
    assert detect(lines[:50]) == "journal-short"  # other programs' lines carry the form's stamps too
    r, recs, events = _whole("journalctl-homeserver-userland-first.txt")
    assert r.format == "journal-short"
    kernel = [x for x in lines if " homeserver kernel: " in x]
    assert len(recs) == len(kernel) == 37
    other = [x for x in lines if x.strip() and not x[0].isspace() and not x.startswith("-- ") and " kernel: " not in x]
    assert r._parser.skipped == len(other) == 253  # systemd[1], acpid, NetworkManager, ... lines
    assert all(x.wall is not None for x in recs)
    t = time.gmtime(recs[0].wall)
    assert (t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec) == (1, 30, 9, 37, 25)
    assert recs[0].message == "EDAC amd64: Node 0: DRAM ECC disabled."
    assert not any("systemd" in x.message.split(":")[0] for x in recs)
    assert events == []


def test_a_full_journal_dump_reads_its_kernel_lines_with_wall_times(utc):
    path = os.path.join(WHOLE, "journalctl-full-homeserver.txt")
    lines = open(path, encoding="utf-8").read().split("\n")
    r, recs, _ = _whole("journalctl-full-homeserver.txt")
    assert r.format == "journal-short"
    assert len(recs) == sum(1 for x in lines if " homeserver kernel: " in x) == 173
    other = [x for x in lines if x.strip() and not x[0].isspace() and not x.startswith("-- ") and " kernel: " not in x]
    assert r._parser.skipped == len(other) == 156  # systemd, NetworkManager, ...: never matched against the rules
    assert all(x.wall is not None for x in recs)
    assert recs[0].message.startswith("Linux version 5.3.0-29-generic")


def test_a_syslog_interleaving_userland_lines_keeps_each_watchdog_events_wall_time(utc):
    """/var/log/messages of 2001: kernel lines among amd, ypbind, PAM-securetty, syslogd 'last message repeated'
    lines and the sender's '[ ... ]' elisions. 7 NETDEV WATCHDOG lines: 7 events, each at its own minute:second."""
    r, recs, events = _whole("messages-tulip-2001.txt")
    assert r.format == "journal-short"
    wd = [e for e in events if e.reason == "NetdevWatchdog"]
    assert [time.strftime("%H:%M:%S", time.gmtime(e.time)) for e in wd] == [
        "16:08:07", "16:08:15", "16:08:23", "16:09:03", "16:09:59", "16:10:07", "16:10:15"]
    assert all(e.ifname == "eth0" for e in wd)
    assert not any("ypbind" in x.message or "securetty" in x.message for x in recs)


def test_overlapping_pstore_records_count_each_event_once():
    """The EFI pstore records of one crash overlap (Oops#1 PartN and Panic#2 PartN+1 hold the same lines): each
    igc 'Detected Tx Unit Hang' (one every 2 s from 885.9 s to 911.9 s) is one event, not two."""
    path = os.path.join(WHOLE, "pstore-dmesg-efi-igc.txt")
    text = open(path, encoding="utf-8").read()
    lines_with_hang = [x for x in text.split("\n") if "Detected Tx Unit Hang" in x]
    distinct = sorted({x.split("]")[0] for x in lines_with_hang})
    assert len(lines_with_hang) > len(distinct)  # the file repeats them
    r, recs, events = _whole("pstore-dmesg-efi-igc.txt")
    assert r.format == "dmesg-r"
    hangs = [e for e in events if "Tx Unit Hang" in e.message]
    assert len(hangs) == len(distinct)
    assert sorted({e.usec for e in hangs}) == sorted(e.usec for e in hangs)
    recorded = [x for x in text.split("\n") if x.startswith("<")]  # the records' dmesg -r lines, repeats included
    assert (len(recorded), len(set(recorded))) == (317, 202)
    assert (len(recs), r.repeated) == (202, 115)
    assert len(hangs) == 14
    resets = [e for e in events if e.reason == "IgcResetAdapter"]
    assert text.count("Reset adapter") == 3 and sorted(e.usec for e in resets) == [913490303, 963734557]


def test_a_lockup_kind_added_to_the_rules_reaches_a_finding(node, tmp_path):
    """Lockup kinds and severities come from the rules file alone: a copy of the packaged rules with one kind added
    (x86's NMI-duration line, arch/x86/kernel/nmi.c nmi_check_duration(): 'INFO: NMI handler (%ps) took too long to
    run: %lld.%03d msecs') makes a finding of that kind, with the rule's severity, title and remedy, from real lines
    of syzbot console logs (google/syzkaller pkg/report/testdata/linux/report/83 and /421 @1e72964b, as in
    corpus.json); the packaged rules, which have no such kind, make none."""
    from importlib import resources

    doc = json.loads(resources.files("nodesleuth").joinpath("rules/kernel-net.json").read_text())
    remedy = "an NMI handler ran for milliseconds: see which (perf, or the NMI backtrace) and how often it fires"
    doc["rules"].insert(0, {"type": "temporary", "reason": "NmiHandlerTooLong",
                            "pattern": r".*INFO: NMI handler \((?P<handler>\S+)\) took too long to run: "
                                       r"(?P<msecs>\d+\.\d+) msecs.*",
                            "x-nodesleuth": {"class": "lockup", "family": "nmi_too_long", "driver": "",
                                             "kind": "nmi_too_long", "severity": "warning",
                                             "title": "slow NMI handler", "remedy": remedy}})
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(doc))
    path = tmp_path / "dmesg"
    path.write_text("[   95.445015] INFO: NMI handler (perf_event_nmi_handler) took too long to run: 1.356 msecs\n"
                    "[  351.814650] INFO: NMI handler (nmi_cpu_backtrace_handler) took too long to run: 1.403 msecs\n")
    rc, got = _check(node, str(path), "--rules", str(rules))
    f = _kinds(got)["nmi_too_long"]
    assert (f["severity"], f["data"]["count"], f["remediation"]) == ("warning", 2, [remedy])
    assert [(a["kind"], a["commands"]) for a in f["actions"]] == [("investigate", [f"# {remedy}"])]  # rendered from it
    assert f["title"].startswith("2 slow NMI handlers: slow NMI handler") and rc == 1, f["title"]
    assert [e["reason"] for e in f["data"]["events"]] == ["NmiHandlerTooLong"] * 2
    rc, plain = _check(node, str(path))
    assert "nmi_too_long" not in _kinds(plain) and rc == 0


def _nic_findings(name: str):
    from nodesleuth.detect.nic import findings

    r, recs, events = _whole(name)
    return r, recs, events, findings(events, None, None)


def test_a_syslog_of_a_failed_hns3_reset_gives_one_critical_nic_finding(utc):
    """netdev bug report (hns3, Debian 5.10.205 arm64, rsyslog RFC 3339 stamps before the dmesg time): a tx timeout
    under memory pressure, a PF reset, five rebuilds that fail to allocate ring memory, then 'Reset fail!'. The
    reader finds that incident: one critical nic_reset finding on the port's PCI address with 2 reset starts, 6
    'Reset done' lines and 6 failures (5 re-schedules and the final 'Reset fail!'), each at its syslog wall time;
    the queue-state dump of the tx timeout is an informational event, never a finding; the OOM task lines and the
    page-allocation trace match no rule."""
    r, recs, events, fs = _nic_findings("syslog-rfc3339-hns3-reset-fail.txt")
    assert r.format == "journal-short-iso" and len(recs) == 109 and r._parser.skipped == 0
    assert all(e.family == "hns3" and e.clock == "wall" for e in events)
    assert [e.reason for e in events if e.severity == "info"] == ["Hns3TxTimeoutCountQueue"]
    assert [(f.kind, f.severity) for f in fs] == [("nic_reset", "critical")]
    f = fs[0]
    assert f.data["ifname"] == "0000:7d:00.1" and f.data["resets"] == 6 and f.data["families"] == ["hns3"]
    kinds = {}
    for e in f.data["events"]:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    assert kinds == {"reset_start": 2, "reset": 6, "reset_failed": 6}
    assert f.data["events"][-1]["reason"] == "Hns3ResetFail"
    assert time.strftime("%H:%M:%S", time.gmtime(f.data["events"][-1]["time"])) == "08:27:13"  # 16:27:13 +08:00


def test_a_bare_console_paste_of_via_rhine_timeouts_gives_its_five_resets(utc):
    """LKML 2004 (via-rhine, 2.6.5-rc2-mm1): a console paste without time stamps, five NETDEV WATCHDOG timeouts, each
    followed by via-rhine's own 'Transmit timed out, status 0003, PHY status 786d, resetting...' and an 'irq 11:
    nobody cared!' trace. Read as bare messages (stack lines join their record): 5 watchdog and 5 via-rhine events,
    one nic_reset finding on eth0 naming both families; no wall or boot time is made up."""
    r, recs, events, fs = _nic_findings("console-via-rhine-2004.txt")
    assert r.format == "bare" and len(recs) == 48
    got = {}
    for e in events:
        got[e.reason] = got.get(e.reason, 0) + 1
    assert got == {"NetdevWatchdog": 5, "ViaRhineTransmitTimedOutStatus": 5}
    assert all(e.time is None and e.clock == "none" and e.ifname == "eth0" for e in events)
    assert [(f.kind, f.severity, f.data["ifname"]) for f in fs] == [("nic_reset", "warning", "eth0")]
    assert fs[0].data["families"] == ["netdev_watchdog", "via_rhine"] and len(fs[0].data["events"]) == 10


def test_a_mlx4_catastrophic_error_log_gives_critical_findings_for_the_device_and_its_port(utc):
    """Michael Stapelberg's ConnectX-3 log (blog, 2021): 'kernel:'-prefixed lines with three systemd-networkd lines
    among them, no time stamps. The report: a CQE error, an internal (catastrophic) error, a device reset that
    succeeds, then the port restart fails and the link stays down. The reader finds: the internal error, the reset
    start (twice: mlx4_core and mlx4_en), the reset done and the failed port restart, all critical but the reset
    done. mlx4_core's lines name only the PCI address and mlx4_en's en_err lines only the interface, and no line
    names both, so they make two findings (0000:01:00.0 and enp1s0), not one; no time is made up."""
    r, recs, events, fs = _nic_findings("kernel-prefixed-mlx4-catas.txt")
    assert r.format == "bare" and len(recs) == 35
    assert [e.reason for e in events] == ["Mlx4InternalErrorDetected", "Mlx4DeviceGoingReset",
                                          "Mlx4DeviceResetSuccessfully", "Mlx4InternalErrorDetectedRestarting",
                                          "Mlx4FailedRestartingPort"]
    assert all(e.time is None for e in events)
    got = [(f.kind, f.severity, f.data["ifname"], f.data["families"], len(f.data["events"])) for f in fs]
    assert got == [("nic_reset", "critical", "0000:01:00.0", ["mlx4"], 4), ("nic_reset", "critical", "enp1s0", ["mlx4"], 1)]


def test_an_igb_sriov_deadlock_console_log_gives_its_hung_task_and_two_vf_notices(utc):
    """intel-wired-lan 2023 (6.2.0-rc8+, I350): 'echo 2 > sriov_numvfs; modprobe -r igb' hangs (a deadlock since
    commit 6faee3d4ee8b). The reader finds the incident the report describes: one hung_task finding, modprobe:2078
    blocked for 10 s. The two igbvf 'PF still resetting' probe notices (the PF was down) are reset starts, so their
    findings are warnings, not critical: the rule counted them as done resets before issue 41."""
    from nodesleuth.detect import lockups

    r, recs, events, fs = _nic_findings("console-igb-sriov-hung-task.txt")
    assert r.format == "dmesg" and len(recs) == 71
    assert [(f.kind, f.severity, f.data["ifname"], f.data["resets"]) for f in fs] == [
        ("nic_reset", "warning", "0000:84:10.2", 0), ("nic_reset", "warning", "0000:84:10.6", 0)]
    (lf,) = lockups.findings(events)
    assert (lf.kind, lf.data["count"], lf.data["processes"], lf.data["longest_s"]) == ("hung_task", 1, ["modprobe:2078"], 10)


# ---------------------------------------------------------------- the whole-log set (issue 41 part 5)

def test_every_labelled_event_of_the_whole_log_set_is_found_and_nothing_else():
    """tests/data/kernel-log/whole-set: >= 50 real logs (SOURCES.md), >= 20 of them with NIC or lockup events
    labelled by reading. The reader finds every labelled event and reports none on an unlabelled line (look-alikes:
    NMI watchdog banners, e1000 watchdog-task link lines, igc register dumps, rtw88 flush timeouts, ...)."""
    from benchmarks import kernel_logs

    out = kernel_logs.run()
    t = out["total"]
    assert t["files"] >= 50 and t["files_with_events"] >= 20 and t["labelled"] >= 100, t
    misses = [(f["file"], m) for f in out["files"] for m in f["misses"]]
    fps = [(f["file"], x) for f in out["files"] for x in f["fps"]]
    assert not misses and not fps, (misses[:5], fps[:5])
    assert {"soft_lockup", "hard_lockup", "rcu_stall", "hung_task", "workqueue_lockup", "tx_timeout", "reset",
            "hang"} <= set(out["by_kind"])
