/* nodesleuth web view: all aggregation happens on the server; this draws it. */
"use strict";
const qs = new URLSearchParams(location.search);
const TOKEN = qs.get("token");
const api = (path, params) => {
  const u = new URLSearchParams(params || {});
  if (TOKEN) u.set("token", TOKEN);
  return fetch(`api/${path}?${u}`).then(r => { if (!r.ok) throw new Error(`${path}: ${r.status}`); return r.json(); });
};
const iso = t => new Date(t * 1000).toISOString().replace(".000Z", "Z");
const state = { summary: null, from: 0, to: 0, tl: null, sel: null, sub: null, flame: null };
const ROWH = () => Math.max(3, Math.min(12, Math.floor(420 / Math.max(1, state.summary.cpus))));
const color = v => v < 0 ? "#f4f4f4" : d3.interpolateYlOrRd(Math.min(1, v / 100));

async function init() {
  state.summary = await api("summary");
  document.getElementById("store").textContent = state.summary.store;
  const end = state.summary.end, start = state.summary.start;
  state.from = Math.max(start, end - 86400); state.to = end;
  document.querySelectorAll("button[data-span]").forEach(b => b.onclick = () => {
    const span = +b.dataset.span, mid = (state.from + state.to) / 2;
    setRange(Math.max(state.summary.start, mid - span / 2), Math.min(state.summary.end, mid + span / 2));
  });
  document.getElementById("zoom-out").onclick = () => {
    const span = (state.to - state.from) * 4, mid = (state.from + state.to) / 2;
    setRange(Math.max(state.summary.start, mid - span / 2), Math.min(state.summary.end, mid + span / 2));
  };
  document.getElementById("all").onclick = () => setRange(state.summary.start, state.summary.end);
  document.getElementById("metric").onchange = () => loadTimeline();
  document.getElementById("search-go").onclick = () => state.flame && state.flame.search(document.getElementById("search").value);
  document.getElementById("search").onkeydown = e => { if (e.key === "Enter") document.getElementById("search-go").click(); };
  document.getElementById("reset-zoom").onclick = () => state.flame && state.flame.resetZoom();
  document.getElementById("diff").onchange = () => state.lastFlame && openFlame(...state.lastFlame);
  window.onhashchange = route;
  route();
}

function route() {
  const inc = location.hash.startsWith("#incidents");
  document.getElementById("page-incidents").hidden = !inc;
  document.getElementById("page-timeline").hidden = inc;
  if (inc) loadIncidents(); else loadTimeline();
}

function setRange(a, b) { state.from = a; state.to = Math.max(a + 1, b); loadTimeline(); }

async function loadTimeline() {
  const wrap = document.getElementById("timeline-wrap");
  const cols = Math.max(200, Math.min(1600, (wrap.parentElement.clientWidth || 1200) - 80));
  const t = performance.now();
  const tl = await api("timeline", { from: state.from, to: state.to, cols, metric: document.getElementById("metric").value });
  showProblems(tl.problems);
  state.tl = tl;
  drawTimeline(tl);
  document.getElementById("range").textContent =
    `${iso(tl.from)} .. ${iso(tl.to)} (${tl.resolution === 1 ? "1 s ticks" : "1 min rollups"})`;
  window.nodesleuth.lastRenderMs = performance.now() - t;
}

function drawTimeline(tl) {
  const cv = document.getElementById("timeline"), rh = ROWH(), ncpu = tl.values.length;
  cv.width = tl.cols; cv.height = Math.max(rh, ncpu * rh);
  const ctx = cv.getContext("2d");
  const img = ctx.createImageData(cv.width, cv.height);
  const rgb = c => { const x = d3.color(c); return [x.r, x.g, x.b]; };
  const lut = Array.from({ length: 102 }, (_, i) => rgb(color(i - 1)));
  for (let cpu = 0; cpu < ncpu; cpu++) {
    const row = tl.values[cpu];
    for (let x = 0; x < tl.cols; x++) {
      const [r, g, b] = lut[Math.max(0, Math.min(101, row[x] + 1))];
      for (let y = cpu * rh; y < (cpu + 1) * rh; y++) {
        const o = (y * cv.width + x) * 4; img.data[o] = r; img.data[o + 1] = g; img.data[o + 2] = b; img.data[o + 3] = 255;
      }
    }
  }
  ctx.putImageData(img, 0, 0);
  cv.dataset.drawn = "1"; cv.dataset.cpus = ncpu; cv.dataset.cols = tl.cols;
  // axis, CPU labels, event markers
  const axis = document.getElementById("axis"); axis.innerHTML = "";
  const x = d3.scaleTime().domain([new Date(tl.from * 1000), new Date(tl.to * 1000)]).range([0, tl.cols]);
  x.ticks(8).forEach(d => { const s = document.createElement("span"); s.style.position = "absolute";
    s.style.left = `${x(d)}px`; s.textContent = d3.utcFormat(tl.to - tl.from > 86400 ? "%m-%d %H:%M" : "%H:%M:%S")(d);
    axis.appendChild(s); });
  const mk = document.getElementById("markers"); mk.innerHTML = "";
  for (let c = 0; c < ncpu; c += Math.max(1, Math.ceil(ncpu / 24))) {
    const l = document.createElement("div"); l.className = "cpu-label"; l.style.top = `${c * rh - 2}px`;
    l.textContent = `cpu${c}`; mk.appendChild(l);
  }
  tl.events.forEach(e => { const m = document.createElement("div"); m.className = "marker";
    m.style.left = `${(e.t - tl.from) / tl.step}px`; m.style.height = `${cv.height}px`;
    m.title = `${iso(e.t)} ${e.reason} ${e.ifname || ""}`; m.dataset.reason = e.reason; mk.appendChild(m); });
  drawLines("census", tl.census, [["tracked", "#555"], ["live", "#090"], ["dying", "#c00"]], "memory cgroups", tl);
  drawLines("memory", tl.memory, [["percpu", "#c60"], ["slab", "#06c"]], "Percpu / Slab bytes", tl);
  bindDrag(cv, tl);
}

