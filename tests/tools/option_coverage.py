"""Which command-line options no test passes.

Walks the click command tree (nodesleuth.cli.main) for every command and its options, then reads
tests/*.py with the ast module and finds every invocation of the CLI:

- a call of a helper that runs the CLI (tests/conftest.py `nodesleuth(*args)`, and any function whose
  body passes its own `*args` after a command name, such as `check_json(*args)` -> `check --json ...`);
- a list, tuple or call holding the string "nodesleuth" right before a command name
  (`[sys.executable, "-m", "nodesleuth", "record", ...]`).

An option counts as passed by an invocation when its name is a string constant inside that invocation, or
inside what the invocation unpacks (`*hot` where `hot = ["--from", ...]` in the same function or module;
`*args` of a test whose `@pytest.mark.parametrize` lists it; `*EQUIV[opt]` of a module-level dict). A
boolean flag pair (`--threads/--no-threads`) counts only when the side that is not the default is
passed: the default is what every other run exercises.

    python tests/tools/option_coverage.py          # a table: command, option, tests passing it
    python tests/tools/option_coverage.py --missing  # only those no test passes (exit 1 if any)

tests/test_cli_options.py::test_every_option_is_exercised fails listing the missing ones.
"""

from __future__ import annotations

import argparse
import ast
import glob
import os
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")


@dataclass
class Option:
    command: str  # "check", "profile ingest"
    name: str  # the longest spelling, "--trace-churn"
    needs: tuple[str, ...]  # the spellings that exercise it (a flag pair: the non-default side)
    hidden: bool = False
    passed_by: list[str] = field(default_factory=list)  # "tests/test_x.py:123"


def options() -> list[Option]:
    """Every option of every command (and the group's own --version)."""
    sys.path.insert(0, os.path.join(ROOT, "src"))
    import click

    from nodesleuth.cli import main

    out: list[Option] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.name == "help":
                continue
            names = [o for o in p.opts + p.secondary_opts if o.startswith("-")]
            if p.secondary_opts and p.is_flag:  # --x/--no-x: the side that is not the default
                needs = tuple(p.secondary_opts if p.default else p.opts)
            else:
                needs = tuple(names)
            out.append(Option(" ".join(path), max(p.opts, key=len), needs, bool(p.hidden)))
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, path + [name])

    walk(main, [])
    return out


def commands() -> set[tuple[str, ...]]:
    sys.path.insert(0, os.path.join(ROOT, "src"))
    import click

    from nodesleuth.cli import main

    out = set()

    def walk(cmd, path):
        out.add(tuple(path))
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, path + [name])

    walk(main, [])
    return out


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


class _Module:
    """One test file: its assignments (module level and per function) for resolving unpacked names."""

    def __init__(self, path: str):
        self.path = path
        with open(path) as f:
            self.tree = ast.parse(f.read(), path)
        self.parents: dict[ast.AST, ast.AST] = {}
        for n in ast.walk(self.tree):
            for c in ast.iter_child_nodes(n):
                self.parents[c] = n
        self.module_assigns = self._assigns(self.tree, top=True)

    @staticmethod
    def _assigns(scope: ast.AST, top: bool = False) -> dict[str, list[ast.AST]]:
        out: dict[str, list[ast.AST]] = {}
        nodes = scope.body if top else ast.walk(scope)
        for n in nodes:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    for name in ast.walk(t):
                        if isinstance(name, ast.Name):
                            out.setdefault(name.id, []).append(n.value)
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name) and n.value:
                out.setdefault(n.target.id, []).append(n.value)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend",
                                                                                                   "insert") \
                    and isinstance(n.func.value, ast.Name):
                out.setdefault(n.func.value.id, []).extend(n.args)
            elif isinstance(n, ast.For) and isinstance(n.target, ast.Name):
                out.setdefault(n.target.id, []).append(n.iter)
        return out

    def function_of(self, node: ast.AST) -> ast.FunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def resolve(self, name: str, at: ast.AST, depth: int = 0) -> list[str]:
        """String constants a name may hold where it is used: assignments in the enclosing functions, the
        module, and parametrize lists of a test's parameter."""
        if depth > 3:
            return []
        out: list[str] = []
        fn = self.function_of(at)
        scopes = []
        while fn is not None:
            scopes.append(fn)
            fn = self.function_of(fn)
        for f in scopes:
            for v in self._assigns(f).get(name, []):
                out += self._consts(v, depth)
            params = [a.arg for a in f.args.args + f.args.kwonlyargs]
            if name in params:
                for d in f.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize" and d.args \
                            and isinstance(d.args[0], ast.Constant) and name in str(d.args[0].value).replace(
                                " ", "").split(","):
                        for a in d.args[1:]:
                            out += self._consts(a, depth)
        for v in self.module_assigns.get(name, []):
            out += self._consts(v, depth)
        return out

    def _consts(self, node: ast.AST, depth: int) -> list[str]:
        out = _strings(node)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id != "str":
                out += self.resolve(n.id, node, depth + 1)  # (depth bounds a name assigned from itself)
        return out


