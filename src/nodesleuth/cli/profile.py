"""`profile run|ingest`, `flame`, `heatmap`, `top-functions`: options and calls."""

from __future__ import annotations

import sys

import click

from ..model.errors import InputError
from ..store.catalog import HEAT, PROFILE
from . import main
from .common import deprecated, one_line_errors, _size, _duration, _range, _times, _warn, _progress


@main.group()
def profile() -> None:
    """Continuous profiling: run it, ingest perf script text, look at heatmaps and top functions."""

@profile.command("run")
@click.option("--store", required=True, type=click.Path())
@click.option("--freq", default=49, show_default=True)
@click.option("--rotate", default=10.0, show_default=True)
@click.option("--buffer", "buffer_kb", default=0, show_default=True,
              help="KB of perf ring buffer per CPU (0: from the rate); lost samples are counted and stored.")
@click.option("--duration", help="Stop after this long; default until SIGTERM.")
@click.option("--retention", default="1d", show_default=True)
@click.option("--max-size", default="4G", show_default=True)
@click.option("--method", type=click.Choice(["auto", "direct", "perf"]), default=None,
              help="direct: read the kernel's perf ring buffers here (perf_event_open; needs root or CAP_PERFMON, "
                   "x86_64); perf: perf record, its stacks named by perf script; auto (default, or "
                   "$NODESLEUTH_PROFILER): direct where possible, else perf record, and says why.")
@click.option("--chunked", is_flag=True, hidden=True,
              help="The former pipeline: one full perf script per chunk (benchmarks and tests compare with it).")
@deprecated("--stream", into="method", use="--method perf", is_flag=True,
            convert=lambda value, current: "perf")  # 0.2.0: one long-lived perf script, today perf record's path
@one_line_errors
def profile_run(store, freq, rotate, buffer_kb, duration, retention, max_size, method, chunked):
    """Profile every CPU continuously into STORE (without the 1 Hz recorder): cpu-clock at FREQ Hz with
    kernel and user stacks, the kernel's ring buffers read directly where possible, else perf record."""
    from ..profile import service

    done = service.run(store, freq, rotate, buffer_kb, _duration(duration) if duration else None, _duration(retention),
                       _size(max_size), method, chunked)
    click.echo(done.line(), err=True)


@profile.command("ingest")
@click.argument("script", type=click.Path())
@click.option("--store", required=True, type=click.Path())
@click.option("--offset", default=0.0, show_default=True,
              help="Seconds added to perf timestamps (wall-clock minus the perf clock at capture).")
@click.option("--event", help="Store this event's samples (default: the clock event if present, else the first).")
@one_line_errors
def profile_ingest(script, store, offset, event):
    """Store a `perf script` text file (any -F field set; one event) for range queries."""
    from ..profile import service

    notes, summary = service.ingest(script, store, offset, event)
    for n in notes:
        click.echo(f"note: {n}", err=True)
    click.echo(summary, err=True)


def _pfilter(cpu, pid, comm, keep_idle=False, cgroup=None):
    from ..profile.samples import Filter

    pids = None
    if cgroup:
        from ..node.cgroupfs import pids_in_cgroup
        from ..node.root import Root

        pids = pids_in_cgroup(Root("/"), cgroup)
    return Filter(set(cpu) if cpu else None, set(pid) if pid else None, set(comm) if comm else None,
                  cgroup_pids=pids, keep_idle=keep_idle)

def _load_profile(reader, store, t0, t1, stacks_only=False, cpus=None):
    """The samples of [t0, t1] from the command's one open store (recording/flame.range_samples), with
    a progress line; the read problems it met said once; InputError when there are none."""
    from ..recording.flame import range_samples

    seen = len(reader.problems)
    prog, cb = _progress(reader, PROFILE)
    with prog:
        s = range_samples(reader, t0, t1, stacks_only, set(cpus) if cpus else None, on_segment=cb)
    _warn(reader.problems[seen:])
    if not len(s):
        _no_samples(store, t0, t1, reader)
    return s

