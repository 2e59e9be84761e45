"""Measure once per boot, remember (collect/probe_state.py): the state file written atomically and
read back, damaged or another boot's ignored with a one-line note, `check --npd` never probing, and
the guards that keep a probe from making memcgs where that could hurt.

Real parts: this host's boot_id and release, its /proc/cgroups, mountinfo and PSI file; a read-only
remount of the real memory hierarchy in a mount namespace of its own. Fixture trees only for what no
real part here can produce (60,000 memory cgroups; memory pressure high), each shaped exactly like the
kernel's file, built from this host's own copy with one number changed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from conftest import memcg, needs_root

from nodesleuth.collect import probe_state
from nodesleuth.model import thresholds as th
from nodesleuth.model.memcg_ids import ID_MAX
from nodesleuth.model.records import MemcgCost
from nodesleuth.node.root import Root

LIVE = Root("/")


def _cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "nodesleuth", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_saved_state_is_read_back_for_this_boot(tmp_path):
    cost = MemcgCost(2989.4, 18659.6, 1140, 4, 2, "v1")
    post = {"wait_s": 3.0, "n": 50, "kinds": {"tmpfs": {"made": 50, "dying": 50}}, "exact": False, "left": 0}
    st = probe_state.save(LIVE, str(tmp_path), cost, None, post, None)
    assert st.fresh and st.age() == "measured just now"
    assert os.listdir(tmp_path) == [probe_state.STATE_FILE]  # the temp file was renamed, nothing else left
    got, note = probe_state.load(LIVE, str(tmp_path))
    assert note is None and got.cost == cost and got.posture == post and not got.fresh
    assert got.boot_id == open("/proc/sys/kernel/random/boot_id").read().strip()
    assert got.kernel == os.uname().release
    assert re.fullmatch(r"measured \d+ s ago, this boot", got.age())
    assert got.age(now=got.time + 3 * 3600) == "measured 3 h ago, this boot"
    assert got.to_dict()["source"] == "state" and got.to_dict()["path"] == str(tmp_path / "probes.json")


def test_missing_damaged_and_foreign_state_are_ignored_with_one_line(tmp_path):
    d = str(tmp_path)
    got, note = probe_state.load(LIVE, d)
    assert got is None and "not measured on this boot" in note
    p = tmp_path / "probes.json"
    p.write_bytes(b'{"schema": "nodesleuth.probes/v1", "time": 1')  # cut short mid-write by hand
    got, note = probe_state.load(LIVE, d)
    assert got is None and note.startswith(f"{p}: not JSON") and "\n" not in note
    p.write_text(json.dumps({"schema": "nodesleuth.probes/v1", "time": "x", "boot_id": "b", "kernel": "k"}))
    got, note = probe_state.load(LIVE, d)
    assert got is None and "from another boot or kernel" in note
    key = probe_state.boot_key(LIVE)
    p.write_text(json.dumps({"schema": "nodesleuth.probes/v1", **key, "time": 1.0, "cost": {"percpu": 1}}))
    got, note = probe_state.load(LIVE, d)
    assert got is None and "damaged" in note and "\n" not in note
    # and check says so in one note, never a traceback
    r = _cli("check", "--json", "--seconds", "1", "--no-trace-churn", "--state-dir", d)
    doc = json.loads(r.stdout)
    assert "Traceback" not in r.stderr and doc["probes"] is None
    if any(n for n in doc["notes"] if "damaged" in n):
        assert any(n.startswith(f"{p}: damaged") for n in doc["notes"])


@needs_root  # reads the live memory hierarchy
def test_check_npd_never_probes_and_says_where_the_cost_came_from(tmp_path):
    """No state: `check --npd` makes no memcg (a probe would write the state: none is written) and the JSON
    run says "not measured on this boot"; with this boot's state the figures and their age come from it."""
    d = str(tmp_path)
    r = _cli("check", "--npd", "--seconds", "1", "--no-trace-churn", "--state-dir", d)
    assert r.returncode in (0, 1, 2) and "Traceback" not in r.stderr
    assert os.listdir(d) == []
    cost = MemcgCost(2989.4, 18659.6, 1140, 4, 2, memcg().name)
    probe_state.save(LIVE, d, cost, None, {"wait_s": 3.0, "n": 50, "kinds": {"tmpfs": {"made": 50, "dying": 50}},
                                           "exact": False, "left": 0}, None)
    doc = json.loads(_cli("check", "--json", "--seconds", "1", "--no-trace-churn", "--state-dir", d).stdout)
    assert doc["probes"]["source"] == "state" and doc["probes"]["path"] == os.path.join(d, "probes.json")
    assert doc["probes"]["memcg_cost"]["percpu_bytes_per_memcg"] == 2989
    assert any(n.startswith(f"memcg cost and zombie posture from {d}/probes.json (measured ") for n in doc["notes"])
    assert doc["posture"]["probe"]["kinds"]["tmpfs"]["dying"] == 50
    z = [f for f in doc["findings"] if f["kind"] == "zombie_cgroups"]
    for f in z:  # where its figure came from, beside it
        assert f["data"]["cost_source"].startswith(f"{d}/probes.json (measured ")
    assert os.listdir(d) == ["probes.json"]


