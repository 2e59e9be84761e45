"""Explained incidents of an open store: the one place an incident becomes its causal chain, for
`explain`, `remedy` and the web view alike, over a Recording whose incidents are found once."""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.incidents import Incident
from ..explain import chain, load
from ..explain.chain import Explained
from ..store.store import StoreReader


@dataclass
class Explanation:
    """What `explain` prints: the chains, what to tell about the choice of incidents, and what
    could not be read (the answer may be incomplete)."""
    incidents: list[Explained]
    notes: list[str]
    problems: list


def explained(rec: load.Recording, chosen: list[Incident]) -> list[Explained]:
    """The causal chain of each chosen incident of `rec`."""
    return [chain.build(rec, i) for i in chosen]


def explanation(reader: StoreReader, at: float | None, t0: float | None, t1: float | None) -> Explanation:
    """The incident covering `at` (none covers it: the nearest is named, read as far as it takes),
    else those of [t0, t1]."""
    lo, hi = (at, at) if at is not None else (t0, t1)
    rec, problems = load.recording(reader, lo, hi)
    chosen, notes = load.choose(rec, at, t0, t1)
    if at is not None and not chosen:
        whole, problems = load.nearest(reader, at)
        _, notes = load.choose(whole, at, None, None)
    return Explanation(explained(rec, chosen), notes, problems)


def incidents_doc(reader: StoreReader) -> dict:
    """The web view's incidents: every incident of the recording with its chain, and the problems."""
    rec, problems = load.recording(reader, None, None)
    incs = explained(rec, load.incidents(rec))
    return {"incidents": [i.to_dict() for i in incs], "problems": [str(p) for p in problems]}
