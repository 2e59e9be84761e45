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

from conftest import ART, free_port, missing, needs_root, wait_ticks
from fixtures.webstore import build, build_day, build_week

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]



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


def _serve(store: str, port: int, *extra: str, host: str = "127.0.0.1") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", store, "--listen", f"{host}:{port}",
                          *extra],
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
    """Debian's chromium driven by Playwright; only the tests that draw need it (the server's own
    answers, tokens and cookies are tested without a browser)."""
    if not os.path.exists(CHROMIUM):
        missing("Debian's chromium is not installed (scripts/setup-tests.sh)")
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
    # wall-clock time under the columns, ms within the second on the side, a legend in samples
    xt = page.locator("#subsecond .axis-x .tick text").all_text_contents()
    assert xt[0] == "00:55:01" and all(len(t) == 8 for t in xt), xt
    assert {"0", "1000"} <= set(page.locator("#subsecond .axis-y .tick text").all_text_contents())
    sub_text = page.locator("#subsecond").text_content()
    assert "ms within the second" in sub_text and "samples per cell (20 ms)" in sub_text and "time (UTC)" in sub_text
    page.locator("#subsecond rect.cell[data-col='1'][data-row='10']").hover()
    assert hover_tip(page).startswith("2026-11-30T00:55:02Z +780 ms")
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


def hover_tip(pg) -> str:
    pg.wait_for_selector("#tip:not([hidden])")
    return pg.locator("#tip").inner_text()


def test_axes_legend_and_hover_values(page, recorded):
    page.goto(f"{page.base}/?from={recorded['t0']}&to={recorded['t0'] + 180}#timeline")
    page.wait_for_function("window.nodesleuth.ready === true", timeout=20000)
    # time axes in UTC wall-clock, a colour legend with its unit, a readable row per CPU
    ticks = page.locator("#tl-axis-top .axis-x .tick text").all_text_contents()
    assert len(ticks) >= 3 and all(len(t) == 8 and t.count(":") == 2 for t in ticks), ticks
    assert "time (UTC)" in page.locator("#tl-axis-bottom").text_content()
    legend = page.locator("#tl-legend").text_content()
    assert "busy % of the CPU (per second)" in legend and "100%" in legend and "no data" in legend
    box = page.locator("canvas#timeline").bounding_box()
    assert box["height"] / 96 >= 10  # rows readable at 96 CPUs (the heatmap scrolls)
    assert page.locator(".cpu-label").count() == 96
    assert page.locator(".cpu-label.hot").all_inner_texts() == ["CPU 39"]
    # hover a hot cell: CPU, time, busy, then %usr/%sys/%soft and the top process from the server
    c = page.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [39, recorded["hot_start"] + 2.5])
    page.mouse.move(c["x"], c["y"])
    page.wait_for_function("document.getElementById('tip').innerText.includes('top:')")
    tip = page.locator("#tip").inner_text()
    assert tip.startswith("CPU 39  2026-11-30T00:55:02") and "busy 9" in tip and "%sys 94" in tip, tip
    assert "top: kubelet[100]" in tip, tip
    page.screenshot(path=os.path.join(ART, "web-hover-cell.png"))
    # the NIC events: a marker over the heatmap and a hover target above it with the kernel's text
    ev = page.locator("#event-strip .ev[data-reason*='ENATxQueuePaused']")
    ev.hover()
    tip = hover_tip(page)
    assert "ENATxQueuePaused on eth0" in tip and "TX q 0 is paused for too long" in tip
    assert "ENADeviceReset on eth0" in tip  # logged in the same second: one target lists both
    page.screenshot(path=os.path.join(ART, "web-hover-event.png"))
    page.mouse.move(5, 5)
    # the incident as a band, its title on hover
    page.wait_for_selector("#event-strip .inc", timeout=30000)
    page.locator("#event-strip .inc").first.hover()
    assert "Incident 1:" in hover_tip(page)
    page.mouse.move(5, 5)
    # uPlot charts: axes with units, legends naming the series, values on hover
    for chart, want in (("census", ["tracked", "live", "dying (zombie)"]), ("memory", ["Percpu", "Slab"])):
        assert page.locator(f"#{chart} .u-axis").count() >= 2
        lg = page.locator(f"#{chart} .u-legend").inner_text()
        assert all(w in lg for w in want), lg
    labels = lambda c: page.evaluate(f"window.nodesleuth.state.charts['{c}'].axes.map(a => a.label)")  # noqa: E731
    assert labels("census") == ["time (UTC)", "cgroups"]  # uPlot draws axes on its canvas
    assert labels("memory") == ["time (UTC)", "bytes"]
    over = page.locator("#census .u-over").bounding_box()
    page.mouse.move(over["x"] + over["width"] * 0.6, over["y"] + over["height"] / 2)
    vals = page.locator("#census .u-legend .u-value").all_inner_texts()
    assert vals[0].startswith("2026-11-30T") and all(v not in ("", "-", "--") for v in vals), vals
    # the starvation chart: this fixture has softirq counts, not ksoftirqd waits or PSI, and says so
    assert "NET_RX" in page.locator("#starve .u-legend").inner_text()
    assert "ksoftirqd wait not recorded" in page.locator("#starve-note").inner_text()
    assert labels("starve") == ["time (UTC)", "softirqs / s"]
    page.screenshot(path=os.path.join(ART, "web-charts.png"), full_page=True)
    # fold idle CPUs: the hot one stays, the URL keeps the choice
    page.check("#fold")
    assert "fold=1" in page.url
    assert int(page.locator("canvas#timeline").get_attribute("data-rows")) < 96
    assert "CPU 39" in page.locator(".cpu-label").all_inner_texts()
    page.uncheck("#fold")
    assert page.errors == []


