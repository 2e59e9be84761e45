"""Zombie posture (collect/posture.py) on this host's real kernel: the reparenting symbol looked up in the
real /proc/kallsyms, the behaviour probe making and removing real memory cgroups, and what `check` says.
Every kernel of the matrix (5.10 to 7.2, one that reparents) is verified in tests/test_vm_matrix.py."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import memcg, needs_root

from nodesleuth.collect import posture
from nodesleuth.model.records import ZombiePosture
from nodesleuth.node.cgroupfs import (STALE_S, Memcg, enter, make_zombies, own_cgroup,
                                      remove_cgroup_tree, remove_stale, remove_stale_pins, retire_tree)
from nodesleuth.node.root import Root, fstype



def test_kallsyms_lookup_on_this_kernel():
    """This host's kernel (6.18) predates the 7.1 series: no lru_reparent_memcg; a function every
    kernel has is found, so a False is a real absence, not a parse failure."""
    release = os.uname().release
    live = Root("/")
    assert posture.kallsyms_has(live, ("mem_cgroup_iter",)) is True
    major, minor = (int(x) for x in release.split(".")[:2])
    assert posture.kallsyms_has(live, posture.REPARENT_SYMBOLS) is ((major, minor) >= (7, 1))


def test_kallsyms_unreadable_is_unknown(tmp_path):
    (tmp_path / "proc").mkdir()
    assert posture.kallsyms_has(Root(str(tmp_path)), posture.REPARENT_SYMBOLS) is None


def test_kallsyms_module_lines(tmp_path):
    """Lines of modules carry a tab and [module]; real lines copied from this host's /proc/kallsyms
    (addresses as root sees them) plus, shaped like them, 7.2's symbol (tests/vm/out/matrix/7.2-v2-2cpu-symbols.json,
    run output: `git show 8b3d002:tests/vm/out/matrix/7.2-v2-2cpu-symbols.json`)."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "kallsyms").write_text(
        "ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]\n"
        "ffffffff816aff90 T mem_cgroup_iter\n"
        "ffffffff816b0a20 T lru_reparent_memcg\n")
    r = Root(str(tmp_path))
    assert posture.kallsyms_has(r, ("ftrace_trampoline",)) is True
    assert posture.kallsyms_has(r, posture.REPARENT_SYMBOLS) is True
    assert posture.kallsyms_has(r, ("lru_gen_reparent_memcg_x",)) is False


