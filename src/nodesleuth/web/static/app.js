/* nodesleuth web view: all aggregation happens on the server; this draws it.
   The view's state (range, colour metric, folding, subsecond selection and CPU, flame range, diff
   baseline, search) lives in the URL, so a copied link reproduces the view. Every panel belongs to
   one selection: a new selection closes the panels of the old one, and a late answer to an old
   request is dropped (request generations), so nothing stale stays on screen. */
"use strict";
const api = async (path, params) => {
  const r = await fetch(`api/${path}?${new URLSearchParams(params || {})}`);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) { const e = new Error(body.error || `${path}: HTTP ${r.status}`); e.status = r.status; e.body = body; throw e; }
  return body;
};
const iso = t => new Date(t * 1000).toISOString().replace(".000Z", "Z");
const hms = d3.utcFormat("%H:%M:%S");
const LEFT = 60;  // px left of the plot area: CPU labels, chart y axes
const ROWH = 12;  // px per CPU row: readable at 96 CPUs (the heatmap scrolls)
// the hot-core rule's threshold, as the server's rules say (model/thresholds.py, in /api/summary)
const HOT = () => state.summary && state.summary.rules ? state.summary.rules.hot_busy_pct : 90;
const FOLD_BELOW = 50;  // "fold idle CPUs" hides the rows that never reached this busy % in the range
const color = v => v < 0 ? "#f4f4f4" : d3.interpolateYlOrRd(Math.min(1, v / 100));
const state = { summary: null, from: 0, to: 0, tl: null, rows: [], sub: null, flame: null, fl: null,
                incidents: [], gen: { tl: 0, sub: 0, flame: 0, cell: 0 }, charts: {} };
const $ = id => document.getElementById(id);

/* ---- URL state ---------------------------------------------------------------------------- */
function syncURL() {
  const p = new URLSearchParams();
  p.set("from", state.from.toFixed(3)); p.set("to", state.to.toFixed(3));
  if ($("metric").value !== "busy") p.set("metric", $("metric").value);
  if ($("fold").checked) p.set("fold", "1");
  if (state.sub) { p.set("sub_from", state.sub.a); p.set("sub_to", state.sub.b); if (state.sub.cpu !== null) p.set("cpu", state.sub.cpu); }
  if (state.fl) {
    p.set("fl_from", state.fl.a.toFixed(3)); p.set("fl_to", state.fl.b.toFixed(3));
    if (state.fl.cpu !== null && state.fl.cpu !== undefined) p.set("fl_cpu", state.fl.cpu);
    if (state.fl.diff) { p.set("diff", "1"); p.set("base_from", state.fl.b0.toFixed(3)); p.set("base_to", state.fl.b1.toFixed(3)); }
    if (state.fl.search) p.set("q", state.fl.search);
  }
  history.replaceState(null, "", `?${p}${location.hash}`);
}
const num = (p, k) => p.has(k) && p.get(k) !== "" && isFinite(+p.get(k)) ? +p.get(k) : null;

async function init() {
  state.summary = await api("summary");
  $("store").textContent = state.summary.store;
  const end = state.summary.end, start = state.summary.start;
  const p = new URLSearchParams(location.search);
  state.from = num(p, "from") ?? Math.max(start, end - 86400);
  state.to = num(p, "to") ?? end;
  if (p.get("metric")) $("metric").value = p.get("metric");
  $("fold").checked = p.get("fold") === "1";
  document.querySelectorAll("button[data-span]").forEach(b => b.onclick = () => {
    const span = +b.dataset.span, mid = (state.from + state.to) / 2;
    setRange(Math.max(state.summary.start, mid - span / 2), Math.min(state.summary.end, mid + span / 2));
  });
  $("zoom-out").onclick = () => {
    const span = (state.to - state.from) * 4, mid = (state.from + state.to) / 2;
    setRange(Math.max(state.summary.start, mid - span / 2), Math.min(state.summary.end, mid + span / 2));
  };
  $("all").onclick = () => setRange(state.summary.start, state.summary.end);
  $("metric").onchange = () => loadTimeline();
  $("fold").onchange = () => { state.tl && drawTimeline(state.tl); syncURL(); };
  $("copy-link").onclick = () => { syncURL(); navigator.clipboard && navigator.clipboard.writeText(location.href).catch(() => {}); };
  $("search-go").onclick = () => { if (!state.flame) return; state.fl.search = $("search").value; state.flame.search(state.fl.search); syncURL(); };
  $("search").onkeydown = e => { if (e.key === "Enter") $("search-go").click(); };
  $("baseline").oninput = () => { delete $("baseline").dataset.auto; };
  $("reset-zoom").onclick = () => state.flame && state.flame.resetZoom();
  $("diff").onchange = () => state.fl && openFlame(state.fl.a, state.fl.b, state.fl.cpu, { keepSub: true });
  $("baseline-go").onclick = () => { $("diff").checked = true; state.fl && openFlame(state.fl.a, state.fl.b, state.fl.cpu, { keepSub: true }); };
  window.onhashchange = route;
  api("incidents").then(d => { state.incidents = d.incidents || []; state.tl && drawMarkers(state.tl); }).catch(() => {});
  await route();
  // restore the selection panels a link carries
  const sa = num(p, "sub_from"), sb = num(p, "sub_to");
  if (sa !== null && sb !== null) await openSubsecond(sa, sb, num(p, "cpu"));
  const fa = num(p, "fl_from"), fb = num(p, "fl_to");
  if (fa !== null && fb !== null) {
    $("diff").checked = p.get("diff") === "1";
    const b0 = num(p, "base_from"), b1 = num(p, "base_to");
    if (b0 !== null && b1 !== null) $("baseline").value = `${b0}..${b1}`;
    if (p.get("q")) $("search").value = p.get("q");
    await openFlame(fa, fb, num(p, "fl_cpu"), { keepSub: true, search: p.get("q") });
  }
  window.nodesleuth.ready = true;
}

