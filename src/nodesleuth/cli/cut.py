"""`cut`: options and calls."""

from __future__ import annotations

import sys

import click

from . import main
from .common import one_line_errors, _times, _warn


@main.command()
@click.option("--store", required=True, type=click.Path(), help="The store to cut from.")
@click.option("--from", "frm", required=True, help="Start (ISO-8601, epoch, '10m ago').")
@click.option("--to", required=True, help="End (same forms).")
@click.argument("out", type=click.Path())
@one_line_errors
def cut(store, frm, to, out):
    """Write the range as a small self-contained store OUT (ticks, 10 s aggregates, rollups, profile
    batches and aggregates, churn, lost samples, the kernel-log lines, the store description) that
    explain, serve and dump read on another machine. Each stream is copied around what explain reads
    for the range (its margin either side, widened until no episode is cut), so the cut explains the
    range as the store does. Exit 2 when parts of the range could not be read."""
    from ..explain.load import extent
    from ..store.cut import cut as do_cut

    t0, t1 = _times(frm, to)
    got = do_cut(store, t0, t1, out, reach=extent(store, t0, t1))
    _warn(got["problems"])
    recs = ", ".join(f"{n} {k}" for k, n in got["records"].items()) or "nothing"
    r0, r1 = got["reach"]
    click.echo(f"{out}: {got['bytes'] / 1e6:.2f} MB ({recs}); the range with what explain reads around it: "
               f"{t0 - r0:.0f} s before, {r1 - t1:.0f} s after", err=True)
    sys.exit(2 if got["problems"] else 0)