def test_kallsyms_chunk_boundary_and_last_line(tmp_path):
    """The file is searched a megabyte at a time: a name cut by the boundary, a module name (in brackets,
    never a symbol), a prefix of a real name and a last line without its newline, in lines shaped like
    the ones above."""
    (tmp_path / "proc").mkdir()
    line = "ffffffff816aff90 T mem_cgroup_iter\n"
    head = line * ((1 << 20) // len(line))
    pad = (1 << 20) - len(head) - len("ffffffff816b0a20 T lru_rep")
    text = head + "x" * pad + "\nffffffff816b0a20 T lru_reparent_memcg\n"
    (tmp_path / "proc" / "kallsyms").write_text(text)
    r = Root(str(tmp_path))
    assert posture.kallsyms_has(r, ("lru_reparent_memcg",)) is True
    (tmp_path / "proc" / "kallsyms").write_text(head + "ffffffffc0201000 t veth_xmit\t[veth]\nffffffff816b0a20 T lru_gen_reparent_memcg")
    assert posture.kallsyms_has(r, ("veth",)) is False
    assert posture.kallsyms_has(r, ("veth_xmit",)) is True
    assert posture.kallsyms_has(r, ("lru_gen_reparent",)) is False
    assert posture.kallsyms_has(r, ("lru_gen_reparent_memcg",)) is True


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root  # makes memory cgroups
def test_probe_on_this_kernel_keeps_page_cache_zombies():
    """6.18 keeps a removed memcg dying under its page cache, tmpfs and disk alike; the probe cleans up
    after itself (its parent is gone, its cgroups freed)."""
    mc = memcg()
    out = posture.probe(Root("/"), n=20, wait=1.0)
    assert set(out["kinds"]) == {"tmpfs", "disk"}, out
    for kind, v in out["kinds"].items():
        assert v["made"] == 20, (kind, v)
        # v2 counts per parent (exact); v1 from the node-wide count, which other jobs move too
        assert v["dying"] == 20 if out["exact"] else v["dying"] >= 16, (kind, out)
    assert out["exact"] is (mc.version == 2)
    assert not os.path.exists(os.path.join(mc.mount, f"nodesleuth-posture-{os.getpid()}"))
    assert isinstance(out["left"], int) and out["left"] <= 40, out  # what it could not free is counted


def test_disk_dir_is_never_tmpfs(monkeypatch, tmp_path):
    monkeypatch.setenv("NODESLEUTH_PROBE_DIR", "/dev/shm")
    d = posture.disk_dir()
    assert d != "/dev/shm" and (d is None or fstype(d) not in posture.MEMORY_FS)
    monkeypatch.setenv("NODESLEUTH_PROBE_DIR", str(tmp_path))
    if fstype(str(tmp_path)) not in posture.MEMORY_FS:
        assert posture.disk_dir() == str(tmp_path)


# What the probe measured on Debian's kernels in the VM matrix (tests/vm/README.md, "Kernel matrix"):
SIX_TWELVE = ZombiePosture("6.12.95+deb12-amd64", "v2", False, True,
                           {"wait_s": 3.0, "n": 50, "exact": True,
                            "kinds": {"tmpfs": {"made": 50, "dying": 50}, "disk": {"made": 50, "dying": 50}}})
SEVEN_TWO = ZombiePosture("7.2.13+deb14-amd64", "v2", True, True,
                          {"wait_s": 3.0, "n": 50, "exact": True, "left": 0,
                           "kinds": {"tmpfs": {"made": 50, "dying": 0},
                                     "disk": {"made": 50, "dying": 50,
                                              "after_writeback": {"dying": 0, "seconds": 34.5}}}})


def test_describe_per_kernel():
    six = " ".join(posture.describe(SIX_TWELVE))
    assert "reparents a removed memcg's LRU pages: no" in six and "zombies accumulate" in six
    assert SIX_TWELVE.accumulate is True
    seven = " ".join(posture.describe(SEVEN_TWO))
    assert "yes (lru_reparent_memcg)" in seven
    assert "writeback: disk: 0 of 50 still dying after 34.5 s" in seven
    assert ("frees a removed memcg's tmpfs page cache at once, and one that wrote to disk once its file is "
            "written back and another memcg goes offline (within 34.5 s here): zombies do not accumulate") in seven
    assert SEVEN_TWO.accumulate is False
    kept = dataclasses.replace(SEVEN_TWO, probe={**SEVEN_TWO.probe, "kinds": {
        **SEVEN_TWO.probe["kinds"], "disk": {"made": 50, "dying": 50, "after_writeback": {"dying": 48, "seconds": 45}}}})
    assert kept.accumulate is True
    assert "stayed dying through writeback: zombies from written files accumulate" in " ".join(posture.describe(kept))
    unknown = dataclasses.replace(SEVEN_TWO, probe={**SEVEN_TWO.probe, "kinds": {"tmpfs": {"made": 50, "dying": None}}})
    assert unknown.accumulate is None  # could not read is never "does not accumulate"


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root  # reads /proc/kallsyms addresses and makes memory cgroups
def test_check_reports_posture(tmp_path):
    """`check --probe --json` carries the posture of the kernel it runs on, under `posture`."""
    p = subprocess.run([sys.executable, "-m", "nodesleuth", "check", "--json", "--seconds", "1", "--no-trace-churn",
                        "--probe", "--state-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    doc = json.loads(p.stdout)
    post = doc["posture"]
    assert post["kernel"] == os.uname().release
    assert post["hierarchy"] in ("v1", "v2", "hybrid")
    assert post["reparents_lru"] is posture.kallsyms_has(Root("/"), posture.REPARENT_SYMBOLS)
    assert post["says"] and post["says"][0].startswith(f"kernel {os.uname().release}")
    if post["probe"]:  # the probe ran (no guard held)
        # v1 counts node-wide, so other jobs' cgroups can make one kind look freed and send the probe
        # through writeback: either way this kernel keeps them
        assert post["accumulate"] is True and "accumulate; the remedy is to stop their creator" in " ".join(post["says"])
    else:
        assert "behaviour not measured" in " ".join(post["says"]) or post["problem"]


@needs_root  # makes memory cgroups
def test_zombie_maker_goes_home_so_its_leaf_is_removable_at_once(tmp_path):
    """make_zombies' child returns to our own cgroup before it exits, so its `_leave` leaf is empty when
    make_zombies returns: one rmdir, no EBUSY wait (an exiting task can count in its cgroup until its
    last context switch, which a loaded machine delays: remove_cgroup_tree's patience). The 7 probe
    trees the CI of 2026-12-05 left came from exporters stopped with SIGTERM: the tests below."""
    mc = memcg()
    parent = mc.path(f"nodesleuth-test-home-{os.getpid()}")
    try:
        home = own_cgroup(parent)
        assert home is not None and str(os.getpid()) in open(os.path.join(home, "cgroup.procs")).read().split()
        for _ in range(5):
            assert make_zombies(3, parent, str(tmp_path / "pins")) == 3
            leave = os.path.join(parent, "_leave")
            assert open(os.path.join(leave, "cgroup.procs")).read() == ""
            os.rmdir(leave)  # at once: no EBUSY retry
    finally:
        remove_cgroup_tree(parent)
    assert not os.path.exists(parent)


def cgroup_cache(path: str) -> int:
    """Page cache charged to a memory cgroup and below it, dying ones included (v1 total_cache, v2 file)."""
    st = dict(line.split() for line in open(os.path.join(path, "memory.stat")) if line.strip())
    return int(st["total_cache"] if "total_cache" in st else st["file"])


@needs_root  # makes memory cgroups
def test_a_page_the_probes_child_was_first_to_charge_is_reclaimed_before_its_tree_goes():
    """What kept 3 of a probe's memcgs dying in CI's v2 VM: a charge its child left that nothing deletes
    (there: text it was first to fault in, or a CPU's charge stock; here: a file it wrote and left, on a
    disk file system, written back). retire_tree removes the leaf, reclaims and drains the top until
    nothing is charged to it (the leaf freed: its own per-CPU statistics were charged to the top), and
    only then removes the top. Without the reclaim the leaf's pages keep it, and the top, charged."""
    base = posture.disk_dir()
    if base is None:
        pytest.skip("no disk file system writable here")
    mc = memcg()
    rel = f"nodesleuth-test-empty-{os.getpid()}"
    leaf = mc.make(f"{rel}/leaf")
    top = mc.path(rel)
    data = os.path.join(base, f"nodesleuth-test-empty-{os.getpid()}")
    try:
        # created out here, as make_zombies does: a new inode's metadata block read inside the leaf would
        # be charged to it and, dirty in the journal, unreclaimable for seconds
        os.close(os.open(data, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        pid = os.fork()
        if pid == 0:
            try:
                enter(leaf, os.getpid())
                fd = os.open(data, os.O_WRONLY)
                os.write(fd, b"z" * (256 << 10))
                os.fsync(fd)  # clean: reclaim may drop it at once
                os.close(fd)
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        before = cgroup_cache(top)
        assert before >= 200 << 10, before  # the child's pages, still cached with no process left
        remove_cgroup_tree(leaf)
        time.sleep(1)
        assert cgroup_cache(top) >= 200 << 10  # removed, the leaf is dying: its pages still charged
        assert retire_tree(top) == 0  # none dying below it (v1: no page held) when it went
        assert not os.path.exists(top)
        assert os.path.exists(data)  # the file is still there: only its cached pages went
    finally:
        remove_cgroup_tree(top)
        os.unlink(data) if os.path.exists(data) else None


@needs_root  # makes memory cgroups
@pytest.mark.parametrize("command", ["check", "exporter"])
def test_a_command_stopped_with_sigterm_removes_its_probe_cgroups(command, tmp_path):
    """SIGTERM mid-probe (`timeout 60 nodesleuth check`; the kubelet stopping the exporter, whose probe
    runs on a thread of its own): the maker child is stopped and the tree removed (the suite's own
    exporters left `nodesleuth-posture-PID` trees behind, the CI of 2026-12-05)."""
    from conftest import free_port

    mc = memcg()
    # a state dir with no state of this boot: check --probe probes, the exporter probes at its start
    args = (["check", "--json", "--seconds", "1", "--no-trace-churn", "--probe"] if command == "check" else
            ["exporter", "--listen", f"127.0.0.1:{free_port()}"]) + ["--state-dir", str(tmp_path)]
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    tree = os.path.join(mc.mount, f"nodesleuth-posture-{p.pid}")
    try:
        deadline = time.time() + 240
        while not os.path.isdir(os.path.join(tree, "tmpfs")) and p.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert os.path.isdir(tree), "the probe never started"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 143, p.stderr.read()
        assert not os.path.exists(tree), sorted(os.listdir(tree))
        # and the files that pinned its zombies (the exporter's were left in /dev/shm before: its probe
        # thread's finally never ran)
        pins = [os.path.join(b, x) for b in posture._kinds().values() for x in os.listdir(b)
                if x.startswith(f"nodesleuth-posture-{p.pid}-")]
        assert not pins, pins
    finally:
        p.kill()
        p.wait()


@needs_root  # makes memory cgroups
def test_the_probe_removes_trees_a_killed_check_left(tmp_path):
    """A check killed with SIGKILL leaves its probe tree; the next probe removes it when its pid is gone
    and it is older than any probe (STALE_S), and leaves a young one and a live pid's alone
    (node/cgroupfs.scratch_tree, which both probes use)."""
    mc = memcg()
    dead = _dead_pid()
    old, young, alive = (mc.make(f"nodesleuth-posture-{dead}/tmpfs/_leave"), mc.make(f"nodesleuth-posture-{dead + 1}/disk"),
                         mc.make(f"nodesleuth-posture-{os.getpid()}/disk"))
    past = time.time() - STALE_S - 60
    os.utime(mc.path(f"nodesleuth-posture-{dead}"), (past, past))
    # its pinning files too: while they exist its zombies stay (in /dev/shm, the tmpfs kind's place); a name
    # from before the pid was in it goes by age alone
    pins_old, pins_young = f"/dev/shm/nodesleuth-posture-{dead}-ab12", f"/dev/shm/nodesleuth-posture-{dead + 1}-cd34"
    pins_alive, pins_nopid = f"/dev/shm/nodesleuth-posture-{os.getpid()}-ef56", "/dev/shm/nodesleuth-posture-x9k2m1qp"
    for d in (pins_old, pins_young, pins_alive, pins_nopid):
        os.makedirs(d)
        open(os.path.join(d, "p0"), "w").write("z")
    for d in (pins_old, pins_alive, pins_nopid):
        os.utime(d, (past, past))
    try:
        gone = remove_stale(Memcg(Root("/")), "posture")
        assert gone == [mc.path(f"nodesleuth-posture-{dead}")]
        assert not os.path.exists(old) and os.path.isdir(young) and os.path.isdir(alive)
        assert sorted(remove_stale_pins(Root("/"), "/dev/shm", "posture")) == sorted([pins_old, pins_nopid])
        assert os.path.isdir(pins_young) and os.path.isdir(pins_alive)
    finally:
        for d in (pins_old, pins_young, pins_alive, pins_nopid):
            shutil.rmtree(d, ignore_errors=True)
        for top in (f"nodesleuth-posture-{dead}", f"nodesleuth-posture-{dead + 1}", f"nodesleuth-posture-{os.getpid()}"):
            if os.path.isdir(mc.path(top)):
                remove_cgroup_tree(mc.path(top))


def _dead_pid() -> int:
    """A pid no process has now (and the next one up, likewise)."""
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}") or os.path.exists(f"/proc/{pid + 1}"):
        pid -= 7
    return pid