function drawLines(id, pts, series, title, tl) {
  const svg = d3.select(`#${id}`).attr("width", tl.cols).attr("height", 90); svg.selectAll("*").remove();
  if (!pts.length) return;
  const x = d3.scaleLinear().domain([tl.from, tl.to]).range([0, tl.cols]);
  const ymax = d3.max(pts, p => d3.max(series, ([k]) => p[k] || 0)) || 1;
  const y = d3.scaleLinear().domain([0, ymax]).range([80, 10]);
  series.forEach(([k, c]) => svg.append("path").attr("fill", "none").attr("stroke", c).attr("class", `line-${k}`)
    .attr("d", d3.line().defined(p => p[k] != null).x(p => x(p.t)).y(p => y(p[k]))(pts)));
  const last = pts[pts.length - 1];
  svg.append("text").attr("x", 4).attr("y", 10).attr("font-size", 11)
    .text(`${title}: ` + series.map(([k]) => `${k} ${d3.format(".3~s")(last[k] || 0)}`).join(", "));
}

function cellAt(cv, tl, ev) {
  const r = cv.getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) * cv.width / r.width);
  const cpu = Math.floor((ev.clientY - r.top) * cv.height / r.height / ROWH());
  return { t: tl.from + col * tl.step, cpu };
}

function bindDrag(cv, tl) {
  let start = null;
  cv.onmousedown = ev => { start = cellAt(cv, tl, ev); };
  cv.onmouseup = ev => {
    if (!start) return;
    const end = cellAt(cv, tl, ev);
    let a = Math.min(start.t, end.t), b = Math.max(start.t, end.t) + tl.step;
    const cpu = start.cpu === end.cpu ? start.cpu : null;
    start = null;
    if (b - a > 120 && tl.resolution > 0) {
      if (b - a > 300) return setRange(a, b);
    }
    if (b - a > 120) { const mid = (a + b) / 2; a = mid - 60; b = mid + 60; }
    openSubsecond(Math.floor(a), Math.ceil(b), cpu);
  };
}

async function openSubsecond(a, b, cpu) {
  const panel = document.getElementById("subsecond-panel"); panel.hidden = false;
  document.getElementById("subsecond-title").textContent =
    `Subsecond heatmap, ${cpu === null ? "all CPUs" : "CPU " + cpu}, ${iso(a)} .. ${iso(b)}`;
  const h = await api("heatmap", cpu === null ? { from: a, to: b } : { from: a, to: b, cpu });
  state.sub = { h, cpu, a, b, pick: null };
  const cw = Math.max(6, Math.min(24, Math.floor(1100 / h.columns.length))), ch = 6;
  const svg = d3.select("#subsecond").html("").append("svg")
    .attr("width", h.columns.length * cw + 40).attr("height", h.rows * ch + 30);
  const scale = d3.scaleLinear().domain([0, Math.max(1, h.maxvalue / 2), Math.max(1, h.maxvalue)])
    .range(["#ffffff", "#ff5032", "#e50914"]);
  const cells = [];
  h.values.forEach((col, c) => col.forEach((v, r) => cells.push({ c, r, v })));
  svg.append("g").attr("transform", "translate(30,0)").selectAll("rect").data(cells).join("rect")
    .attr("class", "cell").attr("x", d => d.c * cw).attr("y", d => d.r * ch).attr("width", cw).attr("height", ch)
    .attr("fill", d => scale(d.v)).attr("data-col", d => d.c).attr("data-row", d => d.r)
    .append("title").text(d => `${iso(h.start + d.c)} +${((h.rows - d.r - 1) * 1000 / h.rows) | 0} ms: ${d.v} samples`);
  svg.selectAll("rect.cell").on("click", (ev, d) => pickCell(d));
  h.hot_cpus.forEach((hc, c) => { if (hc.length) svg.append("text").attr("x", 30 + c * cw).attr("y", h.rows * ch + 12)
    .attr("font-size", 9).attr("class", "hot").text(hc.join(","))
    .append("title").text(`CPUs >= 90% busy in this second: ${hc.join(", ")}`); });
  svg.append("text").attr("x", 0).attr("y", h.rows * ch + 24).attr("font-size", 9).text("hot");
}

