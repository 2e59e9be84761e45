"""The web view in a real headless Chromium (Debian's), driven by Playwright, on a recorded store."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from conftest import ART, free_port
from nodesleuth.lab.webfixture import build, build_day

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")



@contextlib.contextmanager
def served_page(browser, store: str, path: str = "/"):
    """A page of `nodesleuth serve` over this store, on a free port; the server stops after."""
    port = free_port()
    srv = _serve(store, port)
    try:
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
        pg.goto(f"http://127.0.0.1:{port}{path}")
        yield pg
    finally:
        srv.terminate()
        srv.wait()


def _serve(store: str, port: int, *extra: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", store, "--port", str(port), *extra],
                         stderr=subprocess.PIPE, text=True)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            break
        except urllib.error.HTTPError:
            break  # up, but wants a token
        except OSError:
            time.sleep(0.1)
    return p


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    return build(str(tmp_path_factory.mktemp("web")))


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    os.makedirs(ART, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(recorded, browser):
    port = free_port()
    srv = _serve(recorded["store"], port)
    pg = browser.new_page(viewport={"width": 1400, "height": 1100})
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(f"http://127.0.0.1:{port}/")
    pg.base = f"http://127.0.0.1:{port}"
    pg.wait_for_selector("canvas#timeline[data-drawn='1']", timeout=20000)
    pg.errors = errors
    yield pg
    pg.close()
    srv.terminate()
    srv.wait()


def pixel(pg, cpu: int, t: float) -> list[int]:
    return pg.evaluate("""([cpu, t]) => { const st = window.nodesleuth.state, tl = st.tl;
        const cv = document.getElementById('timeline'); const x = Math.floor((t - tl.from) / tl.step);
        const rh = cv.height / st.rows.length; const y = Math.floor((st.rows.indexOf(cpu) + 0.5) * rh);
        return Array.from(cv.getContext('2d').getImageData(x, y, 1, 1).data); }""", [cpu, t])


def test_heatmap_draws_every_cpu_and_the_hot_core(page, recorded):
    assert page.locator("canvas#timeline").get_attribute("data-cpus") == "96"
    hot = pixel(page, 39, recorded["hot_start"] + 2.5)
    cold = pixel(page, 38, recorded["hot_start"] + 2.5)
    assert hot[0] >= 120 and hot[1] <= 60, hot  # dark red (YlOrRd at 100%): ~100% busy
    assert cold[1] >= 180, cold  # pale: idle neighbour
    markers = page.locator("#markers .marker")
    assert markers.count() >= 1 and "ENATxQueuePaused" in (markers.first.get_attribute("title") or "")
    # the cgroup chart is a uPlot chart with a y axis and a legend naming the series
    assert page.locator("#census .u-legend").count() == 1
    legend = page.locator("#census .u-legend").inner_text()
    assert "tracked" in legend and "live" in legend and "dying (zombie)" in legend
    page.screenshot(path=os.path.join(ART, "web-timeline.png"), full_page=True)
    assert page.errors == []


def test_click_opens_subsecond_heatmap_then_flame_graph(page, recorded):
    a = page.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [39, recorded["hot_start"] + 1])
    b = page.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [39, recorded["hot_start"] + 3])
    page.mouse.move(a["x"], a["y"])
    page.mouse.down()
    page.mouse.move(b["x"], b["y"])
    page.mouse.up()
    page.wait_for_selector("#subsecond rect.cell")
    assert "CPU 39" in page.locator("#subsecond-title").inner_text()
    ncols = page.evaluate("window.nodesleuth.state.sub.h.columns.length")
    page.locator("#subsecond rect.cell[data-col='0'][data-row='49']").click()
    page.locator(f"#subsecond rect.cell[data-col='{ncols - 1}'][data-row='0']").click()
    page.wait_for_selector("#flame svg g")
    page.wait_for_timeout(800)
    assert "CPU 39" in page.locator("#flame-title").inner_text()
    # the top frame of the flame graph (the leaf of the widest tower) is the memcg walk
    first = page.locator("#topfuncs tr.row").first.inner_text()
    assert first.startswith("mem_cgroup_nr_lru_pages")
    assert page.locator("#flame").inner_text().count("mem_cgroup_nr_lru_pages") >= 1
    page.fill("#search", "memcg_numa")
    page.click("#search-go")
    page.wait_for_timeout(300)
    page.screenshot(path=os.path.join(ART, "web-flame.png"), full_page=True)
    page.check("#diff")
    page.wait_for_function("document.getElementById('flame-title').innerText.includes('baseline')")
    page.screenshot(path=os.path.join(ART, "web-flame-diff.png"), full_page=True)
    assert page.errors == []


def test_incidents_page_shows_the_chain(page, recorded):
    page.goto(f"{page.base}/#incidents")
    page.wait_for_selector(".incident")
    text = page.locator("#incidents").inner_text()
    # the fixture has no churn trace: the memcg walk is proven, who makes the zombies is not, so no
    # root cause is named and the page says what is proven and what is not
    assert "no root cause proven" in text and "leading explanation: memory-cgroup code by kubelet" in text
    assert "CPU 39" in text and "mem_cgroup_nr_lru_pages" in text and "68440 memcgs dying" in text
    rows = {r.get_attribute("data-link"): r.get_attribute("class") for r in page.locator("#incidents tr[data-link]").all()}
    assert rows["resource"] == "proven" and rows["processes"] == "proven" and rows["creator"] == "unknown"
    assert rows["saturated_core"] == "proven"  # CPU 39 served the interrupts of the reported queue 0
    page.screenshot(path=os.path.join(ART, "web-incidents.png"), full_page=True)
    page.locator(".go-flame").first.click()
    page.wait_for_function("document.getElementById('flame-title').innerText.includes('CPU 39')")
    assert page.errors == []


def test_day_timeline_from_rollups(tmp_path, browser):
    store = build_day(str(tmp_path))
    with served_page(browser, store) as pg:
        pg.wait_for_selector("canvas#timeline[data-drawn='1']", timeout=20000)
        assert pg.locator("canvas#timeline").get_attribute("data-cpus") == "96"
        assert "1 min rollups" in pg.locator("#range").inner_text()
        assert pg.locator("#markers .marker").count() >= 10
        pg.screenshot(path=os.path.join(ART, "web-day.png"))
        pg.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


def test_non_loopback_bind_requires_a_token(recorded):
    import http.cookiejar

    port = free_port()
    srv = _serve(recorded["store"], port, "--bind", "0.0.0.0", "--token", "s3cret")
    base = f"http://127.0.0.1:{port}"
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/api/summary", timeout=5)
        assert e.value.code == 401
        # the token in the URL is swapped for an HttpOnly cookie and the URL loses it
        raw = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as e:
            raw.open(f"{base}/?from=1&token=s3cret#timeline", timeout=5)
        assert e.value.code == 303
        assert e.value.headers["Location"] == "/?from=1"
        cookie = e.value.headers["Set-Cookie"]
        assert "nodesleuth_token=s3cret" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert e.value.headers["Server"] == "waitress"  # a production WSGI server, not werkzeug's dev one
        jar = http.cookiejar.CookieJar()
        browser_like = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        r = browser_like.open(f"{base}/api/summary?token=s3cret", timeout=5)
        assert r.url == f"{base}/api/summary" and json.loads(r.read())["cpus"] == 96
        assert json.loads(browser_like.open(f"{base}/api/summary", timeout=5).read())["cpus"] == 96  # cookie only
        with pytest.raises(urllib.error.HTTPError) as e:  # a wrong token
            urllib.request.urlopen(f"{base}/api/summary?token=s3cre", timeout=5)
        assert e.value.code == 401
        req = urllib.request.Request(f"{base}/api/summary", headers={"Authorization": "Bearer s3cret"})
        assert json.loads(urllib.request.urlopen(req, timeout=5).read())["cpus"] == 96
        req = urllib.request.Request(f"{base}/api/summary", headers={"Cookie": "nodesleuth_token=wrong"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(req, timeout=5)
    finally:
        srv.terminate()
        srv.wait()
    # no --token on a non-loopback bind: one is generated, printed once, and required
    port = free_port()
    srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", recorded["store"], "--port",
                            str(port), "--bind", "0.0.0.0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        line = srv.stderr.readline()
        assert "a token is required; generated one:" in line, line
        gen = line.rsplit(" ", 1)[1].strip()
        assert len(gen) >= 24
        for _ in range(100):
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/summary",
                                             headers={"Authorization": f"Bearer {gen}"})
                doc = json.loads(urllib.request.urlopen(req, timeout=2).read())
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        assert doc["cpus"] == 96
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/summary", timeout=5)
    finally:
        srv.terminate()
        srv.wait()


def test_token_cookie_in_a_real_browser(recorded, browser):
    """Chromium opens the link with the token, ends on the same view without it, and the page works."""
    port = free_port()
    srv = _serve(recorded["store"], port, "--bind", "0.0.0.0", "--token", "s3cret")
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        pg = ctx.new_page()
        pg.goto(f"http://127.0.0.1:{port}/?token=s3cret#timeline")
        pg.wait_for_selector("canvas#timeline[data-drawn='1']", timeout=20000)
        assert "token" not in pg.url and pg.url.endswith("#timeline")
        ck = {c["name"]: c for c in ctx.cookies()}
        assert ck["nodesleuth_token"]["httpOnly"] and ck["nodesleuth_token"]["sameSite"] == "Strict"
        assert pg.evaluate("document.cookie") == ""  # not readable by scripts
        ctx.close()
    finally:
        srv.terminate()
        srv.wait()


def test_concurrent_clients(recorded):
    """16 clients at once, each asking for a timeline, a subsecond heatmap and a flame graph: all
    answered, and each answer equals the one a lone client gets."""
    from concurrent.futures import ThreadPoolExecutor

    port = free_port()
    srv = _serve(recorded["store"], port)
    base = f"http://127.0.0.1:{port}/api"
    h0 = recorded["hot_start"]
    urls = [f"{base}/timeline?from={recorded['t0']}&to={recorded['t0'] + 180}&cols=300",
            f"{base}/heatmap?from={h0 - 5}&to={h0 + 10}&cpu=39",
            f"{base}/flame?from={h0}&to={h0 + 5}&cpu=39",
            f"{base}/cell?cpu=39&t={h0 + 2}"]
    try:
        alone = [json.loads(urllib.request.urlopen(u, timeout=60).read()) for u in urls]

        def get(i):
            r = urllib.request.urlopen(urls[i % len(urls)], timeout=120)
            return i % len(urls), r.headers["Server"], json.loads(r.read())

        with ThreadPoolExecutor(16) as ex:
            got = list(ex.map(get, range(64)))
        assert len(got) == 64
        for i, server, doc in got:
            assert server == "waitress"
            assert doc == alone[i]
        assert alone[2]["top"][0]["function"] == "mem_cgroup_nr_lru_pages"
        assert alone[3]["sys"] >= 90 and alone[3]["procs"][0]["comm"] == "kubelet"
    finally:
        srv.terminate()
        srv.wait()


def test_unreadable_parts_show_a_banner(tmp_path, browser):
    """A store with a damaged segment: the timeline says so on top instead of looking healthy."""
    import shutil

    store = str(tmp_path / "st")
    shutil.copytree(os.path.join(os.path.dirname(__file__), "golden", "store-v2"), store)
    seg = sorted(os.listdir(os.path.join(store, "ticks")))
    seg = os.path.join(store, "ticks", [x for x in seg if x.endswith(".seg")][0])
    with open(seg, "r+b") as f:
        f.seek(os.path.getsize(seg) // 2)
        f.write(b"\xff" * 8)
    with served_page(browser, store, "/#timeline") as pg:
        pg.wait_for_selector("#problem-banner:not([hidden])", timeout=20000)
        text = pg.locator("#problem-banner").inner_text()
        assert "could not be read" in text and "checksum mismatch" in text
        pg.screenshot(path=os.path.join(ART, "web-problem-banner.png"))


def test_day_timeline_keeps_a_3_second_hot_core(tmp_path):
    """A day of per-minute rollups in which CPU 5 was hot for only 3 s of one minute: the day view
    (600 columns over 24 h) still shows that cell hot, because rollups keep each minute's max."""
    import orjson

    from nodesleuth.collect.cgroups import Census
    from nodesleuth.collect.sampler import Tick
    from nodesleuth.store.rollup import STREAM, Rollup
    from nodesleuth.store.store import StoreReader, StoreWriter
    from nodesleuth.web import data

    store = str(tmp_path / "day")
    w = StoreWriter(store)
    t0 = 1_796_000_000.0 - 1_796_000_000.0 % 60
    hot_minute = 600
    roll = Rollup()
    for m in range(24 * 60):
        if m != hot_minute:
            w.append(STREAM, t0 + m * 60, orjson.dumps({"t": t0 + m * 60, "n": 60, "busy": [5] * 8, "bmax": [9] * 8,
                                                        "sys": [1] * 8, "mem": None, "dying": None, "percpu": None,
                                                        "slab": None, "ev": []}))
            continue
        for s in range(60):  # real ticks through the recorder's own rollup code
            raw = {c: (5, 0, 0, 95, 0, 0, 0, 0, 0, 0) for c in range(8)}
            if 20 <= s < 23:
                raw[5] = (0, 0, 100, 0, 0, 0, 0, 0, 0, 0)
            raw[-1] = tuple(sum(v[i] for v in raw.values()) for i in range(10))
            done = roll.add(Tick(t0 + m * 60 + s + 0.5, 1.0, {}, [], Census(0, (), None, (), None), {}, cpu_raw=raw))
            assert done is None
        w.append(STREAM, roll.start, roll.flush())
    w.close()
    tl = data.timeline(StoreReader(store), t0, t0 + 86400, cols=600, metric="busy")
    assert tl["resolution"] == 60
    col = int(hot_minute * 60 / tl["step"])
    row5 = tl["values"][5]
    assert row5[col] == 100 and max(tl["values"][4]) <= 9 and sorted(row5)[-2] <= 9
    mean = data.timeline(StoreReader(store), t0, t0 + 86400, cols=600, metric="mean")
    assert mean["values"][5][col] < 15  # a minute's mean hides it: that is why the max is kept
