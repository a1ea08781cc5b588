// mlxd dashboard: polls GET /v1/status once a second and draws it.
// No framework, no build step, no request to any other host. The API key,
// when the server has keys, stays in this tab's sessionStorage and is sent
// in the Authorization header only (never a cookie). Text from the server
// is always inserted as text (textContent), never as markup.
"use strict";

(() => {
  const POLL_MS = 1000;
  const KEPT_SAMPLES = 300;
  const KEY_STORAGE = "mlxd.apiKey";
  const COLORS = ["#2f6fdd", "#d9822b", "#1e7f4f", "#b3261e", "#8e44ad", "#16a2b8", "#7f8c8d"];

  const state = { samples: [], lastT: null, status: null, busy: new Set() };

  // -- small helpers -------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = value;
      else if (name.startsWith("data-")) node.setAttribute(name, value);
      else if (name === "onclick") node.addEventListener("click", value);
      else if (name === "style") Object.assign(node.style, value); // CSSOM: allowed by the page's CSP
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return `${v >= 100 || i === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
  }

  const percent = (r) => (r === null || r === undefined ? "–" : `${(r * 100).toFixed(0)}%`);

  function seconds(s) {
    if (s === null || s === undefined) return "–";
    return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`;
  }

  const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour12: false });

  function notice(text, isError) {
    const node = $("notice");
    node.textContent = text || "";
    node.className = isError ? "error" : "";
  }

  function badge(text, field) {
    return el("span", { class: `badge state-${text}`, "data-field": field, text });
  }

  // -- the API ---------------------------------------------------------------------

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || "";
  }

  async function call(method, path, body) {
    const headers = { Accept: "application/json" };
    const key = apiKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    return { ok: response.ok, status: response.status, data };
  }

  function errorText(result) {
    const message = result.data && result.data.error && result.data.error.message;
    if (result.status === 401) return `${result.status}: ${message || "an API key is needed"} (enter it above)`;
    return `${result.status}: ${message || "request failed"}`;
  }

  // -- polling ---------------------------------------------------------------------

  async function poll() {
    try {
      const query = state.lastT === null ? "" : `?since=${encodeURIComponent(state.lastT)}`;
      const result = await call("GET", `/v1/status${query}`);
      if (result.ok) {
        $("connection").textContent = "";
        render(result.data);
      } else {
        $("server-state").textContent = result.status === 401 ? "needs a key" : `error ${result.status}`;
        $("server-state").className = "badge state-error";
        $("connection").textContent = errorText(result);
      }
    } catch (e) {
      $("server-state").textContent = "unreachable";
      $("server-state").className = "badge state-error";
      $("connection").textContent = `the server does not answer (${e.message || e})`;
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  function render(status) {
    state.status = status;
    for (const sample of status.samples) state.samples.push(sample);
    if (state.samples.length > KEPT_SAMPLES) state.samples.splice(0, state.samples.length - KEPT_SAMPLES);
    if (state.samples.length) state.lastT = state.samples[state.samples.length - 1].t;

    $("version").textContent = `v${status.version}`;
    const serverState = status.draining ? "draining" : "ok";
    $("server-state").textContent = serverState;
    $("server-state").className = `badge state-${serverState}`;
    $("budget").textContent = status.memory_budget_bytes ? `memory budget ${bytes(status.memory_budget_bytes)}` : "";
    $("updated").textContent = `updated ${clock(status.time)}`;

    renderModels(status.models);
    renderRequests(status.requests);
    renderMcp(status.mcp_servers);
    renderNodes(status.nodes);
    drawCharts(status.models);
    document.body.dataset.updated = String(status.time);
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  }

  function replaceRows(table, rows, columns, emptyText) {
    const body = $(table).tBodies[0];
    body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: columns, text: emptyText }))]));
  }

  // -- tables ------------------------------------------------------------------------

  function renderModels(models) {
    const rows = models.map((m) => {
      const mem = m.memory;
      const cap = mem.limit_bytes || mem.estimate_bytes;
      const share = cap ? Math.min(1, mem.mlx_active_bytes / cap) : 0;
      const pc = m.prefix_cache;
      const disk = m.disk_cache;
      const spec = m.speculation;
      const kv = m.kv;
      const busy = state.busy.has(m.name);
      return el(
        "tr",
        { "data-model": m.name },
        el("td", {},
          el("strong", { text: m.name }),
          m.aliases.length ? el("div", { class: "muted small", text: m.aliases.join(", ") }) : null,
          m.node ? el("div", { class: "muted small", text: `on ${m.node}` }) : null),
        el("td", { "data-field": "kind", text: m.kind || "–" }),
        el("td", {},
          badge(m.state, "state"),
          m.error ? el("div", { class: "reason", "data-field": "error", text: m.error }) : null),
        el("td", { "data-field": "memory" },
          el("span", { text: bytes(mem.mlx_active_bytes) }),
          el("span", { class: "muted", text: ` / ${cap ? bytes(cap) : "–"}` }),
          el("div", { class: "bar", title: mem.limit_bytes ? "of the worker's MLX limit" : "of the budget's estimate" },
            el("div", { style: { width: `${(share * 100).toFixed(1)}%` } })),
          kv && kv.budget_bytes > 0
            ? el("div", { class: "muted small", "data-field": "kv", title: "KV memory in use of its budget, tokens held, requests waiting for it, sequences preempted",
              text: `KV ${bytes(kv.bytes)} / ${bytes(kv.budget_bytes)} · ${kv.tokens} tokens · ${kv.waiting} waiting · ${kv.preemptions} preempted` })
            : null),
        el("td", { "data-field": "requests" },
          el("span", { text: `${m.running} running` }), el("br"),
          el("span", { class: "muted", text: `${m.waiting} queued · ${m.inflight} in flight` })),
        el("td", { "data-field": "prefix-cache" },
          el("span", { "data-field": "hit-rate", text: `${percent(pc.hit_rate)} hits` }),
          el("div", { class: "muted small", text: `${pc.hits}/${pc.queries} · ${pc.entries} entries · ${bytes(pc.bytes)} of ${bytes(pc.budget_bytes)}` })),
        el("td", { "data-field": "disk-tier" },
          el("span", { text: `${percent(disk.hit_rate)} hits` }),
          el("div", { class: "muted small", text: `${disk.entries} entries · ${bytes(disk.bytes)}` })),
        el("td", { "data-field": "speculation" },
          spec ? el("span", { text: `${percent(spec.acceptance)} accepted` }) : el("span", { class: "muted", text: "off" }),
          spec ? el("div", { class: "muted small", text: `${spec.accepted_tokens}/${spec.draft_tokens} · ${spec.method}` }) : null),
        el("td", { class: "actions" },
          el("button", { type: "button", "data-action": "load", disabled: busy || m.state === "ready", onclick: () => act("load", m.name) }, "Load"),
          el("button", { type: "button", "data-action": "unload", disabled: busy || m.state === "unloaded", onclick: () => act("unload", m.name) }, "Unload")),
      );
    });
    replaceRows("models", rows, 9, "no models configured");
  }

  function renderRequests(requests) {
    const rows = requests.map((r) => el(
      "tr",
      { "data-request": r.id },
      el("td", { class: "id", title: r.id, text: r.id.length > 22 ? `${r.id.slice(0, 21)}…` : r.id }),
      el("td", { text: r.model }),
      el("td", { "data-field": "protocol", text: r.protocol }),
      el("td", { text: clock(r.started_at) }),
      el("td", { class: "num", "data-field": "prompt", text: r.prompt_tokens }),
      el("td", { class: "num", "data-field": "cached", text: r.cached_tokens }),
      el("td", { class: "num", "data-field": "completion", text: r.completion_tokens }),
      el("td", { class: "num", text: seconds(r.ttft_seconds) }),
      el("td", { class: "num", text: seconds(r.duration_seconds) }),
      el("td", {}, badge(r.finish || "running", "finish")),
    ));
    replaceRows("requests", rows, 10, "no requests yet");
  }

  function renderMcp(servers) {
    const rows = servers.map((s) => el(
      "tr",
      { "data-mcp": s.name },
      el("td", { text: s.name }),
      el("td", { text: s.transport }),
      el("td", {}, badge(s.connected ? "connected" : "disconnected", "state"),
        s.error ? el("div", { class: "reason", text: s.error }) : null),
      el("td", { class: "num", text: s.tools }),
    ));
    replaceRows("mcp", rows, 4, "none configured");
  }

  function renderNodes(nodes) {
    const rows = nodes.map((n) => el(
      "tr",
      { "data-node": n.name },
      el("td", { text: n.name }),
      el("td", { class: "id", text: n.address }),
      el("td", {}, badge(n.state, "state"), n.error ? el("div", { class: "reason", text: n.error }) : null),
      el("td", { text: n.models.join(", ") || "–" }),
    ));
    replaceRows("nodes", rows, 4, "none configured");
  }

  // -- actions -----------------------------------------------------------------------

  async function act(action, model) {
    state.busy.add(model || "*");
    const what = model ? `${action} ${model}` : action;
    notice(`${what}…`);
    try {
      const result = await call("POST", `/v1/admin/${action}`, model ? { model } : undefined);
      if (result.ok) notice(result.data.changes.join("; ") || `${what}: done`);
      else notice(`${what} refused: ${errorText(result)}`, true);
    } catch (e) {
      notice(`${what} failed: ${e}`, true);
    } finally {
      state.busy.delete(model || "*");
      if (state.status) renderModels(state.status.models);
    }
  }

  // -- charts (drawn on canvas, no library) ------------------------------------------

  function drawChart(canvas, series, format) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 400;
    const height = canvas.clientHeight || 170;
    if (canvas.width !== width * ratio) { canvas.width = width * ratio; canvas.height = height * ratio; }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(document.documentElement);
    const muted = style.getPropertyValue("--muted").trim() || "#888";
    const line = style.getPropertyValue("--line").trim() || "#ddd";
    const left = 62;
    const right = width - 8;
    const top = 8;
    const bottom = height - 34;
    const now = state.samples.length ? state.samples[state.samples.length - 1].t : Date.now() / 1000;
    const span = Math.max(60, KEPT_SAMPLES);
    const x = (t) => right - ((now - t) / span) * (right - left);
    let max = 0;
    for (const s of series) for (const [, v] of s.points) if (v !== null && v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const y = (v) => bottom - (v / max) * (bottom - top);

    ctx.font = "11px system-ui, sans-serif";
    ctx.strokeStyle = line;
    ctx.fillStyle = muted;
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i += 1) {
      const v = (max * i) / 4;
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(right, yy); ctx.stroke();
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      ctx.fillText(format(v), left - 6, yy);
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    for (let m = 0; m <= span / 60; m += 1) {
      const xx = x(now - m * 60);
      ctx.fillText(m === 0 ? "now" : `-${m} min`, xx, bottom + 4);
    }
    series.forEach((s, i) => {
      ctx.strokeStyle = s.color; ctx.fillStyle = s.color; ctx.lineWidth = 1.5;
      ctx.beginPath();
      let open = false;
      for (const [t, v] of s.points) {
        if (v === null) { open = false; continue; }
        if (open) ctx.lineTo(x(t), y(v)); else ctx.moveTo(x(t), y(v));
        open = true;
      }
      ctx.stroke();
      for (const [t, v] of s.points) {
        if (v !== null && s.dots) { ctx.beginPath(); ctx.arc(x(t), y(v), 2, 0, 2 * Math.PI); ctx.fill(); }
      }
      ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
      ctx.fillText(s.label, left + 6 + i * 110, height - 4);
    });
  }

  function readings(samples) {
    const last = samples.length ? samples[samples.length - 1] : null;
    const peak = samples.reduce((m, s) => Math.max(m, s.tokens_per_second), 0);
    $("now-tokens").textContent = last ? `now ${last.tokens_per_second.toFixed(1)} · peak ${peak.toFixed(1)}` : "";
    const timed = samples.filter((s) => s.ttft_p50 !== null);
    const latest = timed.length ? timed[timed.length - 1] : null;
    $("now-ttft").textContent = latest ? `latest p50 ${seconds(latest.ttft_p50)} · p95 ${seconds(latest.ttft_p95)}` : "no requests yet";
    const total = last ? Object.values(last.memory_bytes).reduce((a, b) => a + b, 0) : 0;
    $("now-memory").textContent = last ? `now ${bytes(total)}` : "";
  }

  function drawCharts(models) {
    const samples = state.samples;
    readings(samples);
    drawChart($("chart-tokens"), [
      { label: "tokens/s", color: COLORS[0], points: samples.map((s) => [s.t, s.tokens_per_second]) },
    ], (v) => v.toFixed(v < 10 ? 1 : 0));
    drawChart($("chart-ttft"), [
      { label: "p50", color: COLORS[0], dots: true, points: samples.map((s) => [s.t, s.ttft_p50]) },
      { label: "p95", color: COLORS[1], dots: true, points: samples.map((s) => [s.t, s.ttft_p95]) },
    ], seconds);
    drawChart($("chart-memory"), models.map((m, i) => ({
      label: m.name.length > 14 ? `${m.name.slice(0, 13)}…` : m.name,
      color: COLORS[i % COLORS.length],
      points: samples.map((s) => [s.t, s.memory_bytes[m.name] === undefined ? null : s.memory_bytes[m.name]]),
    })), bytes);
  }

  // -- start -------------------------------------------------------------------------

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORAGE, $("api-key").value.trim());
    $("api-key").value = "";
    notice(apiKey() ? "using the key entered" : "no key");
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORAGE);
    notice("key forgotten");
  });
  $("reload-config").addEventListener("click", () => act("reload", null));
  poll();
})();