def _invocation_strings(mod: _Module, node: ast.AST, elts: list[ast.AST]) -> list[str]:
    out: list[str] = []
    for e in elts:
        if isinstance(e, ast.Starred):
            v = e.value
            if isinstance(v, ast.Name):
                out += mod.resolve(v.id, node)
            else:
                out += _strings(v)
                for n in ast.walk(v):
                    if isinstance(n, ast.Name):
                        out += mod.resolve(n.id, node)
        else:
            out += _strings(e)
            # a name inside (e.g. `["--from", start]` is fine; `opts` holding options is resolved)
            if isinstance(e, ast.Name):
                out += mod.resolve(e.id, node)
    return out


def _command_at(strings: list[str], cmds: set[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The longest command path that the strings start with."""
    best = None
    for c in cmds:
        if c and tuple(strings[:len(c)]) == c and (best is None or len(c) > len(best)):
            best = c
    return best


def _raw_invocations(m: _Module, cmds: set[tuple[str, ...]], helpers: dict[str, tuple[str, ...]]):
    """(node, strings after `nodesleuth`, elements) of each invocation in one module."""
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in helpers:
            yield node, list(helpers[node.func.id]) + _invocation_strings(m, node, node.args), node.args
        elif isinstance(node, (ast.List, ast.Tuple, ast.Call)):
            elts = node.elts if not isinstance(node, ast.Call) else node.args
            idx = [i for i, e in enumerate(elts) if isinstance(e, ast.Constant) and e.value == "nodesleuth"]
            if idx:
                yield node, _invocation_strings(m, node, elts[idx[0] + 1:]), elts[idx[0] + 1:]


def invocations(cmds: set[tuple[str, ...]]):
    """(command path, strings passed, "file:line") for every CLI invocation in tests/*.py."""
    mods = [_Module(p) for p in sorted(glob.glob(os.path.join(TESTS, "*.py")))]
    # helpers: functions that run the CLI with their own `*args` appended -> the command they run
    helpers: dict[str, tuple[str, ...]] = {"nodesleuth": ()}
    for _ in range(3):  # helpers of helpers
        for m in mods:
            for node, strings, elts in list(_raw_invocations(m, cmds, helpers)):
                fn = m.function_of(node)
                if fn is None or fn.args.vararg is None or fn.name in helpers:
                    continue
                if any(isinstance(e, ast.Starred) and getattr(e.value, "id", None) == fn.args.vararg.arg
                       for e in elts):
                    cmd = _command_at(strings, cmds)
                    if cmd:
                        helpers[fn.name] = cmd
    for m in mods:
        rel = os.path.relpath(m.path, ROOT)
        for node, strings, _ in _raw_invocations(m, cmds, helpers):
            cmd = _command_at(strings, cmds)
            if cmd is not None:
                yield cmd, strings[len(cmd):], f"{rel}:{node.lineno}"
            elif strings and strings[0].startswith("-"):
                yield (), strings, f"{rel}:{node.lineno}"  # the group's own options (--version)


def coverage() -> list[Option]:
    cmds = commands()
    opts = options()
    by_cmd: dict[str, list[Option]] = {}
    for o in opts:
        by_cmd.setdefault(o.command, []).append(o)
    for cmd, strings, where in invocations(cmds):
        given = set(strings) | {s.split("=", 1)[0] for s in strings if s.startswith("--") and "=" in s}
        for o in by_cmd.get(" ".join(cmd), []):
            if any(n in given for n in o.needs) and where not in o.passed_by:
                o.passed_by.append(where)
    return opts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--missing", action="store_true", help="only the options no test passes")
    a = ap.parse_args()
    opts = coverage()
    missing = [o for o in opts if not o.passed_by]
    for o in missing if a.missing else opts:
        where = ", ".join(o.passed_by[:3]) + (f" (+{len(o.passed_by) - 3})" if len(o.passed_by) > 3 else "")
        print(f"{(o.command or 'nodesleuth'):16} {'/'.join(o.needs):28} {'(hidden) ' if o.hidden else ''}"
              f"{where or 'NEVER PASSED'}")
    print(f"{len(opts) - len(missing)} of {len(opts)} options passed by a test; {len(missing)} never", file=sys.stderr)
    return 1 if missing and a.missing else 0


if __name__ == "__main__":
    sys.exit(main())
