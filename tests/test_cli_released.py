"""The command line is an interface: every command, option and argument name ever released
(docs/cli-released.json, reconstructed from every commit of main by scripts/cli_released.py) parses against
today's CLI, without running anything; a renamed one prints one line naming its replacement and parses to the
same parameters as today's name (docs/interface.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import click
import pytest

from conftest import free_port, nodesleuth
from nodesleuth.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RELEASED = json.load(open(os.path.join(ROOT, "docs", "cli-released.json")))["names"]

# every released name kept as a hidden alias, and today's invocation it equals (the file's deprecated rows)
ALIASES = [
    (["nodesleuth", "check", "--no-trace"], ["nodesleuth", "check", "--no-trace-churn"]),
    (["nodesleuth", "check", "--trace"], ["nodesleuth", "check", "--trace-churn"]),
    (["nodesleuth", "explain", "--store", "S", "--trace", "1"], ["nodesleuth", "explain", "--store", "S", "--trace-churn", "1"]),
    (["nodesleuth", "serve", "--store", "S", "--port", "8080"], ["nodesleuth", "serve", "--store", "S", "--listen", "127.0.0.1:8080"]),
    (["nodesleuth", "serve", "--store", "S", "--bind", "0.0.0.0"], ["nodesleuth", "serve", "--store", "S", "--listen", "0.0.0.0:8080"]),
    (["nodesleuth", "profile", "run", "--store", "S", "--stream"], ["nodesleuth", "profile", "run", "--store", "S", "--method", "perf"]),
]


def parse(argv: list[str]) -> tuple[click.Command, dict]:
    """argv as the shell hands it to nodesleuth, parsed down to the innermost command, nothing run:
    that command and its parameters."""
    ctx = main.make_context("nodesleuth", list(argv))
    cmd: click.Command = main
    while isinstance(cmd, click.Group):
        rest = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])), *ctx.args]
        name, cmd, rest = cmd.resolve_command(ctx, rest)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return cmd, ctx.params


def _id(r: dict) -> str:
    return f"{r['command']} {r['name'] or ''}".strip()


def test_the_file_holds_the_history():
    """The walk found the 0.1.0 CLI and today's: commands, options and the renamed ones, each with where it
    first shipped."""
    by = {(r["command"], r["name"]): r for r in RELEASED}
    assert len(RELEASED) > 150 and len({_id(r) for r in RELEASED}) == len(RELEASED)
    assert by[("check", "--no-trace")]["first"] == {"version": "0.1.0", "commit": "c6be1e4"}
    assert by[("check", "--no-trace")]["replacement"] == "--no-trace-churn"
    assert by[("serve", "--port")]["last"]["version"] == "0.2.0"
    assert by[("check", "--json")]["status"] == "current" and by[("check", "--json")]["last"] is None
    assert {r["kind"] for r in RELEASED} == {"command", "option", "flag", "argument"}


@pytest.mark.parametrize("row", RELEASED, ids=_id)
def test_every_released_name_parses(row, capsys):
    """Its example parses against today's CLI; a deprecated name says so in one line on stderr, naming the
    replacement, and parses to the same parameters as today's spelling; a current one says nothing."""
    argv = row["example"]
    if argv == ["--version"]:
        with pytest.raises(click.exceptions.Exit) as e:
            parse(argv)
        assert e.value.exit_code == 0 and capsys.readouterr().out.strip().endswith(__import__("nodesleuth").__version__)
        return
    cmd, params = parse(argv)
    assert row["name"] is None or any(row["name"] in p.opts + p.secondary_opts or row["name"] == (p.name or "").upper()
                                      for p in cmd.params), row
    err = capsys.readouterr().err
    if row["status"] == "current":
        assert err == ""
        return
    assert err == f"nodesleuth: {row['name']} is deprecated; use {row['replacement']}\n"
    assert parse(row["today"])[1] == params
    assert capsys.readouterr().err == ""


