"""Renderings of explained incidents: terminal, Markdown and HTML (attachable to a ticket), and the
JSON document (schema nodesleuth.explain/v2). Every link shows its verdict, its share and the rule."""

from __future__ import annotations

import html

from rich.console import Console
from rich.markup import escape

from ..model.timeparse import iso
from .chain import LABEL, Explained
from .dose import text as dose_text

SCHEMA = "nodesleuth.explain/v2"
MARK = {"observed": "●", "proven": "✔", "contributing": "~", "not_proven": "✘", "unknown": "?"}
STYLE = {"observed": "cyan", "proven": "green", "contributing": "yellow", "not_proven": "red", "unknown": "dim"}


def share_text(lk) -> str:
    return "" if lk.share is None else f"{100 * lk.share:.0f}%"


DAMAGE = ("Tcp_RetransSegs", "TcpExt_TCPTimeouts", "Tcp_EstabResets", "TcpExt_TCPAbortOnTimeout", "TcpExt_ListenDrops",
          "TcpExt_TCPRcvQDrop", "TcpExt_TCPBacklogDrop")


def quiet(lk) -> bool:
    """A link with nothing to say takes one line: nothing could be followed (unknown), or the TCP link
    observed no damage at all (no retransmit, timeout, reset or drop)."""
    if lk.verdict == "unknown":
        return True
    return (lk.name == "impact" and lk.verdict == "observed"
            and not any((lk.data.get("counters") or {}).get(k) for k in DAMAGE))


def answer(inc: Explained) -> tuple[str, str]:
    """The report's first two lines: the answer (root cause or leading explanation, its share of the core's
    excess busy time and its proof) and the action to take."""
    if inc.root_cause:
        lead = next((h for h in inc.hypotheses if h.family == inc.family), None)
        share = f": {100 * lead.share:.0f}% of the core's excess busy time" if lead and lead.share is not None else ""
        text = f"root cause {inc.root_cause}, proven end to end ({inc.family}{share})"
    else:  # the leading explanation carries its family's share and verdict (chain._leading)
        text = f"no root cause proven; leading: {inc.leading}"
    cmds = [c for a in inc.actions for c in a.command_lines() if not c.startswith("#")]
    act = (cmds[0] + (f"   (+{len(cmds) - 1} more below)" if len(cmds) > 1 else "")) if cmds else "nothing proven to fix"
    return text, act


def rejected(inc: Explained) -> list[str]:
    """The rejected entries the report has not shown already (a not-proven link of the chain, a
    hypothesis): the hypotheses are listed once; JSON keeps `rejected` whole."""
    shown = {f"{LABEL.get(lk.name, lk.name)}: {lk.summary}" for lk in inc.links}
    prefixes = tuple(f"{h.family}: {h.summary}" for h in inc.hypotheses)
    return [r for r in inc.rejected if r not in shown and not (prefixes and r.startswith(prefixes))]


def to_json(incs: list[Explained], store: str, problems: list, notes: list[str]) -> dict:
    return {"schema": SCHEMA, "store": store, "complete": not problems,
            "problems": [str(p) for p in problems], "notes": notes,
            "incidents": [i.to_dict() for i in incs]}


def group_lines(inc: Explained) -> list[str]:
    """The numbers of a group (explain/family/group.py) that leads: who starts it, how many a second, its share."""
    g = next((h for h in inc.hypotheses if h.family == "group"), None)
    if g is None or inc.family != "group":
        return []
    return [g.summary.removeprefix("group: ")] + g.evidence


def terminal(incs: list[Explained], notes: list[str], problems: list, console: Console | None = None) -> None:
    con = console or Console(highlight=False, soft_wrap=True)
    for n in notes:
        con.print(n, markup=False)
    if not incs and not problems:
        con.print("no incidents in the data read (no NIC resets/timeouts, no core saturated >= 3 s)")
    elif not incs:
        con.print("no incidents in the data that could be read; parts of the recording could not be read "
                  "(see the warning above): the answer may be incomplete", style="bold red")
    for i, inc in enumerate(incs, 1):
        con.print(f"\n[bold]Incident {i}[/bold] at {iso(inc.time)} ({inc.kind}): {escape(inc.title)}", markup=True)
        text, act = answer(inc)
        con.print(f"  [bold{' red' if inc.root_cause else ''}]answer: {escape(text)}[/]", markup=True)
        con.print(f"  [bold]action: {escape(act)}[/]", markup=True)
        for ln in group_lines(inc):
            con.print(f"    {ln}", markup=False)
        con.print("  the chain:", markup=False)
        for lk in inc.links:
            sh = share_text(lk)
            con.print(f"  [{STYLE[lk.verdict]}]{MARK[lk.verdict]} {LABEL.get(lk.name, lk.name):19}"
                      f"{lk.verdict.replace('_', ' '):13}{sh:>5}[/] " + escape(lk.summary),
                      markup=True)
            if quiet(lk):
                continue
            for e in lk.evidence:
                con.print(f"      {e}", markup=False)
            if lk.rule and lk.verdict in ("proven", "contributing", "not_proven"):
                con.print(f"      rule: {lk.rule}", markup=False, style="dim")
        if inc.hypotheses:
            con.print("  hypotheses (share of the core's excess busy time):", markup=False)
            for h in inc.hypotheses:
                sh = "  ?" if h.share is None else f"{100 * h.share:3.0f}%"
                con.print(f"    [{STYLE[h.verdict]}]{MARK[h.verdict]} {h.family:11}{sh:>5}[/] {escape(h.summary)}",
                          markup=True)
        for n in inc.notes:
            con.print(f"  note: {n}", markup=False)
        for ln in dose_text(inc.dose) if inc.dose else []:
            con.print(f"  {ln}", markup=False)
        for r in rejected(inc):
            con.print(f"  rejected: {r}", markup=False, style="dim")