async function route() {
  const inc = location.hash.startsWith("#incidents");
  $("page-incidents").hidden = !inc;
  $("page-timeline").hidden = inc;
  if (inc) return loadIncidents();
  return loadTimeline();
}

function setRange(a, b) {
  state.from = a; state.to = Math.max(a + 1, b);
  // panels of a selection outside the new range would be stale: close them
  if (state.sub && (state.sub.a < state.from || state.sub.b > state.to)) closeSubsecond();
  if (state.fl && (state.fl.a < state.from || state.fl.b > state.to)) closeFlame();
  return loadTimeline();
}

/* ---- timeline heatmap ------------------------------------------------------------------------ */
async function loadTimeline() {
  const gen = ++state.gen.tl;
  const wrap = $("timeline-wrap");
  const cols = Math.max(200, Math.min(1600, (wrap.clientWidth || 1200) - LEFT - 20));
  const t = performance.now();
  const tl = await api("timeline", { from: state.from, to: state.to, cols, metric: $("metric").value });
  if (gen !== state.gen.tl) return;  // a newer range was asked for meanwhile
  showProblems(tl.problems);
  state.tl = tl;
  drawTimeline(tl);
  drawCharts(tl);
  $("range").textContent = `${iso(tl.from)} .. ${iso(tl.to)} (${tl.tier || (tl.resolution === 1 ? "1 s ticks" : "1 min rollups")})`;
  $("range").title = tl.tier_note || "";
  syncURL();
  window.nodesleuth.lastRenderMs = performance.now() - t;
}

function drawTimeline(tl) {
  const cv = $("timeline"), ncpu = tl.values.length;
  const peak = tl.values.map(r => Math.max(-1, ...r));
  const fold = $("fold").checked;
  const rows = [];
  for (let c = 0; c < ncpu; c++) if (!fold || peak[c] >= FOLD_BELOW) rows.push(c);
  state.rows = rows;
  $("fold-note").textContent = fold ? `(${ncpu - rows.length} of ${ncpu} CPUs folded: never >= ${FOLD_BELOW}% in this range)`
                                    : `(${ncpu} CPUs; hot ones, >= ${HOT()}% at some point, in red)`;
  cv.width = tl.cols; cv.height = Math.max(ROWH, rows.length * ROWH);
  const ctx = cv.getContext("2d");
  const img = ctx.createImageData(cv.width, cv.height);
  const rgb = c => { const x = d3.color(c); return [x.r, x.g, x.b]; };
  const lut = Array.from({ length: 102 }, (_, i) => rgb(color(i - 1)));
  rows.forEach((cpu, ri) => {
    const row = tl.values[cpu];
    for (let x = 0; x < tl.cols; x++) {
      const [r, g, b] = lut[Math.max(0, Math.min(101, row[x] + 1))];
      for (let y = ri * ROWH; y < (ri + 1) * ROWH - (ROWH > 6 ? 1 : 0); y++) {
        const o = (y * cv.width + x) * 4; img.data[o] = r; img.data[o + 1] = g; img.data[o + 2] = b; img.data[o + 3] = 255;
      }
    }
  });
  ctx.putImageData(img, 0, 0);
  cv.dataset.drawn = "1"; cv.dataset.cpus = ncpu; cv.dataset.rows = rows.length; cv.dataset.cols = tl.cols;
  const labels = $("cpu-labels"); labels.innerHTML = ""; labels.style.height = `${cv.height}px`;
  rows.forEach((c, ri) => {
    const l = document.createElement("div"); l.className = "cpu-label" + (peak[c] >= HOT() ? " hot" : "");
    l.style.top = `${ri * ROWH}px`; l.textContent = `CPU ${c}`; l.dataset.cpu = c;
    if (peak[c] >= HOT()) l.title = `CPU ${c} reached ${peak[c]}% in this range`;
    labels.appendChild(l);
  });
  // time axes (UTC) above and below, and the colour legend
  const x = d3.scaleUtc().domain([new Date(tl.from * 1000), new Date(tl.to * 1000)]).range([0, tl.cols]);
  const fmt = tl.to - tl.from > 86400 ? d3.utcFormat("%m-%d %H:%M") : tl.to - tl.from > 600 ? d3.utcFormat("%H:%M") : hms;
  for (const [id, ax, ty] of [["tl-axis-top", d3.axisTop, 30], ["tl-axis-bottom", d3.axisBottom, 4]]) {
    const svg = d3.select(`#${id}`).attr("width", LEFT + tl.cols + 40); svg.selectAll("*").remove();
    svg.append("g").attr("class", "axis-x").attr("transform", `translate(${LEFT},${ty})`).call(ax(x).ticks(8).tickFormat(fmt));
    svg.append("text").attr("x", 2).attr("y", id === "tl-axis-top" ? 32 : 12).attr("font-size", 10).text("time (UTC)");
  }
  drawLegend(tl);
  drawMarkers(tl);
  bindHeatmap(cv, tl);
}

