"""Never silent, never leaking: kill -9 leaves no process and no temp file, a damaged byte loses at
most its second, unreadable input is never reported as health, user mistakes get one line."""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import needs_root, nodesleuth, wait_ticks
from nodesleuth.store.segment import HEADER
from nodesleuth.store.store import StoreReader, StoreWriter


def _children_of(pid: int) -> list[int]:
    """Every descendant of pid still alive (from /proc/*/stat ppid)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _running(pid: int) -> bool:
    """pid exists and is not a zombie (it may exit between any two reads: that is 'not running')."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")
    except OSError:
        return f"(pid {pid} gone)"


def _perf_for(store: str) -> list[str]:
    """perf commands whose command line names the store (the churn tracer's, under its reaper)."""
    out = subprocess.run(["pgrep", "-af", "perf (record|script)"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if store in ln]


def _perf_under(pid: int) -> list[int]:
    """perf processes descending from pid (the profiler's perf record and perf script are its own
    children, started with PDEATHSIG and no reaper: they write no scratch file)."""
    out = []
    for k in _children_of(pid):
        try:
            with open(f"/proc/{k}/comm") as f:
                if f.read().strip() == "perf":
                    out.append(k)
        except OSError:
            pass
    return out


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@pytest.mark.parametrize("after", [1.7, 4.3, 7.9])
def test_kill_9_leaves_no_process_and_no_temp_file(tmp_path, after):
    store = str(tmp_path / "st")
    tmp_before = set(glob.glob("/tmp/nodesleuth-*"))
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--quiet", "--profile",
                          "--trace-churn", "--profile-rotate", "2", "--live-every", "5"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env={**os.environ, "NODESLEUTH_PROFILER": "perf"})  # the most children (direct: test_profile_direct)
    try:
        deadline = time.time() + 20
        # perf really running before the kill: the profiler's (perf record, perf script) and the churn tracer's
        while time.time() < deadline and not (_perf_for(store) and len(_perf_under(p.pid)) >= 3):
            time.sleep(0.1)
        assert _perf_for(store) and len(_perf_under(p.pid)) >= 3, (
            p.stderr.read().decode() if p.poll() is not None else "perf never started")
        assert wait_ticks(store, p) >= 1, "no tick stored"  # a loaded host takes seconds to start the sampler
        time.sleep(after + random.random() * 0.5)
        family = _children_of(p.pid)
        assert len([k for k in family if k in _perf_under(p.pid)]) >= 3  # the churn reaper, its perf, the profiler's
        seen = max(t for t, _ in StoreReader(store).read("ticks"))  # stored before the kill
    finally:  # killed whatever happened before: no recorder outlives the test
        os.kill(p.pid, signal.SIGKILL)
        killed_at = time.time()
        p.wait()
    left = family
    while time.time() < killed_at + 10.0:  # at once when the host is quiet; a loaded one may take seconds
        left = [pid for pid in family if _running(pid)]
        if not left and not _perf_for(store) and not os.path.exists(os.path.join(store, ".work", "profile")):
            break
        time.sleep(0.05)
    assert not left, [_cmdline(x) for x in left]
    assert not _perf_for(store)
    work = os.path.join(store, ".work")
    assert not glob.glob(os.path.join(work, "*", "*")), os.listdir(work)  # no perf chunk survives
    assert set(glob.glob("/tmp/nodesleuth-*")) <= tmp_before
    # every second stored before the kill is still there (at most the one being written is lost), and
    # the store reads without damage
    r = StoreReader(store)
    last = max((t for t, _ in r.read("ticks")), default=None)
    assert last is not None and seen <= last < killed_at, (seen, last, killed_at)
    assert r.problems == []
    # a new record on the same store starts (the lock died with its holder) and clears the scratch
    os.makedirs(os.path.join(work, "profile"), exist_ok=True)
    open(os.path.join(work, "profile", "perf.data.2026"), "w").close()
    again = nodesleuth("record", "--store", store, "--duration", "2s", "--quiet", timeout=60)
    assert again.returncode == 0, again.stderr
    assert not os.path.exists(work)


