"""Shared CLI plumbing: one-line errors, sizes, durations, time ranges, progress, warnings."""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading

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


EXIT_GRACE = 10.0  # s after SIGTERM: then the process ends whatever its clean-up still waits for


def clean_up_on_term() -> None:
    """SIGTERM (`timeout`, the kubelet, systemd) unwinds like Ctrl-C instead of killing outright, so
    the `finally` blocks run: the zombie probe removes its cgroups, children are stopped. Only for
    commands that have no stop handler of their own (record and profile install theirs). The clean-up
    gets EXIT_GRACE seconds, a third of the kubelet's default grace period: the exporter's container
    was SIGKILLed (exit 137) after 20 s in CI; a probe's cgroups left then are removed by the next start
    (node/cgroupfs.remove_stale)."""
    def stop(signum, _frame):
        watchdog = threading.Timer(EXIT_GRACE, os._exit, args=(128 + signum,))
        watchdog.daemon = True
        watchdog.start()
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


# --- released names kept working (docs/interface.md "Deprecation policy"; every released name: cli/released.json) ---

class Deprecated(click.Option):
    """A released option kept as a hidden alias of today's one. Given, it prints one line on stderr naming its
    replacement and hands its value to today's parameter `into` (through `convert(value, current)`, `current`
    being that parameter's value so far); today's name, when given too, wins. `into=None`: the option's
    behaviour became the default and it does nothing. Only StableCommand applies it."""

    def __init__(self, decls, *, into: str | None, use: dict[str, str] | str, convert=None, **kw):
        super().__init__(decls, hidden=True, **kw)
        self.into, self.convert = into, convert or (lambda value, current: value)
        self.use = use if isinstance(use, dict) else {o: use for o in self.opts + self.secondary_opts}

    def spelling(self, value) -> str:
        """The name the caller typed (a flag pair: which side, from the value it gave)."""
        if self.is_flag and self.secondary_opts and not value:
            return self.secondary_opts[0]
        return self.opts[0]


def deprecated(*decls: str, into: str | None, use: dict[str, str] | str, convert=None, **kw):
    """`@deprecated("--no-trace", into="trace", use="--no-trace-churn", ...)`: the one way a command keeps a
    released name (see Deprecated); `use` names the replacement, per spelling for a flag pair."""
    if all(d.startswith("-") for d in decls):  # its own parameter name, never today's
        decls += ("deprecated_" + decls[0].split("/")[0].lstrip("-").replace("-", "_"),)
    return click.option(*decls, cls=Deprecated, into=into, use=use, convert=convert, **kw)


def deprecation(old: str, use: str) -> str:
    """The one line a deprecated name prints (a replacement is an option or a sentence)."""
    return f"nodesleuth: {old} is deprecated; {'use ' + use if use.startswith('-') else use}"


class StableCommand(click.Command):
    """A command whose Deprecated options are applied when it parses (so make_context already holds
    today's parameters) and never reach the command's function."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from click.core import ParameterSource

        rest = super().parse_args(ctx, args)
        given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
        for p in self.params:
            if not isinstance(p, Deprecated):
                continue
            value = ctx.params.pop(p.name, None)
            if ctx.get_parameter_source(p.name) not in given:
                continue
            old = p.spelling(value)
            click.echo(deprecation(old, p.use[old]), err=True)
            if p.into is not None and ctx.get_parameter_source(p.into) not in given:
                ctx.params[p.into] = p.convert(value, ctx.params.get(p.into))
        return rest


class StableGroup(click.Group):
    """The CLI's groups: their commands and subgroups are stable ones too."""

    command_class = StableCommand
    group_class = type  # subgroups are StableGroups


def _port_into_listen(port: int, listen: str) -> str:
    """serve's released --port N: today's --listen with its host kept and port N."""
    host, _ = _listen(listen)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _bind_into_listen(bind: str, listen: str) -> str:
    """serve's released --bind HOST: today's --listen with host HOST and its port kept."""
    _, port = _listen(listen)
    return f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"
