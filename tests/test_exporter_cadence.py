"""The exporter's two cadences (fleet/exporter.py FULL_EVERY): /proc/stat every second for the hot-core rule
and the per-CPU gauges, everything else every full_every seconds; the same series either way."""

from __future__ import annotations

import pytest

from fixtures.trees import Animator, make_v1_node
from nodesleuth.collect.sampler import EXPORTER, Sampler
from nodesleuth.fleet import exporter as ex
from nodesleuth.node.root import Root


@pytest.fixture
def opened():
    """Samplers a test opened, closed after it (each keeps its tree's files open until closed)."""
    got: list[Sampler] = []
    yield got
    for s in got:
        s.close()


def _series(state: ex.State) -> dict[str, float]:
    out = {}
    for fam in ex.NodesleuthCollector(state).collect():
        for s in fam.samples:
            out[s.name + repr(sorted(s.labels.items()))] = s.value
    return out


def _thread(root: str, full_every: float, opened: list) -> ex.SamplerThread:
    th = ex.SamplerThread(Root(root), ex.State(), 1.0, None, False, full_every=full_every)
    opened.append(th.sampler)
    th.sampler.prime()
    return th


def test_cpu_tick_reads_only_proc_stat_and_keeps_its_own_baseline(tmp_path, opened):
    root = make_v1_node(str(tmp_path / "n"), ncpu=8, busy_cpu=3, nprocs=40, tracked=500, live=40)
    anim = Animator(root, busy_cpu=3, busy_pid=110)
    s = Sampler.preset(Root(root), EXPORTER, kmsg=False)
    opened.append(s)
    s.prime()
    fast = []
    for _ in range(3):
        anim.step()
        fast.append(s.cpu_tick())
    t = fast[-1]
    assert sorted(c for c in t.cpu if c >= 0) == list(range(8)) and -1 in t.cpu
    assert t.cpu[3].busy >= 90 and t.procs == [] and t.meminfo == {} and t.tcp is None
    assert s.n == 0  # no full tick yet: the processes, cgroups, NICs... were not read
    assert t.cpu_raw[3][2] == 94  # one second's jiffies (the Animator's 100 Hz), not three
    full = s.tick()  # covers the three seconds since prime(), whatever cpu_tick() did meanwhile
    assert full.cpu_raw[3][2] == 3 * 94 and full.census is not None and full.meminfo
    anim.step()
    assert s.cpu_tick().cpu_raw[3][2] == 94  # and cpu_tick's baseline is its own last read


def test_exporter_full_tick_every_full_every_seconds(tmp_path, monkeypatch, opened):
    root = make_v1_node(str(tmp_path / "n"), ncpu=8, busy_cpu=3, nprocs=40, tracked=500, live=40)
    anim = Animator(root, busy_cpu=3, busy_pid=110)
    clock = [1000.0]
    monkeypatch.setattr(ex.time, "monotonic", lambda: clock[0])
    every = _thread(root, 3.0, opened)
    each = _thread(root, 0.0, opened)  # the old cadence: every second a full tick
    fulls = []
    for i in range(7):
        anim.step()
        clock[0] += 1.0
        for th in (every, each):
            th.step()
        fulls.append(every.sampler.n)
        if i == 4:  # between full ticks: the per-CPU gauges are this second's, the rest the last full tick's
            st = every.state
            assert st.tick.time < st.fast.time
            got = _series(st)
            assert got["nodesleuth_cpu_busy_ratio[('cpu', '3')]"] == round(st.fast.cpu[3].busy / 100, 4)
            assert got["nodesleuth_cpu_sys_ratio[('cpu', '0')]"] == round(st.fast.cpu[0].sys / 100, 4)
    assert fulls == [1, 1, 1, 2, 2, 2, 3]  # steps 1, 4 and 7
    assert each.sampler.n == 7
    a, b = _series(every.state), _series(each.state)
    assert a.keys() == b.keys()  # the same series
    for k in ("nodesleuth_samples_total[]", "nodesleuth_cpu_busy_ratio[('cpu', '3')]", "nodesleuth_cgroups_tracked[('controller', 'memory'), ('hierarchy', 'v1')]",
              "nodesleuth_nic_driver_resets_total[('counter', 'total_resets'), ('device', 'eth0')]"):
        assert a[k] == b[k], k
    # the hot-core rule was fed every second either way (its seconds are wall time: this loop's, not the fixture's)
    assert a["nodesleuth_samples_total[]"] == 7 and a["nodesleuth_hot_core_seconds[('cpu', '3')]"] > 0
    assert len(every.tracker.runs[3]) == len(each.tracker.runs[3]) == 7



