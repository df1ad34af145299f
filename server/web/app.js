// sliced web view (docs/ui.md). Plain JavaScript, no framework, nothing
// fetched but this daemon's /api/v1 (read-only GETs). Polls every few
// seconds; a failed poll shows "disconnected" and greys the data until the
// next one succeeds. DOM is built with textContent only: no data is ever
// parsed as HTML.
"use strict";

const POLL_MS = 3000;
const SLICE_PAGE = 50;
const QUEUE_PAGE = 50;
// A fleet this small opens every slice group at once; a larger one shows
// the aggregate rows only, and a click drills down.
const AUTO_OPEN_SLICES = 64;

const state = {
  open: new Map(),     // slice group key -> {params, tokens: [page tokens]}
  closed: new Set(),   // groups the user closed (not re-opened automatically)
  detail: null,        // {kind: "node" | "pg", id}
  queueOffset: 0,
  lastOk: 0,
  polling: false,
};

// ---------------------------------------------------------------- helpers

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

const num = (v) => Number(v || 0);
const pct = (v) => (v === undefined || v === null ? "–" : Math.round(Number(v)) + "%");

function age(seconds) {
  let s = Math.max(0, Math.floor(Number(seconds || 0)));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + s + "s";
  return s + "s";
}

// A group's colour: ids end in their hex sequence (pg-00000000002a), so
// consecutive groups step by the golden angle and never look alike.
function hue(id) {
  const m = /([0-9a-f]{1,8})$/i.exec(id);
  let n = m ? parseInt(m[1], 16) : 0;
  if (!m) for (let i = 0; i < id.length; i++) n = Math.imul(n ^ id.charCodeAt(i), 16777619) >>> 0;
  // 300 degrees, skipping free's greens (90-150).
  const h = (n * 137.508) % 300;
  return Math.round(h < 90 ? h : h + 60);
}

class HttpError extends Error {
  constructor(status, body) {
    super((body && body.message) || ("HTTP " + status));
    this.status = status;
  }
}

async function api(path) {
  let r;
  try {
    r = await fetch("/api/v1/" + path, {credentials: "same-origin", cache: "no-store"});
  } catch (e) {
    throw new HttpError(0, {message: "daemon unreachable"});
  }
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new HttpError(r.status, body);
  return body || {};
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v !== undefined) q.set(k, v);
  return q.toString();
}

// ---------------------------------------------------------------- connection

function setConn(kind, text) {
  const c = document.getElementById("conn");
  c.className = "conn " + kind;
  c.dataset.state = kind;
  c.textContent = text;
  document.body.classList.toggle("stale", kind === "disconnected");
}

function showLogin(show) {
  document.getElementById("login").hidden = !show;
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = document.getElementById("token").value.trim();
  const secure = location.protocol === "https:" ? "; Secure" : "";
  // Tokens are printable without spaces or ";" (the tokens file's format).
  document.cookie = "sliced_token=" + token +
      "; path=/api/v1; SameSite=Strict" + secure;
  showLogin(false);
  poll();
});

// ---------------------------------------------------------------- summary

function renderSummary(s) {
  const byState = s.nodes_by_state || {};
  const parts = [];
  for (const k of ["ALIVE", "DRAINING", "DEAD"]) parts.push(num(byState[k]) + " " + k);
  parts.push(num(s.pending_placement_groups) + " waiting groups" +
             ((s.pending_shapes || []).length ? " (" + s.pending_shapes.join(", ") + ")" : ""));
  parts.push("fragmentation " + Math.round(100 * Number(s.fragmentation || 0)) + "%");
  document.getElementById("summary").textContent = parts.join(" · ");
}

// ---------------------------------------------------------------- slice map

function groupKey(g) {
  return [g.accelerator_type || "", g.topology || "", g.tier || "", g.zone || ""].join("|");
}

