"""The README's first command on a stock Debian (issue 36, part 3): Debian 12's and 13's own python3 is
externally managed (PEP 668), so `pip install .` into it refuses; the first line makes a venv instead.

This test runs that line, read from README.md's first ```sh block, with bash as root inside a stock root
file system of Debian 12 (bookworm, python 3.11) and Debian 13 (trixie, python 3.13): made with mmdebstrap
from Debian's archive (variant `important`, the base system a Debian install has, plus python3), cached
as a tarball under /var/cache/nodesleuth-tests keyed by suite and recipe, imported into podman (runc, see
tests/container.py), with a copy of this checkout as the working directory and the host network (apt
and pip reach the registries; proxy variables, and the CA bundle the host's pip trusts, are passed
through). The container and the image are
removed afterwards; only the tarball stays, so a rerun imports it in seconds.

Run: `pytest -m stock tests/test_readme_stock.py` (slow: the first run builds each root, a minute or two;
every run downloads the wheels pip installs)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import container as C  # noqa: E402
from conftest import missing  # noqa: E402

# The line the README's first ```sh block starts with. Used only while README.md's first block does not
# yet make a venv (its old `pip install .` line is what fails on a stock Debian).
FIRST_LINE = ("apt-get update && apt-get install -y python3-venv && python3 -m venv /opt/nodesleuth && "
              "/opt/nodesleuth/bin/pip install . && /opt/nodesleuth/bin/nodesleuth check")
SUITES = {"bookworm": "3.11", "trixie": "3.13"}
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
CACHE = os.environ.get("NODESLEUTH_TEST_CACHE", "/var/cache/nodesleuth-tests")
MMOPTS = ["--mode=root", "--format=tar", "--variant=important", "--include=python3"]
PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist",
                                     ".pytest_cache", "artifacts")


def readme_first_line(path: str = os.path.join(C.REPO, "README.md")) -> tuple[str, str]:
    """(the first command line of README.md's first ```sh block, where it came from)."""
    with open(path) as f:
        m = re.search(r"^```sh\n(.*?)^```", f.read(), re.M | re.S)
    assert m, f"{path}: no ```sh block"
    lines = [ln.strip() for ln in m.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines, f"{path}: the first ```sh block is empty"
    if re.search(r"-m venv|pipx", lines[0]):
        return lines[0], "README.md"
    return FIRST_LINE, f"fallback (README.md's first line {lines[0]!r} makes no venv yet)"


def ca_passthrough() -> list[str]:
    """The CA bundle this host's pip trusts (PIP_CERT, REQUESTS_CA_BUNDLE or SSL_CERT_FILE), for a network
    whose HTTPS goes through an intercepting proxy: bound read-only into the container and named by
    PIP_CERT there, as a proxy variable is passed through. The stock root itself is not changed."""
    for v in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        f = os.environ.get(v, "")
        if f and os.path.isfile(f):
            inside = "/run/nodesleuth-test-ca.crt"
            return ["-v", f"{os.path.realpath(f)}:{inside}:ro", "-e", f"PIP_CERT={inside}"]
    return []


def sources(suite: str) -> list[str]:
    return [f"deb {MIRROR} {suite} main", f"deb {MIRROR} {suite}-updates main",
            f"deb {SECURITY} {suite}-security main"]


def stock_tarball(suite: str) -> str:
    """The stock root file system of `suite` as a tar (mmdebstrap, cached by suite and recipe)."""
    key = hashlib.sha256("\n".join([suite, *MMOPTS, *sources(suite)]).encode()).hexdigest()[:16]
    tar = os.path.join(CACHE, f"stock-{suite}-{key}.tar")
    if os.path.getsize(tar) if os.path.exists(tar) else 0:
        return tar
    os.makedirs(CACHE, exist_ok=True)
    part = tar + f".part{os.getpid()}"
    try:
        p = subprocess.run(["nice", "-n", "10", "mmdebstrap", "--quiet", *MMOPTS, suite, part, *sources(suite)],
                           capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, f"mmdebstrap {suite}: exit {p.returncode}\n{p.stderr[-3000:]}"
        os.replace(part, tar)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return tar


def _need_tools() -> None:
    why = C.podman_available()
    if why:
        missing(why)
    if not shutil.which("mmdebstrap"):
        missing("mmdebstrap is not installed (scripts/setup-tests.sh installs it)")


@pytest.mark.slow
@pytest.mark.stock
@pytest.mark.parametrize("suite", sorted(SUITES))
def test_readme_first_line_on_stock_debian(suite, tmp_path):
    _need_tools()
    line, origin = readme_first_line()
    t0 = time.monotonic()
    tar = stock_tarball(suite)
    t_root = time.monotonic() - t0
    tag = f"{os.getpid()}-{os.urandom(3).hex()}"
    image = f"localhost/nodesleuth-stock-test:{suite}-{tag}"
    name = f"nodesleuth-test-stock-{suite}-{tag}"
    work = os.path.join(tmp_path, "src")
    shutil.copytree(C.REPO, work, ignore=COPY_IGNORE, symlinks=True)
    C.remove_stale()
    before = C.leftovers()
    try:
        t1 = time.monotonic()
        p = subprocess.run(["podman", "import", "--quiet", tar, image], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        t_import = time.monotonic() - t1
        # what the root has before the line runs, then the line itself, exactly as the README has it
        script = ('echo "python: $(python3 -V 2>&1)"; '
                  'python3 -m pip --version >/dev/null 2>&1 && echo "pip: in the system" || echo "pip: none"; '
                  'bash -c "$README_LINE"; rc=$?; echo "README-LINE-EXIT=$rc"')
        argv = ["podman", "--runtime", C.RUNTIME, "run", "--rm", "--name", name, "--pull=never",
                "--label", f"{C.LABEL}={os.getpid()}", "--cgroup-parent", C.CGROUP_PARENT,
                "--network=host", *C.ulimit_flags(), "-v", f"{work}:/work/src", "-w", "/work/src",
                "-e", "README_LINE", "-e", "DEBIAN_FRONTEND=noninteractive"]
        for v in PROXY_VARS:
            if v in os.environ:
                argv += ["-e", v]
        argv += ca_passthrough()
        argv += [image, "bash", "-c", script]
        t2 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                           env={**os.environ, "README_LINE": line})
        t_line = time.monotonic() - t2
        out = p.stdout + p.stderr
        print(f"\n{suite}: line from {origin}; root {t_root:.1f} s, import {t_import:.1f} s, "
              f"line {t_line:.1f} s; {out.splitlines()[0] if out else ''}")
        assert p.returncode == 0, f"podman run: exit {p.returncode}\n{out[-4000:]}"
        assert f"python: Python {SUITES[suite]}." in out, out[:2000]
        m = re.search(r"^README-LINE-EXIT=(\d+)$", out, re.M)
        assert m, out[-4000:]
        rc = int(m.group(1))
        assert "Successfully installed" in out and re.search(r"\bnodesleuth-\d", out), \
            f"pip did not install the package:\n{out[-4000:]}"
        assert "Traceback" not in out, out[-4000:]
        # NPD's protocol: 0 ok, 1 problem, 2 unknown; and the normal report, not an error line
        assert rc in (0, 1, 2), f"`nodesleuth check` exit {rc}:\n{out[-4000:]}"
        report = out[out.index("Successfully installed"):]
        head = re.search(r"^nodesleuth check: \d+ problem\(s\) in [0-9.]+ s of sampling.*$", report, re.M)
        assert head, report[-4000:]
        print(f"{suite}: check exit {rc}: {head.group(0)}")
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=120)
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True, timeout=120)
        C.remove_cgroup_parent()
    after = C.leftovers()
    assert after["containers"] == [] and after["conmon"] == [] and after["cgroups"] == [], after
    assert not set(after["mounts"]) - set(before["mounts"]), after
    assert subprocess.run(["podman", "image", "exists", image]).returncode != 0