def test_url_round_trip_and_no_stale_panels(page, browser, recorded):
    h0 = recorded["hot_start"]
    page.goto(f"{page.base}/?from={recorded['t0']}&to={recorded['t0'] + 180}#timeline")
    page.wait_for_function("window.nodesleuth.ready === true", timeout=20000)

    def drag(cpu, a, b):
        page.evaluate("window.scrollTo(0, 0)")
        p = page.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [cpu, a])
        q = page.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [cpu, b])
        page.mouse.move(p["x"], p["y"])
        page.mouse.down()
        page.mouse.move(q["x"], q["y"])
        page.mouse.up()

    drag(39, h0 + 1, h0 + 3)
    page.wait_for_selector("#subsecond rect.cell")
    ncols = page.evaluate("window.nodesleuth.state.sub.h.columns.length")
    page.locator("#subsecond rect.cell[data-col='0'][data-row='49']").click()
    page.locator(f"#subsecond rect.cell[data-col='{ncols - 1}'][data-row='0']").click()
    page.wait_for_selector("#flame svg g")
    page.fill("#search", "memcg")
    page.click("#search-go")
    page.check("#diff")
    page.wait_for_function("document.getElementById('flame-title').innerText.includes('vs baseline')")
    url = page.url
    for k in ("from=", "to=", "sub_from=", "cpu=39", "fl_from=", "fl_cpu=39", "diff=1", "base_from=", "q=memcg"):
        assert k in url, (k, url)
    titles = (page.locator("#subsecond-title").inner_text(), page.locator("#flame-title").inner_text())
    # the same link in a fresh page reproduces the view
    other = browser.new_page(viewport={"width": 1400, "height": 1100})
    other.goto(url)
    other.wait_for_function("window.nodesleuth.ready === true", timeout=30000)
    assert (other.locator("#subsecond-title").inner_text(), other.locator("#flame-title").inner_text()) == titles
    assert other.locator("#search").input_value() == "memcg" and other.locator("#diff").is_checked()
    assert other.evaluate("window.nodesleuth.state.tl.from") == page.evaluate("window.nodesleuth.state.tl.from")
    other.screenshot(path=os.path.join(ART, "web-url-restored.png"), full_page=True)
    other.close()
    # a new selection on another CPU: the old flame graph goes, nothing of CPU 39 stays on screen
    drag(1, h0 + 20, h0 + 22)
    page.wait_for_function("document.getElementById('subsecond-title').innerText.includes('CPU 1,')")
    assert page.locator("#flame-panel").is_hidden()
    assert "fl_from" not in page.url and "cpu=1" in page.url
    page.wait_for_selector("#subsecond rect.cell")
    page.screenshot(path=os.path.join(ART, "web-new-selection.png"), full_page=True)
    # its flame graph's default baseline follows the new range (the old default does not stick)
    page.locator("#subsecond rect.cell[data-col='0'][data-row='49']").click()
    page.locator("#subsecond rect.cell[data-col='1'][data-row='0']").click()
    page.wait_for_function("document.getElementById('flame-title').innerText.includes('CPU 1,')")
    a = page.evaluate("window.nodesleuth.state.fl.a")
    b0, b1 = map(float, page.locator("#baseline").input_value().split(".."))
    assert abs(b1 - a) < 0.01 and b1 - b0 >= 5
    assert page.errors == []