def test_every_name_today_is_listed():
    """A name added since the file was written is listed (run scripts/cli_released.py), and every hidden alias
    today is a deprecated row of the file: nothing ships unrecorded."""
    from nodesleuth.cli.common import Deprecated

    listed = {(r["command"], r["name"]) for r in RELEASED}
    deprecated = {(r["command"], r["name"]) for r in RELEASED if r["status"] == "deprecated"}
    today, aliases = set(), set()

    def walk(c: click.Command, path: list[str]) -> None:
        cmd = " ".join(path) or "(nodesleuth)"
        if path:
            today.add((cmd, None))
        for p in c.params:
            names = p.opts + p.secondary_opts if isinstance(p, click.Option) else [p.name.upper()]
            (aliases if isinstance(p, Deprecated) else today).update((cmd, n) for n in names)
        for name, sub in (c.commands.items() if isinstance(c, click.Group) else ()):
            walk(sub, path + [name])

    walk(main, [])
    assert today - listed == set(), "not in docs/cli-released.json: run scripts/cli_released.py"
    assert aliases == deprecated


def test_the_alias_table_is_the_files():
    """ALIASES (what the option-coverage walk sees) are exactly the file's deprecated rows."""
    rows = {(tuple(r["example"]), tuple(r["today"])) for r in RELEASED if r["status"] == "deprecated"}
    assert {(tuple(a[1:]), tuple(b[1:])) for a, b in ALIASES} == rows


@pytest.mark.parametrize("old,new", ALIASES, ids=lambda a: " ".join(a[1:]))
def test_an_alias_parses_like_todays_name(old, new, capsys):
    assert parse(old[1:])[1] == parse(new[1:])[1]
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_todays_name_wins_over_an_alias(capsys):
    """Both given: today's name decides, the alias still warns."""
    assert parse(["check", "--no-trace", "--trace-churn"])[1]["trace"] is True
    assert parse(["serve", "--store", "S", "--port", "9000", "--listen", "10.0.0.1:7000"])[1]["listen"] == "10.0.0.1:7000"
    assert parse(["serve", "--store", "S", "--bind", "::1", "--port", "9000"])[1]["listen"] == "[::1]:9000"
    assert capsys.readouterr().err.count("is deprecated") == 4


