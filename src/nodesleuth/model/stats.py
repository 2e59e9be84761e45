"""The few statistical tests the product uses, exact and in the standard library (no scipy at run time:
it was 72 MB of the container image for four functions; tests/test_stats.py compares every function
with scipy's on a table of cases).

- hypergeometric tails and Fisher's exact test (two-sided, as scipy.stats.fisher_exact): exact integer
  arithmetic (math.comb), so no tolerance and no underflow until the final conversion to float;
- Benjamini-Hochberg adjusted p-values (as scipy.stats.false_discovery_control(method="bh"));
- Spearman's rank correlation with its two-sided p-value from Student's t with n-2 degrees of freedom
  (as scipy.stats.spearmanr), the t tail from the regularized incomplete beta function.
"""

from __future__ import annotations

import math
from fractions import Fraction


def _weights(N: int, K: int, n: int) -> tuple[int, list[int]]:
    """Support start and the integer weights comb(K, x) * comb(N-K, n-x) over the hypergeometric support
    (population N, K successes in it, n drawn); each weight / comb(N, n) is the probability of x."""
    lo, hi = max(0, n - (N - K)), min(K, n)
    a, b = math.comb(K, lo), math.comb(N - K, n - lo)
    out = []
    for x in range(lo, hi + 1):
        out.append(a * b)
        if x < hi:  # exact: comb(K, x+1) = comb(K, x) (K-x) / (x+1), likewise the other factor
            a = a * (K - x) // (x + 1)
            b = b * (n - x) // (N - K - n + x + 1)
    return lo, out


def _log(fr: Fraction) -> float:
    return -math.inf if fr == 0 else math.log(fr.numerator) - math.log(fr.denominator)


def hypergeom_log_sf(k: int, N: int, K: int, n: int) -> float:
    """log P(X > k) (natural log), X hypergeometric; finite where the probability underflows a float."""
    lo, w = _weights(N, K, n)
    return _log(Fraction(sum(v for x, v in enumerate(w, lo) if x > k), math.comb(N, n)))


def hypergeom_log_cdf(k: int, N: int, K: int, n: int) -> float:
    """log P(X <= k) (natural log)."""
    lo, w = _weights(N, K, n)
    return _log(Fraction(sum(v for x, v in enumerate(w, lo) if x <= k), math.comb(N, n)))


def fisher_exact(table: list[list[int]]) -> float:
    """Two-sided p-value of Fisher's exact test of the 2x2 table [[a, b], [c, d]]: the probability of
    every table with the same margins no more likely than the observed one (ties exact)."""
    (a, b), (c, d) = table
    if min(a, b, c, d) < 0:
        raise ValueError("a contingency table holds counts >= 0")
    n1, n2, col = a + b, c + d, a + c
    if n1 == 0 or n2 == 0 or col == 0 or col == n1 + n2:
        return 1.0  # a margin of zero: every table is the observed one
    lo, w = _weights(n1 + n2, n1, col)
    obs = w[a - lo]
    return min(1.0, float(Fraction(sum(v for v in w if v <= obs), math.comb(n1 + n2, col))))


def bh(pvalues: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        out[i] = min(1.0, running)
    return out


def _ranks(xs: list[float]) -> list[float]:
    """Ranks from 1, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)), -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def spearman(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(rho, two-sided p) of Spearman's rank correlation; (nan, nan) when either side is constant."""
    n = len(xs)
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return math.nan, math.nan
    rho = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    dof = n - 2
    if dof <= 0 or abs(rho) == 1.0:
        return rho, 0.0 if dof > 0 else 1.0
    t2 = rho * rho * dof / ((1 - rho) * (1 + rho))
    # two-sided Student's t tail: P(|T| > t) = I_{dof/(dof+t^2)}(dof/2, 1/2)
    return rho, betainc(dof / 2, 0.5, dof / (dof + t2))
