"""`nodesleuth serve`: Flask app over a store, served by waitress (a production WSGI server, not
werkzeug's development one). Loopback by default; any other bind needs a token. A token given in the
URL (`?token=`) is exchanged once for an HttpOnly, SameSite=Strict cookie and the browser is
redirected to the same URL without it, so the token does not stay in shared links, browser history,
Referer headers or proxy logs. Scripts can send `Authorization: Bearer TOKEN` instead."""

from __future__ import annotations

import hmac
import math
import ipaddress
import os
import secrets
import threading
import time

from urllib.parse import urlencode

import orjson
from flask import Flask, Response, abort, jsonify, redirect, request, send_from_directory

from ..recording import flame as rflame
from ..recording.flametree import MAX_DEPTH, MIN_SHARE
from ..recording.heatmap import HEAT_COLS, ProfileCache, heatmap_doc
from ..store.catalog import TICKS
from ..store.store import StoreReader
from ..model.errors import InputError
from ..model.timeparse import iso
from . import data

STATIC = os.path.join(os.path.dirname(__file__), "static")
COOKIE = "nodesleuth_token"
TIMELINE_METRICS = ("busy", "mean", "sys")  # what web/data.py timeline() colours the CPU rows by


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _State:
    """What the routes share: the store's directory, the profile cache and the incidents' cache."""

    def __init__(self, store: str):
        self.store = store
        self.cache = ProfileCache()
        self.inc_cache: dict = {}
        self.inc_lock = threading.Lock()

    def reader(self) -> StoreReader:
        """A fresh reader per request: the store grows while the page is open."""
        return StoreReader(self.store)


def _num(name: str, conv, kind: str, default, lo, hi):
    """A query argument as a number (float or int), within [lo, hi]: else a 400 saying which and why."""
    v = request.args.get(name)
    if v is None or v == "":
        return default
    try:
        x = conv(v)
    except ValueError:
        abort(400, f"{name} must be {kind}, not {v[:40]!r}")
    if not math.isfinite(x):
        abort(400, f"{name} must be a finite number, not {v[:40]!r}")
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        abort(400, f"{name} must be between {lo:g} and {hi:g}" if lo is not None and hi is not None
              else f"{name} must be at least {lo:g}" if lo is not None else f"{name} must be at most {hi:g}")
    return x


def _fnum(name: str, default=None, lo: float | None = None, hi: float | None = None):
    """A float query argument (None when absent), checked by _num."""
    return _num(name, float, "a number", default, lo, hi)


def _inum(name: str, lo: int | None = None, hi: int | None = None):
    """An integer query argument (None when absent), checked by _num."""
    return _num(name, int, "an integer", None, lo, hi)


def _range_args(required: bool, most: float | None = None, what: str = ""):
    """from/to: both finite, from before to (and at most `most` seconds apart)."""
    t0, t1 = _fnum("from"), _fnum("to")
    if required and (t0 is None or t1 is None):
        abort(400, "from and to are required (epoch seconds)")
    if t0 is not None and t1 is not None:
        if t1 <= t0:
            abort(400, f"from ({iso(t0)}) must be before to ({iso(t1)})")
        if most is not None and t1 - t0 > most:
            abort(400, f"from/to at most {what} apart")
    return t0, t1


def _refuse(msg: str, **extra):
    """A request that cannot be answered truthfully: 422 with a sentence the page shows."""
    resp = jsonify({"error": msg, **extra})
    resp.status_code = 422
    return resp


def _register_auth(app: Flask, token: str | None) -> None:
    """The token check before every request (none without a token); a token in the URL becomes a cookie."""

    @app.before_request
    def auth():
        if token is None:
            return None
        in_url = request.args.get("token")
        if in_url is not None:
            if not hmac.compare_digest(in_url.encode(), token.encode()):
                abort(401)
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            resp = redirect(request.path + ("?" + urlencode(rest) if rest else ""), 303)
            resp.set_cookie(COOKIE, token, httponly=True, samesite="Strict", secure=request.is_secure, path="/")
            resp.headers["Cache-Control"] = "no-store"
            resp.headers["Referrer-Policy"] = "no-referrer"
            return resp
        given = request.cookies.get(COOKIE) or request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            abort(401)
        return None


def _register_errors(app: Flask) -> None:
    """A 400 answered as JSON, as the page reads every refusal."""

    @app.errorhandler(400)
    def bad_request(e):
        """A parameter that cannot be used: 400 with the sentence the page shows ({"error": ...}, as a 422)."""
        resp = jsonify({"error": e.description})
        resp.status_code = 400
        return resp


def _register_pages(app: Flask) -> None:
    """The page and its static files."""

    @app.get("/")
    def index():
        return send_from_directory(STATIC, "index.html")

    @app.get("/static/<path:name>")
    def static_file(name):
        return send_from_directory(STATIC, name)


