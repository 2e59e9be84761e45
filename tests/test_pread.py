"""Kernel files kept open and re-read with pread (collect/pread.py) read what open+read reads: on
this machine's /proc (multi-page seq_files included) and on a fixture tree whose files are replaced."""

from __future__ import annotations

import os

from nodesleuth.collect.pread import Preader


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
    import pytest

    from nodesleuth.collect.irqs import IrqReader, parse_interrupts
    from nodesleuth.collect.root import Root

    r = Preader(live=True)
    ir = IrqReader(Root("/"), r)
    try:
        first = ir.read()[1]  # the full read, which finds the per-line files
        if not ir.keys or not first:
            pytest.skip("no NIC IRQ lines in /proc/interrupts here")
        assert ir.lines, "/sys/kernel/irq/N/per_cpu_count not used"
        before = parse_interrupts(r.read("/proc/interrupts").decode(), ir.keys)
        got = ir.read()[1]  # from sysfs
        after = parse_interrupts(r.read("/proc/interrupts").decode(), ir.keys)
        assert set(got) == set(before) == set(after)
        for k, v in got.items():
            assert len(v) == len(before[k])
            assert all(b <= g <= a for b, g, a in zip(before[k], v, after[k])), k
    finally:
        r.close()
