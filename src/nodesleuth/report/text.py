"""Terminal rendering of check findings, most severe first."""

from __future__ import annotations

from rich.console import Console

from ..collect.posture import describe
from ..check.run import CheckResult

STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def render(res: CheckResult, console: Console | None = None) -> None:
    con = console or Console(highlight=False, soft_wrap=True)
    problems = [f for f in res.findings if f.problem]
    head = f"nodesleuth check: {len(problems)} problem(s) in {res.seconds:.1f} s of sampling"
    if problems:
        con.print(f"[bold]{head}[/bold]")
    elif res.unread:  # could-not-read is never "healthy"
        con.print(f"[yellow]{head}, but {len(res.unread)} section(s) could not be read: "
                  f"{', '.join(res.unread)} (status unknown)[/yellow]")
    else:
        con.print(f"[green]{head}: this node looks healthy[/green]")
    if res.root.get("kind") not in (None, "live"):
        con.print(f"root: {res.root['description']}", markup=False)
    for f in res.findings:
        con.print(f"\n[{STYLE.get(f.severity, '')}]{f.severity.upper():8}[/] {f.title}", markup=True)
        for e in f.evidence:
            con.print(f"    evidence: {e}", markup=False)
        for r in f.remediation:
            con.print(f"    fix:      {r}", markup=False)
    allc = res.cpus.get("all")
    if allc:
        hottest = max(((k, v) for k, v in res.cpus.items() if k != "all"), key=lambda kv: kv[1]["busy"],
                      default=None)
        since = " since boot" if res.cpu_window == "since-boot" else ""
        line = f"\nnode busy{since} {allc['busy']:.0f}% (sys {allc['sys']:.0f}%)"
        if hottest:
            line += f"; hottest CPU {hottest[0]} {hottest[1]['busy']:.0f}%"
        con.print(line, markup=False)
    if res.posture is not None:
        for line in describe(res.posture):
            con.print(f"zombie posture: {line}", markup=False)
    for n in res.notes:
        con.print(f"note: {n}", markup=False, style="dim")


def npd_line(res: CheckResult) -> str:
    """One short line for node-problem-detector's condition message (it keeps 80 bytes)."""
    probs = [f for f in res.findings if f.problem]
    if not probs:
        return "nodesleuth: OK" if res.exit_code == 0 else "nodesleuth: UNKNOWN (could not read: see --json notes)"
    more = f" (+{len(probs) - 1} more)" if len(probs) > 1 else ""
    if probs[0].kind == "zombie_cgroups":  # where its cost figure came from: the state file's age, or none
        src = probs[0].data.get("cost_source", "")
        more += " [cost: " + (src[src.index("(measured ") + 10:-1].replace(" ago, this boot", " ago") if "(measured " in src
                              else "unmeasured") + "]"
    title = probs[0].title
    room = NPD_MAX - len(more.encode())
    if len(title.encode()) > room:
        title = title.encode()[:room - 3].decode(errors="ignore").rstrip() + "..."
    return title + more


NPD_MAX = 80  # node-problem-detector keeps this many bytes of a custom plugin's message
