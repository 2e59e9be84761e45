"""`nodesleuth cut`: a range of a real recording as a small store that explain, dump and the web read
elsewhere: a fresh process, another working directory, the original out of reach."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import BUSY, needs_root, nodesleuth, wait_ticks
from nodesleuth.store.store import StoreReader

ENA = [  # ENA 2.11 lines, verbatim format of amzn-drivers ena_netdev.c (tests/data/kernel-log corpus)
    (4, "ena 0000:00:05.0 ens5: TX q 3 is paused for too long (threshold 5000000). Time since last napi "
        "6596000 usec. napi scheduled: 1"),
    (6, "ena 0000:00:05.0: Device reset completed successfully, Driver info: Elastic Network Adapter (ENA) v2.11.0g"),
]
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _kmsg(path: str, lines, seq: int) -> int:
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    with open(path, "a") as f:
        for level, msg in lines:
            f.write(f"{level},{seq},{usec},-;{msg}\n")
            seq += 1
    return seq


def _diff(a, b, path="") -> list[str]:
    """Where two JSON documents differ, path by path (an assertion's message that names the field)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_cut_of_a_real_recording_explains_the_same_elsewhere(tmp_path):
    store, kmsg = str(tmp_path / "st"), str(tmp_path / "kmsg")
    with open(kmsg, "w") as f:
        f.write(f"6,0,{int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)},-;Linux version (test kernel log)\n")
    rec = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--quiet", "--kmsg", kmsg,
                            "--duration", "26s", "--profile", "--units-every", "2"], stderr=subprocess.PIPE)
    loop = None
    try:
        wait_ticks(store, rec)  # a loaded host takes seconds to start it
        time.sleep(5)
        loop = subprocess.Popen([sys.executable, "-c", BUSY, "1", "ns-cutloop"])
        time.sleep(6)
        reset_at = time.time()
        _kmsg(kmsg, ENA, 1)
        time.sleep(4)
        loop.kill()
        rec.wait(timeout=120)
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()
        if rec.poll() is None:
            rec.kill()
    assert rec.returncode == 0, rec.stderr.read().decode()[-400:]
    t0, t1 = reset_at - 12, reset_at + 6
    out = str(tmp_path / "cut")
    p = nodesleuth("cut", "--store", store, "--from", str(t0), "--to", str(t1), out)
    assert p.returncode == 0, p.stderr
    assert "MB (" in p.stderr and "ticks" in p.stderr
    meta = json.load(open(os.path.join(out, "nodesleuth-store.json")))
    assert meta["cut"]["from"] == t0 and meta["cut"]["to"] == t1 and meta["cut"]["source"] == os.path.abspath(store)
    # the cut holds what explain reads for the range: its 300 s margin reaches past this 26 s recording
    span = StoreReader(store).span()
    assert meta["cut"]["reach"][0] <= span[0] and meta["cut"]["reach"][1] >= span[1], (meta["cut"], span)
    assert "s before" in p.stderr and "s after" in p.stderr
    got = meta["cut"]["records"]
    assert got["ticks"] >= 12 and got["ticks10s"] >= 1 and got.get("profile", 0) >= 1, got
    # what the original says about the range, before it goes out of reach
    want_dump = nodesleuth("dump", "--store", store, "--from", str(t0), "--to", str(t1))
    want = nodesleuth("explain", "--store", store, "--from", str(t0), "--to", str(t1), "--json")
    want_flame = nodesleuth("flame", "--store", store, "--from", str(t0), "--to", str(t1), "--format", "folded")
    assert want.returncode == 0 and want_dump.returncode == 0, (want.stderr, want_dump.stderr)
    # elsewhere: the cut copied to another directory, the original renamed away and unreadable
    there = tmp_path / "elsewhere"
    there.mkdir()
    copy = str(there / "incident")
    shutil.copytree(out, copy)
    hidden = str(tmp_path / "hidden")
    os.rename(store, hidden)
    os.chmod(hidden, 0)
    try:
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": SRC, "HOME": str(there)}
        run = lambda *a: subprocess.run([sys.executable, "-m", "nodesleuth", *a], cwd=str(there), env=env,  # noqa: E731
                                        capture_output=True, text=True, timeout=120)
        ex = run("explain", "--store", "incident", "--json")
        assert ex.returncode == 0, ex.stderr
        mine, theirs = json.loads(ex.stdout), json.loads(want.stdout)
        assert any(n.startswith("a cut: its range") for n in mine["notes"]), mine["notes"]
        nic = [i for i in mine["incidents"] if i["kind"] == "nic_reset"]
        assert nic and abs(nic[0]["time"] - reset_at) < 5, mine["incidents"]
        for doc in (mine, theirs):
            doc.pop("store")
        assert len(mine["incidents"]) == len(theirs["incidents"]), (mine["incidents"], theirs["incidents"])
        for a, b in zip(mine["incidents"], theirs["incidents"]):
            assert a == b, _diff(a, b)
        dump = run("dump", "--store", "incident", "--from", str(t0), "--to", str(t1))
        assert dump.returncode == 0 and dump.stdout == want_dump.stdout
        assert any(json.loads(x)["events"] for x in dump.stdout.splitlines())  # the kernel-log lines came along
        assert any(p["comm"] == "ns-cutloop" for x in dump.stdout.splitlines() for p in json.loads(x)["procs"])
        flame = run("flame", "--store", "incident", "--from", str(t0), "--to", str(t1), "--format", "folded")
        assert flame.returncode == 0 and sorted(flame.stdout.splitlines()) == sorted(want_flame.stdout.splitlines())
        assert "ns-cutloop" in flame.stdout
        from nodesleuth.web.server import create_app

        app = create_app(os.path.join(str(there), "incident"))
        c = app.test_client()
        tl = c.get(f"/api/timeline?from={t0}&to={t1}").get_json()
        assert tl["resolution"] == 1 and tl["tier"] == "1 s ticks" and tl["values"]
    finally:
        os.chmod(hidden, 0o755)
    assert not StoreReader(copy).problems


def test_cut_refuses_a_non_empty_target_and_leaves_nothing_half_written(tmp_path):
    src = str(tmp_path / "st")
    p = nodesleuth("record", "--store", src, "--duration", "3s", "--quiet")
    assert p.returncode == 0, p.stderr
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("mine")
    r = nodesleuth("cut", "--store", src, "--from", "1h ago", "--to", "now", str(out))
    assert r.returncode == 2 and "not empty" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert os.listdir(out) == ["x"]
    assert not [n for n in os.listdir(tmp_path) if ".part-" in n]
    r = nodesleuth("cut", "--store", str(tmp_path / "nope"), "--from", "1h ago", "--to", "now", str(tmp_path / "o2"))
    assert r.returncode == 2 and "no such store" in r.stderr