function cellTime(d, end) {
  const h = state.sub.h; const ms = (h.rows - d.r - 1 + (end ? 1 : 0)) / h.rows;
  return h.start + d.c + ms;
}

function pickCell(d) {
  const s = state.sub;
  d3.selectAll("#subsecond rect.cell").classed("sel", x => x === d || x === s.pick);
  if (!s.pick) { s.pick = d; return; }
  let a = cellTime(s.pick, false), b = cellTime(d, true);
  if (b < a) { a = cellTime(d, false); b = cellTime(s.pick, true); }
  s.pick = null;
  openFlame(a, b, s.cpu);
}

async function openFlame(a, b, cpu) {
  state.lastFlame = [a, b, cpu];
  const panel = document.getElementById("flame-panel"); panel.hidden = false;
  const p = { from: a, to: b }; if (cpu !== null && cpu !== undefined) p.cpu = cpu;
  const diff = document.getElementById("diff").checked;
  if (diff) {
    const bl = document.getElementById("baseline").value.split("..").map(Number);
    const [b0, b1] = bl.length === 2 && bl.every(x => x > 0) ? bl : [a - (b - a) - 30, a - 30];
    p.base_from = b0; p.base_to = b1;
  }
  const f = await api("flame", p);
  document.getElementById("flame-title").textContent =
    `Flame graph, ${cpu === null || cpu === undefined ? "all CPUs" : "CPU " + cpu}, ${iso(a)} .. ${iso(b)}: ` +
    `${f.samples} samples` + (f.diff ? " (red: more than baseline, blue: less)" : "");
  const el = document.getElementById("flame"); el.innerHTML = "";
  const chart = flamegraph().width(Math.min(1400, el.parentElement.clientWidth || 1200)).cellHeight(16)
    .minFrameSize(2).sort(true).selfValue(false)
    .tooltip(flamegraph.tooltip.defaultFlamegraphTooltip().text(d => `${d.data.name}: ${d.value} samples` +
      (f.diff ? ` (change ${d.data.delta > 0 ? "+" : ""}${d.data.delta})` : "")));
  if (f.diff) chart.setColorMapper(flamegraph.colorMapper.differentialColorMapper);
  d3.select(el).datum(f.tree).call(chart);
  state.flame = chart;
  el.dataset.samples = f.samples;
  d3.select("#topfuncs").html("<tr><th>function</th><th>self %</th><th>total %</th></tr>")
    .selectAll("tr.row").data(f.top).join("tr").attr("class", "row")
    .html(r => `<td>${r.function}${r.kernel ? " [k]" : ""}</td><td>${r.self_pct}</td><td>${r.total_pct}</td>`);
}

/* Could not read is never healthy: parts of the recording that could not be read are said on top */
function showProblems(problems) {
  const b = document.getElementById("problem-banner");
  if (!problems || !problems.length) { b.hidden = true; return; }
  b.hidden = false;
  b.textContent = `Parts of this recording could not be read (${problems.length}): what is shown may be ` +
    `incomplete. First: ${problems[0]}`;
}

async function loadIncidents() {
  const el = document.getElementById("incidents"); el.textContent = "explaining the recording...";
  const doc = await api("incidents");
  el.innerHTML = doc.problems && doc.problems.length
    ? `<p class="problem">Parts of the recording could not be read (${doc.problems.length}); the list may be incomplete: ${doc.problems[0].replace(/</g, "&lt;")}</p>` : "";
  if (!doc.incidents.length) el.innerHTML += "<p>No incidents in the data read.</p>";
  doc.incidents.forEach((inc, i) => {
    const div = document.createElement("div"); div.className = "incident";
    const core = inc.links.find(l => l.name === "saturated_core" && l.data && l.data.cpu !== undefined);
    const esc = t => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;");
    div.innerHTML = `<h3>Incident ${i + 1}: ${esc(inc.title)}</h3><p>${inc.iso} (${inc.kind})` +
      (inc.root_cause ? ` &mdash; <b>root cause (proven end to end): ${esc(inc.root_cause)}</b>`
                      : ` &mdash; no root cause proven; leading explanation: <b>${esc(inc.leading)}</b>`) + `</p>` +
      (inc.rejected.length ? `<p class="rejected">rejected: ${inc.rejected.map(esc).join("; ")}</p>` : "");
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
    const cv = document.getElementById("timeline"), r = cv.getBoundingClientRect(), tl = state.tl;
    return { x: r.left + ((t - tl.from) / tl.step + 0.5) * r.width / cv.width,
             y: r.top + (cpu + 0.5) * ROWH() * r.height / cv.height };
  },
};
init();
