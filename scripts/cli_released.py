"""Every command and option name that ever shipped, reconstructed from git history (there are no tags: every
commit on main landed), written to docs/cli-released.json; tests/test_cli_released.py parses each against
today's CLI.

For every commit of HEAD's history (or those given), the commit's src/ is extracted with `git archive` into a
temporary directory (history is only read), its click command tree walked in a subprocess with
PYTHONPATH=<that tree>/src, and the union taken: per command and option name, the first and last commit
(and __version__) that had it. A name that today's tree lacks must be listed in RENAMED below (its
replacement and the invocation today's CLI treats the same), or the script fails.

    python scripts/cli_released.py            # all commits (~1 min)
    python scripts/cli_released.py --check    # exit 1 when docs/cli-released.json differs from the walk
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "cli-released.json")

# names released and since renamed or removed: (command, name) -> (replacement shown in the warning, the released
# spelling's example, today's equivalent invocation: both parse to the same parameters)
RENAMED = {
    ("check", "--trace"): ("--trace-churn", ["check", "--trace"], ["check", "--trace-churn"]),
    ("check", "--no-trace"): ("--no-trace-churn", ["check", "--no-trace"], ["check", "--no-trace-churn"]),
    ("explain", "--trace"): ("--trace-churn", ["explain", "--store", "S", "--trace", "1"],
                             ["explain", "--store", "S", "--trace-churn", "1"]),
    ("serve", "--port"): ("--listen HOST:PORT", ["serve", "--store", "S", "--port", "8080"],
                          ["serve", "--store", "S", "--listen", "127.0.0.1:8080"]),
    ("serve", "--bind"): ("--listen HOST:PORT", ["serve", "--store", "S", "--bind", "0.0.0.0"],
                          ["serve", "--store", "S", "--listen", "0.0.0.0:8080"]),
    ("profile run", "--stream"): ("--method perf", ["profile", "run", "--store", "S", "--stream"],
                                  ["profile", "run", "--store", "S", "--method", "perf"]),
}

WALK = r'''
import json, click, nodesleuth
from nodesleuth.cli import main
out = {"version": getattr(nodesleuth, "__version__", None), "commands": {}}
def walk(cmd, path):
    ps = []
    for p in cmd.params:
        t = p.type
        ps.append({"kind": "argument" if isinstance(p, click.Argument) else "option", "name": p.name,
                   "opts": list(p.opts), "secondary": list(getattr(p, "secondary_opts", []) or []),
                   "flag": bool(getattr(p, "is_flag", False)), "hidden": bool(getattr(p, "hidden", False)),
                   "alias": type(p).__name__ == "Deprecated",
                   "required": bool(p.required), "nargs": p.nargs,
                   "type": "Choice" if isinstance(t, click.Choice) else getattr(t, "name", str(t)).upper(),
                   "choices": [str(c) for c in getattr(t, "choices", []) or []]})
    out["commands"][" ".join(path)] = ps
    for name, sub in (cmd.commands.items() if isinstance(cmd, click.Group) else ()):
        walk(sub, path + [name])
walk(main, [])
print(json.dumps(out))
'''


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def walk_commit(commit: str, tmp: str) -> dict:
    d = os.path.join(tmp, commit)
    os.makedirs(d)
    arch = subprocess.run(["git", "archive", commit, "src"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", d], input=arch, check=True)
    p = subprocess.run([sys.executable, "-c", WALK], cwd=tmp, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": os.path.join(d, "src")})
    subprocess.run(["rm", "-rf", d], check=True)
    if p.returncode:
        raise SystemExit(f"{commit}: cannot walk its CLI: {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout)


def sample(p: dict) -> list[str]:
    """A value of the parameter's type that parses."""
    if p["flag"]:
        return []
    if p["choices"]:
        return [p["choices"][0]]
    return ["1" if p["type"].split()[0] in ("INTEGER", "FLOAT") else "S"] * max(p["nargs"], 1)  # (ranges too)


