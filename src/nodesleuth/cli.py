"""Thin command line over the packages; every command turns InputError into one line and exit 2."""

from __future__ import annotations

import functools
import sys

import click
import orjson

from .errors import InputError


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


@click.group()
@click.version_option(package_name="nodesleuth")
def main() -> None:
    """Find the hidden causes of intermittent CPU starvation on Linux nodes, with evidence."""


@main.command()
@click.option("--root", default="/", show_default=True, help="Host root to read /proc and /sys under.")
@click.option("--seconds", default=5.0, show_default=True, help="How long to sample.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema nodesleuth.check/v1).")
@click.option("--npd", is_flag=True, help="One short line on stdout, for node-problem-detector.")
@click.option("--kmsg", type=click.Path(), help="Read a recorded kernel log file instead of ROOT/dev/kmsg.")
@click.option("--lookback", default=3600.0, show_default=True, help="Ignore kernel-log events older than this (s).")
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="Trace cgroup mkdir/rmdir with perf while sampling, to name who makes zombies.")
@click.option("--systemd-pid", type=int, help="Inspect the systemd that is PID 1 of this PID's namespace.")
@click.option("--threads/--no-threads", default=True, show_default=True, help="Attribute CPU per thread.")
@click.option("--zombie-warn", default=1000, show_default=True, help="Dying cgroups that make a warning.")
@click.option("--zombie-crit", default=10000, show_default=True, help="Dying cgroups that make it critical.")
@click.option("--rules", type=click.Path(), help="Kernel-log rules file (NPD kernel-monitor shape).")
@one_line_errors
def check(root, seconds, as_json, npd, kmsg, lookback, trace, systemd_pid, threads, zombie_warn, zombie_crit,
          rules):
    """Say whether this node has the problem class now, and why. Exit 0 OK, 1 problem, 2 unknown."""
    from .detect.check import CheckOptions, run_check, to_json
    from .report.text import npd_line, render

    res = run_check(CheckOptions(root=root, seconds=seconds, kmsg=kmsg, lookback=lookback, trace=trace,
                                 ns_pid=systemd_pid, threads=threads, zombie_warn=zombie_warn,
                                 zombie_crit=zombie_crit, rules=rules))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(to_json(res, root), option=orjson.OPT_INDENT_2) + b"\n")
    elif npd:
        click.echo(npd_line(res))
    else:
        render(res)
    sys.exit(res.exit_code)


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
    from .timeparse import UNITS, PART

    t = text.strip().lower()
    try:
        return float(t)
    except ValueError:
        pass
    parts = PART.findall(t)
    if not parts or any(u not in UNITS for _, u in parts):
        raise InputError(text, "not a duration: use seconds or 7d / 12h / 30m")
    return sum(float(n) * UNITS[u] for n, u in parts)


@main.command()
@click.option("--store", required=True, type=click.Path(), help="Store directory.")
@click.option("--root", default="/", show_default=True)
@click.option("--interval", default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--duration", help="Stop after this long (e.g. 30s, 2h); default: until SIGTERM.")
@click.option("--retention", default="7d", show_default=True, help="Drop whole segments older than this.")
@click.option("--max-size", default="2G", show_default=True, help="Drop oldest segments beyond this many bytes.")
@click.option("--segment", default="1h", show_default=True, help="Segment length.")
@click.option("--live-every", default=60.0, show_default=True, help="Seconds between cgroup directory walks.")
@click.option("--systemd-pid", type=int, help="Read units from the systemd that is PID 1 of this PID's namespace.")
@click.option("--kmsg", type=click.Path(), help="Recorded kernel log file instead of ROOT/dev/kmsg.")
@click.option("--threads/--no-threads", default=True, show_default=True)
@click.option("--quiet", is_flag=True, help="No status line.")
@one_line_errors
def record(store, root, interval, duration, retention, max_size, segment, live_every, systemd_pid, kmsg, threads,
           quiet):
    """Record per-CPU, per-process, cgroup, kernel-log, NIC and unit data every second into STORE."""
    from .record.recorder import RecordOptions, Recorder

    opt = RecordOptions(store=store, root=root, interval=interval,
                        duration=_duration(duration) if duration else None, retention=_duration(retention),
                        max_bytes=_size(max_size), segment_seconds=_duration(segment), live_every=live_every,
                        threads=threads, ns_pid=systemd_pid, kmsg=kmsg)
    status = None
    if not quiet and sys.stderr.isatty():
        def status(rec, tick):
            from .collect.cpu import from_deltas

            utils = (from_deltas(c, d) for c, d in (tick.cpu_raw or {}).items() if c >= 0)
            hot = max((u for u in utils if u), key=lambda u: u.busy, default=None)
            click.echo(f"\r{rec.ticks} ticks, {rec.bytes / 1024:.0f} KiB written"
                       + (f", hottest CPU {hot.cpu} {hot.busy:.0f}%" if hot else "") + "   ", nl=False, err=True)
    Recorder(opt, on_tick=status).run()


def _range(store, frm, to):
    from .store.store import StoreReader
    from .timeparse import parse_time

    reader = StoreReader(store)
    return reader, (parse_time(frm) if frm else None), (parse_time(to) if to else None)


def _progress(reader, stream="ticks"):
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


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm", help="Start: ISO-8601, epoch, or relative ('10m ago').")
@click.option("--to", help="End (same forms); default now.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "openmetrics"]), default="json", show_default=True)
@click.option("-o", "--output", type=click.Path(), help="Write here instead of stdout.")
@one_line_errors
def dump(store, frm, to, fmt, output):
    """Export any time range of a recording."""
    from .store import query

    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader)
    binary = fmt == "json"
    out = open(output, "wb" if binary else "w") if output else (sys.stdout.buffer if binary else sys.stdout)
    with prog:
        ts = query.ticks(reader, t0, t1, on_segment=cb)
        n = {"json": query.to_json_lines, "csv": query.to_csv, "openmetrics": query.to_openmetrics}[fmt](ts, out)
    if output:
        out.close()
    for p in reader.problems:
        click.echo(f"nodesleuth: warning: {p}", err=True)
    click.echo(f"{n} samples", err=True)


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm", help="Start (ISO-8601, epoch, '10m ago').")
@click.option("--to", help="End; default now.")
@click.option("--at", help="Replay the seconds around this time instead (with --around).")
@click.option("--around", default=10.0, show_default=True, help="Seconds either side of --at.")
@one_line_errors
def replay(store, frm, to, at, around):
    """Time travel in the terminal: one line per second (node, hottest CPU and who ran there, zombies, events)."""
    from .report.replay import render
    from .store import query
    from .timeparse import parse_time

    if at:
        t = parse_time(at)
        frm, to = str(t - around), str(t + around)
    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader)
    with prog:
        n = render(query.ticks(reader, t0, t1, on_segment=cb))
    for p in reader.problems:
        click.echo(f"nodesleuth: warning: {p}", err=True)
    if not n:
        click.echo("no samples in that range", err=True)


if __name__ == "__main__":
    main()
