"""One exposed series family: name, type, help and labels (the vocabulary is model/metrics.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # without `_total`: prometheus-client and the OpenMetrics writer add it to counters
    type: str  # gauge | counter | info
    help: str
    labels: tuple[str, ...] = ()