function drawLegend(tl) {
  const root = d3.select("#tl-legend").attr("height", 44); root.selectAll("*").remove();
  const svg = root.append("g").attr("transform", "translate(10,0)");
  const w = 240, grad = root.append("defs").append("linearGradient").attr("id", "busy-grad");
  d3.range(0, 101, 10).forEach(v => grad.append("stop").attr("offset", `${v}%`).attr("stop-color", color(v)));
  svg.append("text").attr("x", 0).attr("y", 12).attr("font-size", 11)
    .text(`${tl.metric === "sys" ? "sys" : "busy"} % of the CPU (${tl.resolution === 1 ? "per second" : tl.resolution === 10 ? "busiest second of each 10 s" : "max of each minute"})`);
  svg.append("rect").attr("x", 0).attr("y", 15).attr("width", w).attr("height", 8).attr("fill", "url(#busy-grad)");
  const s = d3.scaleLinear().domain([0, 100]).range([0, w]);
  svg.append("g").attr("class", "legend-axis").attr("transform", "translate(0,23)").call(d3.axisBottom(s).ticks(5).tickSize(3).tickFormat(v => `${v}%`));
  root.attr("width", w + 140);
  svg.append("rect").attr("x", w + 20).attr("y", 15).attr("width", 12).attr("height", 8).attr("fill", color(-1)).attr("stroke", "#bbb");
  svg.append("text").attr("x", w + 36).attr("y", 23).attr("font-size", 10).text("no data");
}

function drawMarkers(tl) {
  const mk = $("markers"), strip = $("event-strip"), cv = $("timeline");
  mk.innerHTML = ""; strip.innerHTML = ""; strip.style.width = `${tl.cols}px`;
  const xAt = t => (t - tl.from) / tl.step;
  // events a few px apart share one hover target listing all of them (an ENA reset logs several lines)
  const groups = new Map();
  tl.events.forEach(e => {
    const k = Math.round(xAt(e.t) / 6);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(e);
  });
  groups.forEach(evs => {
    const text = evs.map(e => `${iso(e.t)}  ${e.reason}${e.ifname ? " on " + e.ifname : ""} (${e.kind})` +
      (e.message ? `\n  ${e.message}` : "")).join("\n");
    const x0 = xAt(evs[0].t), reasons = evs.map(e => e.reason).join(",");
    evs.forEach(e => { const m = document.createElement("div"); m.className = "marker"; m.style.left = `${xAt(e.t)}px`;
      m.style.height = `${cv.height}px`; m.dataset.reason = e.reason; m.title = text; mk.appendChild(m); });
    const s = document.createElement("div"); s.className = "ev"; s.textContent = evs.length > 1 ? `${evs.length}` : "▼";
    s.style.left = `${x0}px`; s.dataset.reason = reasons; s.dataset.tip = text; hoverTip(s); strip.appendChild(s);
  });
  state.incidents.forEach((inc, i) => {
    if (inc.end < tl.from || inc.start > tl.to) return;
    const a = Math.max(0, xAt(inc.start)), b = Math.min(tl.cols, xAt(Math.max(inc.end, inc.start + tl.step)));
    const text = `Incident ${i + 1}: ${inc.title}\n${iso(inc.start)} .. ${iso(inc.end)}\n` +
      (inc.root_cause ? `root cause (proven): ${inc.root_cause}` : `no root cause proven; leading: ${inc.leading || "?"}`);
    const band = document.createElement("div"); band.className = "band inc"; band.style.left = `${a}px`;
    band.style.width = `${Math.max(2, b - a)}px`; band.style.height = `${cv.height}px`; mk.appendChild(band);
    const s = document.createElement("div"); s.className = "inc"; s.style.left = `${a}px`; s.style.width = `${Math.max(4, b - a)}px`;
    s.dataset.tip = text; s.dataset.incident = i + 1; hoverTip(s); strip.appendChild(s);
  });
  const band = (cls, a, b, label) => {
    if (b < tl.from || a > tl.to) return;
    const x0 = Math.max(0, xAt(a)), x1 = Math.min(tl.cols, xAt(b));
    const d = document.createElement("div"); d.className = `band ${cls}`; d.style.left = `${x0}px`;
    d.style.width = `${Math.max(2, x1 - x0)}px`; d.style.height = `${cv.height}px`; d.title = label; mk.appendChild(d);
    const l = document.createElement("div"); l.className = `band-label ${cls}-label`; l.style.left = `${x0}px`; l.textContent = label;
    mk.appendChild(l);
  };
  if (state.sub) band("sel", state.sub.a, state.sub.b, `selection ${hms(new Date(state.sub.a * 1000))}..${hms(new Date(state.sub.b * 1000))}`);
  if (state.fl && state.fl.diff) band("base", state.fl.b0, state.fl.b1, `baseline ${hms(new Date(state.fl.b0 * 1000))}..${hms(new Date(state.fl.b1 * 1000))}`);
}

