"""`exporter`, `snapshot`, `fleet`, `serve`: options and calls."""

from __future__ import annotations

import sys

import click

from ..collect.probe_state import STATE_DIR
from ..model.errors import InputError
from . import main
from .common import _bind_into_listen, _listen, _port_into_listen, deprecated, one_line_errors


@main.command()
@click.option("--root", default="/", show_default=True)
@click.option("--listen", default="127.0.0.1:9846", show_default=True, help="ADDR:PORT to serve /metrics on.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between samples.")
@click.option("--zone", help="Zone label for nodesleuth_node_info (default: from cloud-init instance data).")
@click.option("--systemd-pid", type=int)
@click.option("--kmsg", type=click.Path(), help="Recorded kernel log file instead of ROOT/dev/kmsg.")
@click.option("--profile", help="Publish each CPU's time share per code family (nodesleuth_profile_cpu_share_ratio): "
              "`run` profiles this host here (direct ring-buffer reader, else perf record), or a recorder's "
              "store directory (record --profile) is read.")
@click.option("--profile-window", default="60s", show_default=True, help="Window of the profile shares.")
@click.option("--profile-freq", default=49, show_default=True, help="Sampling rate per CPU with --profile run.")
@click.option("--state-dir", default=STATE_DIR, show_default=True, type=click.Path(),
              help="Where the probes' results of this boot are kept: read at start; when this boot has none, "
                   "the probes run once and write them (docs/probes.md).")
@one_line_errors
def exporter(root, listen, interval, zone, systemd_pid, kmsg, profile, profile_window, profile_freq, state_dir):
    """Prometheus/OpenMetrics endpoint (/metrics) and a host snapshot (/snapshot) for fleet analysis."""
    from ..fleet.exporter import serve
    from .common import _duration, clean_up_on_term

    clean_up_on_term()  # its zombie probe removes its cgroups when the kubelet stops it

    serve(root, listen, interval, zone, systemd_pid, kmsg, log=lambda m: click.echo(m, err=True), profile=profile,
          profile_window=_duration(profile_window), profile_freq=profile_freq, state_dir=state_dir)

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

    from ..node.root import Root
    from ..fleet.snapshot import take

    doc = json.dumps(take(Root(root), seconds, systemd_pid, zone), indent=2)
    if output:
        with open(output, "w") as f:
            f.write(doc + "\n")
    else:
        click.echo(doc)

@main.command()
@click.argument("sources", nargs=-1)
@click.option("--prometheus", "prom_url", metavar="URL", help="Ask this Prometheus (or Thanos, Mimir, "
              "VictoriaMetrics) instead of fetching snapshots: affected hosts by --affected, facts from the info metrics.")
@click.option("--affected", "affected_expr", metavar="PROMQL", help="Affected hosts (with --prometheus); must keep "
              "the host label. Default: NIC-reset or hot-core incidents in the last 24 h.")
@click.option("--host-label", default="instance", show_default=True, help="Label that names a host (with --prometheus).")
@click.option("--time", "at", metavar="TIME", help="Evaluate at this time (with --prometheus): ISO-8601, epoch, '2h ago'.")
@click.option("--group-by", default="zone", show_default=True, help="zone, instance_type, kernel or os_image.")
@click.option("--top", default=10, show_default=True)
@click.option("--concurrency", default=32, show_default=True, help="Snapshot URLs fetched at once.")
@click.option("--timeout", type=float, help="Seconds to wait for one snapshot URL (default 5), or for one Prometheus "
              "query (default 130: the server's own 2-minute limit, and a margin).")
@click.option("--retries", default=2, show_default=True, help="Retries of a snapshot URL that does not answer.")
@click.option("--json", "as_json", is_flag=True)
@one_line_errors
def fleet(sources, prom_url, affected_expr, host_label, at, group_by, top, concurrency, timeout, retries, as_json):
    """What do the affected hosts have that the healthy ones do not? From snapshots (directories, files,
    exporters' /snapshot URLs) or from Prometheus (--prometheus URL). Exit 0 analysed, 2 refused or bad
    input, 3 analysed but some hosts did not answer (listed)."""
    import json

    from ..fleet import drift
    from ..report import fleet as rf

    unreachable: list[tuple[str, str]] = []
    notes: list[str] = []
    if prom_url:
        from ..fleet import prom
        from ..model.timeparse import parse_time

        if sources:
            raise InputError(sources[0], "give either snapshot sources or --prometheus, not both")
        ctx = click.get_current_context()
        for name in ("concurrency", "retries"):  # they shape snapshot fetching only: say so, never ignore them
            if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
                raise InputError(f"--{name}", "only with snapshot sources (a Prometheus query is one request)")
        r = prom.analyse(prom_url, affected_expr, host_label, group_by, top, parse_time(at) if at else None,
                         timeout=130.0 if timeout is None else timeout)
        n, na, nh, ranked, grp, notes = r.hosts, r.affected, r.healthy, r.ranked, r.groups, r.notes
        extra = {"source": prom_url, "expression": r.expression, "queries": r.queries,
                 "deduplicated": r.deduplicated, "affected_hosts": r.affected_hosts}
    else:
        if not sources:
            raise InputError("fleet", "give snapshot sources (directories, files, URLs) or --prometheus URL")
        if affected_expr or at:
            raise InputError("--affected" if affected_expr else "--time", "only with --prometheus")
        if click.get_current_context().get_parameter_source("host_label") == click.core.ParameterSource.COMMANDLINE:
            raise InputError("--host-label", "only with --prometheus (a snapshot names its host itself)")
        got = drift.load(list(sources), concurrency, 5.0 if timeout is None else timeout, retries)
        unreachable = got.unreachable
        ranked, na, nh = drift.rank(got.snapshots, top)
        n, grp = len(got.snapshots), drift.groups(got.snapshots, group_by)
        extra = {}
    if unreachable:
        notes.append(f"{len(unreachable)} hosts unreachable: " + ", ".join(u for u, _ in unreachable))
    if as_json:
        click.echo(json.dumps(rf.to_json(n, na, nh, extra, grp, ranked, unreachable, notes), indent=2))
    else:
        click.echo(rf.text(n, na, nh, extra, grp, group_by, ranked, notes), nl=False)
        for u, e in unreachable:
            click.echo(f"unreachable: {u}: {e}", err=True)
    if unreachable:
        sys.exit(3)

@main.command()
@click.option("--store", required=True, type=click.Path())
@click.option("--listen", default="127.0.0.1:8080", show_default=True,
              help="HOST:PORT to serve on (as the exporter's --listen); anything but loopback requires a token.")
@click.option("--token", envvar="NODESLEUTH_TOKEN", help="Token required on every request (default: generated "
              "when --listen is not loopback).")
@deprecated("--port", into="listen", use="--listen HOST:PORT", type=int, convert=_port_into_listen)  # 0.1.0-0.2.0
@deprecated("--bind", into="listen", use="--listen HOST:PORT", convert=_bind_into_listen)  # 0.1.0-0.2.0
@one_line_errors
def serve(store, listen, token):
    """Web view (waitress): CPU timeline, subsecond heatmaps, flame graphs, incidents. Off loopback, open
    the printed ?token= link once: the token becomes an HttpOnly cookie and leaves the URL."""
    import os

    from ..web.server import serve as run

    if not os.path.isdir(store):
        raise InputError(store, "no such store directory")
    bind, port = _listen(listen)
    run(store, bind, port, token, log=lambda m: click.echo(m, err=True))
