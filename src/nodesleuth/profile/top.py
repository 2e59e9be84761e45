"""The hottest functions of a range (top_functions): self and total samples per function."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .samples import Filter, Samples


def top_functions(s: Samples, f: Filter, kernel_only: bool = True, n: int = 20) -> list[dict]:
    """Functions by self (leaf) and total (anywhere in the stack) samples, as % of selected samples."""
    m = s.select(f)
    if s.count is None:
        ids, counts = np.unique(s.stack[m], return_counts=True)
    else:
        per = np.bincount(s.stack[m], weights=s.count[m], minlength=len(s.stacks))
        ids = np.flatnonzero(per)
        counts = per[ids].astype(np.int64)
    total = s.total(m)
    self_c: Counter = Counter()
    incl: Counter = Counter()
    for sid, c in zip(ids.tolist(), counts.tolist()):
        st = s.stacks[sid]
        if st:
            self_c[st[-1]] += c
        for fr in dict.fromkeys(st):
            incl[fr] += c
    names = [k for k in incl if (k.endswith("_[k]") or not kernel_only)]
    # ties by name: the same order whatever order the stacks were read in (aggregates or raw samples)
    rows = sorted(names, key=lambda k: (-self_c.get(k, 0), -incl[k], k))[:n]
    return [{"function": k[:-4] if k[-4:] in ("_[k]", "_[j]") else k, "kernel": k.endswith("_[k]"),
             "self": self_c.get(k, 0), "total": incl[k],
             "self_pct": round(100 * self_c.get(k, 0) / max(1, total), 2),
             "total_pct": round(100 * incl[k] / max(1, total), 2)} for k in rows]
