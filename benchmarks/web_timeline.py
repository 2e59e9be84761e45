"""The web view's day timeline: a 24 h recording of a 96-CPU node rendered in real headless Chromium.
Measures the server's /api/timeline for the whole day (aggregated from per-minute rollups) and the
browser's time from navigation to the drawn heatmap. Issue 6's bar: under 1 s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.common import emit
from fixtures.webstore import build_day

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def main(argv=None) -> dict:
    if not os.path.exists(CHROMIUM):
        return emit({"benchmark": "web_timeline", "skipped": "Debian's chromium is not installed"})
    from playwright.sync_api import sync_playwright

    d = tempfile.mkdtemp(prefix="ns-bench-web-")
    srv = None
    try:
        store = build_day(d)
        srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", store, "--listen", "127.0.0.1:18190"],
                               stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                urllib.request.urlopen("http://127.0.0.1:18190/api/summary", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        api = []
        size = 0
        for _ in range(3):
            t = time.perf_counter()
            body = urllib.request.urlopen("http://127.0.0.1:18190/api/timeline?cols=1300", timeout=30).read()
            api.append(time.perf_counter() - t)
            size = len(body)
        doc = json.loads(body)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            renders = []
            for _ in range(3):
                pg = b.new_page(viewport={"width": 1400, "height": 900})
                t = time.perf_counter()
                pg.goto("http://127.0.0.1:18190/")
                pg.wait_for_selector("canvas#timeline[data-drawn='1']", timeout=30000)
                renders.append(time.perf_counter() - t)
                in_page = pg.evaluate("window.nodesleuth.lastRenderMs")
                pg.close()
            b.close()
        best = min(renders)
        return emit({"benchmark": "web_timeline", "cpus": len(doc["values"]), "hours": 24, "cols": doc["cols"],
                     "api_seconds": round(min(api), 3), "bytes": size, "render_seconds": round(best, 3),
                     "render_seconds_all": [round(x, 3) for x in renders],
                     "in_page_fetch_and_draw_ms": round(in_page, 1), "under_1s": best < 1.0})
    finally:
        if srv:
            srv.terminate()
            srv.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