async function renderSliceGroups(resp) {
  const tbody = document.querySelector("#slice-groups tbody");
  const rows = [];
  const groups = resp.groups || [];
  const drills = [];
  const auto = num(resp.total_slices) <= AUTO_OPEN_SLICES;
  for (const g of groups) {
    const key = groupKey(g);
    if (auto && !state.open.has(key) && !state.closed.has(key)) openGroup(key, g);
    const open = state.open.has(key);
    const tr = el("tr", {class: "row" + (open ? " open" : ""), "data-group": key,
                         onclick: () => toggleGroup(key, g)},
      el("td", {text: g.accelerator_type || "?"}),
      el("td", {text: g.topology || "?"}),
      el("td", {text: g.pod_type || ""}),
      el("td", {text: g.tier || ""}),
      el("td", {text: g.zone || ""}),
      el("td", {class: "num", text: num(g.total_slices)}),
      el("td", {class: "num", text: num(g.free_slices)}),
      el("td", {class: "num", text: num(g.held_slices)}),
      el("td", {class: "num", text: num(g.partial_slices)}),
      el("td", {class: "num", text: num(g.broken_slices)}),
      el("td", {class: "num", text: num(g.free_chips) + " / " + num(g.total_chips)}),
      el("td", {class: "num", text: Math.round(100 * Number(g.fragmentation || 0)) + "%"}));
    rows.push(tr);
    if (open) {
      const cell = el("td", {colspan: "12"});
      rows.push(el("tr", {class: "drill", "data-drill": key}, cell));
      drills.push([key, cell]);
    }
  }
  if (!groups.length) {
    rows.push(el("tr", {}, el("td", {colspan: "12", class: "empty", text: "no TPU slices registered"})));
  }
  // Fetch the open drill-downs before swapping, so the page never blinks.
  const pages = await Promise.all(drills.map(([key]) => fetchSlices(key)));
  drills.forEach(([key, cell], i) => renderSlicePage(key, cell, pages[i]));
  tbody.replaceChildren(...rows);
}

function openGroup(key, g) {
  state.open.set(key, {params: {accelerator_type: g.accelerator_type || "", topology: g.topology || "",
                                tier: g.tier || "", zone: g.zone || ""}, tokens: [""]});
}

function toggleGroup(key, g) {
  if (state.open.has(key)) {
    state.open.delete(key);
    state.closed.add(key);
  } else {
    state.closed.delete(key);
    openGroup(key, g);
  }
  poll();
}

function fetchSlices(key) {
  const o = state.open.get(key);
  const token = o.tokens[o.tokens.length - 1];
  return api("slices?" + query({...o.params, page_size: SLICE_PAGE, page_token: token}));
}

function renderSlicePage(key, cell, page) {
  const o = state.open.get(key);
  const box = el("div", {class: "slices"});
  for (const entry of page.slices || []) box.append(renderSlice(entry));
  const nav = el("div", {class: "more"});
  const shown = (page.slices || []).length;
  const first = (o.tokens.length - 1) * SLICE_PAGE;
  nav.append(`slices ${first + 1}–${first + shown} of ${num(page.total)} `);
  if (o.tokens.length > 1) {
    nav.append(el("button", {class: "link", type: "button", text: "previous",
                             onclick: (ev) => { ev.stopPropagation(); o.tokens.pop(); poll(); }}), " ");
  }
  if (page.next_page_token) {
    nav.append(el("button", {class: "link", type: "button", text: "next",
                             onclick: (ev) => { ev.stopPropagation(); o.tokens.push(page.next_page_token); poll(); }}));
  }
  cell.replaceChildren(box, nav);
}

function hostClass(h) {
  if (!h.node_id) return "missing";
  if (h.quarantine_reason) return "quarantined";
  if (h.state === "DEAD") return "dead";
  if (h.state === "DRAINING") return "draining";
  if ((h.placement_group_ids || []).length) return "held";
  return "free";
}

function gridDims(entry, n) {
  const m = /^(\d+)x(\d+)(?:x(\d+))?$/.exec(entry.host_grid || "");
  if (m) {
    const d = [Number(m[1]), Number(m[2]), Number(m[3] || 1)];
    if (d[0] * d[1] * d[2] >= n) return d;
  }
  const x = Math.max(1, Math.ceil(Math.sqrt(n)));
  return [x, Math.max(1, Math.ceil(n / x)), 1];
}