function hoverTip(el) {
  el.onmouseenter = ev => showTip(el.dataset.tip, ev);
  el.onmousemove = ev => showTip(el.dataset.tip, ev);
  el.onmouseleave = hideTip;
}
function showTip(text, ev) {
  const tip = $("tip"); tip.textContent = text; tip.hidden = false;
  tip.style.left = `${Math.min(window.innerWidth - 300, ev.clientX + 14)}px`; tip.style.top = `${ev.clientY + 14}px`;
}
function hideTip() { $("tip").hidden = true; }

function cellAt(cv, tl, ev) {
  const r = cv.getBoundingClientRect();
  const col = Math.max(0, Math.min(tl.cols - 1, Math.floor((ev.clientX - r.left) * cv.width / r.width)));
  const ri = Math.max(0, Math.min(state.rows.length - 1, Math.floor((ev.clientY - r.top) * cv.height / r.height / ROWH)));
  return { t: tl.from + col * tl.step, col, cpu: state.rows[ri] };
}

function bindHeatmap(cv, tl) {
  let start = null, timer = null;
  cv.onmousedown = ev => { start = cellAt(cv, tl, ev); };
  cv.onmouseleave = () => { hideTip(); clearTimeout(timer); };
  cv.onmousemove = ev => {
    const c = cellAt(cv, tl, ev), v = tl.values[c.cpu][c.col];
    const head = `CPU ${c.cpu}  ${iso(c.t)}` + (tl.resolution === 1 ? "" : ` (+${Math.round(tl.step)} s)`) +
      `\n${tl.metric === "sys" ? "sys" : "busy"} ${v < 0 ? "no data" : v + "%"}`;
    showTip(head, ev);
    clearTimeout(timer);
    const gen = ++state.gen.cell;
    timer = setTimeout(async () => {  // details from the server: usr/sys/soft and who ran there
      const d = await api("cell", { cpu: c.cpu, t: c.t + tl.step / 2, resolution: tl.resolution }).catch(() => null);
      if (!d || gen !== state.gen.cell || $("tip").hidden) return;
      let more = "";
      if (d.missing) more = "\n(no sample recorded for this cell)";
      else if (d.span === 60) more = `\nminute mean busy ${d.busy_mean}%, max ${d.busy_max}%, sys ${d.sys}%`;
      else more = `\n%usr ${d.usr.toFixed(0)}  %sys ${d.sys.toFixed(0)}  %soft ${d.soft.toFixed(0)}  %irq ${d.irq.toFixed(0)}` +
        (d.procs.length ? `\ntop: ` + d.procs.map(p => `${p.comm}[${p.pid}]${p.pod ? " (pod " + p.pod + ")" : ""} ${p.pct}%${p.estimate ? "~" : ""}`).join(", ") : "\ntop: nothing sampled");
      showTip(head + more, ev);
    }, 60);
  };
  cv.onmouseup = ev => {
    if (!start) return;
    const end = cellAt(cv, tl, ev);
    let a = Math.min(start.t, end.t), b = Math.max(start.t, end.t) + tl.step;
    const cpu = start.cpu === end.cpu ? start.cpu : null;
    start = null;
    if (b - a > 300) return setRange(a, b);
    if (b - a > 120) { const mid = (a + b) / 2; a = mid - 60; b = mid + 60; }
    openSubsecond(Math.floor(a), Math.ceil(b), cpu);
  };
}

/* ---- charts under the heatmap (uPlot): same time range, axes with units, live legend -------- */
const fmtBytes = v => v == null ? "-" : d3.format(".3~s")(v) + "B";
const fmtCount = v => v == null ? "-" : d3.format(",.0f")(v);
const fmtMs = v => v == null ? "-" : `${d3.format(".3~f")(v)} ms`;
const fmtRate = v => v == null ? "-" : `${d3.format(".3~s")(v)}/s`;

