"""Array and table helpers the profile readers and writers share."""

from __future__ import annotations

import numpy as np


def intern(ix: dict, table: list, item) -> int:
    """The index of `item` in `table`, appended when new (`ix` maps each item to its index)."""
    i = ix.get(item)
    if i is None:
        i = ix[item] = len(table)
        table.append(item)
    return i


def distinct(a: np.ndarray) -> np.ndarray:
    """np.unique(a) for a 1-D integer array: the sorted distinct values. numpy 2's plain np.unique asks
    np.ma.is_masked, whose first use imports numpy.ma (once per process: a noticeable part of a flame
    query's budget and of every `profile run`'s start; benchmarks/results/summary.md)."""
    s = np.sort(a, kind="stable")
    if len(s) < 2:
        return s
    return s[np.concatenate(([True], s[1:] != s[:-1]))]
