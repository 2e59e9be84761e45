"""`record`, `dump`, `replay`: options and calls."""

from __future__ import annotations

import sys

import click

from ..collect.probe_state import STATE_DIR
from . import main
from .common import one_line_errors, _size, _duration, _range, _warn, _progress


@main.command()
@click.option("--store", required=True, type=click.Path(), help="Store directory.")
@click.option("--root", default="/", show_default=True)
@click.option("--interval", default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--duration", help="Stop after this long (e.g. 30s, 2h), counted from the first sample (once perf and "
              "the sampler are ready); default: until SIGTERM.")
@click.option("--tier-1s", "tier_1s", default="7d", show_default=True,
              help="Keep the 1 s ticks and the raw profile this long (AGE or AGE:BYTES, e.g. 7d:20G).")
@click.option("--tier-10s", "tier_10s", default="30d", show_default=True,
              help="Keep the 10 s aggregates (per-CPU mean and busiest second, processes, events), the churn "
                   "trace and the 10 s profile aggregates this long (AGE or AGE:BYTES).")
@click.option("--tier-1m", "tier_1m", default="365d", show_default=True,
              help="Keep the per-minute rollups and profile aggregates this long (AGE or AGE:BYTES).")
@click.option("--retention", help="Drop every stream's segments older than this (one bound for all tiers; "
              "overrides the --tier-* ages).")
@click.option("--max-size", default="2G", show_default=True,
              help="Bound the whole store: beyond it the finest tier's oldest segments go first.")
@click.option("--segment", default="1h", show_default=True, help="Segment length.")
@click.option("--live-every", default=60.0, show_default=True, help="Seconds between cgroup directory walks.")
@click.option("--units-every", default=5, show_default=True, help="Read systemd units every N ticks.")
@click.option("--systemd-pid", type=int, help="Read units from the systemd that is PID 1 of this PID's namespace.")
@click.option("--units-timeout", default=120.0, show_default=True,
              help="Seconds a units read may wait for a busy systemd (on its own thread: ticks never wait).")
@click.option("--kmsg", type=click.Path(), help="Recorded kernel log file instead of ROOT/dev/kmsg.")
@click.option("--threads/--no-threads", default=True, show_default=True)
@click.option("--quiet", is_flag=True, help="No status line.")
@click.option("--profile", is_flag=True, help="Also run continuous perf record -a -g into the store.")
@click.option("--profile-freq", default=49, show_default=True, help="perf sampling frequency (Hz).")
@click.option("--profile-rotate", default=10.0, show_default=True, help="Seconds per perf chunk.")
@click.option("--profile-buffer", default=0, show_default=True,
              help="KB of perf ring buffer per CPU (0: 128 KB at 49 Hz, more at higher rates). Samples perf "
                   "loses when it is full are counted and stored; raise it on a machine too busy to drain it.")
@click.option("--trace-churn", is_flag=True,
              help="Also trace cgroup mkdir/rmdir/release with perf: who creates cgroups, zombie lifetimes.")
@click.option("--state-dir", default=STATE_DIR, show_default=True, type=click.Path(),
              help="Where the probes' results of this boot are kept (read at start; the recorder never probes).")
@one_line_errors
def record(store, root, interval, duration, tier_1s, tier_10s, tier_1m, retention, max_size, segment, live_every,
           units_every, systemd_pid, units_timeout, kmsg, threads, quiet, profile, profile_freq, profile_rotate,
           profile_buffer, trace_churn, state_dir):
    """Record per-CPU, per-process, cgroup, kernel-log, NIC and unit data every second into STORE:
    1 s ticks, 10 s aggregates and per-minute rollups, each kept as long as its tier says."""
    from ..record.recorder import RecordOptions, Recorder

    tiers = {k: _tier(v, f"--tier-{k.replace('min', 'm')}") for k, v in (("1s", tier_1s), ("10s", tier_10s),
                                                                         ("1m", tier_1m))}
    if retention:
        tiers = {k: (_duration(retention), b) for k, (_, b) in tiers.items()}
    opt = RecordOptions(store=store, root=root, interval=interval,
                        duration=_duration(duration) if duration else None, tiers=tiers,
                        max_bytes=_size(max_size), segment_seconds=_duration(segment), live_every=live_every,
                        units_every=units_every, units_timeout=units_timeout, threads=threads, ns_pid=systemd_pid, kmsg=kmsg, profile=profile,
                        profile_freq=profile_freq, profile_rotate=profile_rotate,
                        profile_buffer_kb=profile_buffer, churn=trace_churn)
    if not quiet:  # what one memcg costs here, as measured once this boot (collect/probe_state.py)
        from ..collect import probe_state
        from ..node.root import Root

        got, note = probe_state.load(Root(root), state_dir)
        click.echo("nodesleuth record: " + (f"memcg cost and zombie posture from {got.source()}" if got else note),
                   err=True)
    status = None
    if not quiet and sys.stderr.isatty():
        def status(rec, tick):
            from ..model.mpstat import from_deltas

            utils = (from_deltas(c, d) for c, d in (tick.cpu_raw or {}).items() if c >= 0)
            hot = max((u for u in utils if u), key=lambda u: u.busy, default=None)
            click.echo(f"\r{rec.ticks} ticks, {rec.bytes / 1024:.0f} KiB written"
                       + (f", hottest CPU {hot.cpu} {hot.busy:.0f}%" if hot else "") + "   ", nl=False, err=True)
    Recorder(opt, on_tick=status).run()

def _tier(text: str, opt: str) -> tuple[float | None, int | None]:
    """'7d' or '7d:20G' (age, bytes); 'none' or '0' for no bound."""
    from ..model.errors import InputError

    age, _, size = text.partition(":")
    try:
        a = None if age.strip().lower() in ("none", "inf", "") else _duration(age)
        b = _size(size) if size else None
    except InputError as e:
        raise InputError(opt, f"{text!r}: {e.problem}") from None
    return a, b


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm", help="Start: ISO-8601, epoch, or relative ('10m ago').")
@click.option("--to", help="End (same forms); default now.")
@click.option("--at", help="Only the second (or the 10 s / 1 min record of a coarser tier) covering this time.")
@click.option("--format", "fmt", type=click.Choice(["csv", "json", "openmetrics"]), default="json", show_default=True)
@click.option("-o", "--output", type=click.Path(), help="Write here instead of stdout.")
@one_line_errors
def dump(store, frm, to, at, fmt, output):
    """Export any time range of a recording, from the finest tier that covers it (said on stderr;
    a 10 s or 1 min record carries `tier` in JSON)."""
    from ..report import dump as export
    from ..store import tier
    from ..model.timeparse import parse_time

    if at:
        frm = to = None
    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader)
    binary = fmt == "json"
    out = open(output, "wb" if binary else "w") if output else (sys.stdout.buffer if binary else sys.stdout)
    with prog:
        if at:
            tk, plan = tier.at(reader, parse_time(at))
            ts = [tk] if tk is not None else []
        else:
            plan = tier.plan(reader, t0, t1)
            ts = tier.ticks(reader, t0, t1, on_segment=cb, using=plan)
        n = {"json": export.to_json_lines, "csv": export.to_csv, "openmetrics": export.to_openmetrics}[fmt](ts, out)
    if output:
        out.close()
    _warn(reader.problems)
    click.echo(f"{n} samples; {plan.say()}", err=True)
    sys.exit(2 if reader.problems else 0)