def _frames(seg: str) -> list[int]:
    with open(seg, "rb") as f:
        data = f.read()
    offs, off = [], 0
    while off + HEADER.size <= len(data):
        offs.append(off)
        off += HEADER.size + HEADER.unpack_from(data, off)[1]
    return offs


def test_any_single_damaged_byte_loses_at_most_its_frame(tmp_path):
    """Flip each byte of a segment in turn (every 3rd, to keep it quick): at most the record whose
    frame was hit is lost, including the first frame that holds the segment's dictionary."""
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    for i in range(12):
        w.append("ticks", 1000.0 + i, json.dumps({"i": i, "pad": "y" * (i * 3)}).encode())
    w.close()
    seg = StoreReader(d).segments("ticks")[0]
    with open(seg, "rb") as f:
        good = f.read()
    offs = _frames(seg) + [len(good)]
    for pos in range(0, len(good), 3):
        bad = bytearray(good)
        bad[pos] ^= 0xA5
        with open(seg, "wb") as f:
            f.write(bad)
        r = StoreReader(d)
        got = [json.loads(p)["i"] for _, p in r.read("ticks")]
        frame = max(i for i, o in enumerate(offs) if o <= pos)  # frame 0 is the dictionary
        lost = set(range(12)) - set(got)
        assert lost <= ({frame - 1} if frame >= 1 else set()), (pos, frame, lost)
        assert len(lost) <= 1
        assert got == sorted(got)
        assert r.problems, pos  # the damage is reported, never silent
        # a ranged read steps over frames outside its range unread: inside it, the same holds (at most
        # the damaged frame lost, and said); a time damaged out of its place is checked, not skipped
        r = StoreReader(d)
        got = [json.loads(p)["i"] for _, p in r.read("ticks", 1004.0, 1007.0)]
        lost = set(range(4, 8)) - set(got)
        assert lost <= {frame - 1} and set(got) <= set(range(4, 8)), (pos, frame, got)
        if 4 <= frame - 1 <= 7 or frame == 0:
            assert r.problems, pos
    with open(seg, "wb") as f:
        f.write(good)


def test_dictionary_sidecar_size_cost(tmp_path):
    """The second copy of each segment's dictionary: under 10% of an hour segment of real ticks."""
    from nodesleuth.node.root import Root
    from nodesleuth.collect.sampler import Sampler
    from nodesleuth.store.codec import Encoder

    d = str(tmp_path / "st")
    w = StoreWriter(d)
    s = Sampler(Root("/"), kmsg=False, irqs=True, util=False)
    s.prime()
    enc = Encoder()
    tk = s.tick()
    s.close()
    for i in range(600):  # ten minutes of the same real tick, re-timed: compresses as well as real ones do
        tk.time += 1.0
        w.append("ticks", tk.time, enc.encode(tk))
    w.close()
    seg = StoreReader(d).segments("ticks")[0]
    side = seg[:-4] + ".dict"
    assert os.path.getsize(side) / os.path.getsize(seg) < 0.10


