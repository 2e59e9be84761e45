"""Shared CLI plumbing: one-line errors, sizes, durations, time ranges, progress, warnings."""

from __future__ import annotations

import functools
import signal
import sys

import click

from ..model.errors import InputError
from ..store.catalog import TICKS


def one_line_errors(fn):
    """Bad input gets a one-line error naming the file, never a traceback (exit 2 = NPD 'unknown')."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except InputError as e:
            click.echo(f"nodesleuth: error: {e}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            sys.exit(130)

    return wrapper


def clean_up_on_term() -> None:
    """SIGTERM (`timeout`, the kubelet, systemd) unwinds like Ctrl-C instead of killing outright, so
    the `finally` blocks run: the zombie probe removes its cgroups, children are stopped. Only for
    commands that have no stop handler of their own (record and profile install theirs)."""
    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _size(text: str) -> int:
    """'150M', '2G', '1048576' -> bytes."""
    t = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(t)
    except ValueError:
        raise InputError(text, "not a size: use bytes or 150M / 2G") from None

def _duration(text: str) -> float:
    from ..model.timeparse import UNITS, PART

    t = text.strip().lower()
    try:
        return float(t)
    except ValueError:
        pass
    parts = PART.findall(t)
    if not parts or any(u not in UNITS for _, u in parts):
        raise InputError(text, "not a duration: use seconds or 7d / 12h / 30m")
    return sum(float(n) * UNITS[u] for n, u in parts)

def _times(frm, to) -> tuple[float | None, float | None]:
    """--from/--to as epoch seconds; a reversed or empty range is a user mistake (exit 2)."""
    from ..model.timeparse import iso, parse_time

    t0 = parse_time(frm) if frm else None
    t1 = parse_time(to) if to else None
    if t0 is not None and t1 is not None and t0 >= t1:
        raise InputError("--from/--to", f"from ({iso(t0)}) is after to ({iso(t1)})" if t0 > t1
                         else f"empty range: from and to are both {iso(t0)}")
    return t0, t1

def _range(store, frm, to):
    from ..store.store import StoreReader

    t0, t1 = _times(frm, to)
    return StoreReader(store), t0, t1

def _warn(problems) -> None:
    """Read problems in one line (exit 2 follows from the caller)."""
    from ..store.segment import summarise

    if problems:
        click.echo(f"nodesleuth: warning: {summarise(problems)}", err=True)

def _progress(reader, stream=TICKS):
    """A status line over segments for long reads (only on a terminal)."""
    from rich.progress import BarColumn, Progress, TextColumn

    segs = len(reader.segments(stream))
    prog = Progress(TextColumn("reading {task.completed}/{task.total} segments"), BarColumn(),
                    TextColumn("{task.fields[bytes]}"), transient=True, disable=not sys.stderr.isatty())
    task = prog.add_task("read", total=segs, bytes="")
    done = [0]

    def cb(path, size):
        done[0] += size
        prog.update(task, advance=1, bytes=f"{done[0] / 1e6:.1f} MB")

    return prog, cb

def _write_text(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}") from None


def _listen(text: str) -> tuple[str, int]:
    """--listen HOST:PORT (the exporter's and serve's one form; [::1]:8080 for IPv6)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(text, "not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host, int(port)
