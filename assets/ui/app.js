// llm-warden's dashboard: the status every 2 s, the memory history for the
// chart, lifecycle events live from /warden/events, and a chat box that
// streams through /v1/chat/completions. No dependencies; every failure shows
// as a state on the page, never as an exception.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const WINDOW_MS = 30 * 60 * 1000;
const TIMELINE_MAX = 60;

const state = { status: null, samples: [], trained: {}, brakes: [], chat: [], sending: false };

function bytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

function duration(ms) {
  if (ms <= 0) return "due now";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

// A span that may be under a second (a small model's load), in seconds.
function secs(ms) {
  return ms == null ? "–" : `${(ms / 1000).toFixed(1)} s`;
}

function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour12: false });
}

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.json();
}

function setConn(text, cls) {
  const c = $("conn");
  c.textContent = text;
  c.className = `pill ${cls}`;
}

// At most one refresh in flight and one more queued: a burst of events
// (hundreds of turns ending) costs two status reads, not hundreds.
let refreshing = false;
let refreshAgain = false;

async function refresh() {
  if (refreshing) { refreshAgain = true; return; }
  refreshing = true;
  try {
    await refreshNow();
  } finally {
    refreshing = false;
    if (refreshAgain) { refreshAgain = false; refresh(); }
  }
}

async function refreshNow() {
  try {
    const [status, history] = await Promise.all([getJson("/warden/status"), getJson("/warden/samples")]);
    state.status = status;
    state.samples = history.samples;
    if (status.model && !(status.model in state.trained)) await loadModels();
    renderCards();
    renderChart();
  } catch (e) {
    setConn("warden unreachable", "bad");
    $("state").textContent = `cannot read the status (${e.message}); retrying`;
  }
}

async function loadModels() {
  try {
    const m = await getJson("/v1/models");
    for (const d of m.data) state.trained[d.id] = d.facts ? d.facts.trained_window : null;
  } catch (e) {
    $("window-note").textContent = `model list unavailable (${e.message})`;
  }
}

// Whether the loaded model's conversations survive a reload (status kv_keep).
function kvNote(k) {
  if (!k) return "";
  if (k.kept) return k.how === "swa_full"
    ? "conversations kept across reloads (full-size sliding-window cache)"
    : "conversations kept across reloads";
  return `conversations not kept across reloads: ${k.reason || k.how}`;
}

