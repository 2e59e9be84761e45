"""NIC driver statistics through the SIOCETHTOOL ioctl (collect/ethtool.py) against the real
`ethtool -S` on this machine's NICs: the same names in the same order, and every value between
the ioctl read just before and the one just after the command (the counters are monotonic)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

import pytest

from nodesleuth.node.ethtool import EthtoolStats
from nodesleuth.model.ethtool import parse_ethtool_s
from nodesleuth.collect.nic import NicReader
from nodesleuth.node.root import Root

from conftest import missing


def _physical() -> list[str]:
    base = "/sys/class/net"
    return sorted(i for i in os.listdir(base) if i != "lo" and os.path.exists(f"{base}/{i}/device"))


def _names_in_order(text: str) -> list[str]:
    return [ln.strip().rpartition(":")[0].strip() for ln in text.splitlines()[1:] if ":" in ln]


def test_ioctl_agrees_with_ethtool_S():
    if not shutil.which("ethtool"):
        missing("ethtool is not installed (scripts/setup-tests.sh)")
    nics = _physical()
    if not nics:
        missing("no physical NIC here")
    e = EthtoolStats()
    compared = 0
    try:
        for ifname in nics:
            before = e.read(ifname)
            p = subprocess.run(["ethtool", "-S", ifname], capture_output=True, text=True, timeout=10)
            after = e.read(ifname)
            if p.returncode != 0:  # "no stats available": the ioctl says the same
                assert before == {} and after == {}, ifname
                continue
            cmd = parse_ethtool_s(p.stdout, f"ethtool -S {ifname}")
            assert list(before) == _names_in_order(p.stdout) == list(after), ifname
            for k, v in cmd.items():
                assert before[k] <= v <= after[k], (ifname, k, before[k], v, after[k])
            compared += len(cmd)
    finally:
        e.close()
    assert compared > 0, "no NIC with driver statistics to compare"


def test_missing_interface_has_no_stats_and_a_long_name_is_refused():
    e = EthtoolStats()
    try:
        assert e.read("nsnosuchif0") == {}
        with pytest.raises(OSError) as ei:
            e.read("x" * 16)
        assert ei.value.errno == errno.EINVAL
    finally:
        e.close()


def test_read_nics_live_carries_the_driver_counters():
    nr = NicReader(Root("/"))
    try:
        nics = nr.read(with_ethtool=True)
    finally:
        nr.close()
    for n in nics:
        p = subprocess.run(["ethtool", "-S", n.ifname], capture_output=True, text=True, timeout=10)
        if p.returncode == 0:
            assert set(n.ethtool) == set(parse_ethtool_s(p.stdout, "ethtool -S"))
