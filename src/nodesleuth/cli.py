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
@click.option("--kmsg", type=click.Path(),
              help="Read a kernel log file instead of ROOT/dev/kmsg: /dev/kmsg records, dmesg (plain, -r, -T, "
                   "--time-format iso), journalctl -k (short*, -o json, -o export) or syslog; detected.")
@click.option("--boot-time", help="Boot time of the host that wrote --kmsg (ISO-8601 or epoch), to turn its "
                                  "uptime stamps into wall time.")
@click.option("--lookback", default=3600.0, show_default=True, help="Ignore kernel-log events older than this (s).")
@click.option("--trace/--no-trace", default=True, show_default=True,
              help="Trace cgroup mkdir/rmdir with perf while sampling, to name who makes zombies.")
@click.option("--systemd-pid", type=int, help="Inspect the systemd that is PID 1 of this PID's namespace.")
@click.option("--threads/--no-threads", default=True, show_default=True, help="Attribute CPU per thread.")
@click.option("--zombie-warn", default=1000, show_default=True, help="Dying cgroups that make a warning.")
@click.option("--zombie-crit", default=10000, show_default=True, help="Dying cgroups that make it critical.")
@click.option("--rules", type=click.Path(), help="Kernel-log rules file (NPD kernel-monitor shape).")
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="When memcgs are dying, measure what one costs here (makes and removes empty memcgs).")
@one_line_errors
def check(root, seconds, as_json, npd, kmsg, boot_time, lookback, trace, systemd_pid, threads, zombie_warn,
          zombie_crit, rules, probe):
    """Say whether this node has the problem class now, and why. Exit 0 OK, 1 problem, 2 unknown."""
    from .detect.check import CheckOptions, run_check, to_json
    from .report.text import npd_line, render

    from .timeparse import parse_time

    res = run_check(CheckOptions(root=root, seconds=seconds, kmsg=kmsg, lookback=lookback, trace=trace,
                                 boot_time=parse_time(boot_time) if boot_time else None,
                                 ns_pid=systemd_pid, threads=threads, zombie_warn=zombie_warn,
                                 zombie_crit=zombie_crit, rules=rules, probe=probe))
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
@click.option("--units-every", default=5, show_default=True, help="Read systemd units every N ticks.")
@click.option("--systemd-pid", type=int, help="Read units from the systemd that is PID 1 of this PID's namespace.")
@click.option("--kmsg", type=click.Path(), help="Recorded kernel log file instead of ROOT/dev/kmsg.")
@click.option("--threads/--no-threads", default=True, show_default=True)
@click.option("--quiet", is_flag=True, help="No status line.")
@click.option("--profile", is_flag=True, help="Also run continuous perf record -a -g into the store.")
@click.option("--profile-freq", default=49, show_default=True, help="perf sampling frequency (Hz).")
@click.option("--profile-rotate", default=10.0, show_default=True, help="Seconds per perf chunk.")
@click.option("--trace-churn", is_flag=True,
              help="Also trace cgroup mkdir/rmdir/release with perf: who creates cgroups, zombie lifetimes.")
@one_line_errors
def record(store, root, interval, duration, retention, max_size, segment, live_every, units_every, systemd_pid, kmsg,
           threads, quiet, profile, profile_freq, profile_rotate, trace_churn):
    """Record per-CPU, per-process, cgroup, kernel-log, NIC and unit data every second into STORE."""
    from .record.recorder import RecordOptions, Recorder

    opt = RecordOptions(store=store, root=root, interval=interval,
                        duration=_duration(duration) if duration else None, retention=_duration(retention),
                        max_bytes=_size(max_size), segment_seconds=_duration(segment), live_every=live_every,
                        units_every=units_every, threads=threads, ns_pid=systemd_pid, kmsg=kmsg, profile=profile,
                        profile_freq=profile_freq, profile_rotate=profile_rotate, churn=trace_churn)
    status = None
    if not quiet and sys.stderr.isatty():
        def status(rec, tick):
            from .collect.cpu import from_deltas

            utils = (from_deltas(c, d) for c, d in (tick.cpu_raw or {}).items() if c >= 0)
            hot = max((u for u in utils if u), key=lambda u: u.busy, default=None)
            click.echo(f"\r{rec.ticks} ticks, {rec.bytes / 1024:.0f} KiB written"
                       + (f", hottest CPU {hot.cpu} {hot.busy:.0f}%" if hot else "") + "   ", nl=False, err=True)
    Recorder(opt, on_tick=status).run()


