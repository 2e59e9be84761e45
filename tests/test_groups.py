"""Groups as candidates (explain/family/group.py, collect/spawns.py, docs/groups.md): an exec storm and a fork
storm without exec, each a shell or a process on CPU 1 starting short-lived processes over and over,
recorded for real; explain must lead with the group (who starts them, how many a second, their share
of the core), not with one of its processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import Busy, missing, retry_when_busy

from benchmarks import explain_corpus as ec
from nodesleuth.collect.spawns import MIN_FORKS, SpawnReader
from nodesleuth.model.procfs import parse_processes
from nodesleuth.model.records import Spawns
from nodesleuth.node.pread import Preader
from nodesleuth.node.root import Root

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def test_processes_counter_of_this_kernel():
    with open("/proc/stat") as f:
        text = f.read()
    n = parse_processes(text)
    assert n > 0
    after = parse_processes(open("/proc/stat").read()) if subprocess.run(["true"]).returncode == 0 else n
    assert after >= n + 1  # `true` was forked in between


@retry_when_busy()
def test_a_real_exec_storm_is_caught_by_parent_and_command():
    """A shell starting /bin/true over and over (not pinned: the counter moves whatever the load): the
    counter says hundreds a second, the listings catch some of them alive, grouped under the shell."""
    r = SpawnReader(Root("/"), Preader())
    r.prime()
    p = subprocess.Popen(["sh", "-c", "while :; do /bin/true; done"])
    got = []
    try:
        for _ in range(6):
            time.sleep(0.5)
            got.append(r.read(0.5))
    finally:
        p.kill()
        p.wait()
        r.close()
    assert all(isinstance(s, Spawns) for s in got)
    assert sum(s.forks for s in got) >= 6 * MIN_FORKS * 0.5  # a storm by the rule's own measure
    assert got[0].rows == [] and not got[0].listed  # the first listing is a baseline, never counted
    if not any(s.listed for s in got[1:]):
        # a loaded host ran the storm below the rule's rate (MIN_FORKS a second) in some half-second, so
        # every listing was a new baseline: nothing to compare
        raise Busy(f"the storm started {[s.forks for s in got]} processes per half-second: no two listings in a row")
    mine = [row for s in got[1:] for row in s.rows if row["ppid"] == p.pid]
    assert mine, [(s.forks, s.listed, s.rows) for s in got]
    assert {row["pcomm"] for row in mine} == {"sh"}
    assert {row["comm"] for row in mine} <= {"true", "sh"}
    assert sum(row["new"] for row in mine) >= 1
    # the stored form round-trips, and a 10 s window sums
    s = got[-1]
    assert Spawns.from_stored(s.stored()).to_dict() == s.to_dict()
    m = Spawns.merge(got)
    assert m.forks == sum(x.forks for x in got)


def test_a_quiet_second_lists_nothing():
    r = SpawnReader(Root("/"), Preader())
    r.prime()
    s = r.read(1e9)  # a second so long that no node reaches MIN_FORKS a second in it
    assert s.rows == [] and not s.listed and s.forks >= 0
    assert r.alive is None


# --- the two storms in the corpus (recorded in the VM, tests/corpus/cases/{exec,fork}_storm.py) -------

def _explained(name: str, tmp) -> dict:
    store = ec.extract(name, str(tmp))
    out = subprocess.run([os.path.join(BIN, "nodesleuth"), "explain", "--store", store, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.parametrize("name,child,parent", [("exec_storm", "main", "sh"), ("fork_storm", "forker", "forker")])
def test_the_storm_leads_with_its_group(name, child, parent, tmp_path):
    doc = _explained(name, tmp_path)
    inc = [i for i in doc["incidents"] if i["kind"] == "hot_core" and i["links"][1]["data"].get("cpu") == 1]
    assert len(inc) == 1, [i["title"] for i in doc["incidents"]]
    inc = inc[0]
    assert inc["family"] == "group", inc["title"]
    g = inc["hypotheses"][0]
    assert g["family"] == "group" and g["verdict"] == "proven"
    d = g["data"]
    assert child in d["commands"]
    assert d["parent"]["comm"] == parent
    assert d["source"] == "profile"
    assert d["cpu_share"] >= 0.5  # the group holds most of the core
    assert d["processes"] >= 10  # many processes, none of them alone the cause
    # a storm (the guest runs under TCG, tens of times slower than hardware: 4-30 a second there); the
    # node-wide counter covers at least the distinct processes the profile caught on the core
    secs = inc["links"][0]["data"]["end"] - inc["links"][0]["data"]["start"]
    assert d["started_per_s"] >= 2
    assert d["started_per_s"] * secs >= 0.8 * d["processes"], (d, secs)
    assert inc["root_cause"].startswith(f"group: {child}")
    # one process at a time (the parent waits for each): each lived at most the time between two starts
    assert 0 <= d["median_lifetime_ms_at_least"] <= 1.5 * 1000 / d["started_per_s"], d
    rem = next(lk for lk in inc["links"] if lk["name"] == "remediation")
    assert rem["evidence"][0].startswith(f"ps -o pid,ppid,comm,args,cgroup -p {d['parent']['pid']};")
    # no single process of the storm explains the core
    single = [h for h in inc["hypotheses"] if h["family"] in ("user", "kernel")]
    assert all(h["verdict"] != "proven" for h in single), single


def test_without_a_profile_the_parents_cutime_ties_the_group(tmp_path):
    """The exec storm's recording without its profile: /proc only. The storm's processes are mostly never
    read; their CPU reaches the recording as the shell's exited children's (cutime/cstime). The group is
    named from that and from the listings, before the single-process reading of the same time."""
    import shutil

    store = ec.extract("exec_storm", str(tmp_path))
    for n in os.listdir(store):
        if n.startswith("profile"):
            shutil.rmtree(os.path.join(store, n))
    out = subprocess.run([os.path.join(BIN, "nodesleuth"), "explain", "--store", store, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    inc = json.loads(out.stdout)["incidents"][0]
    g = inc["hypotheses"][0]
    assert g["family"] == "group" and inc["family"] == "group", inc["title"]
    d = g["data"]
    assert d["source"] == "proc-estimate" and d["parent"]["comm"] == "sh" and "main" in d["commands"]
    assert 0 < d["lower_bound_pct"] <= 100 * d["cpu_share"]  # the bound is below the placed estimate
    assert any("cutime/cstime" in e for e in g["evidence"])
    assert any("1 s scan" in e for e in g["evidence"])


# --- live, on this host --------------------------------------------------------------------------

@pytest.mark.slow  # >= 9 s of real recording
@retry_when_busy()
def test_live_exec_storm_on_cpu_1(tmp_path):
    """`nodesleuth record --profile` for 20 s while a shell pinned to CPU 1 starts /bin/true over and over,
    from before the recording to after it; explain must lead with the group. The hot-core rule needs the
    other CPUs under 60%: on a host where another job holds CPU 0 there is no incident to explain, and the
    attempt is retried (conftest.Busy). The storm spans the recording because a job that keeps CPU 1 busy
    whenever the storm does not (even at nice 19) makes the hot run, and so the episode, longer than the
    storm: the storm's share of it fell under the proven rule's half (CI saw `contributing`). A job on
    CPU 1 that does take the core from the storm (40% of the episode's busy time or more, by the
    recording's /proc rows) is a busy machine too."""
    if len(os.sched_getaffinity(0)) < 2:
        missing("needs CPU 1 (a machine with 2 CPUs or more)")
    store = str(tmp_path / f"s-{time.monotonic_ns()}")  # a fresh store per attempt
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    storm = subprocess.Popen(["taskset", "-c", "1", "sh", "-c", "while :; do /bin/true; done"])
    rec = None
    try:
        time.sleep(1)
        rec = subprocess.Popen(["nodesleuth", "record", "--store", store, "--profile", "--quiet",
                                "--duration", "20s"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        rec.wait(timeout=60)
    finally:
        os.kill(storm.pid, signal.SIGKILL)
        storm.wait()
        if rec is not None and rec.poll() is None:
            rec.kill()
            rec.wait()
    _the_live_storm_leads(store, storm.pid)


def _the_live_storm_leads(store: str, storm: int) -> None:
    """The checks of a recording of the live storm (storm: its shell's pid)."""
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", "")}
    out = subprocess.run(["nodesleuth", "explain", "--store", store, "--json"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode in (0, 2), out.stderr[-2000:]
    doc = json.loads(out.stdout)
    inc = [i for i in doc["incidents"] if i["kind"] == "hot_core" and i["links"][1]["data"].get("cpu") == 1]
    if not inc:
        from nodesleuth.explain.load import recording

        rec, _ = recording(store, None, None)
        busy = {c: sum(t.cpu[c].busy for t in rec.ticks) / max(1, len(rec.ticks)) for c in (0, 1)}
        raise Busy(f"no hot-core incident on CPU 1 (during the storm CPU 1 averaged {busy[1]:.0f}%, CPU 0 "
                   f"{busy[0]:.0f}%; the rule wants CPU 1 >= 90% and the others < 60%); incidents: "
                   + ("; ".join(i["title"] for i in doc["incidents"]) or "none"))
    inc = max(inc, key=lambda i: i["end"] - i["start"])
    ep = inc["links"][1]["data"]
    # the stated condition, from the recording's /proc rows of the episode: the storm had most of the core.
    # The rivals are the rows that are not the storm's (its shell, the shell's exited children, /bin/true
    # caught alive), each read exactly; the storm's own time is partly an estimate placed per CPU (cutime).
    # At 40% or more for them the storm has at most 60% of the busy time: too near the proven rule's half
    # for the profile's count and /proc's to agree on the side of it
    rivals = [p for p in ep["top"] if p["pid"] != storm and p["comm"] != "true"]
    if sum(p["share"] for p in rivals) >= 0.4:
        raise Busy(f"other processes held {100 * sum(p['share'] for p in rivals):.0f}% of CPU 1's busy time over "
                   f"the {ep['seconds']:.0f} s episode (" + ", ".join(
                       f"{p['comm']} (pid {p['pid']}) {100 * p['share']:.0f}%" for p in rivals) + ")")
    others = ep.get("others_busy")
    g = next(h for h in inc["hypotheses"] if h["family"] == "group")
    assert inc["family"] == "group", (inc["title"], others)
    assert g["verdict"] == "proven", (g, ep["top"])
    assert g["data"]["parent"]["comm"] == "sh" and "true" in g["data"]["commands"]
    assert g["data"]["started_per_s"] >= 20
    assert g["data"]["cpu_share"] >= 0.5


def test_where_the_parent_runs_is_said_by_pod_unit_or_cgroup():
    """A group's parent is placed by its cgroup: a pod's (real kubelet paths, tests/data/kube/cgroup-paths.json,
    each with its source), a systemd unit's, or the cgroup itself."""
    from nodesleuth.explain.family.group import _where
    from nodesleuth.model.kube import from_cgroup

    with open(os.path.join(REPO, "tests", "data", "kube", "cgroup-paths.json")) as f:
        paths = json.load(f)["paths"]
    for p in paths[:6]:
        ref = from_cgroup(p["path"])
        assert ref is not None, p
        assert _where(p["path"], ref.to_dict()) == f" in pod uid {p['expect']['uid']}"
    assert _where("/system.slice/cron.service", None) == " in cron.service"
    assert _where("/user.slice/user-0.slice/session-3.scope", None) == " in session-3.scope"
    assert _where("/lab/loop", None) == " in cgroup /lab/loop"
    assert _where("/", None) == "" and _where(None, None) == ""
