"""Kernel-log floods: 60,000 lines in 3 s (link flaps, OOM-killer lines, `perf: interrupt took too long`, one ENA
`TX q N is paused` line in 1,000; benchmarks/kmsg_flood.py) written to /dev/kmsg while `record`, the exporter and
`check` read it, and appended to a file they follow with --kmsg. Each must keep ticking every second, account for
every record between the first and the last it saw (read, or dropped: the kernel's sequence numbers skipped it),
say what it dropped (check's notes and JSON, the recorder's stderr and store, the exporter's
nodesleuth_kernel_log_dropped_total), and either find each ENA line of the flood or have its sequence number in
a range it counted dropped. Timings are not asserted (benchmarks/results/kmsg_flood.json has them)."""

from __future__ import annotations

import json
import re
import time


from benchmarks.kmsg_flood import Consumers, devkmsg_unlimited, flood, mark, metrics, to_devkmsg, to_file
import pytest

from conftest import Busy, needs_root, nodesleuth, retry_when_busy

N = 60000
USEC = re.compile(r"Time since last napi (\d+) usec")


def _every_second(ticks: list[dict], t0: float, t1: float) -> None:
    """A tick in every 1 s slot from before the flood to after it: none skipped (a skipped slot is a gap of 2 s)."""
    times = [t["time"] for t in ticks]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] < t0 and times[-1] > t1, (times[0], t0, times[-1], t1)
    assert max(gaps) < 1.5, [round(g, 3) for g in gaps]


def _ena_found_or_dropped(events: list[dict], gaps: list[list[int]], ena: dict[int, int], s0: int, s1: int) -> int:
    """Every ENA line of the flood (index i, its napi usec) is an event read (its seq in (s0, s1)) or its sequence
    number falls in a range counted dropped. The flood's line i has seq s0 + 1 + i, give or take the lines other
    writers put into the kernel log meanwhile (`foreign`, from the markers' seq numbers). Returns how many were
    found."""
    foreign = (s1 - s0 - 1) - N
    assert foreign >= 0
    found = {}
    for e in events:
        m = USEC.search(e.get("message", ""))
        if m and s0 < e["seq"] < s1:
            found[int(m[1])] = e["seq"]
    for i, usec in ena.items():
        if usec in found:
            assert s0 + 1 + i <= found[usec] <= s0 + 1 + i + foreign, (i, found[usec], s0)
            continue
        lo, hi = s0 + 1 + i, s0 + 1 + i + foreign
        assert any(a <= hi and lo <= b for a, b in gaps), f"ENA line {i} (seq {lo}..{hi}) neither found nor dropped"
    return len(found)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@retry_when_busy(attempts=2, pause=10.0)
def test_devkmsg_flood_is_read_or_counted_by_record_exporter_and_check():
    """Whatever the machine's load, every record is read or counted dropped, and every second ticks. That the
    readers also keep up (read most of the flood, as its own thread lets them at a fraction of a CPU) needs the
    CPU they are allowed: when other jobs kept them from it, the attempt proves nothing and is retried."""
    lines, ena = flood(N)
    with devkmsg_unlimited():
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            c = Consumers(d, check_seconds=12)
            try:
                time.sleep(1)
                t0 = time.time()
                s0 = mark("nodesleuth-flood: begin")
                took = to_devkmsg(lines, 3.0)
                s1 = mark("nodesleuth-flood: end")
                t1 = time.time()
                time.sleep(3)  # the ticks after it
                got = c.stop()
            finally:
                c.kill()
    assert took <= 4.5, took  # 60,000 lines in (about) 3 s: a flood, as asked
    assert s1 - s0 - 1 >= N  # the kernel numbered every line of it

    # record: every second ticked through the flood; what it dropped is what its seq gaps say, said on stderr
    ticks = got["ticks"]
    _every_second(ticks, t0, t1)
    kl = [t["kernel_log"] for t in ticks if t.get("kernel_log")]
    read, dropped = sum(k["read"] for k in kl), sum(k["dropped"] for k in kl)
    gaps = [g for k in kl for g in (k["gaps"] or [])]
    assert dropped == sum(b - a + 1 for a, b in gaps)  # each dropped record is in a listed seq range
    if dropped:
        assert re.search(r"nodesleuth: warning: kernel log /dev/kmsg: \d+ record\(s\) dropped \(overwritten by the "
                         r"kernel before they could be read: a flood\)", got["record_stderr"]), got["record_stderr"]
    rec_events = [e for t in ticks for e in t["events"]]
    _ena_found_or_dropped(rec_events, gaps, ena, s0, s1)

    # check: its JSON accounts for every seq between the first and the last record it saw, across the flood
    doc = got["check"]
    k = doc["kernel_log"]
    assert k["first_seq"] <= s0 and k["last_seq"] >= s1, (k["first_seq"], k["last_seq"], s0, s1)
    assert k["read"] + k["dropped"] == k["last_seq"] - k["first_seq"] + 1
    assert k["gaps_total"] == len(k["gaps"]) and k["dropped"] == sum(b - a + 1 for a, b in k["gaps"])
    if k["dropped"]:
        assert any(n.startswith(f"kernel log /dev/kmsg: {k['dropped']} record(s) dropped, overwritten by the kernel")
                   for n in doc["notes"]), doc["notes"]
    nic = [e for f in doc["findings"] if f["kind"] == "nic_reset" for e in f["data"]["events"]]
    found = _ena_found_or_dropped(nic, k["gaps"], ena, s0, s1)

    # the exporter: its counters say the same kind of account
    m = got["metrics"]
    assert "nodesleuth_kernel_log_dropped_total" in m and m["nodesleuth_kernel_log_records_total"] > 0
    paused = m.get('nodesleuth_nic_kernel_events_total{device="eth0",reason="ENATxQueuePaused"}', 0)
    assert len(ena) - m["nodesleuth_kernel_log_dropped_total"] <= paused  # each ENA line: counted, or dropped

    # keeping up: read as it came (most of the flood), not one ring's worth a second, when the CPU was there
    shares = {"record": dropped / max(1, read + dropped), "check": k["dropped"] / max(1, k["read"] + k["dropped"]),
              "exporter": m["nodesleuth_kernel_log_dropped_total"] / max(1, m["nodesleuth_kernel_log_records_total"]
                                                                         + m["nodesleuth_kernel_log_dropped_total"])}
    if max(shares.values()) > 0.5:
        raise Busy("the readers could not get the CPU to keep up: dropped shares "
                   + ", ".join(f"{n} {v:.0%}" for n, v in shares.items()) + f" (ENA lines found by check: {found})")


