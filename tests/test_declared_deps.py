"""Every third-party package the tests import is declared (issue 36): CI installs only what pyproject's
dependencies and extras declare (`pip install -e ".[test]"` in a fresh venv, .ci/run), so a test module
that imports anything else would pass on a machine that happens to have it and fail on a fresh one.

The imports are read with `ast` from every module under tests/ and the helpers they import (fixtures/,
benchmarks/); the standard library (sys.stdlib_module_names), nodesleuth and the repository's own
modules are left out; each remaining top-level name is mapped to the distributions that provide it
(importlib.metadata.packages_distributions()) and must be one of pyproject's names."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("tests", "fixtures", "benchmarks")
# tests/data holds recorded material with the scripts that made it elsewhere (provenance, never imported
# or run by the suite)
SKIP = ("__pycache__", "artifacts", "data")


def normalize(name: str) -> str:
    """PEP 503: PyYAML == pyyaml, prometheus_client == prometheus-client."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(pyproject: str = os.path.join(REPO, "pyproject.toml")) -> set[str]:
    """The normalized names of [project.dependencies] and every [project.optional-dependencies] extra,
    the project's own name included."""
    with open(pyproject, "rb") as f:
        proj = tomllib.load(f)["project"]
    reqs = list(proj.get("dependencies", []))
    for extra in proj.get("optional-dependencies", {}).values():
        reqs += extra
    names = {normalize(proj["name"])}
    for r in reqs:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", r)
        assert m, f"{pyproject}: cannot read the requirement {r!r}"
        names.add(normalize(m.group(1)))
    return names


def python_files(dirs=SCANNED) -> list[str]:
    out = []
    for d in dirs:
        for base, subdirs, files in os.walk(os.path.join(REPO, d)):
            subdirs[:] = [s for s in subdirs if s not in SKIP]
            out += [os.path.join(base, f) for f in files if f.endswith(".py")]
    return sorted(out)


def local_modules(dirs=SCANNED + ("scripts",)) -> set[str]:
    """What a test can import from the repository itself: the top-level names SCANNED, and every module
    and package inside them and scripts/ (tests put their own directories, and the generators' under
    scripts/, on sys.path)."""
    names = {"nodesleuth", *dirs}
    for d in dirs:
        for base, subdirs, files in os.walk(os.path.join(REPO, d)):
            subdirs[:] = [s for s in subdirs if s not in SKIP]
            names |= {f[:-3] for f in files if f.endswith(".py")}
            names |= set(subdirs)
    return names


def imported(path: str) -> dict[str, int]:
    """Absolute top-level names `path` imports -> the first line that imports each."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    tops: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for n in names:
            tops.setdefault(n.split(".")[0], node.lineno)
    return tops


def undeclared(files: list[str], allowed: set[str], local: set[str]) -> list[str]:
    """One line per import that no declared distribution provides."""
    provides = importlib.metadata.packages_distributions()
    bad = []
    for path in files:
        for top, line in sorted(imported(path).items(), key=lambda t: t[1]):
            if top in sys.stdlib_module_names or top in local or top == "__future__":
                continue
            dists = provides.get(top, [])
            if not dists:
                bad.append(f"{os.path.relpath(path, REPO)}:{line}: imports {top!r}, which no installed "
                           f"distribution provides and pyproject does not declare")
            elif not {normalize(d) for d in dists} & allowed:
                bad.append(f"{os.path.relpath(path, REPO)}:{line}: imports {top!r} (distribution "
                           f"{', '.join(sorted(set(dists)))}), which no dependency or extra of pyproject declares")
    return bad


def test_test_imports_are_declared():
    files = python_files()
    assert any(f.endswith("test_store_pack.py") for f in files)
    bad = undeclared(files, declared(), local_modules())
    assert not bad, "\n".join(bad)


def test_the_check_finds_an_undeclared_import(tmp_path):
    """The check can fail: an installed but undeclared distribution (pip) and a package no one provides."""
    mod = tmp_path / "test_fake.py"
    mod.write_text("import os\nimport pytest\nimport pip._internal\nfrom no_such_pkg_x9 import thing\n")
    bad = undeclared([str(mod)], declared(), local_modules())
    assert len(bad) == 2, bad
    assert "imports 'pip' (distribution pip)" in bad[0]
    assert "imports 'no_such_pkg_x9', which no installed distribution provides" in bad[1]