def test_user_mistakes_get_one_line_and_exit_2(tmp_path):
    d = str(tmp_path / "st")
    w = StoreWriter(d)
    w.append("ticks", 1000.0, b'{"v": 2, "t": 1000.0, "iv": 1.0}')
    w.close()
    cases = [
        (["flame", "--store", d, "--from", "now", "--to", "10m ago"], "is after to"),
        (["dump", "--store", d, "--from", "2026-12-01T10:00:00", "--to", "2026-12-01T10:00:00"], "empty range"),
        (["explain", "--store", str(tmp_path)], "not a nodesleuth store"),
        (["dump", "--store", str(tmp_path / "nope")], "no such store directory"),
    ]
    newer = str(tmp_path / "newer")
    os.makedirs(newer)
    with open(os.path.join(newer, "nodesleuth-store.json"), "w") as f:
        json.dump({"schema": 99, "written_by": "nodesleuth 9.0"}, f)
    cases.append((["dump", "--store", newer], "newer nodesleuth"))
    for args, text in cases:
        p = nodesleuth(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert text in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert "Traceback" not in p.stderr


@needs_root
def test_record_into_a_store_it_may_not_write(tmp_path):
    """Root without CAP_DAC_OVERRIDE (as in a locked-down pod) and a read-only directory."""
    d = tmp_path / "ro"
    d.mkdir()
    os.chmod(d, 0o555)
    p = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-m",
                        "nodesleuth", "record", "--store", str(d / "st"), "--duration", "1s", "--quiet"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "cannot write the store: Permission denied" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_unreadable_segments_are_never_health(tmp_path):
    """A store whose segments cannot be read: explain says so and exits 2, never 'no incidents'."""
    d = str(tmp_path / "st")
    shutil.copytree(os.path.join(os.path.dirname(__file__), "golden", "store-v1"), d)
    for seg in glob.glob(os.path.join(d, "ticks", "*.seg")):
        with open(seg, "r+b") as f:
            f.seek(40)
            f.write(b"\xff" * 64)  # the dictionary and the first data frames
    p = nodesleuth("explain", "--store", d, "--json")
    assert p.returncode == 2, p.stderr
    doc = json.loads(p.stdout)
    assert doc["complete"] is False and doc["problems"]
    assert "warning" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    t = nodesleuth("explain", "--store", d)
    assert t.returncode == 2 and "no incidents in the data read" not in t.stdout


@pytest.mark.slow
@needs_root
def test_full_disk_keeps_recording_and_never_writes_half_a_frame(tmp_path):
    """The store on a tmpfs far too small for it: record keeps running, drops oldest segments, skips
    what does not fit, says so once a minute, exits 0; what is on disk reads back without damage."""
    mnt = str(tmp_path / "small")
    os.makedirs(mnt)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "nodesleuth-test-full", mnt], check=True)
    try:
        st = os.statvfs(mnt)
        with open(os.path.join(mnt, "ballast"), "wb") as f:  # leave room for a few seconds only
            # 128 KB: a second of a busy host's ticks (hundreds of processes) is several KB; with 64 KB a fresh
            # 2-CPU host kept only its 10 s rollups through the minute (old code and new alike)
            f.write(b"b" * (st.f_bavail * st.f_frsize - 128 * 1024))
        store = os.path.join(mnt, "st")
        p = nodesleuth("record", "--store", store, "--segment", "2s", "--duration", "65s", "--quiet",
                       "--max-size", "100M", timeout=200)
        assert p.returncode == 0, p.stderr
        warn = [ln for ln in p.stderr.splitlines() if "disk full" in ln]
        assert 1 <= len(warn) <= 2, p.stderr  # once a minute, not once a second
        assert "Traceback" not in p.stderr
        out = nodesleuth("dump", "--store", store, "--format", "csv")
        assert out.returncode == 0, out.stderr  # no damaged or half-written frame
        rows = [json.loads(x) for x in nodesleuth("dump", "--store", store, "--format", "json").stdout.splitlines()]
        assert len(rows) >= 5 and time.time() - rows[-1]["time"] < 10  # a rolling window, up to the end
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


