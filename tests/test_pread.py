"""Kernel files kept open and re-read with pread (collect/pread.py) read what open+read reads: on
this machine's /proc (multi-page seq_files included) and on a fixture tree whose files are replaced."""

from __future__ import annotations

import os

from nodesleuth.node.pread import Preader

from conftest import missing


def _lines_and_keys(b: bytes) -> list[bytes]:
    return [ln.split(b":")[0] for ln in b.splitlines()]


def test_proc_files_read_the_same_as_open_read():
    r = Preader(live=True)
    try:
        for path, one in (("/proc/interrupts", False), ("/proc/meminfo", True), ("/proc/softirqs", True),
                          ("/proc/self/mountinfo", False), ("/proc/1/schedstat", True)):
            for _ in range(2):  # the second read is the pread of an open file
                got = r.read(path, one)
                with open(path, "rb") as f:
                    want = f.read()
                assert _lines_and_keys(got) == _lines_and_keys(want), path
        assert set(r.fds) >= {"/proc/interrupts", "/proc/meminfo"}
    finally:
        r.close()
    assert not r.fds


def test_a_large_seq_file_is_read_to_the_end(tmp_path):
    """/proc/self/maps hands out records a page at a time; a read must not stop at the first page."""
    import mmap

    maps = [mmap.mmap(-1, 4096 * (i % 3 + 1)) for i in range(400)]
    r = Preader(live=True)
    try:
        got = r.read("/proc/self/maps")
        with open("/proc/self/maps", "rb") as f:
            want = f.read()
        assert len(want) > 8192
        assert got.count(b"\n") == want.count(b"\n")
    finally:
        r.close()
        for m in maps:
            m.close()


def test_fixture_file_replaced_by_rename_is_reopened(tmp_path):
    p = str(tmp_path / "stat")
    with open(p, "w") as f:
        f.write("cpu  1 2 3 4\n")
    r = Preader(live=False)
    assert r.read(p) == b"cpu  1 2 3 4\n"
    with open(p + ".tmp", "w") as f:
        f.write("cpu  5 6 7 8\n")
    os.replace(p + ".tmp", p)
    assert r.read(p, True) == b"cpu  5 6 7 8\n"
    os.unlink(p)
    assert r.read_opt(p) is None
    r.close()


def test_per_tick_single_record_files_read_whole():
    """/proc/stat (single_open_size, ~100 lines on a big node), /proc/cgroups and the v2 root
    cgroup.stat are read by the recorder as one record each tick: every line, the same row names."""
    r = Preader(live=True)
    paths = ["/proc/stat", "/proc/cgroups"] + [p for p in ("/sys/fs/cgroup/cgroup.stat",) if os.path.exists(p)]
    try:
        for path in paths:
            for _ in range(2):
                got = r.read(path, True)
                with open(path, "rb") as f:
                    want = f.read()
                assert [ln.split()[0] for ln in got.splitlines()] == [ln.split()[0] for ln in want.splitlines()], path
                assert got.endswith(b"\n"), path
    finally:
        r.close()


def test_nic_irq_lines_from_sysfs_equal_proc_interrupts():
    """collect/irqs.py reads the NIC's lines from /sys/kernel/irq/N/per_cpu_count between full reads of
    /proc/interrupts: on this machine's NIC (virtio_net here) the same lines, and counts that lie between
    those of a full read just before and just after (they are cumulative; the NIC may be busy)."""

    from nodesleuth.collect.irqs import IrqReader
    from nodesleuth.model.procfs import parse_interrupts
    from nodesleuth.node.root import Root

    r = Preader(live=True)
    ir = IrqReader(Root("/"), r)
    try:
        first = ir.read()  # the full read, which finds the per-line files
        if not ir.keys or not first:
            missing("no NIC IRQ lines in /proc/interrupts here")
        assert ir.lines, "/sys/kernel/irq/N/per_cpu_count not used"
        before = parse_interrupts(r.read("/proc/interrupts").decode(), ir.keys)
        got = ir.read()  # from sysfs
        after = parse_interrupts(r.read("/proc/interrupts").decode(), ir.keys)
        assert set(got) == set(before) == set(after)
        for k, v in got.items():
            assert len(v) == len(before[k])
            assert all(b <= g <= a for b, g, a in zip(before[k], v, after[k])), k
    finally:
        r.close()