function lineChart(id, tl, pts, series, axes) {
  if (state.charts[id]) { state.charts[id].destroy(); delete state.charts[id]; }
  const el = $(id); el.innerHTML = "";
  if (!pts.length) { el.textContent = "not recorded in this range"; el.className = "chart hint"; return null; }
  el.className = "chart";
  const data = [pts.map(p => p.t), ...series.map(s => pts.map(p => p[s.key] ?? null))];
  const opts = {
    width: LEFT + tl.cols + (axes.length > 1 ? 70 : 10), height: 170,
    tzDate: ts => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
    scales: { x: { time: true, min: tl.from, max: tl.to }, ...Object.fromEntries(axes.map(a => [a.scale, { auto: true, range: (u, lo, hi) => [0, Math.max(hi * 1.1, a.floor || 1)] }])) },
    cursor: { sync: { key: "nodesleuth" } },
    series: [{ label: "time (UTC)", value: (u, v) => v == null ? "-" : iso(v) },
             ...series.map(s => ({ label: s.label, stroke: s.stroke, width: 1.5, dash: s.dash, scale: s.scale, value: (u, v) => s.fmt(v), spanGaps: false }))],
    padding: [8, axes.length > 1 ? 0 : 10, 0, 0],
    axes: [{ label: "time (UTC)", labelSize: 14, size: 36, space: 90,
             incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400],
             values: (u, splits) => splits.map(v => (tl.to - tl.from > 86400 ? d3.utcFormat("%m-%d %H:%M") : tl.to - tl.from > 600 ? d3.utcFormat("%H:%M") : hms)(new Date(v * 1000))) },
           ...axes.map((a, i) => ({ scale: a.scale, label: a.label, labelSize: 14, size: i === 0 ? LEFT : 70, side: i === 0 ? 3 : 1,
                                    values: (u, vals) => vals.map(a.tick), grid: { show: i === 0 } }))],
  };
  const u = new uPlot(opts, data, el);
  state.charts[id] = u;
  return u;
}

const FMT = { count: fmtCount, bytes: fmtBytes, ms: fmtMs, rate: fmtRate, pct: v => v == null ? "-" : `${d3.format(".1f")(v)}%` };
const TICK = { count: v => d3.format(".3~s")(v), bytes: v => d3.format(".2~s")(v) + "B", ms: v => d3.format("~s")(v),
               rate: v => d3.format("~s")(v), pct: v => d3.format("~s")(v) + "%" };

/* The charts below the timeline: one per panel the server describes (web/panels/), drawn from its
   axes, series and points; a series no point of the range has is left out and its note said. */
function drawCharts(tl) {
  const below = $("below");
  for (const [name, p] of Object.entries(tl.panels || {})) {
    if (!$(name)) {
      const h = document.createElement("h4"); h.className = "chart-title"; h.textContent = p.title;
      const note = document.createElement("p"); note.id = `${name}-note`; note.className = "hint";
      const div = document.createElement("div"); div.id = name; div.className = "chart";
      below.append(h, note, div);
    }
    $(`${name}-note`).textContent = p.notes.join("; ");
    const present = p.series.filter(s => p.points.some(pt => pt[s.key] != null));
    const axes = p.axes.filter(a => present.some(s => s.axis === a.scale))
      .map(a => ({ scale: a.scale, label: a.label, floor: a.floor, tick: TICK[a.unit] }));
    const unit = Object.fromEntries(p.axes.map(a => [a.scale, a.unit]));
    const series = present.map(s => ({ key: s.key, label: s.label, stroke: s.color, dash: s.dash || undefined,
                                       scale: s.axis, fmt: FMT[unit[s.axis]] }));
    lineChart(name, tl, series.length ? p.points : [], series, axes);
  }
}

/* ---- subsecond heatmap ---------------------------------------------------------------------- */
function closeSubsecond() { state.sub = null; $("subsecond-panel").hidden = true; $("subsecond").innerHTML = ""; ++state.gen.sub; }
function closeFlame() { state.fl = null; state.flame = null; $("flame-panel").hidden = true; $("flame").innerHTML = ""; ++state.gen.flame; }