// Every resident model, most recently used first (the cards above are the
// first one's). Cells are text: a model id never becomes markup.
function renderResidents() {
  const s = state.status;
  const list = s.residents || [];
  const body = document.querySelector("#residents tbody");
  while (body.firstChild) body.removeChild(body.firstChild);
  for (const r of list) {
    const tr = document.createElement("tr");
    tr.dataset.model = r.model;
    if (r.model === s.model) tr.className = "current";
    const until = r.idle_deadline_ms == null ? "never" : `in ${duration(r.idle_deadline_ms - Date.now())}`;
    const cells = [r.model, r.kind || "–", r.state, r.context_tokens ? r.context_tokens.toLocaleString() : "–",
      r.footprint_bytes != null ? bytes(r.footprint_bytes) : "–",
      r.slots ? `${r.busy_slots} / ${r.slots}` : "–", poolNote(r.pool), String(r.queue_depth), loadsNote(r.loads), until];
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  $("residents-empty").style.display = list.length ? "none" : "";
  renderWaiting(s.waiting_models || [], s.switching);
}

// A model's loads: how many, the last one's length (what a switch to it
// costs), the time spent loading against the time spent serving, and how
// often it yielded its memory.
function loadsNote(l) {
  if (!l || !l.count) return "–";
  let note = `${l.count} · last ${secs(l.last_ms)} · ${secs(l.total_ms)} loading, ${secs(l.serving_ms)} serving`;
  if (l.yields) note += ` (${l.yields} yielded)`;
  return note;
}

// Models whose load waits for another model's turns, in the line's order,
// each with the scheduler's own sentence (why, and for how long at most).
function renderWaiting(list, sw) {
  const ul = $("waiting");
  while (ul.firstChild) ul.removeChild(ul.firstChild);
  if (sw && sw.loads) {
    const li = document.createElement("li");
    li.textContent = `Switching: ${sw.loads} loads in the last ${Math.round(sw.window_ms / 60000)} min, ${secs(sw.loading_ms)} loading (${Math.round(sw.loading_share * 100)}% of the time)` +
      (sw.thrashing ? ": thrashing, the models asked for do not fit together" : "");
    ul.appendChild(li);
  }
  for (const w of list) {
    const li = document.createElement("li");
    li.dataset.model = w.model;
    li.textContent = `${w.why} (waited ${secs(w.waited_ms)}, ${w.queue_depth} queued)`;
    ul.appendChild(li);
  }
}

// A resident's shared KV pool: the cells idle conversations hold beside
// those running turns reserved, and what was moved to disk to keep it
// compact (every decoded token attends the cells in use).
function poolNote(p) {
  if (!p) return "–";
  let note = `idle ${p.idle_cells.toLocaleString()} · running ${p.busy_cells.toLocaleString()}`;
  if (p.moved) note += ` · ${p.moved} moved to disk (${p.moved_cells.toLocaleString()} cells)`;
  else if (!p.compacting) note += " · kept in place";
  return note;
}

// The live child's slots: busy of all, each busy one's conversation and
// tokens, and the turns waiting for one.
function slotsNote(s) {
  const all = s.slots || [];
  if (!all.length) return "no child: no slots";
  const busy = all.filter((x) => x.busy);
  const each = busy.map((x) => `#${x.id} ${x.conversation ? x.conversation.slice(0, 12) : "no conversation"} (${x.tokens} tokens)`);
  let note = `${busy.length} of ${all.length} slots busy`;
  if (each.length) note += `: ${each.join(", ")}`;
  if (s.waiting_turns) note += ` · ${s.waiting_turns} waiting`;
  return note;
}

// The settings file's state: a refused reading (with its line and column)
// or settings that wait for a restart; hidden when all is applied.
function settingsNote(t) {
  if (!t) return "";
  if (t.error) {
    const at = t.error.line ? ` line ${t.error.line}, column ${t.error.column}` : "";
    return `Settings refused${t.error.file ? ` (${t.error.file}${at})` : at}: ${t.error.message}. The last good settings keep serving.`;
  }
  const parts = [];
  if (t.restart_needed && t.restart_needed.length) parts.push(`changed, applies at the next start: ${t.restart_needed.join(", ")}`);
  if (t.leaving && t.leaving.length) parts.push(`leaving once their turns end: ${t.leaving.join(", ")}`);
  return parts.length ? `Settings: ${parts.join(" · ")}` : "";
}

function renderCards() {
  const s = state.status;
  renderResidents();
  const note = settingsNote(s.settings);
  $("settings-note").textContent = note;
  $("settings-note").hidden = !note;
  $("settings-note").className = s.settings && s.settings.error ? "settings-note bad" : "settings-note";
  $("engine").textContent = `${s.engine} engine`;
  $("kv-note").textContent = kvNote(s.kv_keep);
  if (!s.model) {
    $("model").textContent = "No model loaded";
    $("state").textContent = s.state === "stopped" ? "the warden is stopping" : "the next request loads one";
    $("window").textContent = "–";
    $("window-note").textContent = "";
    $("window-bar").style.width = "0";
    $("footprint").textContent = "–";
    $("footprint-bar").style.width = "0";
  } else {
    $("model").textContent = s.model;
    $("state").textContent = `${s.state}${s.child_pid ? ` · pid ${s.child_pid}` : ""} · ${s.turns} turns`;
    const trained = state.trained[s.model];
    const win = s.context_tokens;
    $("window").textContent = win ? `${win.toLocaleString()} tokens` : "unknown";
    const notes = [];
    if (trained) notes.push(`trained ${trained.toLocaleString()}`);
    if (s.memory_bound_tokens) notes.push(`memory bound ${s.memory_bound_tokens.toLocaleString()}`);
    if (s.brake && s.brake.state && s.brake.state.cap) notes.push(`brake cap ${s.brake.state.cap.toLocaleString()}`);
    $("window-note").textContent = notes.join(" · ");
    $("window-bar").style.width = win && trained ? `${Math.min(100, (100 * win) / trained)}%` : "0";
    const last = state.samples.length ? state.samples[state.samples.length - 1] : null;
    const fp = last ? last.footprint_bytes : null;
    const budget = s.memory_budget_bytes || s.memory_total_bytes;
    $("footprint").textContent = fp != null ? bytes(fp) : "–";
    const pct = fp != null && budget ? Math.min(100, (100 * fp) / budget) : 0;
    $("footprint-bar").style.width = `${pct}%`;
    $("footprint-bar").className = pct > 80 ? "high" : "";
  }
  const brake = s.brake || {};
  let mem = "";
  if (!brake.enabled) mem = `memory sensor off: ${brake.off_reason || "not available on this engine"}`;
  else mem = `pressure ${brake.level || "not read yet"}`;
  if (s.memory_budget_bytes) mem += ` · budget ${bytes(s.memory_budget_bytes)} of ${bytes(s.memory_total_bytes)}`;
  else if (s.memory_total_bytes) mem += ` · RAM ${bytes(s.memory_total_bytes)}`;
  $("memory-note").textContent = mem;
  $("queue").textContent = `${s.queue_depth} / ${s.max_queue}`;
  $("slots").textContent = slotsNote(s);
  if (!s.model) $("deadline").textContent = "nothing loaded";
  else if (s.idle_deadline_ms == null) $("deadline").textContent = "never (kept loaded)";
  else $("deadline").textContent = `in ${duration(s.idle_deadline_ms - Date.now())}${s.keep_alive_s != null ? " (keep_alive)" : ""}`;
}

// A `style` entry ("prop: value") goes through the CSSOM: the page's
// Content-Security-Policy refuses style attributes, not style properties.
function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "style") {
      const [prop, value] = v.split(/:\s*/);
      e.style.setProperty(prop, value);
    } else {
      e.setAttribute(k, v);
    }
  }
  if (parent) parent.appendChild(e);
  return e;
}

