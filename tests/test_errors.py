"""Error paths, each with its one-line message and exit code (never a traceback): the web API's answers to
every bad parameter of every endpoint, `fleet --prometheus` against servers that fail in each way, the lab's
refusals and failures, and `remedy --apply` when systemctl fails."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import free_port, missing, needs_root, nodesleuth

HERE = os.path.dirname(os.path.abspath(__file__))


def one_line_error(p: subprocess.CompletedProcess, *parts: str, code: int = 2) -> str:
    """Exit `code`, stderr one line `nodesleuth: error: ...` holding every part, no traceback."""
    err = p.stderr.strip()
    assert p.returncode == code, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr and len(err.splitlines()) == 1, p.stderr
    assert err.startswith("nodesleuth: error: "), err
    for s in parts:
        assert s in err, (s, err)
    return err


# --- the web API: 400 with {"error": sentence} for every bad parameter --------------------------------------

@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from fixtures.webstore import build
    from nodesleuth.web.server import create_app

    rec = build(str(tmp_path_factory.mktemp("web400")), seconds=60, hot_from=30, cpus=8)
    app = create_app(rec["store"])
    return app.test_client(), rec["hot_start"]


T = "{t}"  # the hot episode's start, filled in per request
BAD = [  # endpoint?query, what the sentence says
    ("timeline?from=abc", "from must be a number, not 'abc'"),
    ("timeline?from=nan&to={t}", "from must be a finite number, not 'nan'"),
    ("timeline?from={t}&to=inf", "to must be a finite number, not 'inf'"),
    ("timeline?from={t}&to={t0}", "must be before to"),
    ("timeline?from={late}", "must be before to"),  # after the recording's end
    ("timeline?cols=many", "cols must be an integer, not 'many'"),
    ("timeline?cols=nan", "cols must be an integer, not 'nan'"),
    ("timeline?cols=1e400", "cols must be an integer, not '1e400'"),
    ("timeline?from={t0}&to={t}&metric=bogus", "metric must be one of busy, mean, sys, not 'bogus'"),
    ("heatmap", "from and to are required"),
    ("heatmap?from={t}", "from and to are required"),
    ("heatmap?from={t}&to={t0}", "must be before to"),
    ("heatmap?from={t}&to={day}", "from/to at most one day apart"),
    ("heatmap?from={t0}&to={t}&cpu=x", "cpu must be an integer, not 'x'"),
    ("heatmap?from={t0}&to={t}&cpu=-1", "cpu must be at least 0"),
    ("heatmap?from={t0}&to={t}&rows=0", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&rows=-5", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&rows=100000", "rows must be between 1 and 1000"),
    ("heatmap?from={t0}&to={t}&cols=nan", "cols must be an integer, not 'nan'"),
    ("flame", "from and to are required"),
    ("flame?from={t}&to={t}", "must be before to"),
    ("flame?from={t0}&to={t}&cpu=1.5", "cpu must be an integer, not '1.5'"),
    ("flame?from={t0}&to={t}&cpu=-1", "cpu must be at least 0"),
    ("flame?from={t0}&to={t}&pid=abc", "pid must be an integer, not 'abc'"),
    ("flame?from={t0}&to={t}&cgroup=/nodesleuth-no-such-cgroup", "cgroup /nodesleuth-no-such-cgroup: no such cgroup"),
    ("flame?from={t0}&to={t}&depth=deep", "depth must be an integer, not 'deep'"),
    ("flame?from={t0}&to={t}&depth=0", "depth must be at least 1"),
    ("flame?from={t0}&to={t}&min_share=nan", "min_share must be a finite number, not 'nan'"),
    ("flame?from={t0}&to={t}&min_share=2", "min_share must be between 0 and 1"),
    ("flame?from={t0}&to={t}&min_share=-0.1", "min_share must be between 0 and 1"),
    ("flame?from={t0}&to={t}&base_from=x&base_to={t}", "base_from must be a number, not 'x'"),
    ("cell", "cpu and t are required"),
    ("cell?cpu=1", "cpu and t are required"),
    ("cell?cpu=nan&t={t}", "cpu must be an integer, not 'nan'"),
    ("cell?cpu=1&t=x", "t must be a number, not 'x'"),
    ("cell?cpu=1&t=nan", "t must be a finite number, not 'nan'"),
    ("cell?cpu=1&t={t}&resolution=0", "resolution must be at least 1"),
    ("cell?cpu=1&t={t}&resolution=fine", "resolution must be an integer, not 'fine'"),
]


def _url(q: str, t: float) -> str:
    return "/api/" + q.format(t=t, t0=t - 20, late=t + 10 * 86400, day=t + 86401)


@pytest.mark.parametrize("query,says", BAD, ids=[q for q, _ in BAD])
def test_web_api_bad_parameter_is_a_400_with_a_sentence(web, query, says):
    client, t = web
    r = client.get(_url(query, t))
    assert r.status_code == 400, (r.status_code, r.data[:300])
    assert r.is_json and says in r.get_json()["error"], r.data


def test_web_api_good_parameters_still_answer(web):
    """The checks refuse only what is wrong: the same endpoints with sound values answer 200."""
    client, t = web
    for q in ("summary", "timeline", "timeline?from={t0}&to={t}&cols=100&metric=sys", "heatmap?from={t0}&to={t}&rows=10",
              "heatmap?from={t0}&to={t}&cpu=7", "flame?from={t0}&to={t}&cpu=3&depth=8&min_share=0.01",
              "cell?cpu=1&t={t}&resolution=60", "incidents"):
        r = client.get(_url(q, t))
        assert r.status_code == 200, (q, r.data[:300])


def test_web_api_reversed_baseline_is_refused_with_422(web):
    """A baseline that cannot be drawn is a 422 (the request is well formed, its answer would be untrue)."""
    client, t = web
    r = client.get(_url("flame?from={t0}&to={t}&base_from={t}&base_to={t0}", t))
    assert r.status_code == 422 and r.get_json()["error"] == "baseline: give base_from < base_to"
