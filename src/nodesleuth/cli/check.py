"""`nodesleuth check`: options and the call."""

from __future__ import annotations

import sys

import click
import orjson

from ..collect.probe_state import STATE_DIR
from ..model.thresholds import ZOMBIE_CRIT, ZOMBIE_WARN
from . import main
from .common import clean_up_on_term, deprecated, one_line_errors


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
@click.option("--trace-churn/--no-trace-churn", "trace", default=True, show_default=True,
              help="Trace cgroup mkdir/rmdir with perf while sampling, to name who makes zombies.")
@deprecated("--trace/--no-trace", into="trace", use={"--trace": "--trace-churn", "--no-trace": "--no-trace-churn"},
            default=None)  # 0.1.0-0.2.0
@click.option("--systemd-pid", type=int, help="Inspect the systemd that is PID 1 of this PID's namespace.")
@click.option("--threads/--no-threads", default=True, show_default=True, help="Attribute CPU per thread.")
@click.option("--zombie-warn", default=ZOMBIE_WARN, show_default=True, help="Dying cgroups that make a warning.")
@click.option("--zombie-crit", default=ZOMBIE_CRIT, show_default=True, help="Dying cgroups that make it critical.")
@click.option("--rules", type=click.Path(), help="Kernel-log rules file (NPD kernel-monitor shape).")
@click.option("--probe/--no-probe", default=None,
              help="--probe: measure now what one memcg costs here and whether this kernel keeps removed memcgs "
                   "dying (makes and removes memcgs; refused while a guard holds: docs/probes.md), and keep the "
                   "result for this boot in --state-dir. Without it no probe runs: the results this boot kept are "
                   "read (--npd never probes).")
@click.option("--state-dir", default=STATE_DIR, show_default=True, type=click.Path(),
              help="Where the probes' results of this boot are kept (a writable hostPath in the DaemonSet).")
@one_line_errors
def check(root, seconds, as_json, npd, kmsg, boot_time, lookback, trace, systemd_pid, threads, zombie_warn,
          zombie_crit, rules, probe, state_dir):
    """Say whether this node has the problem class now, and why. Exit 0 OK, 1 problem, 2 unknown."""
    from ..check.run import CheckOptions, run_check, to_json
    from ..report.text import npd_line, render

    from ..model.timeparse import parse_time

    clean_up_on_term()
    res = run_check(CheckOptions(root=root, seconds=seconds, kmsg=kmsg, lookback=lookback, trace=trace,
                                 boot_time=parse_time(boot_time) if boot_time else None,
                                 ns_pid=systemd_pid, threads=threads, zombie_warn=zombie_warn,
                                 zombie_crit=zombie_crit, rules=rules, probe=probe,
                                 state_dir=state_dir, npd=npd))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(to_json(res, root), option=orjson.OPT_INDENT_2) + b"\n")
    elif npd:
        click.echo(npd_line(res))
    else:
        render(res)
    sys.exit(res.exit_code)