def test_diff_colours_new_frame_red_gone_frames_shown_and_empty_baseline_refused(page, recorded):
    """CPU 39's memcg walk is absent from the 5 s before the episode: the default baseline makes it
    new (solid red); what CPU 39 ran before and not now is drawn as gone; a baseline before the
    profile starts is refused with a sentence instead of an all-grey graph."""
    h0, h1, t0 = recorded["hot_start"], recorded["hot_end"], recorded["t0"]
    page.goto(f"{page.base}/?from={t0}&to={t0 + 180}&fl_from={h0}&fl_to={h1}&fl_cpu=39&diff=1#timeline")
    page.wait_for_function("window.nodesleuth.ready === true", timeout=20000)
    page.wait_for_selector("#flame svg g")
    fill = lambda name: page.evaluate(  # noqa: E731
        "n => { const g = [...document.querySelectorAll('#flame g')].find(g => g.getAttribute('name') === n);"
        " return g ? g.querySelector('rect').getAttribute('fill') : null; }", name)
    assert fill("mem_cgroup_nr_lru_pages_[k]") == "rgb(220,0,0)"
    statuses = page.evaluate("d3.selectAll('#flame g').data().map(d => d.data.status)")
    assert "gone" in statuses and "new" in statuses
    gone = page.evaluate("d3.selectAll('#flame g').data().filter(d => d.data.status === 'gone')"
                         ".map(d => d.data.name)")
    gfill = fill(gone[0])
    assert gfill == "rgb(60,70,160)"
    assert "baseline" in page.locator("#flame-title").inner_text()
    assert page.locator("#flame-legend").is_visible()
    assert page.locator("#markers .band.base").count() == 1  # the baseline window drawn on the timeline
    # hover text of the new frame says so
    page.locator("#flame g[name='mem_cgroup_nr_lru_pages_[k]']").hover()
    page.wait_for_timeout(300)
    assert "new:" in page.locator(".d3-flame-graph-tip").inner_text()
    page.screenshot(path=os.path.join(ART, "web-flame-diff-new-red.png"), full_page=True)
    # a baseline that holds no data: refused, said, no graph
    page.fill("#baseline", f"{t0 + 10}..{t0 + 20}")
    page.click("#baseline-go")
    page.wait_for_selector("#flame-msg:not([hidden])")
    msg = page.locator("#flame-msg").inner_text()
    assert "holds no profile samples" in msg and "choose a baseline inside it" in msg
    assert page.locator("#flame svg").count() == 0
    assert "not drawn" in page.locator("#flame-title").inner_text()
    page.screenshot(path=os.path.join(ART, "web-flame-baseline-refused.png"), full_page=True)
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
        # hover in a day of rollups: the minute's mean and max busy of that CPU
        t = pg.evaluate("window.nodesleuth.state.tl.from") + 3600 * 5
        c = pg.evaluate("([c,t]) => window.nodesleuth.cellCenter(c, t)", [7, t])
        pg.mouse.move(c["x"], c["y"])
        pg.wait_for_function("document.getElementById('tip').innerText.includes('minute mean busy')")
        assert pg.locator("#tip").inner_text().startswith("CPU 7  2026-11-30T")
        pg.screenshot(path=os.path.join(ART, "web-day.png"))
        pg.close()


PANELS = ("census", "memory", "starve", "softnet", "tcp", "reclaim")