def _tree(tmp_path, cgroups: str | None = None, psi: str | None = None) -> Root:
    """This host's own mount table, /proc/cgroups and PSI file under a tree, one number changed."""
    mc = memcg()
    root = tmp_path / "root"
    (root / "proc" / "1").mkdir(parents=True)
    (root / "proc" / "pressure").mkdir()
    shutil.copy("/proc/self/mountinfo", root / "proc" / "1" / "mountinfo")
    (root / "proc" / "cgroups").write_text(cgroups or open("/proc/cgroups").read())
    (root / "proc" / "pressure" / "memory").write_text(psi or open("/proc/pressure/memory").read())
    m = root / mc.host_mount.lstrip("/")
    m.mkdir(parents=True)
    for name in ("memory.limit_in_bytes", "cgroup.controllers", "cgroup.stat"):
        if os.path.exists(os.path.join(mc.host_mount, name)):
            (m / name).write_text(open(os.path.join(mc.host_mount, name)).read())
    return Root(str(root))


@needs_root
def test_guards_on_this_host_and_with_one_number_changed(tmp_path):
    assert probe_state.guard(LIVE) is None  # a quiet node with few memcgs: a probe may run
    if memcg().version != 1:
        return  # the fixtures below are v1's /proc/cgroups; v2's count is cgroup.stat (tests/vm)
    real = open("/proc/cgroups").read()
    # 60,000 memory cgroups: the kernel's line with num_cgroups changed (tab-separated, as the kernel prints)
    many = re.sub(r"^(memory\t\d+\t)\d+", r"\g<1>60000", real, flags=re.M)
    assert many != real
    why = probe_state.guard(_tree(tmp_path, cgroups=many))
    assert f"60000 of {ID_MAX} in use (92% > 80%)" in why and f"60000 memory cgroups already (> {th.PROBE_MAX_MEMCGS})" in why
    # a count over PROBE_MAX_MEMCGS but far from the ID limit: only that guard
    some = re.sub(r"^(memory\t\d+\t)\d+", rf"\g<1>{th.PROBE_MAX_MEMCGS + 1}", real, flags=re.M)
    why = probe_state.guard(_tree(tmp_path / "b", cgroups=some))
    assert why == f"{th.PROBE_MAX_MEMCGS + 1} memory cgroups already (> {th.PROBE_MAX_MEMCGS})"
    # memory pressure: the kernel's two lines, some avg10 above the threshold
    psi = ("some avg10=37.52 avg60=21.04 avg300=6.11 total=48310555\n"
           "full avg10=30.07 avg60=17.77 avg300=5.02 total=40011329\n")
    why = probe_state.guard(_tree(tmp_path / "c", psi=psi))
    assert why.startswith("memory pressure high: ") and f"some avg10=37.52 (> {th.PROBE_MAX_MEM_PSI:g})" in why


