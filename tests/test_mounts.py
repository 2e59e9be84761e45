"""One mountinfo parser (model/procfs.py) for every reader of a mount table, on real lines: this
development machine's /proc/self/mountinfo (kernel 6.18, 2026-12-06), /dev/shm mounted twice as it is
here, and a tmpfs mounted read-only at a path with a space (`mount -t tmpfs -o size=1m,ro ci-rec
"/tmp/ci-rec/with space"`), which the kernel prints as \\040."""

from __future__ import annotations

import os
import time

import pytest

from nodesleuth.model.errors import InputError
from nodesleuth.model.mpstat import parse_btime
from nodesleuth.model.procfs import Mount, cpu_list_count, mount_holding, parse_cpu_list, parse_mount_table, parse_mountinfo
from nodesleuth.node.root import fstype, own_mounts

MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683784k
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683784k
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs ro,size=4096k,nr_inodes=1024,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
161 27 254:0 /run/netns /run/netns rw,relatime shared:40 - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
160 27 0:52 / /tmp/ci-rec/with\040space ro,relatime - tmpfs ci-rec ro,size=1024k
"""


def test_every_mount_with_its_fields():
    t = parse_mount_table(MOUNTINFO, "mountinfo")
    assert len(t) == 11
    assert (t[0].path, t[0].fstype, t[0].read_only, t[0].super_options) == ("/proc", "proc", False, "rw")
    assert t[-1].path == "/tmp/ci-rec/with space" and t[-1].read_only and t[-1].fstype == "tmpfs"
    assert t[-2].path == "/run/netns" and t[-2].fstype == "ext4"  # an optional field (shared:40) before " - "


def test_the_mount_holding_a_path():
    t = parse_mount_table(MOUNTINFO, "mountinfo")
    assert mount_holding(t, "/dev/shm/x").fstype == "tmpfs"
    assert mount_holding(t, "/dev/shm/x") is t[4]  # of two at one point, the one mounted last (on top)
    assert mount_holding(t, "/dev/shmx").fstype == "ext4"  # a prefix of a name is not a parent
    assert mount_holding(t, "/sys/fs/cgroup/memory/a/b").fstype == "cgroup"
    assert mount_holding(t, "/tmp/ci-rec/with space/f").super_options == "ro,size=1024k"
    assert mount_holding(t, "/").fstype == "ext4" and mount_holding([], "/") is None


def test_cgroup_mounts_from_the_same_table():
    assert parse_mountinfo(MOUNTINFO, "mountinfo") == [
        Mount("cgroup", "/sys/fs/cgroup/memory", ("memory",)), Mount("cgroup", "/sys/fs/cgroup/systemd", ()),
        Mount("cgroup2", "/sys/fs/cgroup/unified", ())]
    with pytest.raises(InputError, match="mountinfo: malformed line"):
        parse_mount_table("22 27 0:21 / /proc rw,relatime proc proc rw\n", "mountinfo")


def test_this_process_mounts_and_file_system_types():
    """The live table of this process: / and /proc are always there; a path that does not exist yet is
    judged by its nearest existing ancestor."""
    mounts = own_mounts()
    assert any(m.path == "/proc" and m.fstype == "proc" for m in mounts)
    assert fstype("/proc/self") == "proc"
    assert fstype("/proc/self/no/such/file") == "proc"
    shm = [m for m in mounts if m.path == "/dev/shm"]
    if shm:
        assert fstype("/dev/shm") == shm[-1].fstype


def test_cpu_lists_one_parser():
    """Kernel CPU lists (/sys/devices/system/cpu/{online,possible}, cpulist_print's form)."""
    assert parse_cpu_list("0-3,8-11\n", "p") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_cpu_list("0\n", "p") == [0] and cpu_list_count("0-95\n", "p") == 96
    with open("/sys/devices/system/cpu/online") as f:
        assert os.sched_getaffinity(0) <= set(parse_cpu_list(f.read(), f.name))  # this process runs on online CPUs
    for bad in ("", "x", "0-a"):
        with pytest.raises(InputError, match="malformed CPU list"):
            cpu_list_count(bad, "possible")


def test_btime_one_parser():
    with open("/proc/stat") as f:
        text = f.read()
    bt = parse_btime(text, "/proc/stat")
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    assert isinstance(bt, int) and abs(bt - booted) < 5  # the kernel's own boot time, to its rounding
    assert parse_btime("cpu  1 2 3 4\nintr 5\n", "stat") is None
    with pytest.raises(InputError, match="malformed btime line"):
        parse_btime("cpu  1 2 3 4\nbtime x\n", "stat")