def test_fixture_irq_sysfs_is_shaped_like_this_kernels(tmp_path):
    """The 96-CPU fixture (fixtures/trees.py) has /sys/kernel/irq/N/per_cpu_count as a real kernel does
    (this machine's: "2,0\\n", every possible CPU comma-separated), kept equal to its animated
    /proc/interrupts, so the recorder reads it as on a real node."""
    import glob

    from fixtures.trees import Animator, make_v1_node
    from nodesleuth.collect.irqs import IrqReader
    from nodesleuth.model.procfs import parse_interrupts
    from nodesleuth.node.root import Root

    real = sorted(glob.glob("/sys/kernel/irq/*/per_cpu_count"))
    assert real, "this kernel has no /sys/kernel/irq"
    with open(real[0]) as f:
        line = f.read()
    assert line.endswith("\n") and all(x.isdigit() for x in line[:-1].split(","))
    root = make_v1_node(str(tmp_path / "n"), ncpu=16, tracked=100, live=4, nprocs=10)
    anim = Animator(root, busy_cpu=3)
    r = Preader(live=False)
    ir = IrqReader(Root(root), r)
    try:
        ir.read()  # the full read, which finds the per-line files
        assert len(ir.lines) == 8, ir.lines  # eth0-Tx-Rx-0..7
        for _ in range(2):
            anim.step()
            got = ir.read()
            with open(f"{root}/proc/interrupts") as f:
                want = parse_interrupts(f.read(), ir.keys)
            assert got == want and any(sum(v) > 0 for v in got.values())
    finally:
        r.close()


def test_softirqs_parsed_at_once_equal_row_by_row():
    """/proc/softirqs is parsed in one go when every row has the header's count of CPUs: the same table
    as row by row on real files (this VM's two snapshots and this machine's live file, prometheus/procfs'
    and node_exporter's fixtures: tests/data/proctrees/README.md) and on the 96-CPU fixture; a row with a
    missing count or a damaged one still reads as before (first n kept / an error naming the file)."""
    import glob
    import random

    import pytest

    from fixtures.trees import softirqs
    from nodesleuth.model.procfs import parse_softirqs
    from nodesleuth.model.errors import InputError

    texts = []
    for p in sorted(glob.glob(os.path.join(os.path.dirname(__file__), "data/proctrees/**/proc/softirqs"),
                              recursive=True)) + ["/proc/softirqs"]:
        with open(p) as f:
            texts.append(f.read())
    assert len(texts) == 5
    texts.append(softirqs(96, random.Random(3)))
    from nodesleuth.model import procfs as irqs

    for t, at_once in [(t, k) for t in texts for k in (irqs.AT_ONCE, 1)]:  # as shipped (8 CPUs), and always
        irqs.AT_ONCE, keep = at_once, irqs.AT_ONCE
        try:
            got = parse_softirqs(t)
        finally:
            irqs.AT_ONCE = keep
        assert got == parse_softirqs(t, fast=False) and len(got) >= 10
        assert all(type(v) is int for row in got.values() for v in row)
    big = texts[-1].splitlines()
    k = next(i for i, ln in enumerate(big) if "NET_RX:" in ln)
    short = "\n".join(big[:k] + [big[k].rsplit(None, 1)[0]] + big[k + 1:]) + "\n"  # NET_RX lost its last CPU
    assert parse_softirqs(short) == parse_softirqs(short, fast=False)
    assert len(parse_softirqs(short)["NET_RX"]) == 95
    bad = "\n".join(big[:2] + [big[2].replace(big[2].split()[5], "12x", 1)] + big[3:]) + "\n"
    with pytest.raises(InputError, match="/proc/softirqs: malformed line"):
        parse_softirqs(bad)