def _no_samples(store, t0, t1, reader):
    from ..model.timeparse import iso

    rng = f"{iso(t0) if t0 else 'the start'} .. {iso(t1) if t1 else 'the end'}"
    raise InputError(store, f"no profile samples in {rng}" + (" (parts of the store could not be read)"
                                                               if reader.problems else ""))

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
@click.option("--format", "fmt", type=click.Choice(["svg", "folded", "collapsed-cpu", "speedscope",
                                                   "speedscope-process", "pprof"]),
              help="Default: from -o's extension (.svg, .json = speedscope, .pb.gz = pprof), else folded. "
              "collapsed-cpu: folded with the CPU as root frame; speedscope: one profile per CPU, "
              "speedscope-process: one per process; pprof: gzip protobuf for go tool pprof, Pyroscope, Parca.")
@click.option("--max-depth", default=64, show_default=True, help="SVG: cut stacks deeper than this (noted).")
@click.option("--hz", default=49.0, show_default=True,
              help="pprof: the sampling frequency recorded at, for the cpu nanoseconds sample type beside samples.")
@click.option("--idle", is_flag=True, help="Keep idle samples.")
@click.option("--name", "root", type=click.Choice(["comm", "pid", "tid"]), default="comm", show_default=True,
              help="Process frame: comm, comm-PID (stackcollapse-perf.pl --pid), comm-PID/TID (--tid).")
@click.option("--annotate", type=click.Choice(["kernel", "jit", "all", "none"]), default="kernel",
              show_default=True, help="Frame suffixes _[k]/_[j] (stackcollapse-perf.pl --kernel/--jit/--all/none).")
@click.option("--raw-names", is_flag=True, help="Keep symbol names as perf printed them (no tidying of C++ "
              "argument lists, Java L prefixes, quotes).")
@click.option("--weight", type=click.Choice(["samples", "period"]), default="samples", show_default=True,
              help="Count samples, or sum perf's period column as stackcollapse-perf.pl does.")
@click.option("-o", "--output", type=click.Path())
@one_line_errors
def flame(store, frm, to, cpu, pid, comm, cgroup, diff_baseline, fmt, max_depth, hz, idle, root, annotate,
          raw_names, weight, output):
    """Flame graph of any time range, filtered by CPU, pid or comm; optionally against a baseline."""
    from ..profile import export
    from ..profile.folded import folded
    from ..model.timeparse import iso

    if not fmt:
        fmt = "svg" if output and output.endswith(".svg") else "speedscope" if output and output.endswith(
            ".json") else "pprof" if output and output.endswith((".pb.gz", ".pprof")) else "folded"
    # per-sample views (sample order, CPUs, tids, periods) need the raw samples; flame graphs do not
    fast = fmt in ("svg", "folded") and root != "tid" and weight == "samples"
    reader, t0, t1 = _range(store, frm, to)  # the one open store of the range and its baseline
    s = _load_profile(reader, store, t0, t1, fast, cpu)
    f = _pfilter(cpu, pid, comm, idle, cgroup)
    how = dict(name=root, annotate=annotate, tidy_names=not raw_names, weight=weight)
    fc = folded(s, f, **how)
    base = None
    if diff_baseline:
        b0, b1 = _times(*_span(diff_baseline))
        bs = _load_profile(reader, store, b0, b1, fast, cpu)
        base = folded(bs, f, **how)
    what = f"CPU {','.join(map(str, cpu))} " if cpu else ""
    title = (f"{what}{iso(t0) if t0 else 'start'} .. {iso(t1) if t1 else 'end'} ({sum(fc.values())} samples)"
             + (" vs baseline" if base else ""))
    text = export.render(fmt, s, f, fc, base, title, max_depth, hz)
    if isinstance(text, bytes):
        if not output:
            raise InputError(f"--format {fmt}", "binary output: give -o FILE.pb.gz")
        with open(output, "wb") as fh:
            fh.write(text)
        click.echo(f"{sum(fc.values())} samples, {len(fc)} stacks -> {output}", err=True)
        sys.exit(2 if s.problems else 0)
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
@click.option("--pid", type=int, multiple=True, help="Only these processes (reads raw samples).")
@click.option("--comm", multiple=True, help="Only these command names (reads raw samples).")
@click.option("--cgroup", help="Only processes now in this cgroup (reads raw samples).")
@click.option("--rows", default=50, show_default=True, help="Subsecond rows (FlameScope: 50).")
@click.option("--step", type=click.IntRange(min=1), default=1, show_default=True,
              help="Seconds per column (from the heatmap aggregates: cells summed, a column's hot CPUs those "
                   "hot in any of its seconds).")
