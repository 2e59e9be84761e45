"""`lab run|clean`: options and calls."""

from __future__ import annotations

import sys

import click

from ..model.errors import InputError
from . import main
from .common import one_line_errors


@main.group()
def lab() -> None:
    """Reproduce the incident for real on this machine, and undo it."""

@lab.command("run")
@click.option("--seconds", default=30.0, show_default=True, help="How long the data loader runs once zombies are there.")
@click.option("--workdir", default="/var/lib/nodesleuth-lab", show_default=True)
@click.option("--cpu", default=1, show_default=True, help="The core the data loader and the poller are pinned to.")
@click.option("--zombies", default=30000, show_default=True, help="Dying memcgs the unit must leave before the "
              "data loader starts.")
@click.option("--rate", type=float, default=None, show_default="chosen from the cost curve to saturate the core",
              help="Data loader MB/s (page cache through reclaim). By default the rate that saturates CPU N at "
              "--zombies, from the measured cost curve (100 with --no-curve), and the run fails when the core was "
              "not >= 95% busy for >= 80% of it; a rate given here is not held to that.")
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
def lab_run(seconds, workdir, cpu, zombies, rate, per_start, restart_sec, no_curve, curve_at, min_growth,
            no_profile):
    """The incident made by the kernel: a crash-looping unit leaves zombies, reclaim walks them on CPU N."""
    from ..lab.run import LabError, run

    try:
        st = run(seconds=seconds, workdir=workdir, cpu=cpu, per_start=per_start, restart_sec=restart_sec,
                 zombies=zombies, rate=rate, profile=not no_profile, curve=not no_curve,
                 points=_counts(curve_at, "--curve"), min_growth=min_growth, log=lambda m: click.echo(m, err=True))
    except (LabError, RuntimeError, OSError) as e:  # its sentence names the workdir where that is the point
        import os

        # a run that got as far as its state file leaves cgroups and files: say how to undo them
        left = os.path.exists(os.path.join(workdir, "state.json")) and "state.json" not in str(e)
        raise InputError("lab run", f"{e}" + (f"; undo what it made: nodesleuth lab clean --workdir {workdir}"
                                               if left else "")) from None
    if st.curve:
        click.echo(f"\nmemcg reclaim cost on this kernel (data loader at {st.rate:.0f} MB/s on CPU {cpu}):")
        click.echo(f"{'zombies':>8} {'kernel ms/MB':>13} {'share of CPU':>13}")
        for c in st.curve:
            click.echo(f"{c['zombies']:>8} {c['reclaim_sys_ms_per_mb']:>13.2f} {100 * c['core_share_at_rate']:>12.0f}%")
    click.echo(f"\n{st.zombies} zombies made by ecs.service; CPU {cpu} busy per second: "
               + " ".join(f"{v['busy']:.0f}" for v in st.victim if v["busy"] is not None))
    sat = st.saturated
    if sat:
        click.echo(f"saturated (>= {sat['busy_at_least']:.0f}% busy): {sat['seconds']} of {sat['of']} s "
                   f"({100 * sat['share']:.0f}%) at {st.rate:.0f} MB/s, {st.rate_from}")
    click.echo("NIC reset lines: " + (f"{len(st.resets)} SIMULATED (the victim waited past the lab's threshold)"
                                      if st.resets else "none simulated (the victim was not starved)"))
    click.echo(f"\nrecording: {st.store}\nnext: nodesleuth explain --store {st.store}; then nodesleuth lab clean")

def _counts(text: str, opt: str) -> tuple[int, ...]:
    try:
        out = tuple(sorted(int(x) for x in text.split(",") if x.strip()))
    except ValueError:
        out = ()
    if len(out) < 2 or out[0] < 0:
        raise InputError(opt, f"{text!r}: two or more zombie counts, none negative, e.g. 0,1000,10000")
    return out

@lab.command("clean")
@click.option("--workdir", default="/var/lib/nodesleuth-lab", show_default=True)
@click.option("--keep-store", is_flag=True, help="Keep the recording (WORKDIR/store and recorder.log); remove the rest.")
@one_line_errors
def lab_clean(workdir, keep_store):
    """Stop what lab run started, remove its cgroups and files, drop caches, verify the zombie count."""
    from ..lab.run import clean

    res = clean(workdir, log=lambda m: click.echo(m, err=True), keep_store=keep_store)
    sys.exit(0 if res["returned_to_baseline"] else 1)  # 1: the memory cgroup count stayed above the baseline