def test_check_no_trace_runs_untraced(tmp_path):
    """`check --no-trace` (0.1.0's spelling, in NPD configs and cron jobs) runs the check without churn tracing,
    as --no-trace-churn does, with the warning on stderr and stdout clean for machines."""
    from fixtures.trees import make_v2_node

    root = make_v2_node(str(tmp_path / "n"), dying=5000)
    p = nodesleuth("check", "--root", root, "--seconds", "1", "--no-trace", "--no-probe", "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "nodesleuth.check/v1" and doc["churn"] is None
    assert "nodesleuth: --no-trace is deprecated; use --no-trace-churn" in p.stderr.splitlines()


def test_serve_port_serves_on_that_port(tmp_path):
    """`serve --port N` (0.1.0-0.2.0) serves on the default host with port N."""
    from fixtures.webstore import build

    store = build(str(tmp_path / "web"), seconds=10, hot_from=3, hot_len=3, cpus=2)["store"]
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", store, "--port", str(port)],
                           stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    assert r.status == 200
                break
            except urllib.error.HTTPError as e:
                pytest.fail(f"serve answered {e.code}")
            except OSError:
                assert srv.poll() is None, srv.stderr.read()
                time.sleep(0.1)
        else:
            pytest.fail("serve --port never answered")
    finally:
        srv.terminate()
        srv.wait(30)
    assert srv.stderr.read().splitlines()[0] == "nodesleuth: --port is deprecated; use --listen HOST:PORT"


@pytest.mark.slow
@pytest.mark.long  # walks every commit (~2.5 min)
def test_the_file_is_the_walk_of_history():
    """Re-walking every commit gives the file byte for byte (scripts/cli_released.py --check)."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "cli_released.py"), "--check"],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr


def _schemas_in_doc() -> dict[str, str]:
    """docs/interface.md's schema table: name -> status."""
    import re

    out = {}
    for ln in open(os.path.join(ROOT, "docs", "interface.md")):
        m = re.match(r"\| `(nodesleuth\.[a-z_]+/v\d+)` \|.*\| (\w+)[^|]* \|$", ln.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_the_schemas_emitted_are_the_documented_ones():
    """Every schema name the code defines (SCHEMA = "nodesleuth.NAME/vN" in src/) is a current row of
    docs/interface.md, and every current row is defined: a new schema version cannot ship undocumented."""
    import ast
    import glob

    defined = {}
    for path in glob.glob(os.path.join(ROOT, "src", "nodesleuth", "**", "*.py"), recursive=True):
        for node in ast.walk(ast.parse(open(path).read())):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and node.value.value.startswith("nodesleuth.")
                    and "/v" in node.value.value):
                defined[node.value.value] = os.path.relpath(path, ROOT)
    doc = _schemas_in_doc()
    assert set(defined) == {s for s, st in doc.items() if st == "current"}, (defined, doc)
    assert doc["nodesleuth.explain/v1"] == "former"
    from nodesleuth.check.run import SCHEMA as check
    from nodesleuth.explain.report import SCHEMA as explain
    from nodesleuth.collect.probe_state import SCHEMA as probes
    from nodesleuth.fleet.snapshot import SCHEMA as snapshot

    assert {check, explain, snapshot, probes} == set(defined)


def test_explain_v2_links_keep_v1_fields():
    """explain/v1 (0.1.0) links had name, status (found/unknown), confidence, summary, evidence, data; a v2 link
    carries them all, status derived from its verdict."""
    from nodesleuth.explain.chain import Link
    from nodesleuth.model.thresholds import PROVEN, UNKNOWN

    v1 = {"name", "status", "confidence", "summary", "evidence", "data"}
    found = Link("creator", PROVEN, "ecs.service made 12,000 cgroups", share=0.9).to_dict()
    unknown = Link("creator", UNKNOWN, "no churn traced").to_dict()
    assert v1 <= set(found) and (found["status"], found["confidence"]) == ("found", "high")
    assert (unknown["status"], unknown["confidence"]) == ("unknown", "none")


def _deploy_invocations() -> list[tuple[str, list[str]]]:
    """Every nodesleuth command line deploy/ ships: the systemd unit's ExecStart, the DaemonSet's container args,
    node-problem-detector's plugin rules."""
    import shlex

    import yaml

    dep = os.path.join(ROOT, "deploy")
    out = []
    for ln in open(os.path.join(dep, "systemd", "nodesleuth-record.service")):
        if ln.startswith("ExecStart="):
            argv = shlex.split(ln.split("=", 1)[1])
            out.append(("systemd ExecStart", argv[1:]))
    for doc in yaml.safe_load_all(open(os.path.join(dep, "kubernetes", "daemonset.yaml"))):
        for c in ((doc or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])):
            if "args" in c:
                out.append((f"DaemonSet container {c['name']}", c["args"]))
    for r in json.load(open(os.path.join(dep, "npd", "nodesleuth-plugin-monitor.json")))["rules"]:
        out.append((f"NPD rule {r['reason']} ({r['type']})", r["args"]))
    return out


def test_deploy_command_lines_parse_with_todays_names(capsys):
    """The unit, the DaemonSet and NPD's config parse against today's CLI and use no deprecated name."""
    found = _deploy_invocations()
    assert {w.split()[0] for w, _ in found} == {"systemd", "DaemonSet", "NPD"}
    for where, argv in found:
        cmd, params = parse(argv)
        assert capsys.readouterr().err == "", where
        assert cmd.name == argv[0], where