def test_week_view_draws_every_panel_from_the_minute_tier(tmp_path, browser):
    """Seven days of minutes only (the 1 s and 10 s tiers past their retention), written by the recorder's Rollup
    from a real Sampler's ticks of the fixture node: every chart under the timeline draws the whole week, the
    sections' charts (starvation, softnet, tcp, reclaim) from the minute's folded sections, with the values the
    stored minutes hold."""
    from nodesleuth.store import rollup, tier
    from nodesleuth.store.store import StoreReader

    store = build_week(str(tmp_path))
    minutes = list(rollup.minutes(StoreReader(store)))
    assert len(minutes) == 7 * 1440
    processed = max(round(sum(tier.from_minute(m).softnet.processed) / m.n) for m in minutes)
    assert processed > 0
    with served_page(browser, store, f"/?from={minutes[0].t:.0f}&to={minutes[-1].t + 60:.0f}") as pg:
        pg.wait_for_function("window.nodesleuth.ready === true", timeout=60000)
        assert "1 min rollups" in pg.locator("#range").inner_text()
        t0, t1 = pg.evaluate("[window.nodesleuth.state.tl.from, window.nodesleuth.state.tl.to]")
        assert t1 - t0 >= 7 * 86400 - 120
        # the CPU view: every CPU's row has a cell in every column of the week (the minutes' busiest seconds)
        rows = pg.evaluate("window.nodesleuth.state.tl.values")
        assert len(rows) == len(minutes[0].bmax) and all(min(r) >= 0 for r in rows), [r.count(-1) for r in rows]
        for name in PANELS:
            got = pg.evaluate("""n => { const u = window.nodesleuth.state.charts[n]; if (!u) return null;
                const x = u.data[0]; return [x.length, x[0], x[x.length - 1],
                u.data.slice(1).map(s => s.filter(v => v != null).length), u.series.map(s => s.label)]; }""", name)
            assert got, f"{name}: no chart"
            n, first, last, present, labels = got
            assert n >= 500 and first - t0 <= 3600 and t1 - last <= 3600, (name, got[:3])
            assert max(present) == n, (name, present, labels)
            assert pg.locator(f"#{name}").inner_text() != "not recorded in this range", name
        i = pg.evaluate("window.nodesleuth.state.charts.softnet.series.map(s => s.label)").index("packets processed")
        drawn = pg.evaluate(f"Math.max(...window.nodesleuth.state.charts.softnet.data[{i}])")
        assert drawn == processed  # the busiest minute's rate (thinning keeps each bucket's max)
        pg.screenshot(path=os.path.join(ART, "web-week.png"), full_page=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **kw):
        return None