function renderChart() {
  const svg = $("chart");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 900, H = 260, L = 64, R = 64, T = 10, B = 24;
  const now = Date.now();
  const samples = state.samples.filter((p) => p.t_ms >= now - WINDOW_MS);
  const t0 = samples.length ? Math.min(samples[0].t_ms, now - 60 * 1000) : now - 60 * 1000;
  const x = (t) => L + ((t - t0) / Math.max(1, now - t0)) * (W - L - R);
  if (!samples.length) {
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "no samples yet";
    $("chart-note").textContent = "The warden samples memory every few seconds; the chart fills as it runs.";
    return;
  }
  const byteMax = Math.max(1, ...samples.flatMap((p) => [p.available_bytes || 0, p.footprint_bytes || 0])) * 1.1;
  const tokMax = Math.max(1, ...samples.map((p) => p.context_tokens || 0)) * 1.15;
  const yb = (v) => H - B - (v / byteMax) * (H - T - B);
  const yt = (v) => H - B - (v / tokMax) * (H - T - B);
  // Pressure bands behind everything.
  const levels = [];
  samples.forEach((p, i) => {
    levels.push(p.level || "none");
    if (p.level !== "warning" && p.level !== "critical") return;
    const end = i + 1 < samples.length ? samples[i + 1].t_ms : now;
    el("rect", { x: x(p.t_ms), y: T, width: Math.max(1, x(end) - x(p.t_ms)), height: H - T - B,
      style: `fill: var(--${p.level})`, class: `band ${p.level}` }, svg);
  });
  svg.setAttribute("data-levels", [...new Set(levels)].join(","));
  el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#ccd" }, svg);
  for (const f of [0.5, 1]) {
    el("text", { x: L - 6, y: yb((byteMax / 1.1) * f) + 4, "text-anchor": "end" }, svg).textContent = bytes((byteMax / 1.1) * f);
  }
  el("text", { x: W - R + 6, y: yt(tokMax / 1.15) + 4 }, svg).textContent = `${Math.round(tokMax / 1.15)} tok`;
  el("text", { x: L, y: H - 6 }, svg).textContent = clock(t0);
  el("text", { x: W - R, y: H - 6, "text-anchor": "end" }, svg).textContent = clock(now);
  const line = (key, y, color, id) => {
    const pts = samples.filter((p) => p[key] != null).map((p) => `${x(p.t_ms).toFixed(1)},${y(p[key]).toFixed(1)}`);
    if (pts.length) el("polyline", { points: pts.join(" "), fill: "none", style: `stroke: ${color}`, "stroke-width": 2, id }, svg);
  };
  line("available_bytes", yb, "var(--available)", "available-line");
  line("footprint_bytes", yb, "var(--footprint)", "footprint-line");
  // The window as a step line: flat until the sample where it changed.
  const steps = [];
  const windows = [];
  let prev = null;
  for (const p of samples) {
    const w = p.context_tokens;
    if (w == null) { prev = null; continue; }
    if (prev !== null && w !== prev) steps.push(`${x(p.t_ms).toFixed(1)},${yt(prev).toFixed(1)}`);
    steps.push(`${x(p.t_ms).toFixed(1)},${yt(w).toFixed(1)}`);
    if (windows[windows.length - 1] !== w) windows.push(w);
    prev = w;
  }
  if (prev !== null) steps.push(`${x(now).toFixed(1)},${yt(prev).toFixed(1)}`);
  if (steps.length) {
    const wl = el("polyline", { points: steps.join(" "), fill: "none", style: "stroke: var(--window)", "stroke-width": 2.5, id: "window-line" }, svg);
    wl.setAttribute("data-windows", windows.join(","));
  }
  for (const b of state.brakes) {
    if (b.t < t0) continue;
    el("line", { x1: x(b.t), y1: T, x2: x(b.t), y2: H - B, stroke: "#b42318", "stroke-dasharray": "3 3", class: "brake-mark" }, svg);
  }
  const sensorless = samples.every((p) => p.level == null);
  $("chart-note").textContent = sensorless
    ? "No memory pressure sensor here: only the footprint and the window are drawn."
    : `${samples.length} samples; dashed red lines mark memory brake actions.`;
}