async function openSubsecond(a, b, cpu) {
  const gen = ++state.gen.sub;
  closeFlame();  // a flame graph of the previous selection would be stale
  state.sub = { a, b, cpu, h: null, pick: null };
  const panel = $("subsecond-panel"); panel.hidden = false;
  $("subsecond").innerHTML = "loading...";
  $("subsecond-title").textContent = `Subsecond heatmap, ${cpu === null ? "all CPUs" : "CPU " + cpu}, ${iso(a)} .. ${iso(b)}`;
  syncURL(); state.tl && drawMarkers(state.tl);
  let h;
  try { h = await api("heatmap", cpu === null ? { from: a, to: b } : { from: a, to: b, cpu }); }
  catch (e) { if (gen === state.gen.sub) $("subsecond").textContent = e.message; return; }
  if (gen !== state.gen.sub) return;
  state.sub.h = h;
  const st = h.step || 1;  // seconds per column (long ranges are folded server-side)
  const n = h.columns.length, cw = Math.max(6, Math.min(70, Math.floor(1100 / n))), ch = 6;
  const M = { l: 56, t: 30, b: 58 };
  const W = M.l + n * cw + 20, H = M.t + h.rows * ch + M.b;
  const svg = d3.select("#subsecond").html("").append("svg").attr("width", W + 260).attr("height", H);
  const scale = d3.scaleLinear().domain([0, Math.max(1, h.maxvalue / 2), Math.max(1, h.maxvalue)]).range(["#ffffff", "#ff5032", "#e50914"]);
  const cells = [];
  h.values.forEach((col, c) => col.forEach((v, r) => cells.push({ c, r, v })));
  const g = svg.append("g").attr("transform", `translate(${M.l},${M.t})`);
  const offMs = r => Math.round((h.rows - r - 1) * 1000 / h.rows);
  g.selectAll("rect").data(cells).join("rect")
    .attr("class", "cell").attr("x", d => d.c * cw).attr("y", d => d.r * ch).attr("width", cw).attr("height", ch)
    .attr("fill", d => scale(d.v)).attr("data-col", d => d.c).attr("data-row", d => d.r)
    .attr("data-tip", d => `${iso(h.start + d.c * st)}${st > 1 ? ` (+${st} s)` : ""} +${offMs(d.r)} ms\n${d.v} samples` +
      (h.hot_cpus[d.c].length ? `\nhot CPUs ${st > 1 ? "in a second of this column" : "this second"}: ${h.hot_cpus[d.c].join(", ")}` : ""))
    .on("click", (ev, d) => pickCell(d))
    .on("mousemove", (ev) => showTip(ev.target.dataset.tip, ev)).on("mouseleave", hideTip);
  // axes: wall-clock time of each column, offset within the second
  const x = d3.scaleLinear().domain([0, n]).range([0, n * cw]);
  const every = Math.max(1, Math.ceil(n / Math.floor((n * cw) / 70)));
  g.append("g").attr("class", "axis-x").attr("transform", `translate(0,${h.rows * ch})`)
    .call(d3.axisBottom(x).tickValues(d3.range(0, n, every)).tickFormat(c => hms(new Date((h.start + c * st) * 1000))));
  const y = d3.scaleLinear().domain([1000, 0]).range([0, h.rows * ch]);
  g.append("g").attr("class", "axis-y").call(d3.axisLeft(y).ticks(5).tickFormat(v => `${v}`));
  svg.append("text").attr("class", "axis-title").attr("transform", `translate(12,${M.t + h.rows * ch / 2}) rotate(-90)`)
    .attr("text-anchor", "middle").text("ms within the second");
  svg.append("text").attr("class", "axis-title").attr("x", M.l).attr("y", H - 6).attr("text-anchor", "start")
    .text(`time (UTC), ${d3.utcFormat("%Y-%m-%d")(new Date(h.start * 1000))}, one column per ${st > 1 ? st + " seconds (cells summed)" : "second"}`);
  h.hot_cpus.forEach((hc, c) => { if (hc.length) g.append("text").attr("x", c * cw).attr("y", h.rows * ch + 34)
    .attr("font-size", 9).attr("class", "hot").attr("fill", "#c00").text(hc.join(","))
    .append("title").text(`CPUs >= ${HOT()}% busy in this second: ${hc.join(", ")}`); });
  g.append("text").attr("x", -50).attr("y", h.rows * ch + 34).attr("font-size", 9).attr("fill", "#c00").text("hot CPUs");
  // colour legend
  const lg = svg.append("g").attr("transform", `translate(${W + 10},${M.t})`);
  const grad = svg.append("defs").append("linearGradient").attr("id", "sub-grad").attr("x1", 0).attr("x2", 0).attr("y1", 1).attr("y2", 0);
  [0, .5, 1].forEach(o => grad.append("stop").attr("offset", o).attr("stop-color", scale(o * Math.max(1, h.maxvalue))));
  lg.append("rect").attr("width", 10).attr("height", 120).attr("fill", "url(#sub-grad)").attr("stroke", "#ccc");
  lg.append("g").attr("class", "legend-axis").attr("transform", "translate(10,0)")
    .call(d3.axisRight(d3.scaleLinear().domain([Math.max(1, h.maxvalue), 0]).range([0, 120]))
      .ticks(Math.min(4, Math.max(1, h.maxvalue))).tickFormat(d3.format("d")));
  lg.append("text").attr("y", -8).attr("font-size", 11).text(`samples per cell (${(1000 / h.rows).toFixed(0)} ms)`);
}

function cellTime(d, end) {
  const h = state.sub.h, st = h.step || 1;
  if (st > 1) return h.start + (d.c + (end ? 1 : 0)) * st;  // a folded column: its whole seconds
  const ms = (h.rows - d.r - 1 + (end ? 1 : 0)) / h.rows;
  return h.start + d.c + ms;
}

function pickCell(d) {
  const s = state.sub;
  d3.selectAll("#subsecond rect.cell").classed("sel", x => x === d || x === s.pick);
  if (!s.pick) { s.pick = d; return; }
  let a = cellTime(s.pick, false), b = cellTime(d, true);
  if (b < a) { a = cellTime(d, false); b = cellTime(s.pick, true); }
  s.pick = null;
  openFlame(a, b, s.cpu, { keepSub: true });
}

