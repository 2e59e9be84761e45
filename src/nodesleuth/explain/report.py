"""Renderings of explained incidents: terminal, Markdown and HTML (attachable to a ticket)."""

from __future__ import annotations

import html

from rich.console import Console

from ..timeparse import iso
from .chain import Incident

MARK = {"found": "✔", "unknown": "?"}
LABEL = {"event": "Event", "saturated_core": "Saturated core", "processes": "Processes on it",
         "functions": "Hottest functions", "resource": "Resource walked", "creator": "Who creates it",
         "unit_loop": "Restart loop", "remediation": "Remediation"}


def terminal(incidents: list[Incident], console: Console | None = None) -> None:
    con = console or Console(highlight=False, soft_wrap=True)
    if not incidents:
        con.print("no incidents in this range (no NIC resets/timeouts, no core saturated >= 3 s)")
    for i, inc in enumerate(incidents, 1):
        con.print(f"\n[bold]Incident {i}[/bold] at {iso(inc.time)} ({inc.kind}): {inc.title}")
        for lk in inc.links:
            style = "green" if lk.status == "found" else "dim"
            con.print(f"  [{style}]{MARK[lk.status]} {LABEL.get(lk.name, lk.name):18}[/] "
                      f"[{lk.confidence}] {html.unescape(lk.summary)}", markup=True)
            for e in lk.evidence:
                con.print(f"      {e}", markup=False)
        if inc.root_cause:
            con.print(f"  [bold red]root cause: {inc.root_cause}[/]")


def markdown(incidents: list[Incident], store: str) -> str:
    out = ["# nodesleuth explain", "", f"Recording: `{store}`", ""]
    if not incidents:
        out.append("No incidents in this range.")
    for i, inc in enumerate(incidents, 1):
        out += [f"## Incident {i}: {inc.title}", "", f"*{iso(inc.time)}* ({inc.kind})"
                + (f" - **root cause: {inc.root_cause}**" if inc.root_cause else ""), "",
                "| link | status | confidence | finding |", "|---|---|---|---|"]
        for lk in inc.links:
            out.append(f"| {LABEL.get(lk.name, lk.name)} | {lk.status} | {lk.confidence} | "
                       f"{lk.summary.replace('|', '/')} |")
        out.append("")
        for lk in inc.links:
            if lk.evidence:
                out.append(f"### {LABEL.get(lk.name, lk.name)}")
                fence = lk.name == "remediation"
                if fence:
                    out += ["```sh"] + lk.evidence + ["```"]
                else:
                    out += [f"- {e}" for e in lk.evidence]
                out.append("")
    return "\n".join(out) + "\n"


def html_report(incidents: list[Incident], store: str) -> str:
    body = []
    for i, inc in enumerate(incidents, 1):
        rows = "".join(
            f"<tr class='{lk.status}'><td>{LABEL.get(lk.name, lk.name)}</td><td>{lk.status}</td>"
            f"<td>{lk.confidence}</td><td>{html.escape(lk.summary)}<ul>"
            + "".join(f"<li><code>{html.escape(e)}</code></li>" for e in lk.evidence) + "</ul></td></tr>"
            for lk in inc.links)
        body.append(f"<section><h2>Incident {i}: {html.escape(inc.title)}</h2><p>{iso(inc.time)} ({inc.kind})"
                    + (f" &mdash; <b>root cause: {html.escape(inc.root_cause)}</b>" if inc.root_cause else "")
                    + f"</p><table><tr><th>link</th><th>status</th><th>confidence</th><th>finding</th></tr>"
                    f"{rows}</table></section>")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>nodesleuth explain</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:4px 8px;vertical-align:top}tr.unknown{color:#888}</style></head><body>"
            f"<h1>nodesleuth explain</h1><p>Recording: <code>{html.escape(store)}</code></p>"
            + ("".join(body) or "<p>No incidents in this range.</p>") + "</body></html>\n")
