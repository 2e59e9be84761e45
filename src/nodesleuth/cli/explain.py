"""`explain` and `remedy`: options and calls."""

from __future__ import annotations

import sys

import click
import orjson

from ..model.errors import InputError
from . import main
from .common import deprecated, one_line_errors, _times, _warn, _write_text


@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--at", help="Explain the incident covering this time (ISO-8601, epoch, '10m ago').")
@click.option("--incidents", is_flag=True, help="Find the incidents in the range and explain each (default).")
@click.option("--from", "frm", help="Range start; default: the whole recording.")
@click.option("--to", help="Range end.")
@click.option("--json", "as_json", is_flag=True, help="Schema nodesleuth.explain/v2.")
@click.option("--markdown", type=click.Path(), help="Also write a Markdown report here.")
@click.option("--html", "html_out", type=click.Path(), help="Also write an HTML report here.")
@click.option("--trace-churn", "trace", type=float, metavar="SECONDS",
              help="First trace cgroup churn live for this many seconds and print creators.")
@deprecated("--trace", into="trace", use="--trace-churn", type=float)  # 0.1.0-0.2.0
@one_line_errors
def explain(store, at, incidents, frm, to, as_json, markdown, html_out, trace):
    """Rebuild event -> hot core -> process -> function -> zombie cgroups -> creating unit -> fix,
    with a measured share and a verdict (proven / contributing / not proven) for every link.
    Exit 0; 2 when parts of the recording could not be read (the answer may be incomplete)."""
    from ..explain import load, report
    from ..model.timeparse import parse_time
    from ..recording.incidents import explanation
    from ..store.store import StoreReader

    load.one_shot()
    if trace:
        _trace_churn(trace)
    t0, t1 = _times(frm, to)
    t = parse_time(at) if at else None
    ex = explanation(StoreReader(store), t, t0, t1)
    incs, notes, problems = ex.incidents, ex.notes, ex.problems
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
    from ..collect.churn import ChurnTracer

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

    from ..remedy import apply as rm

    allow = set(units)
    if store:
        from ..explain import load
        from ..recording.incidents import explained

        load.one_shot()
        t0, t1 = _times(frm, to)
        rec, problems = load.recording(store, t0, t1)
        _warn(problems)
        plan = rm.plan(explained(rec, load.incidents(rec, t0, t1)), allow)
    else:
        from ..check.run import CheckOptions, run_check

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
    if res["failed"]:
        click.echo("nodesleuth: error: remedy failed: " + "; ".join(res["failed"]), err=True)
        sys.exit(1)