def markdown(incs: list[Explained], store: str, notes: list[str], problems: list) -> str:
    out = ["# nodesleuth explain", "", f"Recording: `{store}`", ""]
    out += [f"> {n}" for n in notes] + ([""] if notes else [])
    if problems:
        out += [f"**Incomplete:** {len(problems)} part(s) of the recording could not be read; first: `{problems[0]}`", ""]
    if not incs:
        out.append("No incidents in the data read.")
    for i, inc in enumerate(incs, 1):
        text, act = answer(inc)
        out += [f"## Incident {i}: {inc.title}", "", f"*{iso(inc.time)}* ({inc.kind})", "",
                f"**Answer:** {text}", "", f"**Action:** `{act}`", ""]
        gl = group_lines(inc)
        out += ([f"**Group:** {gl[0]}", ""] + [f"- {e}" for e in gl[1:]] + [""]) if gl else []
        out += ["| link | verdict | share | finding |", "|---|---|---|---|"]
        for lk in inc.links:
            out.append(f"| {LABEL.get(lk.name, lk.name)} | {lk.verdict.replace('_', ' ')} | {share_text(lk)} | "
                       f"{lk.summary.replace('|', '/')} |")
        out.append("")
        if inc.hypotheses:
            out += ["| family | verdict | share | hypothesis |", "|---|---|---|---|"] + [
                f"| {h.family} | {h.verdict.replace('_', ' ')} | {'' if h.share is None else f'{100 * h.share:.0f}%'} | "
                f"{h.summary.replace('|', '/')} |" for h in inc.hypotheses] + [""]
        out += [f"> {n}" for n in inc.notes] + ([""] if inc.notes else [])
        if inc.dose:
            d = dose_text(inc.dose)
            out += [d[0], ""] + [f"- {ln.strip()}" for ln in d[1:]] + [""]
        rej = rejected(inc)
        if rej:
            out += ["Rejected hypotheses:", ""] + [f"- {r}" for r in rej] + [""]
        for lk in inc.links:
            if lk.evidence and not quiet(lk):
                out.append(f"### {LABEL.get(lk.name, lk.name)}")
                if lk.name == "remediation":
                    out += ["```sh"] + lk.evidence + ["```"]
                else:
                    out += [f"- {e}" for e in lk.evidence]
                if lk.rule:
                    out.append(f"- *rule: {lk.rule}*")
                out.append("")
    return "\n".join(out) + "\n"


def html_report(incs: list[Explained], store: str, notes: list[str], problems: list) -> str:
    body = []
    for i, inc in enumerate(incs, 1):
        rows = "".join(
            f"<tr class='{lk.verdict}'><td>{LABEL.get(lk.name, lk.name)}</td><td>{lk.verdict.replace('_', ' ')}</td>"
            f"<td>{share_text(lk)}</td><td>{html.escape(lk.summary)}"
            + ("" if quiet(lk) else "<ul>" + "".join(f"<li><code>{html.escape(e)}</code></li>" for e in lk.evidence)
               + (f"<li class='rule'>rule: {html.escape(lk.rule)}</li>" if lk.rule else "") + "</ul>") + "</td></tr>"
            for lk in inc.links)
        text, act = answer(inc)
        verdict = (f"<p class='answer'><b>Answer: {html.escape(text)}</b></p>"
                   f"<p class='action'>Action: <code>{html.escape(act)}</code></p>")
        rej = "".join(f"<li>{html.escape(r)}</li>" for r in rejected(inc))
        gl = group_lines(inc)
        grp = (f"<p class='group'><b>Group:</b> {html.escape(gl[0])}</p><ul class='group'>"
               + "".join(f"<li>{html.escape(e)}</li>" for e in gl[1:]) + "</ul>") if gl else ""
        hyp = "".join(f"<tr class='{h.verdict}'><td>{h.family}</td><td>{h.verdict.replace('_', ' ')}</td><td>"
                      f"{'' if h.share is None else f'{100 * h.share:.0f}%'}</td><td>{html.escape(h.summary)}</td></tr>"
                      for h in inc.hypotheses)
        body.append(f"<section><h2>Incident {i}: {html.escape(inc.title)}</h2><p>{iso(inc.time)} ({inc.kind})</p>"
                    f"{verdict}{grp}<table><tr><th>link</th><th>verdict</th><th>share</th><th>finding</th>"
                    f"</tr>{rows}</table>"
                    + (f"<p>Hypotheses (share of the core's excess busy time):</p><table class='hypotheses'><tr>"
                       f"<th>family</th><th>verdict</th><th>share</th><th>hypothesis</th></tr>{hyp}</table>" if hyp else "")
                    + "".join(f"<p>{html.escape(n)}</p>" for n in inc.notes)
                    + ("<p>" + "<br>".join(html.escape(ln) for ln in dose_text(inc.dose)) + "</p>" if inc.dose else "")
                    + (f"<p>Rejected hypotheses:</p><ul>{rej}</ul>" if rej else "")
                    + "</section>")
    banner = (f"<p class='problem'>Incomplete: {len(problems)} part(s) of the recording could not be read; first: "
              f"{html.escape(str(problems[0]))}</p>" if problems else "")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>nodesleuth explain</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:4px 8px;vertical-align:top}tr.unknown{color:#888}tr.not_proven{background:#fee}"
            "tr.proven{background:#efe}.problem{background:#fdd;padding:.5em}.rule{color:#777}</style></head><body>"
            f"<h1>nodesleuth explain</h1><p>Recording: <code>{html.escape(store)}</code></p>{banner}"
            + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
            + ("".join(body) or "<p>No incidents in the data read.</p>") + "</body></html>\n")
