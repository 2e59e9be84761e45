"""softnet_stat: real files of every kernel generation (9/10/11/13/15 columns, tests/data/net/README.md),
the exporter against the real Debian prometheus-node-exporter on the same files, a real flood over a
veth pair steered to one CPU, and a hot core's finding that says what the core left undone there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import Busy, check_json, finding, free_port, needs_root, nodesleuth, recording, retry_when_busy
from nodesleuth.collect.softnet import SoftnetReader
from nodesleuth.model.records import netstat_metric
from nodesleuth.model.errors import InputError
from nodesleuth.model.procfs import parse_softnet
from nodesleuth.node.pread import Preader
from nodesleuth.node.root import Root


HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.join(HERE, "data", "net")
SNAP0 = os.path.join(HERE, "data", "proctrees", "here-20261203", "snap0")  # a whole /proc tree of this VM
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"


def read(name: str) -> str:
    with open(os.path.join(D, "softnet_stat", name)) as f:
        return f.read()


# file: (columns per row, CPUs, cells checked by hand against the file's hex text)
FILES = {
    "insights-core-test-rhel5-9col.txt": ([9], [0], {0: {"processed": 0x6dcad223, "dropped": 0, "time_squeeze": 1}}),
    "insights-core-test-rhel67-10col.txt": ([10] * 4, [0, 1, 2, 3], {1: {"dropped": 0xff, "time_squeeze": 2,
                                                                          "received_rps": 6}}),
    "rcbops-rpc-maas-issue677-10col-excerpt.txt": ([10] * 3, [0, 1, 2], {0: {"processed": 0x0073d76b,
                                                                              "time_squeeze": 0x49ae}}),
    "packagecloud-blog-3.13-10col-excerpt.txt": ([10] * 4, [0, 1, 2, 3], {2: {"time_squeeze": 3}}),
    "insights-core-test-rhel8-11col.txt": ([11], [0], {0: {"dropped": 0xfe, "time_squeeze": 0x12,
                                                           "flow_limit_count": 1}}),
    "node_exporter-fixture-11col.txt": ([11] * 4, [0, 1, 2, 3], {1: {"processed": 0xdfb82, "dropped": 0x29,
                                                                     "time_squeeze": 0xa}}),
    "procfs-fixture-mixed-widths.txt": ([13, 13, 11, 9, 10], [0, 1, 2, 3, 4],
                                        {1: {"time_squeeze": 0xb1, "backlog_len": 0xdc},
                                         2: {"time_squeeze": 0xf0000769, "flow_limit_count": 2},
                                         3: {"processed": 0x01663fb2, "time_squeeze": 0x109a4}}),
    "GENERATED-13col-cpu2-offline.txt": ([13] * 3, [0, 1, 3], {3: {"processed": 0xd0, "dropped": 7}}),
    "host-6.18.44-2cpu.txt": ([15] * 2, [0, 1], {1: {"processed": 0x6008, "backlog_len": 0}}),
    "host-6.18.44-2cpu-after-floods.txt": ([15] * 2, [0, 1], {0: {"processed": 0x00e22474, "dropped": 0x21bf4,
                                                                  "time_squeeze": 0x4b843, "received_rps": 0xb71ac},
                                                              1: {"time_squeeze": 1}}),
}
# the columns a row of each width carries (net/core/net-procfs.c softnet_seq_show per generation)
KEYS = {9: {"processed", "dropped", "time_squeeze"}, 10: {"processed", "dropped", "time_squeeze", "received_rps"},
        11: {"processed", "dropped", "time_squeeze", "received_rps", "flow_limit_count"}}
KEYS[13] = KEYS[15] = KEYS[11] | {"backlog_len"}


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_kernel_generation_parses_as_printed(name):
    widths, cpus, cells = FILES[name]
    text = read(name)
    assert [len(r.split()) for r in text.splitlines() if r.strip()] == widths  # the sample is what it says
    assert os.path.exists(os.path.join(D, "softnet_stat", name + ".source"))
    rows = parse_softnet(text, None)
    assert sorted(rows) == cpus
    for cpu, w in zip(cpus, widths):
        assert set(rows[cpu]) == KEYS[w], (cpu, w, rows[cpu])
    for cpu, want in cells.items():
        assert {k: rows[cpu][k] for k in want} == want


def test_not_a_kernels_file_is_refused():
    """procfs's broken fixture (4 columns) and insights-core's "RHEL 9" one, whose last row repeats the
    CPU index 0: each is one InputError naming the file, not a silent overwrite."""
    with pytest.raises(InputError, match="row 1 has 4 columns"):
        parse_softnet(read("procfs-fixture-broken-4col.txt"), None, "x/softnet_stat")
    with pytest.raises(InputError, match="CPU 0 appears twice"):
        parse_softnet(read("insights-core-test-rhel9-13col.txt"), None, "x/softnet_stat")


def test_rows_without_an_index_are_the_online_cpus():
    """Before 5.10 the file has no CPU column and skips offline CPUs: row i is the i-th online CPU."""
    rows = parse_softnet(read("insights-core-test-rhel67-10col.txt"), [0, 1, 3, 4])
    assert sorted(rows) == [0, 1, 3, 4] and rows[3]["time_squeeze"] == 3 and rows[4]["received_rps"] == 8


def test_node_exporter_fixture_equals_its_upstream_output():
    """node_exporter's own expected output (1.12, collector/fixtures/e2e-output.txt) for its fixture."""
    with open(os.path.join(D, "upstream-node_exporter-e2e-output-softnet-netstat.txt")) as f:
        fams = {fam.name: fam for fam in text_string_to_metric_families(f.read())}
    rows = parse_softnet(read("node_exporter-fixture-11col.txt"), None)
    for ours, theirs in (("processed", "node_softnet_processed"), ("dropped", "node_softnet_dropped"),
                         ("time_squeeze", "node_softnet_times_squeezed"), ("received_rps", "node_softnet_received_rps"),
                         ("flow_limit_count", "node_softnet_flow_limit_count")):
        got = {int(s.labels["cpu"]): s.value for s in fams[theirs].samples}
        assert got == {c: float(r[ours]) for c, r in rows.items()}, ours