def test_packages_queried_again_only_when_the_database_changes(tmp_path, monkeypatch):
    """The exporter refreshes its facts every minute: dpkg-query (or rpm) runs again only when the package
    database's files changed (their stamp: size and mtime of dpkg's status and updates, rpm's files)."""
    from nodesleuth.fleet import snapshot

    tree = tmp_path / "t"
    (tree / "var/lib/dpkg/updates").mkdir(parents=True)
    status = tree / "var/lib/dpkg/status"
    status.write_text("Package: systemd\n")
    stamp_of = snapshot._db_stamp
    s0 = stamp_of(Root(str(tree)))
    assert s0 == stamp_of(Root(str(tree)))
    status.write_text("Package: systemd\nVersion: 258-1\n")  # an upgrade rewrites the status file
    s1 = stamp_of(Root(str(tree)))
    (tree / "var/lib/dpkg/updates/0001").write_text("Package: kubelet\n")  # dpkg's journal, not merged yet
    s2 = stamp_of(Root(str(tree)))
    assert len({s0, s1, s2}) == 3

    calls = []
    stamp = [s0]
    monkeypatch.setattr(snapshot, "_query_packages", lambda root: calls.append(root) or {"systemd": "257-1"})
    monkeypatch.setattr(snapshot, "_db_stamp", lambda root: stamp[0])
    monkeypatch.setattr(snapshot, "_PACKAGES_SEEN", {})
    live = Root("/")
    assert snapshot.packages(live) == {"systemd": "257-1"} and len(calls) == 1
    assert snapshot.packages(live) == {"systemd": "257-1"} and len(calls) == 1  # kept
    stamp[0] = s1
    assert snapshot.packages(live) == {"systemd": "257-1"} and len(calls) == 2  # the database changed: asked again
    monkeypatch.setattr(snapshot, "_query_packages", lambda root: calls.append(root) and None)
    stamp[0] = s2
    assert snapshot.packages(live) == {} and snapshot.packages(live) == {} and len(calls) == 4  # a failure is not kept


def test_a_unit_that_restarted_since_the_last_full_tick_stays_crash_looping():
    """A crash loop that fails in milliseconds and restarts after 200 ms (tests/conftest.py crasher_unit) is
    `running` with Result=success for a moment; a full tick that lands there must not report it healthy
    (the container's and the host's exporter disagreed on ecs.service in CI). A unit that restarted often
    long ago and did not since is not."""
    import dataclasses

    from nodesleuth.model.records import Unit

    up = Unit(id="ecs.service", n_restarts=40, active="active", sub="running", enabled="enabled", result="success",
              exit_status=0, main_pid=4242, restart="on-failure", restart_usec=200000, fragment="", cgroup="")
    assert not up.crash_looping  # what systemd says in that moment
    looping = ex.SamplerThread._looping
    assert looping(up, (37, True)) and looping(up, (37, False))  # it restarted 3 times in the last 15 s
    assert not looping(up, (40, True))  # no restart since: running is what it is
    assert not looping(up, None)  # the first read cannot tell
    assert not looping(dataclasses.replace(up, n_restarts=2), (1, False))  # restarted, but not often
    assert looping(dataclasses.replace(up, sub="auto-restart"), (40, False))  # systemd says so itself
