"""Explained incidents of an open store: the one place an incident becomes its causal chain, for
`explain`, `remedy` and the web view alike, over a Recording whose incidents are found once."""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.incidents import Incident
from ..explain import chain, load
from ..explain.chain import Explained
from ..store.store import StoreReader, cut_range


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
    else those of [t0, t1]; of a cut with neither, those of the range it was made for."""
    told = []
    if at is None and t0 is None and t1 is None and (cr := cut_range(reader.dir)) is not None:
        from ..model.timeparse import iso

        t0, t1 = cr
        told = [f"a cut: its range, {iso(t0)} to {iso(t1)}, explained (--from/--to for the margin around it)"]
    lo, hi = (at, at) if at is not None else (t0, t1)
    rec, problems = load.recording(reader, lo, hi)
    chosen, notes = load.choose(rec, at, t0, t1)
    notes = told + notes
    if at is not None and not chosen:
        whole, problems = load.nearest(reader, at)
        _, notes = load.choose(whole, at, None, None)
    return Explanation(explained(rec, chosen), notes, problems)


def incidents_doc(reader: StoreReader) -> dict:
    """The web view's incidents: every incident of the recording (of a cut: of its range) with its
    chain, and the problems."""
    t0, t1 = cut_range(reader.dir) or (None, None)
    rec, problems = load.recording(reader, t0, t1)
    incs = explained(rec, load.incidents(rec, t0, t1))
    return {"incidents": [i.to_dict() for i in incs], "problems": [str(p) for p in problems]}
