"""The lab's rate: chosen from the cost curve it measured so the core saturates, refused when reading alone
would fill the core, and the run judged by how much of it the core was saturated (lab/run.py)."""

from __future__ import annotations

import pytest

from nodesleuth.lab.run import HEADROOM, LabError, choose_rate, cost_at, saturation

# the curve `lab run` measured on this machine (kernel 6.18, 2 vCPUs, cgroup v1; docs/lab.md)
HERE = [{"zombies": 0, "reclaim_sys_ms_per_mb": 0.13}, {"zombies": 1000, "reclaim_sys_ms_per_mb": 0.36},
        {"zombies": 10000, "reclaim_sys_ms_per_mb": 6.6}, {"zombies": 30000, "reclaim_sys_ms_per_mb": 12.6}]


def test_cost_between_and_past_the_curves_points():
    assert cost_at(HERE, 0) == 0.13 and cost_at(HERE, 30000) == 12.6
    assert cost_at(HERE, 20000) == pytest.approx(9.6)  # halfway between 6.6 and 12.6
    assert cost_at(HERE, 50000) == 12.6  # past the last point: its cost (the real one is higher)


def test_the_rate_asks_more_than_the_core_at_the_zombies_made():
    rate, why = choose_rate(HERE, 30000, 1)
    assert rate == pytest.approx(HEADROOM * 1000 / 12.6, abs=0.1)  # 103 MB/s: 130% of the core at 12.6 ms/MB
    assert rate * 12.6 / 1000 > 1.0 and rate * 0.13 / 1000 < 0.05  # the zombies fill it, reading alone does not
    assert "103 MB/s asks 130% of CPU 1" in why and "with no zombies it would ask 1%" in why, why
    # fewer zombies cost less per MB, so the loader must read faster
    assert choose_rate(HERE, 10000, 1)[0] > rate


def test_no_rate_where_reading_alone_would_fill_the_core():
    with pytest.raises(LabError, match=r"only 0.24 ms/MB at 500 zombies, so 5306 MB/s would be needed, past the 4000"):
        choose_rate(HERE, 500, 1)
    assert choose_rate(HERE, 1000, 1)[0] == pytest.approx(3611.1, abs=0.1)  # 47% of the core with no zombies: allowed
    flat = [{"zombies": 0, "reclaim_sys_ms_per_mb": 2.0}, {"zombies": 30000, "reclaim_sys_ms_per_mb": 3.0}]
    with pytest.raises(LabError, match=r"433 MB/s is needed, but at that rate reading alone .* takes 87% of the core"):
        choose_rate(flat, 30000, 1)


def test_saturation_counts_seconds_at_95_percent_or_more():
    sec = [{"busy": b, "loader": 90.0} for b in (100, 99.5, 95.0, 94.9, 100)] + [{"busy": None, "loader": 0.0}]
    s = saturation(sec)
    assert (s["seconds"], s["of"], s["share"]) == (4, 5, 0.8)
    assert s["loader_share"] == 75.0  # over every second watched, the unreadable one included
