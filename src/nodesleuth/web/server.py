"""`nodesleuth serve`: Flask app over a store. Loopback by default; any other bind needs a token."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import threading
import time

from flask import Flask, abort, jsonify, request, send_from_directory

from ..profile import query as pq
from ..store.store import StoreReader
from . import data

STATIC = os.path.join(os.path.dirname(__file__), "static")


def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def create_app(store: str, token: str | None = None) -> Flask:
    app = Flask(__name__, static_folder=None)
    cache = data.ProfileCache()
    inc_cache: dict = {}
    inc_lock = threading.Lock()

    def reader() -> StoreReader:
        return StoreReader(store)

    @app.before_request
    def auth():
        if token is None:
            return None
        given = request.args.get("token") or request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not hmac.compare_digest(given.encode(), token.encode()):
            abort(401)
        return None

    def fnum(name: str, default=None):
        v = request.args.get(name)
        if v is None or v == "":
            return default
        try:
            return float(v)
        except ValueError:
            abort(400, f"{name} must be a number")

    def inum(name: str):
        v = fnum(name)
        return None if v is None else int(v)

    @app.get("/")
    def index():
        return send_from_directory(STATIC, "index.html")

    @app.get("/static/<path:name>")
    def static_file(name):
        return send_from_directory(STATIC, name)

    @app.get("/api/summary")
    def summary():
        return jsonify({**data.summary(reader()), "store": store})

    @app.get("/api/timeline")
    def timeline():
        r = reader()
        t0, t1 = fnum("from"), fnum("to")
        if t0 is None or t1 is None:  # only then is the recording's span (a read of its ends) needed
            s = data.summary(r)
            t1 = t1 if t1 is not None else (s["end"] or time.time())
            t0 = t0 if t0 is not None else max(s["start"] or t1 - 3600, t1 - 86400)
        cols = max(10, min(4000, inum("cols") or 600))
        return jsonify(data.timeline(r, t0, t1, cols, request.args.get("metric", "busy")))

    @app.get("/api/heatmap")
    def heatmap():
        t0, t1 = fnum("from"), fnum("to")
        if t0 is None or t1 is None or t1 <= t0 or t1 - t0 > 3600:
            abort(400, "from/to required, at most one hour apart")
        s = cache.get(reader(), t0, t1)
        return jsonify(data.heatmap(s, t0, t1, inum("cpu"), inum("rows") or 50))

    @app.get("/api/flame")
    def flame():
        t0, t1 = fnum("from"), fnum("to")
        if t0 is None or t1 is None or t1 <= t0:
            abort(400, "from/to required")
        r = reader()
        s = data.subset(cache.get(r, t0, t1), t0, t1)
        base = None
        b0, b1 = fnum("base_from"), fnum("base_to")
        if b0 is not None and b1 is not None and b1 > b0:
            base = pq.load(r, b0, b1)
        cpu, pid = inum("cpu"), inum("pid")
        f = pq.Filter(cpus={cpu} if cpu is not None else None, pids={pid} if pid is not None else None)
        return jsonify({**data.flame(s, base, f), "from": t0, "to": t1, "cpu": cpu})

    @app.get("/api/incidents")
    def incidents():
        from ..explain import chain, load

        r = reader()
        segs = r.segments("ticks")
        key = (len(segs), os.path.getmtime(segs[-1]) if segs else 0)
        with inc_lock:
            if inc_cache.get("key") != key:
                rec, problems = load.recording(store, None, None)
                incs = [chain.build(rec, i) for i in load.incidents(rec)]
                inc_cache.update(key=key, doc=[i.to_dict() for i in incs], problems=[str(p) for p in problems])
            return jsonify({"incidents": inc_cache["doc"], "problems": inc_cache["problems"]})

    return app


def serve(store: str, host: str = "127.0.0.1", port: int = 8080, token: str | None = None, log=print) -> None:
    from werkzeug.serving import make_server

    if not is_loopback(host) and not token:
        token = secrets.token_urlsafe(24)
        log(f"binding {host}: a token is required; generated one: {token}")
    app = create_app(store, token if not is_loopback(host) else token)
    srv = make_server(host, port, app, threaded=True)
    log(f"nodesleuth web view on http://{host}:{port}/" + (f"?token={token}" if token else ""))
    srv.serve_forever()
