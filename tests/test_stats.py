"""model/stats.py against scipy.stats (a test dependency only: the product no longer imports it).

The cases: every feature's 2x2 table of the generated fleets the fleet tests analyse (fixtures/fleetgen.py:
300 and 2,000 hosts, the planted cause, its decoys and the random facts), tables with a zero margin or
a zero cell, large fleets (10,000 hosts: p underflows, the log tail must not), and Spearman on the dose
shapes explain/dose.py sees (ties, monotone, noise)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as sp

from nodesleuth.fleet import drift
from nodesleuth.model import stats

from fixtures.fleetgen import make_fleet


def _fleet_tables() -> list[tuple[int, int, int, int]]:
    out = set()
    for n, seed in ((300, 1), (2000, 3)):
        aff, hea, na, nh = drift.count(make_fleet(n, seed))
        for f in set(aff) | set(hea):
            out.add((aff[f], na, hea[f], nh))
    return sorted(out)


FLEET = _fleet_tables()
EDGE = [(0, 5, 0, 7), (5, 5, 7, 7), (0, 0, 3, 4), (3, 10, 3, 10), (1, 1, 0, 1), (0, 40, 40, 40), (1, 2, 1, 2),
        (9000, 9500, 3, 500), (400, 500, 10, 9500), (250, 500, 4750, 9500), (7, 9, 2, 11)]


def _close(a: float, b: float, rel: float = 1e-9) -> bool:
    return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


def test_the_fleet_cases_are_many():
    assert len(FLEET) >= 30


@pytest.mark.parametrize("a,na,h,nh", FLEET + EDGE)
def test_fisher_and_tails_match_scipy(a, na, h, nh):
    table = [[a, na - a], [h, nh - h]]
    ours, theirs = stats.fisher_exact(table), float(sp.fisher_exact(table).pvalue)
    assert _close(ours, theirs, 1e-7), (table, ours, theirs)
    N, K, n = na + nh, a + h, na
    if 0 < K:
        for ours_t, theirs_t in ((stats.hypergeom_log_sf(a - 1, N, K, n), sp.hypergeom.logsf(a - 1, N, K, n)),
                                 (stats.hypergeom_log_cdf(a, N, K, n), sp.hypergeom.logcdf(a, N, K, n))):
            if math.isfinite(theirs_t) and theirs_t > -700:  # scipy's log tails are exact down to exp underflow
                assert math.isclose(ours_t, theirs_t, rel_tol=1e-7, abs_tol=1e-9), (table, ours_t, theirs_t)


def test_log_tail_stays_finite_where_p_underflows():
    a, na, h, nh = 9000, 9500, 3, 500
    assert stats.fisher_exact([[a, na - a], [h, nh - h]]) < 1e-300
    lt = stats.hypergeom_log_sf(a - 1, na + nh, a + h, na) / math.log(10)
    assert math.isfinite(lt) and lt < -500


def test_bh_matches_scipy():
    rng = random.Random(7)
    cases = [[stats.fisher_exact([[a, na - a], [h, nh - h]]) for a, na, h, nh in FLEET],
             [0.01, 0.04, 0.03, 0.2, 0.5, 1.0, 0.0, 0.04], [1.0], [0.5, 0.5, 0.5],
             [rng.random() ** 3 for _ in range(200)]]
    for ps in cases:
        ours, theirs = stats.bh(ps), sp.false_discovery_control(ps, method="bh")
        assert all(_close(x, float(y), 1e-12) for x, y in zip(ours, theirs)), ps


def test_spearman_matches_scipy():
    rng = random.Random(11)
    cases = [([100, 200, 300, 400, 500, 600], [1, 2, 3, 4, 5, 6]),
             ([100, 200, 300, 400, 500, 600], [6, 5, 4, 3, 2, 1]),
             ([1, 1, 2, 2, 3, 3, 4, 4], [0.1, 0.3, 0.2, 0.2, 0.5, 0.4, 0.9, 0.8]),
             ([5, 3, 8, 1, 9, 2, 7], [2, 2, 2, 1, 3, 3, 1])]
    for n in (6, 10, 30, 90):
        xs = [rng.randint(0, 70000) for _ in range(n)]
        cases.append((xs, [x / 70000 + rng.gauss(0, 0.5) for x in xs]))
        cases.append((xs, [rng.random() for _ in xs]))
    for xs, ys in cases:
        rho, p = stats.spearman(xs, ys)
        r = sp.spearmanr(xs, ys)
        assert math.isclose(rho, float(r.statistic), rel_tol=1e-12, abs_tol=1e-14), (xs, ys)
        assert math.isclose(p, float(r.pvalue), rel_tol=1e-8, abs_tol=1e-15), (xs, ys, p, r.pvalue)
    assert all(math.isnan(v) for v in stats.spearman([1, 2, 3, 4, 5, 6], [2] * 6))


def test_betainc_matches_scipy():
    from scipy.special import betainc
    for a, b in ((2.0, 0.5), (14.0, 0.5), (0.5, 0.5), (44.0, 0.5), (3.0, 7.0)):
        for x in np.linspace(0.001, 0.999, 37):
            assert math.isclose(stats.betainc(a, b, float(x)), float(betainc(a, b, x)), rel_tol=1e-10, abs_tol=1e-15)


def test_the_product_does_not_import_scipy():
    import subprocess
    import sys
    code = ("import sys, nodesleuth.fleet.drift as d, nodesleuth.explain.dose, nodesleuth.cli;"
            "d.rank_counts(__import__('collections').Counter(x=3), __import__('collections').Counter(x=1), 5, 5);"
            "print('scipy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