const KINDS = ["loading", "ready", "load_failed", "turn_ended", "unloaded", "child_exited", "client_stalled",
  "reap_checked", "brake", "yielded", "pool_compacted", "turn_resumed", "prefix_reset", "notice",
  "settings_applied", "settings_refused"];

function describe(kind, e) {
  switch (kind) {
    case "loading": return `loading ${e.model} (port ${e.port})`;
    case "ready": return `${e.model} ready in ${e.load_ms} ms, window ${e.context_tokens ?? "?"}`;
    case "load_failed": return `load of ${e.model} failed: ${e.code}`;
    case "turn_ended": {
      let t = `turn ${e.seq} (${e.route}) ${e.outcome}`;
      if (e.timings) {
        t += ` · ${e.timings.events} tokens`;
        if (e.timings.ttft_s != null) t += ` · first token ${(e.timings.ttft_s * 1000).toFixed(0)} ms`;
        if (e.timings.decode_tokens_per_s != null) t += ` · ${e.timings.decode_tokens_per_s.toFixed(0)} tok/s`;
        if (e.timings.paused_s != null) t += ` · paused ${e.timings.paused_s.toFixed(1)} s by a crash`;
      }
      return t;
    }
    case "unloaded": return `${e.model} unloaded (${e.reason === "idle" ? "idle reap" : e.reason})`;
    case "turn_resumed": return e.how === "continued"
      ? `turn ${e.seq} (${e.route}) continued on a new ${e.model} after ${e.code} (pid ${e.pid}), ${e.sent_tokens} tokens already sent, paused ${e.paused_ms} ms`
      : `turn ${e.seq} (${e.route}) run again on a new ${e.model} after ${e.code} (pid ${e.pid}), nothing had been sent`;
    case "child_exited": return `${e.model} crashed: ${e.code} (pid ${e.pid})`;
    case "client_stalled": return `turn ${e.seq}: client stopped reading (${e.waited_ms} ms)`;
    case "reap_checked": return e.reaped ? "idle reap" : null;
    case "brake": return `memory brake ${e.action} at ${e.level} (${e.point}), window ${e.window_from ?? "?"} → ${e.window_to ?? "unloaded"}`;
    case "yielded": return `${e.model} yielded the memory to ${e.to}: ${e.why}`;
    case "pool_compacted": return `${e.model}: an idle conversation's ${e.cells.toLocaleString()} cells moved to disk (slot ${e.slot}): keeping them would cost the turns ahead ~${e.keep_ms} ms, the move ~${e.move_ms} ms`;
    case "prefix_reset": return `prefix cache reset (${e.reason})`;
    case "notice": return `notice: ${e.notice.t}${e.notice.reason ? ` (${e.notice.reason})` : ""}`;
    case "settings_applied": {
      const p = [];
      if (e.added.length) p.push(`added ${e.added.join(", ")}`);
      if (e.removed.length) p.push(`removed ${e.removed.join(", ")}`);
      if (e.changed.length) p.push(`changed ${e.changed.join(", ")}`);
      if (e.restart_needed.length) p.push(`at restart: ${e.restart_needed.join(", ")}`);
      return `settings applied${p.length ? `: ${p.join("; ")}` : ""}`;
    }
    case "settings_refused": {
      const at = e.problem.line ? ` (line ${e.problem.line}, column ${e.problem.column})` : "";
      return `settings refused${at}: ${e.problem.message}`;
    }
    default: return null;
  }
}