@pytest.mark.slow
@needs_root
def test_slow_fsync_delays_durability_not_the_1hz_loop(tmp_path):
    """The store on a disk whose writes are throttled (blkio throttle on a loop device): every fsync
    takes seconds (1 KB/s). The recorder keeps running, says so once, skips the seconds a blocked
    write cost (never bunches them up), resumes, and leaves no damaged frame."""
    img = str(tmp_path / "slow.img")
    mnt = str(tmp_path / "slow")
    # the disk's writes throttled by the io controller of whichever hierarchy this host has: v1 blkio
    # (blkio.throttle.write_bps_device) or v2 io (io.max wbps, the io controller handed down to it)
    v1 = os.path.isdir("/sys/fs/cgroup/blkio")
    base = "/sys/fs/cgroup/blkio" if v1 else "/sys/fs/cgroup"
    cg = os.path.join(base, f"nodesleuth-test-slow-{os.getpid()}")
    if not v1 and "io" not in open("/sys/fs/cgroup/cgroup.controllers").read().split():
        from conftest import missing

        missing("no io controller on either cgroup hierarchy to throttle a disk with")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    dev = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(mnt)
    try:
        subprocess.run(["mkfs.ext4", "-q", dev], check=True)
        subprocess.run(["mount", dev, mnt], check=True)
        majmin = subprocess.run(["lsblk", "-no", "MAJ:MIN", dev], capture_output=True, text=True).stdout.strip()
        if not v1:
            with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                f.write("+io")
        os.makedirs(cg)
        with open(os.path.join(cg, "blkio.throttle.write_bps_device" if v1 else "io.max"), "w") as f:
            f.write(f"{majmin} 1024" if v1 else f"{majmin} wbps=1024")
        store = os.path.join(mnt, "st")
        start = time.time()
        p = subprocess.run(["sh", "-c", f"echo $$ > {cg}/cgroup.procs && exec {sys.executable} -m nodesleuth record "
                            f"--store {store} --duration 14s --quiet"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert "fsync(s) took over a second" in p.stderr, p.stderr
        r = StoreReader(store)
        times = [t for t, _ in r.read("ticks")]
        assert r.problems == []
        assert len(times) >= 5 and times[-1] >= start + 10, times  # it resumed and went on to the end
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= 0.9, gaps  # skipped, never bunched up
    finally:
        subprocess.run(["umount", mnt], check=False)
        subprocess.run(["losetup", "-d", dev], check=False)
        try:
            os.rmdir(cg)
        except OSError:
            pass


def test_sigterm_ends_the_process_within_its_grace_even_when_clean_up_hangs():
    """SIGTERM unwinds (clean-up runs), but a clean-up that never ends (here an exit handler that sleeps
    an hour, as a probe thread stuck in the kernel would) does not hold the process past EXIT_GRACE: the
    kubelet would SIGKILL it at 30 s and a unit's stop would hang."""
    from nodesleuth.cli.common import EXIT_GRACE

    code = ("import atexit, os, signal, time\n"
            "from nodesleuth.cli.common import clean_up_on_term\n"
            "clean_up_on_term()\n"
            "atexit.register(time.sleep, 3600)\n"
            "print('ready', flush=True)\n"
            "time.sleep(3600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(EXIT_GRACE + 30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 128 + signal.SIGTERM
    assert EXIT_GRACE - 1 <= took, took  # the clean-up had its time: it was not cut short


def test_exporter_answers_sigterm_whichever_thread_the_kernel_gives_it(tmp_path):
    """A process-directed signal may land on any thread; Python runs handlers on the main thread only,
    and the exporter's main thread slept in a 60 s select: SIGTERM on another thread went unanswered until
    the kubelet's SIGKILL (137 in CI). kill(TID) of a non-leader thread makes the kernel try that thread
    first: every thread in turn gets one, in a fresh exporter each time."""
    import socket
    import urllib.request

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    tried = 0
    for k in range(3):
        port = free_port()
        p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "exporter", "--listen", f"127.0.0.1:{port}",
                              "--state-dir", str(tmp_path / "state"), "--root", "/"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
                    break
                except OSError:
                    assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.poll() else "slow"
                    time.sleep(0.3)
            others = sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task") if int(t) != p.pid)
            if k >= len(others):
                break
            os.kill(others[k], signal.SIGTERM)
            tried += 1
            rc = p.wait(30)  # the kubelet's default grace period: killed after it, the test fails here
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert rc == 128 + signal.SIGTERM, (k, rc, p.stderr.read())
    assert tried >= 2  # the sampler and HTTP threads at least