def _times(frm, to) -> tuple[float | None, float | None]:
    """--from/--to as epoch seconds; a reversed or empty range is a user mistake (exit 2)."""
    from .timeparse import iso, parse_time

    t0 = parse_time(frm) if frm else None
    t1 = parse_time(to) if to else None
    if t0 is not None and t1 is not None and t0 >= t1:
        raise InputError("--from/--to", f"from ({iso(t0)}) is after to ({iso(t1)})" if t0 > t1
                         else f"empty range: from and to are both {iso(t0)}")
    return t0, t1


def _range(store, frm, to):
    from .store.store import StoreReader

    t0, t1 = _times(frm, to)
    return StoreReader(store), t0, t1


def _warn(problems) -> None:
    """Read problems in one line (exit 2 follows from the caller)."""
    from .store.segment import summarise

    if problems:
        click.echo(f"nodesleuth: warning: {summarise(problems)}", err=True)


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
    _warn(reader.problems)
    click.echo(f"{n} samples", err=True)
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
    (~ = estimated split of a migrating thread), zombies, ksoftirqd waits, events)."""
    from .report.replay import render
    from .store import query
    from .timeparse import parse_time

    if at:
        t = parse_time(at)
        frm, to = str(t - around), str(t + around)
    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader)
    with prog:
        n = render(query.ticks(reader, t0, t1, on_segment=cb), None if all_cpus else top_n)
    _warn(reader.problems)
    if not n:
        click.echo("no samples in that range", err=True)
    sys.exit(2 if reader.problems else 0)


@main.group()
def profile() -> None:
    """Continuous profiling: run it, ingest perf script text, look at heatmaps and top functions."""


@profile.command("run")
@click.option("--store", required=True, type=click.Path())
@click.option("--freq", default=49, show_default=True)
@click.option("--rotate", default=10.0, show_default=True)
@click.option("--duration", help="Stop after this long; default until SIGTERM.")
@click.option("--retention", default="1d", show_default=True)
@click.option("--max-size", default="4G", show_default=True)
@one_line_errors
def profile_run(store, freq, rotate, duration, retention, max_size):
    """Run perf record -a -g continuously into STORE (without the 1 Hz recorder)."""
    import signal
    import time

    from .profile.runner import ProfileRunner
    from .store.store import StoreWriter

    w = StoreWriter(store, _duration(retention), _size(max_size))
    r = ProfileRunner(w.append, freq=freq, rotate=rotate, workdir=w.workdir("profile"))
    if not r.start():
        raise InputError("perf", r.error or "cannot start")
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    end = time.time() + _duration(duration) if duration else None
    try:
        while not stop and (end is None or time.time() < end):
            time.sleep(0.2)
    finally:
        r.stop()
        w.enforce()
        w.close()
    click.echo(f"{r.samples} samples in {r.chunks} chunks, {r.restarts} perf restarts", err=True)


@profile.command("ingest")
@click.argument("script", type=click.Path())
@click.option("--store", required=True, type=click.Path())
@click.option("--offset", default=0.0, show_default=True,
              help="Seconds added to perf timestamps (wall-clock minus the perf clock at capture).")
@one_line_errors
def profile_ingest(script, store, offset):
    """Store a `perf script` text file (comm,pid,tid,cpu,time,... fields) for range queries."""
    from .profile.codec import encode
    from .profile.parse import parse_file
    from .store.store import StoreWriter

    b = parse_file(script)
    w = StoreWriter(store)
    t0, payload = encode(b, offset)
    w.append("profile", t0, payload)
    w.close()
    click.echo(f"{len(b)} samples, {len(b.stacks)} unique stacks, {b.skipped} skipped", err=True)


def _pfilter(cpu, pid, comm, keep_idle=False, cgroup=None):
    from .profile.query import Filter

    pids = None
    if cgroup:
        from .collect.cgroups import pids_in_cgroup
        from .collect.root import Root

        pids = pids_in_cgroup(Root("/"), cgroup)
    return Filter(set(cpu) if cpu else None, set(pid) if pid else None, set(comm) if comm else None,
                  cgroup_pids=pids, keep_idle=keep_idle)


def _load_profile(store, frm, to):
    from .profile.query import load

    reader, t0, t1 = _range(store, frm, to)
    prog, cb = _progress(reader, "profile")
    with prog:
        s = load(reader, t0, t1, on_segment=cb)
    _warn(reader.problems)
    if not len(s):
        from .timeparse import iso

        rng = f"{iso(t0) if t0 else 'the start'} .. {iso(t1) if t1 else 'the end'}"
        raise InputError(store, f"no profile samples in {rng}" + (" (parts of the store could not be read)"
                                                                   if reader.problems else ""))
    return s, t0, t1


def _span(text: str) -> tuple[str, str]:
    a, sep, b = text.partition("..")
    if not sep or not a or not b:
        raise InputError(text, "expected T1..T2")
    return a, b


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm", help="Start (ISO-8601, epoch, '10m ago').")
@click.option("--to", help="End.")
@click.option("--cpu", type=int, multiple=True, help="Only these CPUs (repeatable).")
@click.option("--pid", type=int, multiple=True, help="Only these processes (repeatable).")
@click.option("--comm", multiple=True, help="Only these command names (repeatable).")
@click.option("--cgroup", help="Only processes now in this cgroup (and below), e.g. /kubepods/burstable or "
              "/system.slice/kubelet.service; membership is read at query time.")
@click.option("--diff-baseline", help="T1..T2: colour by change against this window (normalised).")
@click.option("--format", "fmt", type=click.Choice(["svg", "folded", "speedscope"]),
              help="Default: from -o's extension (.svg, .json = speedscope), else folded.")
@click.option("--idle", is_flag=True, help="Keep idle samples.")
@click.option("-o", "--output", type=click.Path())
@one_line_errors
def flame(store, frm, to, cpu, pid, comm, cgroup, diff_baseline, fmt, idle, output):
    """Flame graph of any time range, filtered by CPU, pid or comm; optionally against a baseline."""
    import json

    from .profile import export
    from .profile.query import diff, folded, folded_text
    from .timeparse import iso

    s, t0, t1 = _load_profile(store, frm, to)
    f = _pfilter(cpu, pid, comm, idle, cgroup)
    fc = folded(s, f)
    if not fmt:
        fmt = "svg" if output and output.endswith(".svg") else "speedscope" if output and output.endswith(
            ".json") else "folded"
    base = None
    if diff_baseline:
        b0, b1 = _span(diff_baseline)
        bs, _, _ = _load_profile(store, b0, b1)
        base = folded(bs, f)
    if fmt == "svg":
        what = f"CPU {','.join(map(str, cpu))} " if cpu else ""
        rng = f"{iso(t0) if t0 else 'start'} .. {iso(t1) if t1 else 'end'}"
        text = export.svg(fc, f"{what}{rng} ({sum(fc.values())} samples)" + (" vs baseline" if base else ""),
                          baseline=base)
    elif fmt == "speedscope":
        text = json.dumps(export.speedscope(s, f))
    elif base is not None:
        text = "".join(f"{k} {b} {i}\n" for k, b, i in diff(fc, base))
    else:
        text = folded_text(fc)
    if output:
        with open(output, "w") as fh:
            fh.write(text)
        click.echo(f"{sum(fc.values())} samples, {len(fc)} stacks -> {output}", err=True)
    else:
        click.echo(text, nl=False)
    sys.exit(2 if s.problems else 0)


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm")
@click.option("--to")
@click.option("--cpu", type=int, multiple=True, help="Per-CPU heatmap for these CPUs; default all CPUs.")
@click.option("--rows", default=50, show_default=True, help="Subsecond rows (FlameScope: 50).")
@click.option("--json", "as_json", is_flag=True, help="FlameScope's API shape plus hot_cpus per column.")
@one_line_errors
def heatmap(store, frm, to, cpu, rows, as_json):
    """FlameScope-style subsecond-offset heatmap, per CPU or all CPUs, with hot cores marked."""
    import json

    from .profile.query import heatmap as hm

    s, t0, t1 = _load_profile(store, frm, to)
    h = hm(s, _pfilter(cpu, None, None), rows=rows, start=t0, end=t1)
    if as_json:
        click.echo(json.dumps({"start": h.start, "rows": list(range(h.rows)), "columns": h.columns,
                               "values": h.values, "maxvalue": h.maxvalue, "hot_cpus": h.hot_cpus, "cpus": h.cpus}))
        return
    shades = " .:-=+*#%@"
    for r in range(h.rows):
        line = "".join(shades[min(9, int(9 * col[r] / h.maxvalue))] if h.maxvalue else " " for col in h.values)
        click.echo(f"{1000 - (r + 1) * 1000 // h.rows:>4}ms |{line}|")
    click.echo("hot CPUs per second: " + " ".join(
        f"{c}:{','.join(map(str, hc))}" for c, hc in zip(h.columns, h.hot_cpus) if hc) or "none")
    sys.exit(2 if s.problems else 0)


@main.command("top-functions")
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm")
@click.option("--to")
@click.option("--cpu", type=int, multiple=True)
@click.option("--pid", type=int, multiple=True)
@click.option("--all-functions", is_flag=True, help="User-space functions too, not only the kernel's.")
@click.option("-n", default=15, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@one_line_errors
def top_functions(store, frm, to, cpu, pid, all_functions, n, as_json):
    """The hottest kernel functions on CPU N (self and total samples) in a range."""
    import json

    from rich.console import Console
    from rich.table import Table

    from .profile.query import top_functions as tf

    s, _, _ = _load_profile(store, frm, to)
    rows = tf(s, _pfilter(cpu, pid, None), kernel_only=not all_functions, n=n)
    if as_json:
        click.echo(json.dumps(rows))
        return
    t = Table("function", "self %", "total %", "self", "total")
    for r in rows:
        t.add_row(r["function"], f"{r['self_pct']:.1f}", f"{r['total_pct']:.1f}", str(r["self"]), str(r["total"]))
    Console().print(t)
    sys.exit(2 if s.problems else 0)


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--at", help="Explain the incident covering this time (ISO-8601, epoch, '10m ago').")
@click.option("--incidents", is_flag=True, help="Find the incidents in the range and explain each (default).")
@click.option("--from", "frm", help="Range start; default: the whole recording.")
@click.option("--to", help="Range end.")
@click.option("--json", "as_json", is_flag=True, help="Schema nodesleuth.explain/v2.")
@click.option("--markdown", type=click.Path(), help="Also write a Markdown report here.")
@click.option("--html", "html_out", type=click.Path(), help="Also write an HTML report here.")
@click.option("--trace", type=float, help="First trace cgroup churn live for this many seconds and print creators.")
@one_line_errors
def explain(store, at, incidents, frm, to, as_json, markdown, html_out, trace):
    """Rebuild event -> hot core -> process -> function -> zombie cgroups -> creating unit -> fix,
    with a measured share and a verdict (proven / contributing / not proven) for every link.
    Exit 0; 2 when parts of the recording could not be read (the answer may be incomplete)."""
    from .explain import chain, load, report
    from .timeparse import parse_time

    if trace:
        _trace_churn(trace)
    t0, t1 = _times(frm, to)
    t = parse_time(at) if at else None
    lo, hi = (t, t) if t is not None else (t0, t1)
    rec, problems = load.recording(store, lo, hi)
    chosen, notes = load.choose(rec, t, t0, t1)
    if t is not None and not chosen:  # none covers T: name the nearest in the whole recording
        whole, problems = load.recording(store, None, None)
        _, notes = load.choose(whole, t, None, None)
    incs = [chain.build(rec, i) for i in chosen]
    if markdown:
        _write_text(markdown, report.markdown(incs, store, notes, problems))
    if html_out:
        _write_text(html_out, report.html_report(incs, store, notes, problems))
    _warn(problems)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report.to_json(incs, store, problems, notes),
                                             option=orjson.OPT_INDENT_2) + b"\n")
    else:
        report.terminal(incs, notes, problems)
    sys.exit(2 if problems else 0)


def _trace_churn(seconds: float) -> None:
    from .collect.churn import ChurnTracer

    tr = ChurnTracer()
    if not tr.start():
        raise InputError("perf", tr.error or "cannot trace")
    import time as _t

    _t.sleep(seconds)
    summ = tr.stop(seconds)
    for c in (summ.creators if summ else [])[:10]:
        click.echo(f"churn: {c.comm} made {c.mkdir} / removed {c.rmdir} cgroups like {c.pattern}"
                   + (f" (unit {c.unit})" if c.unit else "") + f"; {c.still_dying} still dying; pids "
                   f"{sorted(c.pids)[:5]}", err=True)


def _write_text(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise InputError(path, f"cannot write: {e.strerror or e}") from None


@main.command()
@click.option("--store", type=click.Path(), help="Plan from explain over this recording; default: a live check.")
@click.option("--from", "frm")
@click.option("--to")
@click.option("--systemd-pid", type=int, help="Act on the systemd that is PID 1 of this PID's namespace.")
@click.option("--unit", "units", multiple=True, help="Allow acting on this protected unit (kubelet, sshd, "
              "systemd-*...) when it is proven to be the cause.")
@click.option("--apply", "do_apply", is_flag=True, help="Do it (default: print what would be done).")
@click.option("--seconds", default=5.0, show_default=True, help="Live check length when no --store.")
@one_line_errors
def remedy(store, frm, to, systemd_pid, units, do_apply, seconds):
    """Perform what explain (or check) proved: disable and mask the unit proven to make the zombies,
    reclaim zombies proven to cost a core. Nothing unproven, no protected unit unless named."""
    import json

    from .remedy import apply as rm

    allow = set(units)
    if store:
        from .explain import chain, load

        t0, t1 = _times(frm, to)
        rec, problems = load.recording(store, t0, t1)
        _warn(problems)
        plan = rm.plan([chain.build(rec, i) for i in load.incidents(rec, t0, t1)], allow)
    else:
        from .detect.check import CheckOptions, run_check

        plan = rm.plan(run_check(CheckOptions(seconds=seconds, ns_pid=systemd_pid)).findings, allow)
    for a in plan.actions:
        click.echo(f"because: {a.why}")
    for r in plan.refused:
        click.echo(f"refused: {r}")
    cmds = plan.commands(systemd_pid)
    if not cmds:
        click.echo("nothing to do: no unit is proven to make zombies and no zombie cost is proven")
        return
    if not do_apply:
        click.echo("would run (dry run; --apply to act):")
        for c in cmds:
            click.echo(f"  {c}")
        return
    res = rm.apply(plan, systemd_pid, log=click.echo)
    click.echo(json.dumps(res))


@main.command()
@click.option("--root", default="/", show_default=True)
@click.option("--listen", default="127.0.0.1:9846", show_default=True, help="ADDR:PORT to serve /metrics on.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--zone", help="Zone label for nodesleuth_node_info (default: from cloud-init instance data).")
@click.option("--systemd-pid", type=int)
@click.option("--kmsg", type=click.Path(), help="Recorded kernel log file instead of ROOT/dev/kmsg.")
@one_line_errors
def exporter(root, listen, interval, zone, systemd_pid, kmsg):
    """Prometheus/OpenMetrics endpoint (/metrics) and a host snapshot (/snapshot) for fleet analysis."""
    import json
    import os
    import threading
    import time
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app

    from .collect.root import Root
    from .fleet import exporter as ex
    from .fleet import snapshot as snap

    r = Root(root)
    state = ex.State()
    kmsg_src = kmsg or (r.exists("/dev/kmsg") and os.access(r.join("/dev/kmsg"), os.R_OK))
    th = ex.SamplerThread(r, state, interval, systemd_pid, kmsg_src)
    th.start()
    reg = CollectorRegistry()
    reg.register(ex.NodesleuthCollector(state, ex.node_info(r, zone)))
    metrics = make_wsgi_app(reg)
    cache = {"t": 0.0, "doc": b""}
    lock = threading.Lock()

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/snapshot":
            with lock:
                if time.time() - cache["t"] > 60:
                    cache["doc"] = json.dumps(snap.take(r, 1.0, systemd_pid, zone)).encode()
                    cache["t"] = time.time()
                body = cache["doc"]
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        if environ.get("PATH_INFO") in ("/metrics", "/"):
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /snapshot\n"]

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, *a):
            pass

    host, _, port = listen.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]"):
        click.echo(f"nodesleuth: serving metrics on {listen}, reachable from the network", err=True)
    try:
        httpd = make_server(host.strip("[]") or "127.0.0.1", int(port), app, server_class=Server, handler_class=Quiet)
    except OSError as e:
        raise InputError(listen, f"cannot listen: {e.strerror or e}") from None
    click.echo(f"nodesleuth exporter on http://{listen}/metrics", err=True)
    httpd.serve_forever()


@main.command()
@click.option("--root", default="/", show_default=True)
@click.option("--seconds", default=2.0, show_default=True)
@click.option("--systemd-pid", type=int)
@click.option("--zone", help="Override the zone (when the host does not show it).")
@click.option("-o", "--output", type=click.Path())
@one_line_errors
def snapshot(root, seconds, systemd_pid, zone, output):
    """JSON fingerprint of this host (kernel, image, units, sysctls, packages, cloud zone) plus health."""
    import json

    from .collect.root import Root
    from .fleet.snapshot import take

    doc = json.dumps(take(Root(root), seconds, systemd_pid, zone), indent=2)
    if output:
        with open(output, "w") as f:
            f.write(doc + "\n")
    else:
        click.echo(doc)


@main.command()
@click.argument("sources", nargs=-1, required=True)
@click.option("--group-by", default="zone", show_default=True, help="zone, instance_type, kernel or os_image.")
@click.option("--top", default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@one_line_errors
def fleet(sources, group_by, top, as_json):
    """Compare snapshots (directories, files or URLs): who is affected, and which config difference explains it."""
    import json

    from .fleet import drift

    snaps = drift.load(list(sources))
    ranked, na, nh = drift.rank(snaps, top)
    grp = drift.groups(snaps, group_by)
    if as_json:
        click.echo(json.dumps({"hosts": len(snaps), "affected": na, "healthy": nh,
                               "groups": {k: {"affected": a, "total": t} for k, (a, t) in grp.items()},
                               "ranked": [r.__dict__ for r in ranked]}, indent=2))
        return
    click.echo(f"{len(snaps)} hosts: {na} affected, {nh} healthy")
    click.echo(f"by {group_by}: " + ", ".join(f"{k} {a}/{t}" for k, (a, t) in grp.items()))
    click.echo("differences that separate affected from healthy hosts:")
    for r in ranked:
        click.echo(f"  {r.score:+.2f}  {r.feature}: on {r.affected_share:.0%} of affected hosts, "
                   f"{r.healthy_share:.0%} of healthy ones")


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--port", default=8080, show_default=True)
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback requires a token.")
@click.option("--token", envvar="NODESLEUTH_TOKEN", help="Token required on every request (default: generated "
              "when --bind is not loopback).")
@one_line_errors
def serve(store, port, bind, token):
    """Web view: CPU timeline, subsecond heatmaps, flame graphs, incidents."""
    import os

    from .web.server import serve as run

    if not os.path.isdir(store):
        raise InputError(store, "no such store directory")
    run(store, bind, port, token, log=lambda m: click.echo(m, err=True))


@main.group()
def lab() -> None:
    """Reproduce the incident for real on this machine, and undo it."""


@lab.command("run")
@click.option("--seconds", default=30.0, show_default=True, help="How long the data loader runs once zombies are there.")
@click.option("--workdir", default="/var/lib/nodesleuth-lab", show_default=True)
@click.option("--cpu", default=1, show_default=True, help="The core the data loader and the poller are pinned to.")
@click.option("--zombies", default=30000, show_default=True, help="Dying memcgs the unit must leave before the "
              "data loader starts.")
@click.option("--rate", default=100.0, show_default=True, help="Data loader MB/s (page cache through reclaim).")
@click.option("--per-start", default=500, show_default=True, help="Cgroups the agent leaves per start.")
@click.option("--restart-sec", default="200ms", show_default=True, help="RestartSec of the crash-looping unit.")
@click.option("--no-curve", is_flag=True, help="Skip measuring the cost curve first.")
@click.option("--curve", "curve_at", default="0,1000,10000,30000", show_default=True,
              help="Zombie counts the cost curve is measured at (a slow VM wants fewer).")
@click.option("--min-growth", default=5.0, show_default=True, help="How many times the cost at the last curve "
              "point must exceed the cost at the first (under software emulation the fill itself is dear: the VM "
              "test uses 3).")
@click.option("--no-profile", is_flag=True, help="Record without perf -g (faster, less evidence).")
@one_line_errors
def lab_run(seconds, workdir, cpu, zombies, rate, per_start, restart_sec, no_curve, curve_at, min_growth, no_profile):
    """The incident made by the kernel: a crash-looping unit leaves zombies, reclaim walks them on CPU N."""
    from .lab.run import LabError, run

    try:
        st = run(seconds=seconds, workdir=workdir, cpu=cpu, per_start=per_start, restart_sec=restart_sec,
                 zombies=zombies, rate=rate, profile=not no_profile, curve=not no_curve,
                 points=_counts(curve_at, "--curve"), min_growth=min_growth, log=lambda m: click.echo(m, err=True))
    except LabError as e:
        raise InputError(workdir, str(e)) from None
    if st.curve:
        click.echo(f"\nmemcg reclaim cost on this kernel (data loader at {rate:.0f} MB/s on CPU {cpu}):")
        click.echo(f"{'zombies':>8} {'kernel ms/MB':>13} {'share of CPU':>13}")
        for c in st.curve:
            click.echo(f"{c['zombies']:>8} {c['reclaim_sys_ms_per_mb']:>13.2f} {100 * c['core_share_at_rate']:>12.0f}%")
    click.echo(f"\n{st.zombies} zombies made by ecs.service; CPU {cpu} busy per second: "
               + " ".join(f"{v['busy']:.0f}" for v in st.victim if v["busy"] is not None))
    click.echo("NIC reset lines: " + (f"{len(st.resets)} SIMULATED (the victim waited past the lab's threshold)"
                                      if st.resets else "none simulated (the victim was not starved)"))
    click.echo(f"\nrecording: {st.store}\nnext: nodesleuth explain --store {st.store}; then nodesleuth lab clean")


def _counts(text: str, opt: str) -> tuple[int, ...]:
    try:
        out = tuple(sorted(int(x) for x in text.split(",") if x.strip()))
    except ValueError:
        out = ()
    if len(out) < 2 or out[0] < 0:
        raise click.BadParameter(f"{text!r}: two or more zombie counts, e.g. 0,1000,10000", param_hint=opt)
    return out


@lab.command("clean")
@click.option("--workdir", default="/var/lib/nodesleuth-lab", show_default=True)
@click.option("--keep-store", is_flag=True)
@one_line_errors
def lab_clean(workdir, keep_store):
    """Stop what lab run started, remove its cgroups and files, drop caches, verify the zombie count."""
    from .lab.run import clean

    res = clean(workdir, log=lambda m: click.echo(m, err=True), keep_store=keep_store)
    sys.exit(0 if res["returned_to_baseline"] else 1)  # 1: the memory cgroup count stayed above the baseline


if __name__ == "__main__":
    main()