/* ---- flame graph, plain or against a baseline ------------------------------------------------ */
const diffColor = (d, orig) => {
  if (d.highlight) return orig;
  const st = d.data.status;
  if (!st) return orig;
  if (st === "new") return "rgb(220,0,0)";
  if (st === "gone") return "rgb(60,70,160)";
  if (st === "same") return "rgb(215,215,215)";
  const k = Math.round(110 + 110 * (1 - Math.min(1, Math.abs(d.data.change || 0))));  // 110 (all changed) .. 220
  return st === "more" ? `rgb(255,${k},${k})` : `rgb(${k},${k},255)`;
};

function parseBaseline(text) {
  const parts = text.split("..").map(s => s.trim());
  if (parts.length !== 2) return null;
  const t = s => isFinite(+s) && s !== "" ? +s : Date.parse(s) / 1000;
  const [b0, b1] = parts.map(t);
  return isFinite(b0) && isFinite(b1) && b1 > b0 ? [b0, b1] : null;
}

async function openFlame(a, b, cpu, opts = {}) {
  const gen = ++state.gen.flame;
  if (!opts.keepSub && state.sub && (state.sub.cpu !== cpu || a < state.sub.a || b > state.sub.b)) closeSubsecond();
  cpu = cpu === undefined ? null : cpu;
  const diff = $("diff").checked;
  state.fl = { a, b, cpu, diff, search: opts.search || (state.fl && state.fl.search) || "" };
  const panel = $("flame-panel"); panel.hidden = false;
  const p = { from: a, to: b }; if (cpu !== null) p.cpu = cpu;
  if (diff) {
    // a baseline the page filled in follows the range; one typed (or from a link) stays
    const given = $("baseline").dataset.auto === "1" ? null : parseBaseline($("baseline").value);
    const len = Math.max(5, b - a);
    const [b0, b1] = given || [a - len, a];  // default: the window of the same length just before
    if (!given) { $("baseline").value = `${b0.toFixed(3)}..${b1.toFixed(3)}`; $("baseline").dataset.auto = "1"; }
    p.base_from = b0; p.base_to = b1; state.fl.b0 = b0; state.fl.b1 = b1;
  }
  const who = cpu === null ? "all CPUs" : "CPU " + cpu;
  $("flame-title").textContent = `Flame graph, ${who}, ${iso(a)} .. ${iso(b)}: loading...`;
  $("flame").innerHTML = ""; $("flame-note").textContent = ""; $("flame-msg").hidden = true; $("flame-legend").hidden = true; $("topfuncs").innerHTML = "";
  state.flame = null;
  syncURL(); state.tl && drawMarkers(state.tl);
  let f;
  try { f = await api("flame", p); }
  catch (e) {
    if (gen !== state.gen.flame) return;
    $("flame-title").textContent = `Flame graph, ${who}, ${iso(a)} .. ${iso(b)}: not drawn`;
    $("flame-msg").hidden = false; $("flame-msg").textContent = e.message;
    return;
  }
  if (gen !== state.gen.flame) return;
  $("flame-title").textContent = `Flame graph, ${who}, ${iso(a)} .. ${iso(b)}: ${f.samples} samples` +
    (f.diff ? ` vs baseline ${iso(f.base_from)} .. ${iso(f.base_to)} (${f.base_samples} samples, normalised)` : "");
  $("flame-legend").hidden = !f.diff;
  $("flame-note").textContent = [
    f.lost ? `perf lost ${f.lost} samples in this range besides the ${f.samples} drawn (its ring buffer was full): ` +
      `deep stacks are lost first, so their share here is too low` : "",
    f.cut ? `${f.cut} samples (${(100 * f.cut / Math.max(1, f.samples)).toFixed(1)}%) had stacks ` +
      `deeper than ${f.depth_cap} frames: drawn cut at frame ${f.depth_cap}` : ""].filter(Boolean).join("; ");
  const el = $("flame");
  const total = f.tree.samples ?? f.tree.value;
  const tipText = d => {
    const n = d.data.samples ?? d.value, pct = (100 * n / Math.max(1, total)).toFixed(2);
    if (!f.diff) return `${d.data.name}\n${n} samples (${pct}%)`;
    const st = d.data.status;
    if (st === "gone") return `${d.data.name}\ngone: 0 samples now, ${d.data.base} in the baseline (normalised)`;
    if (st === "new") return `${d.data.name}\nnew: ${n} samples (${pct}%), absent from the baseline`;
    return `${d.data.name}\n${n} samples (${pct}%), baseline ${d.data.base} (${st}${d.data.change ? ", " + d3.format("+.0%")(d.data.change) : ""})`;
  };
  const chart = flamegraph().width(Math.min(1400, el.parentElement.clientWidth || 1200)).cellHeight(16)
    .minFrameSize(2).sort(true).selfValue(false).transitionDuration(0)
    .tooltip(flamegraph.tooltip.defaultFlamegraphTooltip().text(d => tipText(d).replace(/\n/g, " | ")));
  if (f.diff) chart.setColorMapper(diffColor);
  d3.select(el).datum(f.tree).call(chart);
  state.flame = chart;
  el.dataset.samples = f.samples; el.dataset.diff = f.diff ? "1" : "0";
  if (state.fl.search) { $("search").value = state.fl.search; chart.search(state.fl.search); }
  d3.select("#topfuncs").html("<tr><th>function</th><th>where</th><th>self %</th><th>total %</th></tr>")
    .selectAll("tr.row").data(f.top).join("tr").attr("class", "row")
    .html(r => `<td>${r.function}</td><td>${r.kernel ? "kernel" : "user"}</td><td>${r.self_pct}</td><td>${r.total_pct}</td>`);
}

