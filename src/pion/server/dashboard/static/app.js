// Pion's dashboard: polls the server's JSON every few seconds and draws it. No framework, no
// build step; every value goes into the page as text (textContent), never as markup.
"use strict";

const REFRESH_MS = 3000;
const state = { sort: "hits", order: "desc", page: 1, size: 50, tenant: null, timer: null, busy: false, again: false };
const $ = (id) => document.getElementById(id);

// -- formatting ---------------------------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v >= 100 ? 0 : 1)) + " " + units[i];
}
function count(n) { return Number(n || 0).toLocaleString("en-US"); }
function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + " %"; }
function seconds(s) {
  s = Number(s || 0);
  if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function axisSeconds(s) {  // the chart's labels: short enough for its margin
  if (s === 0) return "0";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return (s / 60).toFixed(s < 600 ? 1 : 0) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function ago(epoch) {
  if (!epoch) return "never";
  const d = Math.max(0, Date.now() / 1000 - epoch);
  if (d < 60) return Math.round(d) + " s ago";
  if (d < 3600) return Math.round(d / 60) + " min ago";
  if (d < 86400) return Math.round(d / 3600) + " h ago";
  return new Date(epoch * 1000).toISOString().slice(0, 16).replace("T", " ");
}
function uptime(s) {
  const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
}
function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}
function setBar(id, used, max) {
  const bar = $(id);
  const share = max > 0 ? Math.min(1, used / max) : 0;
  bar.style.width = (100 * share).toFixed(1) + "%";
  bar.className = share > 0.9 ? "hot" : share > 0.7 ? "warm" : "";
}

// -- the server ---------------------------------------------------------------------------------

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin", cache: "no-store" }, options || {}));
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  return { status: response.status, body };
}

function showLogin(message) {
  stopPolling();
  $("dashboard").hidden = true;
  $("who").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("status").textContent = "not logged in";
  $("login-password").focus();
}

function showDashboard(session) {
  state.tenant = session.tenant;
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("who").hidden = false;
  $("whoami").textContent = session.tenant ? `tenant ${session.tenant}` : `user ${session.user}`;
  $("logout").hidden = Boolean(session.open);
  document.body.classList.toggle("tenant", Boolean(session.tenant));
  refresh();
  stopPolling();
  state.timer = setInterval(refresh, REFRESH_MS);
}

function stopPolling() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

async function start() {
  const { status, body } = await api("/api/session");
  if (status === 200) showDashboard(body);
  else showLogin("");
}

async function login(event) {
  event.preventDefault();
  const button = $("login-submit");
  button.disabled = true;
  $("login-error").textContent = "";
  try {
    const { status, body } = await api("/api/login", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ user: $("login-user").value, password: $("login-password").value }),
    });
    $("login-password").value = "";
    if (status === 200) showDashboard(body);
    else showLogin((body && body.error) || `refused (${status})`);
  } finally {
    button.disabled = false;
  }
}

async function logout() {
  await api("/api/logout", { method: "POST" });
  showLogin("");
}

async function refresh() {
  if (state.busy) { state.again = true; return; }  // a click during a poll: poll again after it
  state.busy = true;
  try {
    const q = `sort=${encodeURIComponent(state.sort)}&order=${state.order}&page=${state.page}&size=${state.size}`;
    const calls = [api("/api/overview"), api("/api/prefixes?" + q), api("/api/history"), api("/api/search")];
    if (!state.tenant) calls.push(api("/api/replication"), api("/api/slowlog"));
    const results = await Promise.all(calls);
    if (results.some((r) => r.status === 401)) { showLogin("the session ended: log in again"); return; }
    const [overview, prefixes, history, search, replication, slowlog] = results;
    if (overview.status === 200) drawOverview(overview.body);
    if (prefixes.status === 200) drawPrefixes(prefixes.body);
    if (history.status === 200) drawHistory(history.body);
    if (search.status === 200) drawSearch(search.body);
    if (replication && replication.status === 200) drawReplication(replication.body);
    if (slowlog && slowlog.status === 200) drawSlowlog(slowlog.body);
    const failed = results.find((r) => r.status !== 200);
    $("status").textContent = failed ? `error ${failed.status}: ${(failed.body && failed.body.error) || ""}`
      : `updated ${new Date().toLocaleTimeString()} · refreshes every ${REFRESH_MS / 1000} s`;
  } catch (e) {
    $("status").textContent = "cannot reach the server: " + e;
  } finally {
    state.busy = false;
    if (state.again) { state.again = false; refresh(); }
  }
}