def build(commits: list[str]) -> list[dict]:
    order = {c: i for i, c in enumerate(commits)}
    main_line = set(git("rev-list", "--first-parent", "HEAD").split())
    seen: dict[tuple[str, str], dict] = {}
    trees = {}
    with tempfile.TemporaryDirectory(prefix="cli-released-") as tmp:
        with ThreadPoolExecutor(2) as ex:  # one walk per core (a walk is one python importing the CLI)
            trees = dict(zip(commits, ex.map(lambda c: walk_commit(c, tmp), commits)))
    head = trees[commits[-1]]
    for c in commits:
        t = trees[c]
        for cmd, params in t["commands"].items():
            names = [(None, None)] if cmd else []
            names += [(o, p) for p in params if not p.get("alias") for o in  # a kept alias is not a release of it
                      (p["opts"] + p["secondary"] if p["kind"] == "option" else [p["name"].upper()])]
            for name, p in names:
                e = seen.setdefault((cmd, name), {"first": c, "commits": []})
                e["commits"].append(c)
                if p is not None:
                    e["param"] = p
    out = []
    short = {c: git("rev-parse", "--short=7", c).strip() for c in commits}
    for (cmd, name), e in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        current = commits[-1] in e["commits"]
        on_main = [c for c in e["commits"] if c in main_line] or e["commits"]
        last = max(on_main, key=order.get)
        p = e.get("param")
        row = {"command": cmd or "(nodesleuth)", "name": name, "kind": "command" if p is None else
               ("argument" if p["kind"] == "argument" else "flag" if p["flag"] else "option"),
               "first": {"version": trees[e["first"]]["version"], "commit": short[e["first"]]},
               "last": None if current else {"version": trees[last]["version"], "commit": short[last]}}
        if p is not None and p["kind"] == "option":
            row["takes"] = None if p["flag"] else (p["type"] if not p["choices"] else "|".join(p["choices"]))
        if current:
            row["status"] = "current"
            row["example"] = _example(head, cmd, name)
        elif (cmd, name) in RENAMED:
            use, ex, today = RENAMED[(cmd, name)]
            row.update(status="deprecated", replacement=use, example=ex, today=today)
        else:
            raise SystemExit(f"{cmd} {name}: released ({short[e['first']]}..{short[last]}), gone today, and not "
                             f"in RENAMED: keep it as a hidden alias (cli/common.py deprecated) and list it")
        out.append(row)
    return out


def _example(head: dict, cmd: str, name: str | None) -> list[str]:
    """The invocation that passes the name with today's required parameters."""
    if cmd == "" and name == "--version":
        return ["--version"]
    subs = [c for c in head["commands"] if c.startswith(cmd + " ")] if cmd and name is None else []
    if subs:  # a group: with its first command
        return _example(head, subs[0], None)
    argv = cmd.split() if cmd else []
    params = head["commands"][cmd]
    for p in params:
        if p.get("alias"):
            continue
        spelled = name in (p["opts"] + p["secondary"]) or (p["kind"] == "argument" and name == p["name"].upper())
        if p["kind"] == "argument":
            continue
        if p["required"] or spelled:
            argv += [name if spelled else p["opts"][0], *sample(p)]
    for p in params:  # positional arguments last
        if p["kind"] == "argument":
            argv += sample(p) if (p["required"] or name == p["name"].upper()) else []
    return argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the file differs from the walk")
    a = ap.parse_args()
    commits = git("rev-list", "--reverse", "--topo-order", "HEAD").split()
    rows = build(commits)
    text = json.dumps({"about": "Every command, option and argument name nodesleuth ever released (each commit of "
                                "main's history; scripts/cli_released.py). tests/test_cli_released.py parses each "
                                "example against today's CLI; a deprecated name also prints one line naming its "
                                "replacement and parses like `today`. See docs/interface.md.",
                       "names": rows}, indent=1) + "\n"
    if a.check:
        same = os.path.exists(OUT) and open(OUT).read() == text
        print("docs/cli-released.json is " + ("up to date" if same else "out of date: run scripts/cli_released.py"))
        return 0 if same else 1
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"{len(rows)} names ({sum(r['kind'] != 'command' for r in rows)} options and arguments, "
          f"{sum(r.get('status') == 'deprecated' for r in rows)} deprecated) over {len(commits)} commits -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