def _register_timeline(app: Flask, st: _State) -> None:
    """The recording's summary and the CPU timeline drawn from it."""

    @app.get("/api/summary")
    def summary():
        return jsonify({**data.summary(st.reader()), "store": st.store})

    @app.get("/api/timeline")
    def timeline():
        r = st.reader()
        t0, t1 = _range_args(False)
        metric = request.args.get("metric", "busy")
        if metric not in TIMELINE_METRICS:
            abort(400, f"metric must be one of {', '.join(TIMELINE_METRICS)}, not {metric[:40]!r}")
        if t0 is None or t1 is None:  # only then is the recording's span (a read of its ends) needed
            s = data.summary(r)
            t1 = t1 if t1 is not None else (s["end"] or time.time())
            t0 = t0 if t0 is not None else max(s["start"] or t1 - 3600, t1 - 86400)
        cols = max(10, min(4000, _inum("cols") or 600))  # clamped: the page asks for its width in pixels
        if t1 <= t0:
            abort(400, f"from ({iso(t0)}) must be before to ({iso(t1)}): the recording ends at {iso(t1)}")
        return jsonify(data.timeline(r, t0, t1, cols, metric))


def _register_heatmap(app: Flask, st: _State) -> None:
    """The subsecond heatmap of one CPU (or all)."""

    @app.get("/api/heatmap")
    def heatmap():
        t0, t1 = _range_args(True, 86400, "one day")
        r = st.reader()
        cpu, rows = _inum("cpu", 0), _inum("rows", 1, 1000) or 50
        cols = max(10, min(86400, _inum("cols") or HEAT_COLS))
        doc = heatmap_doc(r, st.cache, t0, t1, cpu, rows, cols)
        if doc is None:
            abort(400, "from/to at most one hour apart (this store has no heatmap aggregates)")
        return Response(orjson.dumps(doc), mimetype="application/json")


def _register_flame(app: Flask, st: _State) -> None:
    """The flame graph of a range, filtered, optionally against a baseline range."""

    @app.get("/api/flame")
    def flame():
        t0, t1 = _range_args(True)
        r = st.reader()
        cpu, pid, comm, cgroup = _inum("cpu", 0), _inum("pid", 0), request.args.get("comm"), request.args.get("cgroup")
        try:
            f = rflame.flame_filter(cpu, pid, comm, cgroup)
        except InputError as e:  # no such cgroup on any hierarchy
            abort(400, f"cgroup {e}")
        b0, b1 = _fnum("base_from"), _fnum("base_to")
        depth = max(2, min(512, _inum("depth", 1) or MAX_DEPTH))  # clamped, as cols
        share = _fnum("min_share", lo=0.0, hi=1.0)
        if (b0 is None) != (b1 is None) or (b0 is not None and b1 <= b0):
            return _refuse("baseline: give base_from < base_to")
        q = rflame.FlameQuery(t0, t1, f, cpu, depth, MIN_SHARE if share is None else share)
        try:
            doc = rflame.flame_doc(r, q, st.cache) if b0 is None else rflame.diff_doc(r, q, b0, b1, st.cache)
        except rflame.Refused as e:
            return _refuse(e.message, **e.asked)
        return Response(orjson.dumps(doc), mimetype="application/json")


def _register_cell(app: Flask, st: _State) -> None:
    """What ran in one heatmap cell."""

    @app.get("/api/cell")
    def cell():
        cpu, t = _inum("cpu", 0), _fnum("t")
        if cpu is None or t is None:
            abort(400, "cpu and t are required")
        return jsonify(data.cell(st.reader(), cpu, t, _inum("resolution", 1) or 1))


def _register_incidents(app: Flask, st: _State) -> None:
    """The recording's incidents with their causal chains, rebuilt only when the recording grew."""

    @app.get("/api/incidents")
    def incidents():
        from ..recording.incidents import incidents_doc  # the causal chains' modules: only when asked

        r = st.reader()
        segs = r.segments(TICKS)
        key = (len(segs), os.path.getmtime(segs[-1]) if segs else 0)
        with st.inc_lock:
            if st.inc_cache.get("key") != key:
                st.inc_cache.update(key=key, doc=incidents_doc(r))
            return jsonify(st.inc_cache["doc"])


def create_app(store: str, token: str | None = None) -> Flask:
    """The web view's Flask app over `store`: the token check, JSON errors, then each group of routes."""
    app = Flask(__name__, static_folder=None)
    st = _State(store)
    _register_auth(app, token)
    _register_errors(app)
    _register_pages(app)
    _register_timeline(app, st)
    _register_heatmap(app, st)
    _register_flame(app, st)
    _register_cell(app, st)
    _register_incidents(app, st)
    return app


def serve(store: str, host: str = "127.0.0.1", port: int = 8080, token: str | None = None, log=print,
          threads: int = 8) -> None:
    from waitress import create_server

    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(24)
        log(f"binding {host}: a token is required; generated one: {token}")
    srv = create_server(create_app(store, token), host=host, port=port, threads=threads)
    log(f"nodesleuth web view on http://{host}:{port}/" + (f"?token={token}" if token else "")
        + (" (the token is swapped for a cookie on first visit)" if token else ""))
    srv.run()