// -- panels -------------------------------------------------------------------------------------

function drawOverview(o) {
  const s = o.server, kv = o.kv, mem = o.memory;
  $("server-line").textContent = `${s.version} · up ${uptime(s.uptime_s)}` + (s.role ? ` · ${s.role}` : "") +
    ` · ${count(s.connected_clients)} clients`;
  $("card-hit-rate").textContent = pct(kv.hit_rate);
  $("card-hits").textContent = `${count(kv.hits)} hits · ${count(kv.misses)} misses`;
  $("card-saved").textContent = seconds(kv.prefill_saved_s);
  $("card-tokens").textContent = `${count(kv.tokens_served)} tokens served`;
  $("card-kv").textContent = bytes(kv.stored_bytes);
  $("card-kv-budget").textContent = kv.budget_bytes ? `budget ${bytes(kv.budget_bytes)} per space` : "no budget (kv-maxmemory 0)";
  const biggest = Math.max(0, ...kv.spaces.map((sp) => sp.stored_bytes));
  setBar("bar-kv", biggest, kv.budget_bytes);
  $("card-mem").textContent = bytes(mem.used_bytes);
  $("card-mem-max").textContent = (mem.max_bytes ? `of ${bytes(mem.max_bytes)}` : "no maxmemory") +
    (mem.rss_bytes ? ` · RSS ${bytes(mem.rss_bytes)}` : "") + (o.viewer.tenant ? " (quota)" : "");
  setBar("bar-mem", mem.used_bytes || 0, mem.max_bytes || 0);
  $("card-prefixes").textContent = count(kv.prefixes);
  $("card-pinned").textContent = `${count(kv.pinned)} pinned`;
  $("card-evictions").textContent = count(kv.evictions);
  $("card-evicted-keys").textContent = mem.evicted_keys !== undefined ? `prefixes · ${count(mem.evicted_keys)} keys evicted` : "prefixes evicted";
}

