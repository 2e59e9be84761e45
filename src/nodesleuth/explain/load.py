"""Read what explain needs out of a store: ticks, the profile, the churn trace."""

from __future__ import annotations

import orjson

from ..store import query
from ..store.store import StoreReader
from .chain import Recording


def recording(store: str, t0: float | None, t1: float | None) -> tuple[Recording, list]:
    reader = StoreReader(store)
    ticks = list(query.ticks(reader, t0, t1))
    samples = None
    if reader.segments("profile"):
        from ..profile.query import load

        samples = load(reader, t0, t1)
    churn = []
    for _, payload in reader.read("churn", None if t0 is None else t0 - 60, t1):
        churn += orjson.loads(payload)
    return Recording(ticks, samples, churn), reader.problems
