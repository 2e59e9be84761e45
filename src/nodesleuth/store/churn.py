"""The cgroup churn trace in the store: one field-name table per perf chunk, rows of CgEvent."""

from __future__ import annotations

import dataclasses

import orjson

from ..model.records import CgEvent
from .catalog import CHURN
from .segment import Problem

FIELDS = tuple(f.name for f in dataclasses.fields(CgEvent))


def encode(events: list[CgEvent], offset: float = 0.0) -> tuple[float, bytes]:
    """(time of the first event, payload); `offset` turns perf's clock into wall-clock seconds."""
    rows = [[round(e.time + offset, 6) if n == "time" else getattr(e, n) for n in FIELDS] for e in events]
    return rows[0][0], orjson.dumps({"f": FIELDS, "r": rows})


def decode(payload: bytes) -> list[CgEvent]:
    doc = orjson.loads(payload)
    if isinstance(doc, dict):  # schema 2: a field-name table
        names = doc.get("f", FIELDS)
        return [CgEvent(**{n: v for n, v in zip(names, row) if n in FIELDS}) for row in doc.get("r", [])]
    return [CgEvent(*row) for row in doc]  # schema 1: positional rows


def events(reader, t0: float | None, t1: float | None) -> list[CgEvent]:
    """Every traced event in [t0, t1], in time order; an undecodable record is a store problem."""
    out: list[CgEvent] = []
    for _, payload in reader.read(CHURN, t0, t1):
        try:
            out += decode(payload)
        except (ValueError, TypeError) as e:
            reader.problems.append(Problem(f"{reader.dir}/{CHURN}", 0, f"undecodable churn record: {e}"))
    out.sort(key=lambda e: e.time)
    return out