function drawPrefixes(p) {
  state.page = p.page;
  const stale = Date.now() / 1000 - p.as_of > 5;  // a large table is re-read less often (docs/dashboard.md)
  $("prefix-total").textContent = `${count(p.total)} total` +
    (stale ? ` · as of ${new Date(p.as_of * 1000).toLocaleTimeString()}` : "");
  $("page-info").textContent = `page ${count(p.page)} of ${count(p.pages)}`;
  $("page-prev").disabled = p.page <= 1;
  $("page-next").disabled = p.page >= p.pages;
  for (const th of document.querySelectorAll("#prefix-table th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === p.sort);
    th.dataset.order = th.dataset.sort === p.sort ? p.order : "";
  }
  const body = document.createElement("tbody");
  if (!p.rows.length) {
    const tr = el("tr");
    const td = el("td", "no prefixes stored yet", "empty");
    td.colSpan = 9;
    tr.append(td);
    body.append(tr);
  }
  for (const r of p.rows) {
    const tr = el("tr");
    tr.dataset.ns = r.ns;
    tr.append(el("td", r.space, "tenant-col"), el("td", r.ns, "ns"), el("td", r.model || "–", "mono"),
      el("td", count(r.tokens), "num"), el("td", r.codec, "mono"), el("td", bytes(r.bytes), "num"),
      el("td", count(r.hits), "num"), el("td", ago(r.last_hit)), el("td", r.pinned ? "pinned" : "", "pin"));
    body.append(tr);
  }
  $("prefix-table").replaceChild(body, $("prefix-table").tBodies[0]);
}

function drawSearch(s) {
  const body = document.createElement("tbody");
  if (!s.indexes.length) {
    const tr = el("tr");
    const td = el("td", s.enabled ? "no search indexes" : "search is not enabled", "empty");
    td.colSpan = 6;
    tr.append(td);
    body.append(tr);
  }
  for (const i of s.indexes) {
    const tr = el("tr");
    const progress = i.indexing ? `indexing ${(100 * i.percent_indexed).toFixed(0)} %` : "done";
    tr.append(el("td", i.space, "tenant-col"), el("td", i.db ? `${i.name} (db ${i.db})` : i.name),
      el("td", count(i.docs), "num"), el("td", count(i.vectors), "num"), el("td", progress),
      el("td", bytes(i.memory_bytes), "num"));
    body.append(tr);
  }
  $("search-table").replaceChild(body, $("search-table").tBodies[0]);
}

const REPLICATION_FIELDS = ["role", "connected_slaves", "master_host", "master_port", "master_link_status",
  "master_repl_offset", "slave_repl_offset", "repl_backlog_active", "repl_backlog_histlen"];
const CLUSTER_FIELDS = ["cluster_enabled", "cluster_state", "cluster_slots_assigned", "cluster_slots_ok",
  "cluster_known_nodes", "cluster_size", "cluster_current_epoch"];

function drawPairs(id, fields, names) {
  const items = [];
  const extra = Object.keys(fields).filter((k) => /^slave\d+$/.test(k));
  for (const key of names.concat(extra)) {
    if (key in fields) items.push(el("dt", key), el("dd", fields[key]));
  }
  $(id).replaceChildren(...items);
}

function drawReplication(r) {
  drawPairs("replication", r.replication, REPLICATION_FIELDS);
  drawPairs("cluster", r.cluster, CLUSTER_FIELDS);
}

function drawSlowlog(s) {
  $("slowlog-note").textContent = `${count(s.length)} entries · slower than ${count(s.threshold_us)} µs`;
  const body = document.createElement("tbody");
  if (!s.entries.length) {
    const tr = el("tr");
    const td = el("td", "nothing slow yet", "empty");
    td.colSpan = 5;
    tr.append(td);
    body.append(tr);
  }
  for (const e of s.entries) {
    const tr = el("tr");
    tr.append(el("td", e.id, "num"), el("td", ago(e.time)), el("td", count(e.usec), "num"),
      el("td", e.command, "mono cmd"), el("td", e.client + (e.name ? ` (${e.name})` : ""), "mono"));
    body.append(tr);
  }
  $("slowlog-table").replaceChild(body, $("slowlog-table").tBodies[0]);
}

// -- charts (SVG, drawn here) ---------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function chart(id, points, value, format, fixedMax) {
  const root = $(id);
  while (root.firstChild) root.removeChild(root.firstChild);
  const W = 600, H = 180, L = 62, R = 8, T = 10, B = 22;
  const values = points.map(value);
  const known = values.filter((v) => v !== null);
  const max = fixedMax !== undefined ? fixedMax : Math.max(1e-9, ...known) * 1.1;
  const x = (i) => L + (points.length > 1 ? (i * (W - L - R)) / (points.length - 1) : 0);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  for (let k = 0; k <= 4; k++) {
    const v = (max * k) / 4;
    root.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    const label = svg("text", { x: L - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" });
    label.textContent = format(v);
    root.append(label);
  }
  if (!known.length) {
    const t = svg("text", { x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle" });
    t.textContent = points.length ? "no lookups in this window yet" : "collecting samples…";
    root.append(t);
    return;
  }
  let d = "", area = "", open = false, first = null, last = null;
  values.forEach((v, i) => {
    if (v === null) { open = false; return; }
    d += (open ? " L" : " M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
    if (first === null) first = i;
    last = i;
    open = true;
  });
  values.forEach((v, i) => { if (v !== null) area += (area ? " L" : "M") + x(i).toFixed(1) + " " + y(v).toFixed(1); });
  area += ` L${x(last).toFixed(1)} ${y(0)} L${x(first).toFixed(1)} ${y(0)} Z`;
  root.append(svg("path", { d: area, class: "area" }), svg("path", { d: d.trim(), class: "line" }));
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  for (const [i, anchor] of [[0, "start"], [points.length - 1, "end"]]) {
    const label = svg("text", { x: x(i), y: H - 6, class: "axis", "text-anchor": anchor });
    label.textContent = new Date((i ? t1 : t0) * 1000).toLocaleTimeString();
    root.append(label);
  }
}

function drawHistory(h) {
  const points = h.points;
  chart("chart-hit-rate", points, (p) => p.hit_rate, (v) => (100 * v).toFixed(0) + "%", 1);
  chart("chart-saved", points, (p) => p.saved_total_s, axisSeconds);
}

// -- wiring -------------------------------------------------------------------------------------

function sortBy(column) {
  if (state.sort === column) state.order = state.order === "desc" ? "asc" : "desc";
  else { state.sort = column; state.order = ["space", "ns", "model", "codec"].includes(column) ? "asc" : "desc"; }
  state.page = 1;
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("page-prev").addEventListener("click", () => { state.page = Math.max(1, state.page - 1); refresh(); });
  $("page-next").addEventListener("click", () => { state.page += 1; refresh(); });
  $("page-size").addEventListener("change", (e) => { state.size = Number(e.target.value); state.page = 1; refresh(); });
  for (const th of document.querySelectorAll("#prefix-table th[data-sort]")) {
    th.addEventListener("click", () => sortBy(th.dataset.sort));
  }
  start();
});