// The warden replays its recent events when the page connects (each with
// the time it saw it, `at_ms`), so the timeline starts with what happened
// before the page was opened; a reconnect gets only what it missed.
function addEvent(kind, e) {
  const text = describe(kind, e);
  if (!text) return;
  const at = e.at_ms ?? Date.now();
  if (kind === "brake") state.brakes.push({ t: at });
  const li = document.createElement("li");
  li.dataset.kind = kind;
  const time = document.createElement("time");
  time.textContent = clock(at);
  const span = document.createElement("span");
  span.textContent = text;
  li.append(time, span);
  const list = $("timeline");
  list.prepend(li);
  while (list.children.length > TIMELINE_MAX) list.removeChild(list.lastChild);
  $("timeline-empty").style.display = "none";
  if (["ready", "unloaded", "brake", "child_exited", "turn_ended", "settings_applied", "settings_refused"].includes(kind)) refresh();
}

function connectEvents() {
  const es = new EventSource("/warden/events");
  es.onopen = () => setConn("live", "ok");
  // EventSource reconnects by itself after a network error; after an HTTP
  // error it gives up (CLOSED), so the page starts a new one. Either way the
  // page says so meanwhile.
  es.onerror = () => {
    setConn("event stream lost, reconnecting…", "bad");
    if (es.readyState === EventSource.CLOSED) setTimeout(connectEvents, 3000);
  };
  for (const kind of KINDS) {
    es.addEventListener(kind, (m) => {
      try { addEvent(kind, JSON.parse(m.data)); } catch (err) { setConn(`bad event (${err.message})`, "bad"); }
    });
  }
}

// A notice goes above the answer it came with (`before`), the rest below.
function chatLine(cls, text, before) {
  const d = document.createElement("div");
  d.className = `msg ${cls}`;
  d.textContent = text;
  $("chat-log").insertBefore(d, before || null);
  d.scrollIntoView({ block: "nearest" });
  return d;
}

async function send(ev) {
  ev.preventDefault();
  const text = $("chat-input").value.trim();
  if (!text || state.sending) return;
  state.sending = true;
  $("chat-send").disabled = true;
  $("chat-input").value = "";
  state.chat.push({ role: "user", content: text });
  chatLine("user", text);
  const out = chatLine("assistant", "");
  out.id = "chat-answer";
  let answer = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: state.chat, stream: true, max_tokens: 128 }),
    });
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      throw new Error(body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${r.status}`);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (line.startsWith(": warden ")) {
            const n = JSON.parse(line.slice(9));
            chatLine("notice", `${n.t.replace("_", " ")}${n.model ? ` ${n.model}` : ""}${n.reason ? ` (${n.reason})` : ""}`, out);
          } else if (line.startsWith("data: ") && line !== "data: [DONE]") {
            const d = JSON.parse(line.slice(6));
            if (d.error) throw new Error(`${d.error.code}: ${d.error.message}`);
            const delta = d.choices && d.choices[0] && d.choices[0].delta ? d.choices[0].delta.content : null;
            if (delta) { answer += delta; out.textContent = answer; }
          }
        }
      }
    }
    state.chat.push({ role: "assistant", content: answer });
  } catch (e) {
    chatLine("error", e.message);
    state.chat.pop();
  } finally {
    out.removeAttribute("id");
    out.dataset.done = "1";
    state.sending = false;
    $("chat-send").disabled = false;
  }
}

$("chat-form").addEventListener("submit", send);
$("chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) send(e);
});
connectEvents();
refresh();
setInterval(refresh, 2000);
