"""Folded stacks as stackcollapse-perf.pl writes them (folded, folded_frames, folded_text), its
name tidying (tidy), and difffolded.pl's differential stacks of two folded profiles (diff)."""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from .parse import SUFFIXES
from .samples import Filter, Samples


GO_METHOD = re.compile(r"\.\(.*\)\.")
ARGS = re.compile(r"\((?!anonymous namespace\)).*")


def tidy(name: str, java: bool = False) -> str:
    """stackcollapse-perf.pl's tidy_generic and tidy_java: drop C++/Java argument lists (everything
    from the first `(` that is not `(anonymous namespace)`, unless it looks like a Go method), quotes,
    and for java processes the `L` of `Lpkg/Class`. Annotation suffixes are kept."""
    base, suf = (name[:-4], name[-4:]) if name[-4:] in SUFFIXES else (name, "")
    if not GO_METHOD.search(base):
        base = ARGS.sub("", base)
    base = base.replace('"', "").replace("'", "")
    if java and base[:1] == "L" and "/" in base:
        base = base[1:]
    return base + suf


def _root(comm: str, pid: int, tid: int, known: bool, name: str) -> str:
    """The process frame as stackcollapse-perf.pl names it: comm, comm-PID or comm-PID/TID; `?` where
    perf printed one number (or a tid of 0, which Perl reads as false)."""
    if name == "comm":
        r = comm
    else:
        p = str(pid) if known and tid != 0 else "?"
        t = tid if not known or tid != 0 else pid
        r = f"{comm}-{p}" if name == "pid" else f"{comm}-{p}/{t}"
    return r.replace(" ", "_").replace(";", ":")


def folded(s: Samples, f: Filter, name: str = "comm", annotate: str = "kernel", tidy_names: bool = True,
           weight: str = "samples") -> Counter:
    """Brendan Gregg folded stacks: `root;...;leaf` -> count (see folded_frames)."""
    out: Counter = Counter()
    for k, v in folded_frames(s, f, name, annotate, tidy_names, weight).items():
        out[";".join(k)] += v
    return out


def folded_frames(s: Samples, f: Filter, name: str = "comm", annotate: str = "kernel", tidy_names: bool = True,
                  weight: str = "samples") -> Counter:
    """Folded stacks as frame tuples `(root, ..., leaf)` -> count (the flame graph builds its tree from
    them without joining and splitting strings), as stackcollapse-perf.pl folds them
    (tests compare with its outputs recorded on this machine, tests/data/perf-script/stackcollapse-outputs.md).

    name: the process frame (comm | pid | tid = its --pid/--tid); annotate: which suffixes to show
    (kernel = --kernel `_[k]`, jit = `_[j]`, all = --all, none = its default); tidy_names: its tidy rules
    (off = raw symbol names); weight: samples, or period (sums perf's period as it does)."""
    m = s.select(f)
    comm, stack = s.comm[m].astype(np.int64), s.stack[m].astype(np.int64)
    w = None if s.count is None else s.count[m].astype(np.int64)
    if weight == "period" and s.period is not None:
        w = s.period[m].astype(np.int64)
        w[w == 0] = 1
    if name == "comm":
        keys = np.stack([comm, stack])
    else:
        known = s.pid_known[m] if s.pid_known is not None else np.ones(len(comm), dtype=bool)
        keys = np.stack([comm, stack, s.pid[m].astype(np.int64), known.astype(np.int64), s.tid[m].astype(np.int64)])
    out: Counter = Counter()
    if not keys.shape[1]:
        return out
    uniq, counts = _sum_keys(keys, w)
    shown: dict[tuple[str, bool], str] = {}
    stacks: dict[tuple[int, bool], tuple[str, ...]] = {}  # a stack's shown frames, per java-ness
    for col, c in zip(uniq.T.tolist(), counts.tolist()):
        cm = s.comms[col[0]]
        java = cm.startswith("java")
        frames = stacks.get((col[1], java))
        if frames is None:
            out_fr = []
            for fr in s.stacks[col[1]]:
                v = shown.get((fr, java))
                if v is None:
                    v = shown[(fr, java)] = _show(fr, java, annotate, tidy_names)
                out_fr.append(v)
            frames = stacks[(col[1], java)] = tuple(out_fr)
        root = () if not cm else (_root(cm, col[2], col[4], bool(col[3]), name) if name != "comm"
                                  else cm.replace(" ", "_").replace(";", ":"),)
        out[root + frames] += int(c)
    return out


def _sum_keys(keys: np.ndarray, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct columns of `keys` and their summed weights; packs the rows into one int64 key (a 1-D
    sort, far cheaper than np.unique(axis=1) on the millions of rows of an hour's edges)."""
    lo = keys.min(axis=1)
    dims = (keys.max(axis=1) - lo + 1).tolist()
    if math.prod(dims) < 2 ** 62:
        key = np.ravel_multi_index(keys - lo[:, None], dims)
        u, inv = np.unique(key, return_inverse=True)
        uniq = np.stack(np.unravel_index(u, dims)) + lo[:, None]
    else:
        uniq, inv = np.unique(keys, axis=1, return_inverse=True)
    return uniq, np.bincount(inv.ravel(), weights=w, minlength=uniq.shape[1])


def _show(fr: str, java: bool, annotate: str, tidy_names: bool) -> str:
    v = tidy(fr, java) if tidy_names else fr
    if v.endswith("_[k]") and annotate not in ("kernel", "all"):
        v = v[:-4]
    elif v.endswith("_[j]") and annotate not in ("jit", "all"):
        v = v[:-4]
    return v


def folded_text(fc: Counter) -> str:
    """Sorted by byte value, as Perl's `sort { $a cmp $b }`."""
    return "".join(f"{k} {fc[k]}\n" for k in sorted(fc, key=lambda k: k.encode()))


def diff(incident: Counter, baseline: Counter) -> list[tuple[str, float, int]]:
    """difffolded.pl -n: baseline scaled to the incident's total; rows `stack base_scaled incident`."""
    ti, tb = sum(incident.values()), sum(baseline.values())
    scale = ti / tb if tb else 0.0
    keys = sorted(set(incident) | set(baseline))
    return [(k, round(baseline.get(k, 0) * scale, 2), incident.get(k, 0)) for k in keys]