@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm", help="Start (ISO-8601, epoch, '10m ago').")
@click.option("--to", help="End; default now.")
@click.option("--at", help="Replay the seconds around this time instead (with --around).")
@click.option("--around", default=10.0, show_default=True, help="Seconds either side of --at.")
@click.option("--top", "top_n", default=2, show_default=True, help="Show the N hottest CPUs each second.")
@click.option("--all-cpus", is_flag=True, help="Show every CPU each second.")
@one_line_errors
def replay(store, frm, to, at, around, top_n, all_cpus):
    """Time travel in the terminal: one line per second (node, the hottest CPUs and who ran there
    (~ = estimated split of a migrating thread), zombies, ksoftirqd waits, events). Past the 1 s
    tier's retention, one line per 10 s or 1 min record (said on stderr)."""
    from ..report.replay import render
    from ..store import tier
    from ..model.timeparse import parse_time

    if at:
        t = parse_time(at)
        frm, to = str(t - around), str(t + around)
    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader)
    plan = tier.plan(reader, t0, t1)
    if plan.coarse:
        click.echo(f"nodesleuth: {plan.say()}", err=True)
    with prog:
        n = render(tier.ticks(reader, t0, t1, on_segment=cb, using=plan), None if all_cpus else top_n)
    _warn(reader.problems)
    if not n:
        click.echo("no samples in that range", err=True)
    sys.exit(2 if reader.problems else 0)