def test_non_loopback_bind_requires_a_token(recorded):
    import http.cookiejar

    port = free_port()
    srv = _serve(recorded["store"], port, "--token", "s3cret", host="0.0.0.0")
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
    srv = subprocess.Popen([sys.executable, "-m", "nodesleuth", "serve", "--store", recorded["store"], "--listen",
                            f"0.0.0.0:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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
    srv = _serve(recorded["store"], port, "--token", "s3cret", host="0.0.0.0")
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
        assert alone[2]["top"][0]["function"] == "mem_cgroup_nr_lru_pages" and alone[2]["cut"] == 0
        # a depth cap: stacks deeper than 5 frames are cut there, the cut samples counted
        capped = json.loads(urllib.request.urlopen(f"{base}/flame?from={h0}&to={h0 + 5}&cpu=39&depth=5").read())

        def depth(n):
            return 1 + max((depth(c) for c in n["children"]), default=0)

        assert depth(capped["tree"]) == 6 and capped["cut"] >= 240 and capped["samples"] == alone[2]["samples"]
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

    from nodesleuth.model.records import Census
    from nodesleuth.model.records import Tick
    from nodesleuth.store.catalog import ROLLUP as STREAM
    from nodesleuth.store.rollup import Rollup
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
            done = roll.add(Tick(time=t0 + m * 60 + s + 0.5, interval=1.0, cpu={}, procs=[],
                                 census=Census(0, (), None, (), None), cpu_raw=raw))
            assert done is None
        w.write(STREAM, roll.flush())
    w.close()
    tl = data.timeline(StoreReader(store), t0, t0 + 86400, cols=600, metric="busy")
    assert tl["resolution"] == 60
    col = int(hot_minute * 60 / tl["step"])
    row5 = tl["values"][5]
    assert row5[col] == 100 and max(tl["values"][4]) <= 9 and sorted(row5)[-2] <= 9
    mean = data.timeline(StoreReader(store), t0, t0 + 86400, cols=600, metric="mean")
    assert mean["values"][5][col] < 15  # a minute's mean hides it: that is why the max is kept


@pytest.mark.slow  # >= 9 s here (the fast tier: docs/testing.md)
@needs_root
def test_real_recording_busy_loop_new_frame_and_starvation_chart(tmp_path, browser, busy_loop):
    """A real recording (recorder + perf on this machine): a pinned busy loop started mid-way. Its
    CPU is hot in the heatmap; against the seconds before it started its frames are new (red); the
    starvation chart shows the kernel's ksoftirqd wait and CPU pressure as recorded."""
    import signal

    store = str(tmp_path / "st")
    comm = f"nsweb-{os.getpid() % 100000}"  # not a name another suite on this machine may be running
    rec = subprocess.Popen([sys.executable, "-m", "nodesleuth", "record", "--store", store, "--quiet", "--profile",
                            "--profile-rotate", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ticks(store, rec)  # a loaded host takes seconds to start it (and its profiler)
        # the baseline seconds hold work of their own (another process on CPU 1), so the comparison does
        # not hang on whatever else this machine runs: a baseline of idle samples alone is refused (422)
        base = busy_loop(1, f"nsbase-{os.getpid() % 100000}")
        time.sleep(4.5)
        base.kill()
        base.wait()
        loop_from = time.time()
        busy_loop(1, comm)
        time.sleep(6)
        loop_to = time.time()
    finally:
        rec.send_signal(signal.SIGTERM)
        _, err = rec.communicate(timeout=60)
    assert rec.returncode == 0, err
    t0 = loop_from - 5
    url = (f"/?from={t0:.3f}&to={loop_to + 1:.3f}&fl_from={loop_from + 1:.3f}&fl_to={loop_to:.3f}&diff=1"
           f"&base_from={t0 + 1:.3f}&base_to={loop_from - 0.2:.3f}#timeline")
    with served_page(browser, store, url) as pg:
        pg.wait_for_function("window.nodesleuth.ready === true", timeout=30000)
        assert pg.locator("#problem-banner").is_hidden()
        lg = pg.locator("#starve .u-legend").inner_text()
        assert "longest ksoftirqd wait" in lg and "PSI cpu some" in lg and "NET_RX" in lg, lg
        assert pg.evaluate("window.nodesleuth.state.charts.starve.axes.map(a => a.label)") == [
            "time (UTC)", "ms / s", "softirqs / s"]
        pg.wait_for_selector("#flame svg g", timeout=30000)
        fill = pg.evaluate("""n => { const g = [...document.querySelectorAll('#flame g')]
            .find(g => g.getAttribute('name') === n); return g && g.querySelector('rect').getAttribute('fill'); }""", comm)
        roots = pg.evaluate("d3.selectAll('#flame g').data().filter(d => d.depth === 1)"
                            ".map(d => [d.data.name, d.data.status, d.data.samples])")
        assert fill == "rgb(220,0,0)", roots  # the loop's process is new against the seconds before it started
        pg.screenshot(path=os.path.join(ART, "web-real-busyloop.png"), full_page=True)


def test_svg_flame_graph_search_and_zoom_in_chromium(recorded, browser, tmp_path):
    """The CLI's SVG works on its own in a browser: Search highlights and reports the matched share,
    a click zooms into a frame (others hidden, Reset Zoom shown), the details line names the frame."""
    from conftest import nodesleuth

    h0, h1 = recorded["hot_start"], recorded["hot_end"]
    out = str(tmp_path / "f.svg")
    p = nodesleuth("flame", "--store", recorded["store"], "--from", str(h0 - 5), "--to", str(h1), "-o", out)
    assert p.returncode == 0, p.stderr
    pg = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(f"file://{out}")
    pg.wait_for_selector("g.f")
    pg.evaluate("search('mem_cgroup_nr_lru_pages')")
    matched = pg.locator("#matched").text_content()
    assert matched.startswith("Matched: ") and float(matched.split()[1].rstrip("%")) > 0
    hit = pg.locator("g.f[data-name='mem_cgroup_nr_lru_pages_[k]'] rect").first
    assert hit.get_attribute("fill") == "rgb(230,0,230)"
    pg.screenshot(path=os.path.join(ART, "svg-search.png"))
    kub = pg.locator("g.f[data-name='kubelet']").first
    kub.hover()
    assert pg.locator("#details").text_content().startswith("Function: kubelet (")
    kub.click()
    assert pg.locator("#unzoom").get_attribute("class") in ("", None)
    assert pg.locator("g.f[data-name='swapper']").first.get_attribute("class") == "f hide"
    w = float(pg.locator("g.f[data-name='kubelet'] rect").first.get_attribute("width"))
    assert w >= 1179  # the zoomed frame fills the width (1200 - 2 x 10 px padding)
    pg.screenshot(path=os.path.join(ART, "svg-zoomed.png"))
    pg.click("#unzoom")
    assert "hide" in (pg.locator("#unzoom").get_attribute("class") or "")
    assert errors == []
    pg.close()


def test_flame_says_how_many_samples_perf_lost(recorded, browser, tmp_path):
    """A range whose profile lost samples (perf's ring buffer full: stored by the recorder as
    profile_lost) is drawn with a note saying how many, for the CPU shown (or all CPUs): a thinner
    profile is never shown as the whole one."""
    import shutil

    from nodesleuth.profile.codec import encode_lost
    from nodesleuth.store.catalog import PROFILE_LOST
    from nodesleuth.store.store import StoreWriter

    store = str(tmp_path / "st")
    shutil.copytree(recorded["store"], store)
    h0 = recorded["hot_start"]
    w = StoreWriter(store)
    w.append(PROFILE_LOST, *encode_lost([(h0 + 2, 39, 123), (h0 + 2.5, 5, 77)]))
    w.close()
    port = free_port()
    srv = _serve(store, port)
    try:
        base = f"http://127.0.0.1:{port}"
        for q, want in (("&cpu=39", 123), ("", 200), ("&cpu=7", 0)):
            with urllib.request.urlopen(f"{base}/api/flame?from={h0 + 1}&to={h0 + 3}{q}", timeout=60) as r:
                assert json.loads(r.read())["lost"] == want, q
        pg = browser.new_page(viewport={"width": 1400, "height": 1100})
        pg.goto(f"{base}/?from={recorded['t0']}&to={recorded['t0'] + 180}&fl_from={h0 + 1}&fl_to={h0 + 3}&fl_cpu=39"
                "#timeline")
        pg.wait_for_function("window.nodesleuth.ready === true", timeout=30000)
        note = pg.locator("#flame-note").inner_text()
        assert "perf lost 123 samples in this range" in note and "ring buffer was full" in note, note
        pg.close()
    finally:
        srv.terminate()
        srv.wait()


def test_incidents_page_shows_a_leading_group(browser, tmp_path):
    """The exec storm of the corpus (tests/corpus/cases/exec_storm.py, recorded in the VM): the incidents
    page leads with the group and its numbers (explain/family/group.py, docs/groups.md)."""
    from benchmarks import explain_corpus as ec

    store = ec.extract("exec_storm", str(tmp_path))
    with served_page(browser, store, "/#incidents") as page:
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.reload()
        page.wait_for_selector(".incident")
        text = page.locator("#incidents").inner_text()
        assert "root cause (proven end to end, group): group: main processes started by sh (pid" in text
        grp = page.locator("#incidents p.group").first.inner_text()
        assert grp.startswith("Group: main processes started by sh (pid") and "/s started" in grp
        assert "% of CPU 1" in grp
        assert page.locator("#incidents ul.group li").count() >= 3  # its evidence: profile, counter, listings
        assert page.locator("#incidents tr[data-family='group']").first.get_attribute("class") == "proven"
        page.screenshot(path=os.path.join(ART, "web-incidents-group.png"), full_page=True)
        assert errors == []