/* Could not read is never healthy: parts of the recording that could not be read are said on top */
function showProblems(problems) {
  const b = $("problem-banner");
  if (!problems || !problems.length) { b.hidden = true; return; }
  b.hidden = false;
  b.textContent = `Parts of this recording could not be read (${problems.length}): what is shown may be ` +
    `incomplete. First: ${problems[0]}`;
}


// a group of processes that leads (explain/family/group.py): who starts it, how many a second, its share
function groupHtml(inc, esc) {
  const g = (inc.hypotheses || []).find(h => h.family === "group");
  if (!g || inc.family !== "group") return "";
  return `<p class="group" data-family="group"><b>Group:</b> ${esc(g.summary.replace(/^group: /, ""))}</p><ul class="group">` +
    g.evidence.map(e => `<li>${esc(e)}</li>`).join("") + `</ul>`;
}

async function loadIncidents() {
  const el = $("incidents"); el.textContent = "explaining the recording...";
  const doc = await api("incidents");
  state.incidents = doc.incidents;
  el.innerHTML = doc.problems && doc.problems.length
    ? `<p class="problem">Parts of the recording could not be read (${doc.problems.length}); the list may be incomplete: ${doc.problems[0].replace(/</g, "&lt;")}</p>` : "";
  if (!doc.incidents.length) el.innerHTML += "<p>No incidents in the data read.</p>";
  doc.incidents.forEach((inc, i) => {
    const div = document.createElement("div"); div.className = "incident";
    const core = inc.links.find(l => l.name === "saturated_core" && l.data && l.data.cpu !== undefined);
    const esc = t => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;");
    div.innerHTML = `<h3>Incident ${i + 1}: ${esc(inc.title)}</h3><p>${inc.iso} (${inc.kind})` +
      (inc.root_cause ? ` &mdash; <b>root cause (proven end to end, ${inc.family}): ${esc(inc.root_cause)}</b>`
                      : ` &mdash; no root cause proven; leading explanation: <b>${esc(inc.leading)}</b>`) + `</p>` +
      groupHtml(inc, esc) +
      (inc.rejected.length ? `<p class="rejected">rejected: ${inc.rejected.map(esc).join("; ")}</p>` : "") +
      (inc.hypotheses && inc.hypotheses.length ? `<table class="hypotheses"><tr><th>family</th><th>verdict</th>` +
        `<th>share of the excess</th><th>hypothesis</th></tr>` + inc.hypotheses.map(h =>
          `<tr class="${h.verdict}" data-family="${h.family}"><td>${h.family}</td><td>${h.verdict.replace("_", " ")}</td>` +
          `<td>${h.share === null ? "?" : Math.round(100 * h.share) + "%"}</td><td>${esc(h.summary)}</td></tr>`).join("") +
        `</table>` : "") + (inc.notes || []).map(n => `<p class="note">${esc(n)}</p>`).join("");
    const tbl = document.createElement("table");
    inc.links.forEach(l => {
      const tr = document.createElement("tr"); tr.className = l.verdict; tr.dataset.link = l.name;
      const mark = {observed: "●", proven: "✔", contributing: "~", not_proven: "✘", unknown: "?"}[l.verdict];
      tr.innerHTML = `<td>${mark} ${l.name.replace("_", " ")}</td>` +
        `<td class="conf-${l.confidence}">${l.verdict.replace("_", " ")}</td>` +
        `<td>${l.share === null ? "" : Math.round(100 * l.share) + "%"}</td><td>${esc(l.summary)}` +
        `<ul>${l.evidence.map(e => `<li>${esc(e)}</li>`).join("")}</ul></td>`;
      tbl.appendChild(tr);
    });
    div.appendChild(tbl);
    if (core) {
      const go = document.createElement("button"); go.textContent = "timeline around it"; go.className = "go-timeline";
      go.onclick = () => { location.hash = "#timeline"; setRange(core.data.start - 60, core.data.end + 60); };
      const fl = document.createElement("button"); fl.textContent = `flame graph of CPU ${core.data.cpu}`;
      fl.className = "go-flame";
      fl.onclick = () => { location.hash = "#timeline"; openFlame(core.data.start, core.data.end, core.data.cpu); };
      div.append(go, fl);
    }
    el.appendChild(div);
  });
}

window.nodesleuth = {
  state,
  /* page coordinates of the centre of a timeline cell, for tests and automation */
  cellCenter(cpu, t) {
    const cv = $("timeline"), r = cv.getBoundingClientRect(), tl = state.tl, ri = state.rows.indexOf(cpu);
    return { x: r.left + ((t - tl.from) / tl.step + 0.5) * r.width / cv.width,
             y: r.top + (ri + 0.5) * ROWH * r.height / cv.height };
  },
};
init();