function renderSlice(entry) {
  const s = entry.slice || {};
  const hosts = entry.hosts || [];
  const [gx, gy, gz] = gridDims(entry, hosts.length);
  const layers = [];
  for (let z = 0; z < gz; z++) {
    layers.push(el("div", {class: "hostgrid", style: `grid-template-columns: repeat(${gx}, 26px)`,
                           title: gz > 1 ? "z = " + z : null}));
  }
  hosts.forEach((h, i) => {
    let x = i % gx, y = Math.floor(i / gx) % gy, z = Math.floor(i / (gx * gy));
    const p = /^(\d+)-(\d+)(?:-(\d+))?$/.exec(h.position || "");
    if (p && !s.positions_assumed) { x = Number(p[1]); y = Number(p[2]); z = Number(p[3] || 0); }
    const cls = hostClass(h);
    const pgs = h.placement_group_ids || [];
    const jobs = h.job_ids || [];
    const tip = [h.node_id || "missing worker " + i, h.state || "", h.quarantine_reason ? "quarantined: " + h.quarantine_reason : ""]
        .concat(pgs.map((id, k) => "held by " + id + (jobs[k] ? " (job " + jobs[k] + ")" : "")))
        .filter(Boolean).join("\n");
    const c = el("span", {class: "cell " + cls, title: tip, "data-node": h.node_id || "",
                          "data-state": cls, "data-pg": pgs.join(" "),
                          style: `grid-column: ${x + 1}; grid-row: ${y + 1}`,
                          text: String(i)});
    if (cls === "held") {
      const hh = hue(pgs[0]);
      c.style.background = `hsl(${hh}, 55%, 48%)`;
      // Outline: the hosts one group holds in a carved (partial) slice.
      c.style.borderColor = `hsl(${hh}, 70%, 25%)`;
    } else if (pgs.length) {
      c.style.borderColor = `hsl(${hue(pgs[0])}, 70%, 25%)`;
    }
    if (h.node_id) c.addEventListener("click", (ev) => { ev.stopPropagation(); openDetail("node", h.node_id); });
    (layers[Math.min(z, gz - 1)] || layers[0]).append(c);
  });
  const holders = el("div", {class: "holders"});
  const seen = new Map();
  for (const h of hosts) (h.placement_group_ids || []).forEach((id, k) => seen.set(id, (h.job_ids || [])[k] || ""));
  for (const [id, job] of seen) {
    holders.append(el("button", {class: "link", type: "button", text: id + (job ? " · " + job : ""),
                                 onclick: (ev) => { ev.stopPropagation(); openDetail("pg", id); }}), " ");
  }
  return el("div", {class: "slice", "data-slice": s.name || "", "data-status": entry.status || ""},
    el("div", {}, el("span", {class: "name", text: s.name || ""}),
       el("span", {class: "badge " + (entry.status || ""), text: entry.status === "partial" ? "carved / partial" : entry.status})),
    ...layers,
    s.reason ? el("div", {class: "why", text: s.reason}) : null,
    holders);
}

// ---------------------------------------------------------------- queue

function renderQueue(resp) {
  const tbody = document.querySelector("#queue tbody");
  const rows = [];
  for (const e of resp.entries || []) {
    const g = e.placement_group || {};
    const ex = e.explain || {};
    const why = el("td", {class: "reason"}, el("div", {text: g.pending_reason || ex.summary || ""}));
    if (ex.summary && ex.summary !== g.pending_reason) why.append(el("div", {class: "holders", text: ex.summary}));
    const cls = g.compute_class
      ? g.compute_class + ((e.compute_class_tiers || []).length ? " (" + e.compute_class_tiers.join(" → ") + ")" : "")
      : "";
    rows.push(el("tr", {class: "row", "data-pg": g.placement_group_id || "", onclick: () => openDetail("pg", g.placement_group_id)},
      el("td", {class: "num", text: num(e.position) + 1}),
      el("td", {text: g.placement_group_id || ""}),
      el("td", {text: g.job_id || ""}),
      el("td", {text: g.state || ""}),
      el("td", {class: "num", text: num(g.priority)}),
      el("td", {text: cls}),
      el("td", {text: age(e.age_seconds)}),
      why));
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: "8", class: "empty", text: "nothing waits"})));
  tbody.replaceChildren(...rows);
  const more = document.getElementById("queue-more");
  const total = num(resp.total);
  more.hidden = total <= QUEUE_PAGE && state.queueOffset === 0;
  more.replaceChildren(`groups ${state.queueOffset + 1}–${state.queueOffset + (resp.entries || []).length} of ${total} `);
  if (state.queueOffset > 0) {
    more.append(el("button", {class: "link", type: "button", text: "previous",
                              onclick: () => { state.queueOffset = Math.max(0, state.queueOffset - QUEUE_PAGE); poll(); }}), " ");
  }
  if (state.queueOffset + QUEUE_PAGE < total) {
    more.append(el("button", {class: "link", type: "button", text: "next",
                              onclick: () => { state.queueOffset += QUEUE_PAGE; poll(); }}));
  }
}