def _tree(path, softnet: str, online: str) -> str:
    os.makedirs(os.path.join(path, "proc", "net"), exist_ok=True)
    os.makedirs(os.path.join(path, "sys", "devices", "system", "cpu"), exist_ok=True)
    with open(os.path.join(path, "proc", "net", "softnet_stat"), "w") as f:
        f.write(softnet)
    with open(os.path.join(path, "sys", "devices", "system", "cpu", "online"), "w") as f:
        f.write(online + "\n")
    return str(path)


def test_collector_deltas_are_modulo_2_32_and_follow_the_online_cpus(tmp_path):
    """The counters are u32: a wrap between two reads is a small delta, not a reset; with no CPU
    column the rows are the online CPUs (here 0 and 2)."""
    row = "{:08x} {:08x} {:08x} 00000000 00000000 00000000 00000000 00000000 00000000 {:08x}\n"
    root = _tree(tmp_path, row.format(0xfffffff0, 5, 1, 9) + row.format(100, 0, 0, 0), "0,2")
    r = SoftnetReader(Root(root), Preader(False))
    r.prime()
    new = tmp_path / "new"
    new.write_text(row.format(0x10, 5, 4, 9) + row.format(150, 2, 0, 3))
    os.replace(new, os.path.join(root, "proc", "net", "softnet_stat"))
    s = r.read(1.0)
    assert s.cpus == [0, 2]
    assert s.processed == [0x20, 50] and s.time_squeeze == [3, 0] and s.dropped == [0, 2]
    assert s.received_rps == [0, 3] and s.flow_limit_count is None and s.backlog_len is None
    assert s.totals["processed"] == [0x10, 150]


# --- the exporter against the real node_exporter -------------------------------------------------