@needs_root  # a mount namespace of its own, the real memory hierarchy remounted read-only there
def test_read_only_cgroup_fs_holds_the_probe(tmp_path):
    mc = memcg()
    d = str(tmp_path / "state")
    script = (f"mount -o remount,bind,ro {mc.host_mount} && exec {sys.executable} -m nodesleuth check --json "
              f"--seconds 1 --no-trace-churn --probe --state-dir {d}")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                       text=True, timeout=300)
    doc = json.loads(r.stdout)
    note = next(n for n in doc["notes"] if n.startswith("probes not run: "))
    assert f"cgroup file system read-only: {mc.host_mount} is mounted ro" in note
    assert not os.path.exists(d)  # nothing measured, nothing kept
    assert "read-only" in doc["posture"]["problem"]


def test_the_recorder_reads_the_state_and_shares_its_directory(tmp_path):
    """In the DaemonSet the recorder's store and the probe state are one hostPath: a store directory that
    holds only probes.json is still a new, empty store; the recorder says where the cost came from."""
    d = tmp_path / "store"
    probe_state.save(LIVE, str(d), MemcgCost(2989.4, 18659.6, 1140, 4, 2, "v1"), None, None, "probe not run")
    r = _cli("record", "--store", str(d), "--root", "/", "--duration", "2s", "--no-threads", "--state-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert f"memcg cost and zombie posture from {d}/probes.json (measured " in r.stderr
    assert (d / "probes.json").exists() and len(os.listdir(d)) > 1  # the store was written beside it


@needs_root  # the exporter's first start probes (makes memory cgroups)
def test_the_exporter_probes_once_a_boot_and_then_reads_the_state(tmp_path):
    import signal
    import time

    from conftest import free_port

    d = tmp_path / "state"
    mc = memcg()

    def start():
        return subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", f"127.0.0.1:{free_port()}",
                                 "--state-dir", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    p = start()
    try:
        deadline = time.time() + 240
        while not (d / "probes.json").exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert (d / "probes.json").exists(), "the first start of this boot did not probe"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    first = json.load(open(d / "probes.json"))
    p = start()
    try:
        seen = False
        deadline = time.time() + 20  # the probe would start 5 s after the start
        while time.time() < deadline:
            seen |= os.path.isdir(os.path.join(mc.mount, f"nodesleuth-posture-{p.pid}"))
            seen |= os.path.isdir(os.path.join(mc.mount, f"nodesleuth-probe-{p.pid}"))
            time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
    assert not seen  # the second start made no memory cgroup
    assert json.load(open(d / "probes.json")) == first
    assert f"memcg cost and zombie posture from {d}/probes.json (measured " in err, err


def test_npd_line_says_where_the_cost_came_from_within_80_bytes():
    from nodesleuth.check.run import CheckResult
    from nodesleuth.detect.findings import Finding
    from nodesleuth.report.text import NPD_MAX, npd_line

    f = Finding("zombie_cgroups", "critical", "68680 dying memory cgroups (cgroup v1 memory), 286x the live count",
                [], [], data={"cost_source": "/var/lib/nodesleuth/probes.json (measured 3 h ago, this boot)"})
    line = npd_line(CheckResult([f], {}, {}))
    assert line.endswith(" [cost: 3 h ago]") and len(line.encode()) <= NPD_MAX
    f.data["cost_source"] = "not measured on this boot"
    line = npd_line(CheckResult([f], {}, {}))
    assert line.endswith(" [cost: unmeasured]") and len(line.encode()) <= NPD_MAX


def test_record_says_where_the_cost_comes_from(tmp_path):
    """The recorder reads the probes' state at start and says its source, or why there is none; it never
    probes (no state is written)."""
    d = str(tmp_path / "state")
    os.makedirs(d)
    from conftest import nodesleuth

    r = nodesleuth("record", "--store", str(tmp_path / "st"), "--duration", "2s", "--state-dir", d)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("nodesleuth record: "))
    assert "not measured on this boot" in line or "no probe state" in line or d in line, line
    assert os.listdir(d) == []