def _file_flood(tmp_path):
    lines, ena = flood(N)
    path = str(tmp_path / "kmsg.txt")
    up = time.clock_gettime(time.CLOCK_MONOTONIC)
    with open(path, "w") as f:
        f.write(f"6,0,{int(up * 1e6)},-;nodesleuth-flood: file begins\n")
    return path, lines, ena


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
def test_followed_file_flood_is_read_whole_by_record_and_exporter(tmp_path):
    """A file gaining 60,000 lines in 3 s: nothing is lost (the rest of a bounded tick waits in the file), every
    second still ticks, and each ENA line of the flood is found by both."""
    path, lines, ena = _file_flood(tmp_path)
    c = Consumers(str(tmp_path), kmsg=path)
    try:
        t0 = time.time()
        to_file(path, lines, 3.0, first_seq=1)
        t1 = time.time()
        deadline = time.time() + 60
        while time.time() < deadline and metrics(c.port).get("nodesleuth_kernel_log_records_total", 0) < N + 1:
            time.sleep(0.5)
        time.sleep(2)
        got = c.stop()
    finally:
        c.kill()
    ticks = got["ticks"]
    _every_second(ticks, t0, t1)
    kl = [t["kernel_log"] for t in ticks if t.get("kernel_log")]
    assert sum(k["read"] for k in kl) == N + 1 and sum(k["dropped"] for k in kl) == 0
    assert kl[-1]["behind_bytes"] == 0  # caught up
    usecs = {int(USEC.search(e["message"])[1]) for t in ticks for e in t["events"] if USEC.search(e["message"])}
    assert usecs == set(ena.values())
    m = got["metrics"]
    assert m["nodesleuth_kernel_log_records_total"] == N + 1 and m["nodesleuth_kernel_log_dropped_total"] == 0
    assert m['nodesleuth_nic_kernel_events_total{device="eth0",reason="ENATxQueuePaused"}'] == len(ena)
    assert m["nodesleuth_kernel_log_behind_bytes"] == 0


def test_check_reads_a_flooded_file_whole(tmp_path):
    """check --kmsg of a file holding a 60,000-line flood: every line read (the ticks' bound leaves the rest for
    the read after the window), none dropped, each ENA line an event of the nic_reset finding."""
    path, lines, ena = _file_flood(tmp_path)
    to_file(path, lines, 0.0, first_seq=1)
    p = nodesleuth("check", "--kmsg", path, "--seconds", "2", "--no-trace-churn", "--no-probe", "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    k = doc["kernel_log"]
    assert (k["read"], k["dropped"], k["first_seq"], k["last_seq"]) == (N + 1, 0, 0, N)
    nic = [e for f in doc["findings"] if f["kind"] == "nic_reset" for e in f["data"]["events"]]
    assert {int(USEC.search(e["message"])[1]) for e in nic if USEC.search(e["message"])} == set(ena.values())