def _scrape(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _serve(cmd: list[str], port: int, want: str, timeout: float = 60) -> dict:
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                got = _scrape(port)
                if want in got:
                    return got
            except OSError:
                pass
            if p.poll() is not None:
                raise AssertionError(f"{cmd[0]} exited {p.returncode}: {p.stderr.read().decode()[-300:]}")
            time.sleep(0.2)
        raise AssertionError(f"{want} not served in {timeout:.0f} s")
    finally:
        p.kill()
        p.wait()


# tree: (softnet_stat, netstat and snmp sample, online CPUs)
TREES = {
    "host-15col": ("host-6.18.44-2cpu-after-floods.txt", "host-6.18.44.txt", "0-1"),
    "node_exporter-11col": ("node_exporter-fixture-11col.txt", "node_exporter-fixture.txt", "0-3"),
    "procfs-mixed": ("procfs-fixture-mixed-widths.txt", "procfs-fixture-26231.txt", "0-4"),
    "rhel5-9col": ("insights-core-test-rhel5-9col.txt", "below-test.txt", "0"),
    "rhel7-10col-real": ("rcbops-rpc-maas-issue677-10col-excerpt.txt", "below-test.txt", "0-2"),
    "rhel8-11col": ("insights-core-test-rhel8-11col.txt", "node_exporter-fixture.txt", "0"),
    "cpu2-offline-13col": ("GENERATED-13col-cpu2-offline.txt", "host-6.18.44.txt", "0-1,3"),
}


@pytest.mark.parametrize("name", sorted(TREES))
def test_exporter_agrees_with_node_exporter(name, tmp_path):
    """The same /proc tree served by Debian's node_exporter (1.5.0: softnet and netstat collectors only)
    and by `nodesleuth exporter`: processed, dropped and times_squeezed per cpu and the TCP counters
    have the same values under the same name suffix. 1.5.0 has only those three softnet series; its
    netstat ones are untyped (node_netstat_Tcp_RetransSegs), ours counters (..._total{netns=""})."""
    from conftest import missing

    if not os.path.exists(NODE_EXPORTER):
        missing("Debian prometheus-node-exporter not installed (scripts/setup-tests.sh installs it)")
    softnet, net, online = TREES[name]
    tree = tmp_path / "tree"
    shutil.copytree(SNAP0, tree, symlinks=True)
    _tree(tree, read(softnet), online)
    for f in ("netstat", "snmp"):
        shutil.copy(os.path.join(D, f, net), tree / "proc" / "net" / f)
    ne_port, ns_port = free_port(), free_port()
    theirs = _serve([NODE_EXPORTER, "--collector.disable-defaults", "--collector.softnet", "--collector.netstat",
                     "--collector.netstat.fields=^(Tcp|TcpExt)_.*", f"--path.procfs={tree}/proc",
                     f"--web.listen-address=127.0.0.1:{ne_port}"], ne_port, "node_softnet_processed_total")
    ours = _serve([sys.executable, "-m", "nodesleuth", "exporter", "--root", str(tree), "--interval", "0.5",
                   "--listen", f"127.0.0.1:{ns_port}"], ns_port, "nodesleuth_netstat_tcp_retrans_segs_total")
    assert theirs["node_scrape_collector_success"][(("collector", "softnet"),)] == 1.0
    rows = parse_softnet(read(softnet), None)
    for suffix in ("processed_total", "dropped_total", "times_squeezed_total"):
        t = {dict(k)["cpu"]: v for k, v in theirs[f"node_softnet_{suffix}"].items()}
        o = {dict(k)["cpu"]: v for k, v in ours[f"nodesleuth_softnet_{suffix}"].items()}
        if name == "cpu2-offline-13col":
            # the kernel skips offline CPU 2 and prints its index in column 13: node_exporter 1.5.0 labels
            # rows by their number (procfs before 0.10 ignored the index), so CPU 3's counters come out as
            # cpu="2"; nodesleuth reads the index (and, on older kernels, /sys/devices/system/cpu/online)
            assert sorted(o) == ["0", "1", "3"] and sorted(t) == ["0", "1", "2"], (o, t)
            assert [o[c] for c in ("0", "1", "3")] == [t[c] for c in ("0", "1", "2")], suffix
            assert o["3"] == t["2"] == {"processed_total": 0xd0, "dropped_total": 7,
                                         "times_squeezed_total": 3}[suffix]
        else:
            assert o == t, (suffix, o, t)
            assert len(o) == len(rows)
    tcp = [n for n in theirs if n.startswith(("node_netstat_Tcp_", "node_netstat_TcpExt_"))]
    # the same counter under our snake_case name (records.netstat_metric: promtool lints node_exporter's camelCase)
    mine = {n: netstat_metric(n[len("node_netstat_"):]) + "_total" for n in tcp}
    both = [n for n in tcp if mine[n] in ours]
    assert len(both) >= 12, both  # all 14 but TCPRcvQDrop / TCPBacklogDrop where a fixture lacks them
    for n in both:
        assert ours[mine[n]][(("netns", ""),)] == theirs[n][()], n


# --- a real flood, steered to one CPU ---------------------------------------------------------------

def _kernel_softnet() -> dict:
    with open("/proc/net/softnet_stat") as f:
        return parse_softnet(f.read(), None)


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@retry_when_busy()
def test_flood_over_veth_steered_to_one_cpu_squeezes_it_there(tmp_path):
    """A UDP flood between two network namespaces, its receive processing steered by RPS to CPU 1,
    with net.core.netdev_budget lowered to 2 (and netdev_max_backlog to 64; both restored): CPU 1's
    time_squeeze rises, the recording's per-second figures on CPU 1 add up to the kernel's own delta
    read around it, and CPU 0 stays far below."""
    from nodesleuth.lab.netvictim import NetLab

    store = str(tmp_path / "store")
    before_budget = open("/proc/sys/net/core/netdev_budget").read()
    with NetLab() as lab:
        lab.rps(1)
        lab.sysctl("net.core.netdev_budget", 2)
        lab.sysctl("net.core.netdev_max_backlog", 64)
        k0 = _kernel_softnet()
        with recording(store, "9s") as rec:
            time.sleep(2.5)
            flood, st = lab.flood(0, 4.0, cpu=0)
            flood.wait(timeout=60)
            sent = lab.wait_status(st, key="done")["sent"]
            assert rec.wait(timeout=120) == 0, rec.stderr.read().decode()[-500:]
        k1 = _kernel_softnet()
    assert lab.left() == [] and open("/proc/sys/net/core/netdev_budget").read() == before_budget
    kernel = {c: (k1[c]["time_squeeze"] - k0[c]["time_squeeze"]) % (1 << 32) for c in k1}
    drops = {c: (k1[c]["dropped"] - k0[c]["dropped"]) % (1 << 32) for c in k1}
    d = nodesleuth("dump", "--store", store, "--format", "json")
    ticks = [json.loads(x) for x in d.stdout.splitlines()]
    rec_sq = {c: sum(t["softnet"]["time_squeeze"][t["softnet"]["cpus"].index(c)] for t in ticks if t["softnet"])
              for c in (0, 1)}
    print(f"flood: {sent} datagrams in 4 s from CPU 0; kernel time_squeeze {kernel}, dropped {drops}; "
          f"recorded time_squeeze {rec_sq} over {len(ticks)} s")
    if kernel[1] < 100 and sent < 20000:
        # a loaded host sends too little in 4 s to overrun even a 2-packet budget often
        raise Busy(f"the flood sent only {sent} datagrams in 4 s: kernel time_squeeze {kernel}")
    assert kernel[1] >= 100, (sent, kernel)
    assert kernel[1] >= 10 * max(1, kernel[0]), kernel  # the squeezes are where RPS sent the packets
    # the recording's seconds lie inside the kernel's window and the flood inside the recording
    assert 0.9 * kernel[1] <= rec_sq[1] <= kernel[1], (rec_sq, kernel)
    worst = max(ticks, key=lambda t: t["softnet"]["time_squeeze"][1] if t["softnet"] else -1)
    assert worst["softnet"]["time_squeeze"][1] > 0 and worst["softnet"]["processed"][1] > 0


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
@retry_when_busy()
def test_hot_core_finding_says_what_it_left_undone(busy_loop):
    """A spinner on CPU 1 and a steady flood whose receive processing RPS sends to CPU 1 (budget 2):
    check's hot-core finding for CPU 1 carries softnet_stat's squeezes and drops on CPU 1 in its
    window, with the numbers, and they are at most the kernel's own delta around the check. The hot
    core rule also needs CPU 0 quiet (< 60%): on a host too busy for that, no finding is the answer."""
    from nodesleuth.lab.netvictim import NetLab

    with NetLab() as lab:
        lab.rps(1)
        lab.sysctl("net.core.netdev_budget", 2)
        p = busy_loop(cpu=1, comm="ns-busyloop")
        try:
            k0 = _kernel_softnet()
            lab.flood(5000, 12.0, cpu=0)
            rc, doc = check_json("--seconds", "6", "--no-trace-churn")
            k1 = _kernel_softnet()
        finally:
            p.kill()
            p.wait()
    assert lab.left() == []
    kernel = (k1[1]["time_squeeze"] - k0[1]["time_squeeze"]) % (1 << 32)
    f = finding(doc, "hot_core", cpu=1)
    others = doc["cpus"]["0"]["busy"]
    print(f"CPU 0 {others}% busy; kernel time_squeeze on CPU 1 over the check {kernel}; finding: "
          f"{f and [e for e in f['evidence'] if 'softnet' in e]}")
    if f is None:
        assert others >= 50, ([x["title"] for x in doc["findings"]], others)
        raise Busy(f"CPU 0 averaged {others}%: a busy node, no hot core by the rule")
    sn = f["data"]["softnet"]
    if kernel < 20:  # the flood's sender (CPU 0) did not get the CPU to make the budget run out
        raise Busy(f"the flood made {kernel} squeezes on CPU 1 over the check (the rule's CPU 0 was {others}%)")
    assert sn["cpu"] == 1 and 0 < sn["time_squeeze"] <= kernel, (sn, kernel)
    line = next(e for e in f["evidence"] if e.startswith("softnet_stat on CPU 1"))
    assert f"{sn['time_squeeze']} time_squeeze" in line and f"{sn['dropped']} dropped" in line
    assert f["data"]["top"][0]["pid"] == p.pid