@click.option("--json", "as_json", is_flag=True, help="FlameScope's API shape plus hot_cpus per column.")
@one_line_errors
def heatmap(store, frm, to, cpu, pid, comm, cgroup, rows, step, as_json):
    """FlameScope-style subsecond-offset heatmap, per CPU or all CPUs, with hot cores marked."""
    import json

    import math

    from ..profile.heatmap import heatmap as hm, heatmap_fast

    # whole seconds, as FlameScope's columns: the per-minute heatmap aggregates then answer
    reader, t0, t1 = _range(store, frm, to)
    t0 = None if t0 is None else float(math.floor(t0))
    t1 = None if t1 is None else float(math.ceil(t1))
    flt = _pfilter(cpu, pid, comm, cgroup=cgroup)
    prog, cb = _progress(reader, HEAT)
    with prog:
        h = heatmap_fast(reader, flt, rows=rows, start=t0, end=t1, on_segment=cb, step=step)
    problems = list(reader.problems)
    if h is not None and not h.found:
        _no_samples(store, t0, t1, reader)
    if h is None:
        if step > 1:
            raise InputError("--step", "needs the heatmap aggregates: only with --cpu filters and 50 rows "
                                       "(--pid, --comm, --cgroup and other --rows read raw samples, one second each)")
        s = _load_profile(reader, store, t0, t1)
        h = hm(s, flt, rows=rows, start=t0, end=t1)
        problems = s.problems
    else:
        _warn(reader.problems)
    if as_json:
        click.echo(json.dumps({"start": h.start, "rows": list(range(h.rows)), "columns": h.columns,
                               "values": h.values, "maxvalue": h.maxvalue, "hot_cpus": h.hot_cpus, "cpus": h.cpus,
                               "step": h.step, "notes": [h.hot_note] if h.hot_note else []}))
        return
    from ..report.heatmap import render_text

    click.echo(render_text(h), nl=False)
    if h.hot_note:
        click.echo(h.hot_note)
    sys.exit(2 if problems else 0)

@main.command("top-functions")
@click.option("--store", required=True, type=click.Path())
@click.option("--from", "frm")
@click.option("--to")
@click.option("--cpu", type=int, multiple=True)
@click.option("--pid", type=int, multiple=True)
@click.option("--comm", multiple=True, help="Only these command names (repeatable).")
@click.option("--cgroup", help="Only processes now in this cgroup (and below).")
@click.option("--kernel-only", is_flag=True, help="Only kernel functions (default: user and kernel, marked).")
@click.option("--all-functions", is_flag=True, hidden=True, help="Kept for old scripts: user and kernel is the default.")
@click.option("-n", default=15, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@one_line_errors
def top_functions(store, frm, to, cpu, pid, comm, cgroup, kernel_only, all_functions, n, as_json):
    """The hottest functions (user and kernel, a column says which) on CPU N in a range, by self and
    total samples; the shares of user and kernel samples are printed under the table."""
    import json

    from rich.console import Console
    from rich.table import Table

    from ..profile.top import top_functions as tf

    reader, t0, t1 = _range(store, frm, to)
    s = _load_profile(reader, store, t0, t1, True, cpu)
    import numpy as np

    flt = _pfilter(cpu, pid, comm, cgroup=cgroup)
    rows = tf(s, flt, kernel_only=kernel_only, n=n)
    if as_json:
        click.echo(json.dumps(rows))
        return
    t = Table("function", "where", "self %", "total %", "self", "total")
    for r in rows:
        t.add_row(r["function"], "kernel" if r["kernel"] else "user", f"{r['self_pct']:.1f}", f"{r['total_pct']:.1f}",
                  str(r["self"]), str(r["total"]))
    con = Console()
    con.print(t)
    in_kernel = np.array([bool(st) and st[-1].endswith("_[k]") for st in s.stacks], dtype=bool)
    m = s.select(flt)
    sel = s.stack[m]
    w = s.count[m] if s.count is not None else np.ones(len(sel), dtype=np.int64)  # aggregated rows carry counts
    n_all, k = int(w.sum()), int(w[in_kernel[sel]].sum()) if len(sel) else 0
    con.print(f"{n_all} samples: {100 * k / max(1, n_all):.1f}% in the kernel, "
              f"{100 * (n_all - k) / max(1, n_all):.1f}% in user space"
              + ("; showing kernel functions only (--kernel-only)" if kernel_only else ""), markup=False)
    sys.exit(2 if s.problems else 0)