// ---------------------------------------------------------------- details

function openDetail(kind, id) {
  state.detail = {kind, id};
  poll();
}

document.getElementById("detail-close").addEventListener("click", () => {
  state.detail = null;
  document.getElementById("detail").hidden = true;
  document.body.classList.remove("with-detail");
});

function kv(pairs) {
  const dl = el("dl", {class: "kv"});
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(el("dt", {text: k}), v instanceof Node ? el("dd", {}, v) : el("dd", {text: String(v)}));
  }
  return dl;
}

function logs(lines) {
  if (!lines || !lines.length) return el("p", {class: "empty", text: "no log lines"});
  const pre = el("pre", {class: "logs"});
  for (const l of lines) {
    pre.append(el("span", {class: "sev-" + (l.severity || ""),
                           text: `${(l.time || "").replace("T", " ").replace(/\..*Z$/, "Z")} ${l.node_id || ""} ${l.severity || ""} ${l.text || ""}\n`}));
  }
  return pre;
}

function spark(samples, field) {
  const pts = samples.map((s, i) => [i, s[field]]).filter(([, v]) => v !== undefined);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 100 28");
  svg.setAttribute("preserveAspectRatio", "none");
  if (pts.length) {
    const n = Math.max(1, samples.length - 1);
    const y = (v) => (27 - 26 * Math.min(100, v) / 100).toFixed(1);
    // One report so far: a level line at its value.
    const xy = pts.length === 1 ? [`0,${y(pts[0][1])}`, `100,${y(pts[0][1])}`]
                                : pts.map(([i, v]) => `${(100 * i / n).toFixed(1)},${y(v)}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", xy.join(" "));
    svg.append(line);
  }
  const last = pts.length ? pts[pts.length - 1][1] : undefined;
  return el("div", {"data-series": field}, svg, el("div", {class: "spark-val", text: pct(last)}));
}

function renderNode(d) {
  const n = d.node || {};
  const chips = d.chips || [];
  const body = [el("h3", {text: "node " + n.node_id}),
    kv([["state", n.state], ["quarantined", n.quarantine_reason], ["address", n.address],
        ["slice", (n.labels || {})["ray.io/tpu-slice-name"]], ["worker", (n.labels || {})["ray.io/tpu-worker-id"]],
        ["groups", (n.placement_group_ids || []).join(", ")],
        ["last heartbeat", n.last_heartbeat]])];
  body.push(el("h3", {text: "TPU telemetry (recent reports)"}));
  if (!chips.length) {
    body.push(el("p", {class: "empty", text: "no fresh TPU report from this node's agent"}));
  } else {
    const g = el("div", {class: "chips", "data-telemetry": n.node_id});
    g.append(el("span", {class: "h", text: "chip"}), el("span", {class: "h", text: "duty cycle"}),
             el("span", {class: "h", text: "TensorCore"}), el("span", {class: "h", text: "HBM used"}),
             el("span", {class: "h", text: "memory bandwidth"}));
    for (const c of chips) {
      const s = c.samples || [];
      g.append(el("span", {text: num(c.chip_index)}), spark(s, "duty_cycle"), spark(s, "tensorcore_utilization"),
               spark(s, "hbm_used_percent"), spark(s, "memory_bandwidth_utilization"));
    }
    body.push(g);
  }
  const labels = el("details", {}, el("summary", {text: "labels"}),
                    kv(Object.entries(n.labels || {}).sort()));
  body.push(labels, el("h3", {text: "recent libtpu log lines"}), logs(d.recent_logs));
  return body;
}

function renderGroup(d) {
  const g = d.placement_group || {};
  const ex = d.explain || {};
  const body = [el("h3", {text: "placement group " + g.placement_group_id}),
    kv([["state", g.state], ["job", g.job_id], ["name", g.name], ["priority", num(g.priority)],
        ["compute class", g.compute_class], ["why it waits", g.pending_reason],
        ["slices", (g.slice_names || []).join(", ")], ["created", g.create_time]])];
  if (ex.outcome) {
    body.push(el("h3", {text: "explain: " + ex.outcome}), el("p", {class: "reason", text: ex.summary || ""}));
    const ul = el("ul");
    for (const line of ex.details || []) ul.append(el("li", {text: line}));
    body.push(ul);
  }
  const workers = g.workers || [];
  body.push(el("h3", {text: workers.length ? `workers (${workers.length})` : "bundles"}));
  if (workers.length) {
    const t = el("table", {class: "grid-table"},
      el("thead", {}, el("tr", {}, ...["rank", "node", "address", "slice", "worker id", "env"].map((h) => el("th", {text: h})))));
    const tb = el("tbody");
    for (const w of workers) {
      const env = el("details", {}, el("summary", {text: Object.keys(w.env || {}).length + " vars"}),
                     kv(Object.entries(w.env || {}).sort()));
      tb.append(el("tr", {"data-worker": num(w.rank)},
        el("td", {class: "num", text: num(w.rank)}),
        el("td", {}, el("button", {class: "link", type: "button", text: w.node_id, onclick: () => openDetail("node", w.node_id)})),
        el("td", {text: w.address || ""}), el("td", {text: w.slice_name || ""}),
        el("td", {class: "num", text: num(w.tpu_worker_id)}), el("td", {}, env)));
    }
    t.append(tb);
    body.push(t);
  } else {
    const ul = el("ul");
    for (const b of g.bundles || []) {
      ul.append(el("li", {text: Object.entries(b.resources || {}).map(([k, v]) => k + ": " + v).join(", ") +
                               (b.node_id ? " on " + b.node_id : " (not placed)")}));
    }
    body.push(ul);
  }
  body.push(el("h3", {text: "recent libtpu log lines"}), logs(d.recent_logs));
  return body;
}

async function refreshDetail() {
  const d = state.detail;
  if (!d) return;
  const panel = document.getElementById("detail");
  const box = document.getElementById("detail-body");
  try {
    const data = await api((d.kind === "node" ? "nodes/" : "placement_groups/") + encodeURIComponent(d.id));
    if (state.detail !== d) return;
    box.replaceChildren(...(d.kind === "node" ? renderNode(data) : renderGroup(data)));
    panel.dataset.kind = d.kind;
    panel.dataset.id = d.id;
  } catch (e) {
    if (e.status === 404) {
      box.replaceChildren(el("p", {class: "empty", text: d.id + ": " + e.message}));
    } else {
      throw e;
    }
  }
  panel.hidden = false;
  document.body.classList.add("with-detail");
}

// ---------------------------------------------------------------- polling

async function poll() {
  if (state.polling) { state.again = true; return; }
  state.polling = true;
  try {
    const [summary, groups, queue] = await Promise.all([
      api("summary"), api("slice_groups"), api("queue?" + query({offset: state.queueOffset, page_size: QUEUE_PAGE}))]);
    renderSummary(summary);
    await renderSliceGroups(groups);
    renderQueue(queue);
    await refreshDetail();
    state.lastOk = Date.now();
    showLogin(false);
    setConn("live", "live · updated " + new Date().toLocaleTimeString());
  } catch (e) {
    if (e.status === 401) {
      showLogin(true);
      setConn("disconnected", "sign in: " + e.message);
    } else {
      const since = state.lastOk ? " · last update " + new Date(state.lastOk).toLocaleTimeString() : "";
      setConn("disconnected", "disconnected (" + e.message + ")" + since + " · retrying");
    }
  } finally {
    state.polling = false;
    if (state.again) { state.again = false; poll(); }
  }
}

poll();
setInterval(poll, POLL_MS);
