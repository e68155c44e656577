// app.js - the web UI: the header (key, balance, role), a small router, and the four pages:
// the playground, a run (live timeline, replay, result, cost), the runs list and the admin page.
// Everything the API says is put on the page as text (textContent), except the run's result,
// which is Markdown rendered by marked and then sanitised by DOMPurify.

import * as api from "./api.js";
import * as fmt from "./format.js";

/* ---------- small DOM helpers ---------- */

// h("div", {class: "x", onclick: f}, "text", child...): children are text or nodes, never HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function statusPill(status) {
  return h("span", { class: `pill st-${status}` }, fmt.statusLabel(status));
}

function errorBox(id) {
  return h("p", { class: "error", id, role: "alert", hidden: true });
}

function showError(el, err) {
  if (!el) return;
  if (!err) { el.hidden = true; el.textContent = ""; return; }
  el.textContent = err.message || String(err);
  el.hidden = false;
}

async function copyText(btn, text) {
  try {
    await navigator.clipboard.writeText(text);
    btn.textContent = "Copied";
  } catch {
    // Without clipboard permission: select the text so that Ctrl+C copies it.
    const pre = btn.closest(".codeblock").querySelector("pre");
    const r = document.createRange();
    r.selectNodeContents(pre);
    const s = getSelection();
    s.removeAllRanges();
    s.addRange(r);
    btn.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(() => { btn.textContent = "Copy"; }, 2000);
}

/* ---------- the header: key, role, balance ---------- */

const state = { role: null, seed: null, form: null };

async function refreshAccount() {
  const bal = document.getElementById("balance");
  const btn = document.getElementById("key-button");
  if (!api.getKey()) {
    bal.textContent = "";
    btn.textContent = "Set API key";
    btn.classList.add("primary");
    state.role = null;
    return;
  }
  btn.textContent = "API key ✓";
  btn.classList.remove("primary");
  try {
    const b = await api.request("GET", "/v1/balance");
    bal.textContent = `Balance ${fmt.money(b.available_micros)}`;
    bal.title = `${fmt.money(b.balance_micros)} in all, ${fmt.money(b.reserved_micros)} reserved by runs`;
    bal.classList.remove("bad");
  } catch (err) {
    bal.textContent = err.status === 401 ? "Key refused" : "Balance unavailable";
    bal.title = err.message;
    bal.classList.add("bad");
  }
  state.role = api.getRole();
}

function openKeyDialog(message) {
  const dlg = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  input.value = "";
  showError(document.getElementById("key-error"), message ? { message } : null);
  if (!dlg.open) dlg.showModal();
  input.focus();
}

function setupKeyDialog() {
  const dlg = document.getElementById("key-dialog");
  const form = document.getElementById("key-form");
  const input = document.getElementById("key-input");
  const err = document.getElementById("key-error");
  document.getElementById("key-button").addEventListener("click", () => openKeyDialog());
  document.getElementById("key-cancel").addEventListener("click", () => dlg.close());
  document.getElementById("key-forget").addEventListener("click", () => {
    api.setKey("");
    dlg.close();
    refreshAccount();
    route();
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) { showError(err, { message: "Paste a key first." }); return; }
    api.setKey(key);
    try {
      await api.request("GET", "/v1/balance");
    } catch (ex) {
      if (ex.status === 401) {
        api.setKey("");
        showError(err, ex);
        input.select();
        refreshAccount();
        return;
      }
      // Another failure (the store, the network) is shown in the header; the key stays.
    }
    dlg.close();
    await refreshAccount();
    route();
  });
}

/* ---------- router ---------- */

let leavePage = null;

function navigate(path) {
  if (path !== location.pathname + location.search) history.pushState(null, "", path);
  route();
}

function route() {
  if (leavePage) { leavePage(); leavePage = null; }
  const main = document.getElementById("main");
  main.replaceChildren();
  const p = location.pathname;
  let page = "playground";
  if (p === "/runs") page = "runs";
  else if (p.startsWith("/runs/")) page = "run";
  else if (p === "/keys") page = "keys";
  for (const a of document.querySelectorAll("nav a[data-page]"))
    a.toggleAttribute("aria-current", a.dataset.page === page || (page === "run" && a.dataset.page === "runs"));
  if (page === "runs") leavePage = runsPage(main, new URLSearchParams(location.search));
  else if (page === "run") leavePage = runPage(main, decodeURIComponent(p.slice(6)));
  else if (page === "keys") leavePage = adminPage(main);
  else leavePage = playgroundPage(main);
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  e.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", route);

/* ---------- playground ---------- */

const SEED_FALLBACK = { prompt: "", web: false, shell: true, timeout_seconds: 120, max_cost_micros: 40000 };

function formFromRequest(r) {
  const web = r.web;
  return {
    prompt: r.prompt || "",
    shell: r.shell !== false,
    web: !!web,
    allow: web && typeof web === "object" && Array.isArray(web.allow) ? web.allow.join("\n") : "",
    connections: Array.isArray(r.connections) ? [...r.connections] : [],
    files: [],
    timeout: String(r.timeout_seconds ?? 120),
    budget: fmt.dollarsField(r.max_cost_micros ?? 40000),
    zdr: !!r.zero_data_retention,
    model: r.model || "",
  };
}

// The request body the form describes, in the seed's field order, with the optional fields only
// when they differ from the defaults. Throws with a sentence when a field cannot be sent at all.
function requestBody(f) {
  const micros = fmt.parseDollars(f.budget);
  if (micros === null) throw new Error("Budget: an amount in dollars, like 0.04 (at most 6 decimals).");
  if (!/^\s*-?\d+\s*$/.test(f.timeout)) throw new Error("Timeout: a whole number of seconds.");
  const b = { prompt: f.prompt };
  const allow = f.allow.split(/[\s,]+/).filter(Boolean);
  b.web = f.web ? (allow.length ? { allow } : true) : false;
  b.shell = f.shell;
  b.timeout_seconds = Number(f.timeout);
  b.max_cost_micros = micros;
  if (f.model.trim()) b.model = f.model.trim();
  if (f.connections.length) b.connections = f.connections;
  if (f.files.length) b.files = f.files.map((x) => ({ path: x.path, ...x.body }));
  if (f.zdr) b.zero_data_retention = true;
  return b;
}

function shellQuote(s) {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function curlFor(body) {
  return [
    "curl -X POST $EPHEMERAL_URL/v1/runs \\",
    '  -H "Authorization: Bearer $EPHEMERAL_API_KEY" \\',
    '  -H "Content-Type: application/json" \\',
    '  -H "Idempotency-Key: $(uuidgen)" \\',
    `  -d ${shellQuote(JSON.stringify(body))}`,
  ].join("\n");
}

const MAX_FILES_BYTES = 10 * 1024 * 1024;

async function readFile(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    if (!text.includes("\0")) return { content: text };
  } catch { /* binary: base64 below */ }
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return { content_base64: btoa(bin) };
}

function playgroundPage(main) {
  if (!state.form) state.form = formFromRequest(state.seed || SEED_FALLBACK);
  const f = state.form;
  const id = (n) => `pg-${n}`;

  const field = (label, input, hint) =>
    h("div", { class: "field" }, h("label", { for: input.id }, label), input,
      hint ? h("p", { class: "hint", id: `${input.id}-hint` }, hint) : null);
  const toggle = (name, label, checked) =>
    h("label", { class: "toggle" },
      h("input", { type: "checkbox", id: id(name), name, checked }), h("span", {}, label));

  const prompt = h("textarea", { id: id("prompt"), name: "prompt", rows: 9, required: true, spellcheck: "false" });
  prompt.value = f.prompt;
  const allow = h("textarea", { id: id("allow"), name: "allow", rows: 2, placeholder: "example.com\n*.example.org", "aria-describedby": `${id("allow")}-hint` });
  allow.value = f.allow;
  const allowField = field("Web allow-list", allow, "One domain a line; empty allows any public site through the broker.");
  const timeout = h("input", { id: id("timeout"), name: "timeout", inputmode: "numeric", autocomplete: "off", "aria-describedby": `${id("timeout")}-hint` });
  timeout.value = f.timeout;
  const budget = h("input", { id: id("budget"), name: "budget", inputmode: "decimal", autocomplete: "off", "aria-describedby": `${id("budget")}-hint` });
  budget.value = f.budget;
  const model = h("input", { id: id("model"), name: "model", autocomplete: "off", placeholder: "server default", list: id("models") });
  model.value = f.model;
  const models = h("datalist", { id: id("models") });
  const connBox = h("div", { class: "conns", id: id("connections") });
  const connText = h("input", { id: id("conn-text"), name: "connections", autocomplete: "off", placeholder: "github, billing" });
  connText.value = f.connections.join(", ");
  const fileInput = h("input", { type: "file", id: id("files"), name: "files", multiple: true, class: "visually-hidden", tabindex: "-1" });
  const fileList = h("ul", { class: "files" });
  const drop = h("div", { class: "drop" },
    h("span", {}, "Drop files here, or "),
    h("label", { for: fileInput.id, class: "linklike", tabindex: "0", role: "button", id: id("choose") }, "choose files"),
    fileInput,
    h("p", { class: "hint" }, "Sent inline into the run's scratch folder, up to 10 MiB in all."));
  const formError = errorBox(id("error"));
  const runBtn = h("button", { type: "submit", class: "primary big", id: id("run") }, "Run");
  const resetBtn = h("button", { type: "button", class: "ghost", id: id("reset") }, "Reset to the example");

  const form = h("form", { class: "card form", id: "run-form", novalidate: true, "aria-label": "Run request" },
    field("Prompt", prompt),
    h("fieldset", { class: "perms" }, h("legend", {}, "Permissions"),
      h("div", { class: "row" }, toggle("shell", "Shell", f.shell), toggle("web", "Web", f.web),
        toggle("zdr", "Zero data retention", f.zdr))),
    allowField,
    h("div", { class: "field" }, h("span", { class: "label", id: id("conn-label") }, "Connections"), connBox),
    h("div", { class: "field" }, h("span", { class: "label" }, "Files"), drop, fileList),
    h("div", { class: "row three" },
      field("Timeout (seconds)", timeout, "1 to 3600"),
      field("Budget (dollars)", budget, "A hard limit, reserved from your balance"),
      field("Model", model)),
    models,
    formError,
    h("div", { class: "actions" }, resetBtn, runBtn));

  const curlPre = h("code", { id: "curl" });
  const jsonPre = h("code", { id: "request-json" });
  const codeBlock = (title, code, note) => {
    const btn = h("button", { type: "button", class: "ghost small", "aria-label": `Copy ${title}` }, "Copy");
    btn.addEventListener("click", () => copyText(btn, code.textContent));
    return h("div", { class: "codeblock" },
      h("div", { class: "codehead" }, h("span", {}, title), note ? h("span", { class: "hint" }, note) : null, btn),
      h("pre", { tabindex: "0" }, code));
  };
  const aside = h("aside", { class: "code", "aria-label": "Equivalent request" },
    codeBlock("curl", curlPre, "set EPHEMERAL_URL and EPHEMERAL_API_KEY"),
    codeBlock("request.json", jsonPre));

  main.append(
    h("section", { class: "intro" },
      h("h1", {}, "Playground"),
      h("p", { class: "lead" }, "Run an AI agent in a disposable sandbox with a hard budget. ",
        "The example below writes and runs a script, tries to reach the internet, and reports that the call fails.")),
    h("div", { class: "play" }, form, aside));

  const sync = () => {
    f.prompt = prompt.value;
    f.shell = form.elements.shell.checked;
    f.web = form.elements.web.checked;
    f.zdr = form.elements.zdr.checked;
    f.allow = allow.value;
    f.timeout = timeout.value;
    f.budget = budget.value;
    f.model = model.value;
    if (state.role !== "admin") f.connections = connText.value.split(/[\s,]+/).filter(Boolean);
    allowField.hidden = !f.web;
    try {
      const body = requestBody(f);
      const json = JSON.stringify(body, null, 2);
      jsonPre.textContent = json;
      curlPre.textContent = curlFor(body);
      showError(formError, null);
    } catch (err) {
      showError(formError, err);
    }
  };

  const renderFiles = () => {
    fileList.replaceChildren(...f.files.map((x, i) =>
      h("li", {}, h("code", {}, x.path), h("span", { class: "hint" }, ` ${fmt.thousands(x.size)} bytes `),
        h("button", { type: "button", class: "ghost small", "aria-label": `Remove ${x.path}`,
                      onclick: () => { f.files.splice(i, 1); renderFiles(); sync(); } }, "Remove"))));
  };
  // Files are read one by one; the list is checked and changed only between reads, so that a
  // drop while a choice is still being read loses nothing.
  const addFiles = async (list) => {
    for (const file of [...list]) {
      const others = () => f.files.filter((x) => x.path !== file.name);
      const total = others().reduce((n, x) => n + x.size, 0);
      if (others().length >= 100) { showError(formError, { message: "At most 100 files." }); break; }
      if (total + file.size > MAX_FILES_BYTES) { showError(formError, { message: `${file.name}: the files would be over 10 MiB in all.` }); break; }
      const body = await readFile(file);
      f.files = [...others(), { path: file.name, size: file.size, body }];
      renderFiles();
      sync();
    }
  };
  fileInput.addEventListener("change", () => { addFiles(fileInput.files); fileInput.value = ""; });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); addFiles(e.dataTransfer.files); });
  drop.querySelector("label").addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); fileInput.click(); }
  });

  const renderConnections = (names) => {
    if (state.role === "admin" && names) {
      if (!names.length) { connBox.replaceChildren(h("p", { class: "hint" }, "None configured for this organization.")); return; }
      connBox.replaceChildren(h("div", { class: "row wrap", role: "group", "aria-labelledby": id("conn-label") },
        ...names.map((n) => {
          const cb = h("input", { type: "checkbox", value: n, checked: f.connections.includes(n) });
          cb.addEventListener("change", () => {
            f.connections = cb.checked ? [...f.connections, n] : f.connections.filter((x) => x !== n);
            sync();
          });
          return h("label", { class: "toggle" }, cb, h("span", {}, n));
        })));
    } else {
      connText.setAttribute("aria-labelledby", id("conn-label"));
      connBox.replaceChildren(connText, h("p", { class: "hint" }, "Names of your organization's connections, separated by commas."));
    }
  };
  renderConnections(null);
  renderFiles();

  form.addEventListener("input", (e) => { e.target.removeAttribute("aria-invalid"); sync(); });
  form.addEventListener("change", sync);
  resetBtn.addEventListener("click", () => {
    state.form = null;
    route();
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    sync();
    let body;
    try { body = requestBody(f); } catch (err) { showError(formError, err); return; }
    if (!api.getKey()) {
      showError(formError, new api.NoKeyError());
      openKeyDialog("Paste an API key to run this request.");
      return;
    }
    runBtn.disabled = true;
    runBtn.textContent = "Starting…";
    try {
      const run = await api.request("POST", "/v1/runs",
                                    { body, headers: { "Idempotency-Key": api.newIdempotencyKey() } });
      refreshAccount();
      navigate(`/runs/${run.id}`);
    } catch (err) {
      showError(formError, err);
      runBtn.disabled = false;
      runBtn.textContent = "Run";
      if (err.status === 401) refreshAccount();
      // The field at fault, when the server names one the form has.
      const at = { prompt, timeout_seconds: timeout, max_cost_micros: budget, model,
                   web: allow, connections: connText }[String(err.param || "").split(/[.[]/)[0]];
      if (at && !at.closest("[hidden]")) { at.setAttribute("aria-invalid", "true"); at.focus(); }
    }
  });

  let alive = true;
  (async () => {
    if (!api.getKey()) return;
    await refreshAccount();
    if (!alive) return;
    if (state.role === "admin") {
      try {
        const list = await api.request("GET", "/v1/connections");
        if (alive) renderConnections(list.data.map((c) => c.name));
      } catch (err) { if (alive) renderConnections(null); }
    }
    try {
      const runs = await api.request("GET", "/v1/runs?limit=50");
      if (!alive) return;
      const seen = [...new Set(runs.data.map((r) => r.model).filter(Boolean))];
      models.replaceChildren(...seen.map((m) => h("option", { value: m })));
    } catch { /* the datalist is a convenience */ }
  })();
  sync();
  return () => { alive = false; };
}

/* ---------- a run ---------- */

const PERMS = (p, run) => [
  ["Connections", p.connections && p.connections.length ? p.connections.join(", ") : "None"],
  ["Web", p.web === true ? "On" : p.web && p.web.allow ? `On, only ${p.web.allow.join(", ")}` : "Off"],
  ["Shell", p.shell ? "On, inside the sealed machine" : "Off"],
  ["Files", p.files && p.files.length ? p.files.map((x) => (typeof x === "string" ? x : x.path)).join(", ") : "None"],
  ["Zero data retention", p.zero_data_retention ? "On: nothing of the run's content is kept"
    : run.retention && run.retention.log_kept_days ? `Off: the log is kept ${run.retention.log_kept_days} days` : "Off"],
  ["Budget", `${fmt.money(p.max_cost_micros)}, hard limit`],
  ["Time limit", `${p.timeout_seconds} seconds`],
];

function renderMarkdown(el, text) {
  if (typeof text !== "string" || !text) {
    el.replaceChildren(h("p", { class: "hint" }, "No result."));
    return;
  }
  if (!window.marked || !window.DOMPurify) {
    el.replaceChildren(h("pre", {}, text));
    return;
  }
  // Raw HTML in the Markdown is shown as text, and images as their link: a result never loads
  // anything, and DOMPurify then removes whatever else could run (javascript: links included).
  const renderer = new window.marked.Renderer();
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  renderer.html = (html) => esc(typeof html === "string" ? html : html.text || "");
  renderer.image = (href, title, alt) => esc(`[image: ${alt || ""}] ${href || ""}`);
  // breaks: a single newline is a line break, as a model that answers line by line means it.
  const html = window.marked.parse(text, { renderer, mangle: false, headerIds: false, breaks: true });
  const clean = window.DOMPurify.sanitize(html, {
    FORBID_TAGS: ["style", "img", "form", "input", "button", "iframe", "svg", "math"],
    FORBID_ATTR: ["style"],
    RETURN_DOM_FRAGMENT: true,
  });
  for (const a of clean.querySelectorAll("a")) {
    a.setAttribute("rel", "noopener noreferrer");
    a.setAttribute("target", "_blank");
  }
  el.replaceChildren(clean);
}

function costBar(cost, reserved, live) {
  const total = reserved || 1;
  const pct = (v) => `${Math.max(0, Math.min(100, (100 * (v || 0)) / total))}%`;
  const bar = h("div", { class: `bar${live ? " live" : ""}`, role: "img",
    "aria-label": live ? `${fmt.money(reserved)} reserved while the run is going`
      : `${fmt.money(cost.charged_micros)} charged, ${fmt.money(cost.released_micros)} released of ${fmt.money(reserved)}` });
  if (!live) {
    bar.append(h("span", { class: "seg model" }), h("span", { class: "seg web" }), h("span", { class: "seg compute" }));
    const [m, w, c] = bar.children;
    // A part too small to see still shows as a sliver (.seg has a minimum width); an empty part
    // is not drawn.
    for (const [el, v] of [[m, cost.model_micros], [w, cost.web_micros], [c, cost.compute_micros]]) {
      el.style.width = pct(v);
      el.hidden = !(v > 0);
    }
  }
  const legend = live
    ? h("p", { class: "legend" }, h("strong", {}, fmt.money(reserved)), " reserved · charged when the run ends")
    : h("p", { class: "legend" },
      ...[["model", "Model", cost.model_micros], ["web", "Web", cost.web_micros],
          ["compute", "Compute", cost.compute_micros], ["released", "Released", cost.released_micros]]
        .map(([cls, name, v]) => h("span", { class: "item" }, h("span", { class: `key ${cls}` }), `${name} ${fmt.money(v)}`)));
  return [bar, legend];
}

function runPage(main, runId) {
  let run = null;
  let settledOnLoad = false;
  let stop = null;
  let alive = true;
  const events = [];
  const labelState = {};
  const rows = new Map();

  const pill = h("span", { id: "run-status" });
  const summary = h("span", { class: "summary", id: "run-summary" });
  const meta = h("p", { class: "meta", id: "run-meta" });
  const liveState = h("span", { class: "livestate", id: "live-state", "aria-live": "polite" });
  const pageError = errorBox("run-error");
  const cancelBtn = h("button", { type: "button", class: "danger", id: "cancel", hidden: true }, "Cancel run");
  const bar = h("div", { class: "costbar card", id: "cost" });
  const tbody = h("tbody", { id: "timeline-body" });
  const result = h("div", { class: "md", id: "result" }, h("p", { class: "hint" }, "The result appears when the run ends."));
  const costLine = h("p", { class: "costline", id: "cost-line" });
  const perms = h("tbody", { id: "perms" });
  const usage = h("tbody", { id: "usage" });
  const replayBox = h("div", { class: "replay", id: "replay" });

  main.append(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "/runs", "data-nav": true }, "← All runs")),
    h("section", { class: "runhead" },
      h("h1", {}, pill, " ", h("code", { class: "runid" }, runId)),
      summary, meta, h("div", { class: "actions" }, cancelBtn)),
    pageError,
    bar,
    h("div", { class: "rungrid" },
      h("section", { class: "card timeline", "aria-labelledby": "tl-title" },
        h("div", { class: "cardhead" }, h("h2", { id: "tl-title" }, "Timeline"), liveState),
        replayBox,
        h("table", { class: "tl" },
          h("caption", { class: "visually-hidden" }, "Events of the run, in order"),
          h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "t" }, "t (s)"),
            h("th", { scope: "col", class: "src" }, "source"), h("th", { scope: "col" }, "message"))),
          tbody),
        h("h2", { class: "sub" }, "Result"), result, costLine),
      h("aside", { class: "side" },
        h("section", { class: "card" }, h("h2", {}, "Permissions"),
          h("table", { class: "kv" }, h("caption", { class: "visually-hidden" }, "What the agent can and cannot do"), perms)),
        h("section", { class: "card" }, h("h2", {}, "Usage"), h("table", { class: "kv" }, usage)))));

  const drawRun = () => {
    if (!run) return;
    pill.replaceChildren(statusPill(run.status));
    const terminal = fmt.TERMINAL.includes(run.status);
    const c = run.cost || {};
    const reserved = c.reserved_micros ?? run.permissions?.max_cost_micros;
    summary.textContent = terminal
      ? `${fmt.money(c.charged_micros)} of ${fmt.money(reserved)}${run.finished_at ? ` · ${fmt.duration(run)}` : ""}`
      : `budget ${fmt.money(reserved)}`;
    const bits = [run.model, `created ${fmt.when(run.created_at)}`];
    if (run.sandbox && run.sandbox.backend) bits.push(`${run.sandbox.backend} sandbox`);
    meta.replaceChildren(bits.join(" · "));
    // A replay (replay_of) names the run it replays and counts the tool results that differed.
    const rp = run.replay;
    if (rp && typeof rp.of === "string") {
      const n = rp.divergences;
      meta.append(" · ", h("span", { id: "run-replay" }, "replay of ",
        h("a", { href: `/runs/${encodeURIComponent(rp.of)}`, "data-nav": true }, rp.of),
        `, ${fmt.thousands(n)} ${n === 1 ? "divergence" : "divergences"}`));
    }
    if (run.error && run.error.message) meta.append(h("span", { class: "errtext" }, ` · ${run.error.message}`));
    cancelBtn.hidden = terminal;
    bar.replaceChildren(...costBar(c, reserved, !terminal));
    costLine.textContent = terminal
      ? `Model ${fmt.money(c.model_micros)} · Web ${fmt.money(c.web_micros)} · Compute ${fmt.money(c.compute_micros)}`
      : "";
    perms.replaceChildren(...PERMS(run.permissions || {}, run).map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))));
    const u = terminal ? run.usage || {} : {}; // counted at the settlement
    usage.replaceChildren(...[
      ["Model calls", fmt.thousands(u.model_calls)],
      ["Tokens", terminal ? `${fmt.thousands(u.total_tokens)} (${fmt.thousands(u.input_tokens)} in, ${fmt.thousands(u.output_tokens)} out)` : "—"],
      ["Shell commands", fmt.thousands(u.shell_commands)],
      ["Web requests", fmt.thousands(u.web_requests)],
      ["Connection requests", fmt.thousands(u.connection_requests)],
    ].map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))));
    if (terminal) {
      if (run.result !== null && run.result !== undefined) renderMarkdown(result, run.result);
      else if (!result.dataset.zdr)
        result.replaceChildren(h("p", { class: "hint" }, run.permissions?.zero_data_retention
          ? "Zero data retention: the result was shown only to a client following the run, and not kept."
          : "No result."));
      drawReplay();
    }
  };

  const eventRow = (ev) => {
    const cls = fmt.sourceClass(ev);
    const label = fmt.sourceLabel(ev, labelState);
    let msg;
    const d = ev.data || {};
    if (ev.type === "shell.command") {
      const out = [];
      if (typeof d.command === "string" && d.command !== ev.message.replace(/^\$ /, "")) out.push(h("pre", { class: "cmd" }, `$ ${d.command}`));
      if (d.stdout) out.push(h("pre", { class: "out" }, d.stdout));
      if (d.stderr) out.push(h("pre", { class: "err" }, d.stderr));
      const facts = [];
      if (typeof d.exit_code === "number") facts.push(`exit ${d.exit_code}`);
      if (d.signal) facts.push(`signal ${d.signal}`);
      if (typeof d.duration_ms === "number") facts.push(`${fmt.thousands(d.duration_ms)} ms`);
      if (typeof d.stdout_bytes === "number") facts.push(`stdout ${fmt.thousands(d.stdout_bytes)} B`);
      if (typeof d.stderr_bytes === "number") facts.push(`stderr ${fmt.thousands(d.stderr_bytes)} B`);
      if (d.stdout_truncated || d.stderr_truncated) facts.push("output cut");
      if (!d.stdout && !d.stderr) out.push(h("p", { class: "hint" }, "No output kept."));
      out.push(h("p", { class: "facts" }, facts.join(" · ")));
      msg = h("details", {}, h("summary", {}, h("code", {}, ev.message)), ...out);
    } else if (ev.type === "replay.divergence") {
      msg = h("span", {}, h("strong", { class: "badge warn" }, "diverged"), " ", ev.message);
    } else {
      msg = h("span", {}, ev.message);
      if (d.denied) msg.append(h("span", { class: "errtext" }, ` · denied: ${d.denied}`));
    }
    const tr = h("tr", { class: `ev ${cls}`, "data-seq": ev.seq, "data-type": ev.type },
      h("td", { class: "t" }, fmt.seconds(ev.t)),
      h("td", { class: "src" }, h("span", { class: `src-label ${cls}` }, label)),
      h("td", { class: "msg" }, msg));
    return tr;
  };

  const addEvent = (ev) => {
    events.push(ev);
    const tr = eventRow(ev);
    rows.set(ev.seq, tr);
    tbody.append(tr);
    if (run && !fmt.TERMINAL.includes(run.status)) {
      if (ev.type === "sandbox.ready" || ev.type === "worker.started") run.status = "running";
      if (ev.type.startsWith("run.") && ev.type !== "run.queued") run.status = ev.type.slice(4);
      pill.replaceChildren(statusPill(run.status));
      cancelBtn.hidden = fmt.TERMINAL.includes(run.status);
    }
    // The settled run (result, usage, cost) once its last event is in, unless it was already
    // settled when the page loaded it.
    if (ev.type === "worker.destroyed" && !settledOnLoad) refetch();
  };

  const refetch = async () => {
    try {
      const r = await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}`);
      if (!alive) return;
      run = r;
      drawRun();
      refreshAccount();
    } catch (err) {
      if (alive) showError(pageError, err);
    }
  };

  /* Replay: the finished timeline again, with its original spacing, at x1, x4 or x16. The
   * controls have their place from the start (disabled while the run goes on), so that nothing
   * moves when the run ends. */
  const replay = { speed: 1, playing: false, pos: 0, base: 0, t0: 0, raf: 0, tMax: 0 };
  const playBtn = h("button", { type: "button", class: "primary small", id: "replay-play", disabled: true }, "▶ Replay");
  const speeds = h("div", { class: "speeds", role: "radiogroup", "aria-label": "Replay speed" });
  const range = h("input", { type: "range", id: "replay-pos", min: "0", max: "0", step: "1", value: "0", disabled: true, "aria-label": "Replay position (jump)" });
  const clock = h("span", { class: "clock", id: "replay-clock" }, "replay when the run ends");
  const currentPos = () => replay.playing ? replay.base + ((performance.now() - replay.t0) / 1000) * replay.speed : replay.pos;
  const setPos = (p) => { replay.pos = p; replay.base = p; replay.t0 = performance.now(); };
  for (const sp of [1, 4, 16]) {
    const b = h("button", { type: "button", role: "radio", class: "ghost small", "data-speed": sp, "aria-checked": sp === 1 ? "true" : "false" }, `×${sp}`);
    b.addEventListener("click", () => {
      setPos(currentPos());
      replay.speed = sp;
      for (const x of speeds.children) x.setAttribute("aria-checked", x === b ? "true" : "false");
    });
    speeds.append(b);
  }
  const show = (p) => {
    let last = null;
    for (const ev of events) {
      const tr = rows.get(ev.seq);
      const visible = (ev.t || 0) <= p + 1e-9;
      tr.hidden = !visible;
      tr.classList.remove("current");
      if (visible) last = tr;
    }
    if (last && p < replay.tMax) last.classList.add("current");
    range.value = String(Math.round(p * 100));
    clock.textContent = `${p.toFixed(2)} / ${replay.tMax.toFixed(2)} s`;
  };
  const frame = () => {
    if (!replay.playing) return;
    const p = currentPos();
    if (p >= replay.tMax) {
      replay.playing = false;
      replay.pos = replay.tMax;
      show(replay.tMax);
      playBtn.textContent = "▶ Replay";
      replayBox.dataset.state = "ended";
      return;
    }
    show(p);
    replay.raf = requestAnimationFrame(frame);
  };
  playBtn.addEventListener("click", () => {
    if (replay.playing) {
      replay.pos = currentPos();
      replay.playing = false;
      cancelAnimationFrame(replay.raf);
      playBtn.textContent = "▶ Resume";
      replayBox.dataset.state = "paused";
      return;
    }
    const p = replay.pos >= replay.tMax ? 0 : replay.pos;
    setPos(p);
    replay.playing = true;
    playBtn.textContent = "❚❚ Pause";
    replayBox.dataset.state = "playing";
    show(p);
    replay.raf = requestAnimationFrame(frame);
  });
  range.addEventListener("input", () => {
    const p = Number(range.value) / 100;
    setPos(p);
    show(p);
  });
  replayBox.append(playBtn, speeds, range, clock);
  const drawReplay = () => {
    if (!events.length || replayBox.dataset.state) return;
    replay.tMax = Math.max(...events.map((e) => e.t || 0));
    replay.pos = replay.tMax;
    range.max = String(Math.ceil(replay.tMax * 100));
    range.value = range.max;
    clock.textContent = `${replay.tMax.toFixed(2)} / ${replay.tMax.toFixed(2)} s`;
    playBtn.disabled = false;
    range.disabled = false;
    replayBox.dataset.state = "ready";
  };

  cancelBtn.addEventListener("click", async () => {
    cancelBtn.disabled = true;
    cancelBtn.textContent = "Cancelling…";
    try {
      run = await api.request("POST", `/v1/runs/${encodeURIComponent(runId)}/cancel`,
                              { headers: { "Idempotency-Key": api.newIdempotencyKey() } });
      if (alive) drawRun();
    } catch (err) {
      if (alive) showError(pageError, err);
    } finally {
      cancelBtn.disabled = false;
      cancelBtn.textContent = "Cancel run";
    }
  });

  (async () => {
    if (!api.getKey()) {
      showError(pageError, new api.NoKeyError());
      return;
    }
    try {
      run = await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}`);
    } catch (err) {
      if (alive) showError(pageError, err);
      return;
    }
    if (!alive) return;
    settledOnLoad = fmt.TERMINAL.includes(run.status);
    drawRun();
    stop = api.followEvents(runId, {
      onEvent: (ev) => { if (alive) addEvent(ev); },
      onResult: (text) => { result.dataset.zdr = "1"; renderMarkdown(result, text); },
      onState: (s, detail) => {
        liveState.dataset.state = s;
        liveState.textContent = s === "live" ? "● live" : s === "reconnecting" ? "reconnecting…" : "";
        liveState.title = detail || "";
        if (s === "done" && run && !fmt.TERMINAL.includes(run.status)) refetch();
        if (s === "done" && run && fmt.TERMINAL.includes(run.status)) drawReplay();
      },
      onError: (err) => showError(pageError, err),
    });
  })();

  return () => {
    alive = false;
    if (stop) stop();
    replay.playing = false;
    cancelAnimationFrame(replay.raf);
  };
}

/* ---------- the runs list ---------- */

const cursorStack = [];

function runsPage(main, params) {
  const status = params.get("status") || "";
  const after = params.get("after") || "";
  const limit = /^\d{1,3}$/.test(params.get("limit") || "") ? params.get("limit") : "20";
  let alive = true;
  const select = h("select", { id: "status-filter", name: "status" },
    h("option", { value: "" }, "All statuses"),
    ...["queued", "starting", "running", ...fmt.TERMINAL].map((s) => h("option", { value: s, selected: s === status }, fmt.statusLabel(s))));
  const tbody = h("tbody", { id: "runs-body" });
  const err = errorBox("runs-error");
  const pager = h("div", { class: "pager" });
  main.append(
    h("section", { class: "intro" }, h("h1", {}, "Runs"), h("p", { class: "lead" }, "Newest first.")),
    h("div", { class: "toolbar" }, h("label", { for: select.id }, "Status"), select),
    err,
    h("div", { class: "card tablewrap" },
      h("table", { class: "runs" },
        h("caption", { class: "visually-hidden" }, "Runs of your organization"),
        h("thead", {}, h("tr", {}, ...["Run", "Status", "Model", "Created", "Duration", "Cost"].map((c) => h("th", { scope: "col" }, c)))),
        tbody)),
    pager);
  select.addEventListener("change", () => {
    cursorStack.length = 0;
    navigate(select.value ? `/runs?status=${encodeURIComponent(select.value)}` : "/runs");
  });
  (async () => {
    const q = new URLSearchParams({ limit });
    if (status) q.set("status", status);
    if (after) q.set("after", after);
    try {
      const list = await api.request("GET", `/v1/runs?${q}`);
      if (!alive) return;
      if (!list.data.length)
        tbody.append(h("tr", {}, h("td", { colspan: "6", class: "hint" }, status ? "No run with this status." : "No run yet: start one in the playground.")));
      for (const r of list.data) {
        const c = r.cost || {};
        const terminal = fmt.TERMINAL.includes(r.status);
        tbody.append(h("tr", { "data-id": r.id },
          h("td", {}, h("a", { href: `/runs/${r.id}`, "data-nav": true, class: "runid" }, r.id)),
          h("td", {}, statusPill(r.status)),
          h("td", {}, r.model || "—"),
          h("td", {}, fmt.when(r.created_at)),
          h("td", {}, terminal ? fmt.duration(r) : "—"),
          h("td", { class: "num" }, terminal ? `${fmt.money(c.charged_micros)} of ${fmt.money(c.reserved_micros)}` : `${fmt.money(c.reserved_micros ?? r.permissions?.max_cost_micros)} held`)));
      }
      const base = (status ? `status=${encodeURIComponent(status)}&` : "") + (limit !== "20" ? `limit=${limit}&` : "");
      if (after) {
        const prev = h("a", { href: "#", class: "button ghost", id: "newer" }, "← Newer");
        prev.addEventListener("click", (e) => {
          e.preventDefault();
          const p = cursorStack.pop();
          navigate(p ? `/runs?${base}after=${encodeURIComponent(p)}` : `/runs${base ? `?${base.slice(0, -1)}` : ""}`);
        });
        pager.append(prev);
      }
      if (list.has_more && list.data.length) {
        const last = list.data[list.data.length - 1].id;
        const next = h("a", { href: `/runs?${base}after=${encodeURIComponent(last)}`, class: "button ghost", id: "older" }, "Older →");
        next.addEventListener("click", (e) => {
          e.preventDefault();
          if (after) cursorStack.push(after);
          navigate(next.getAttribute("href"));
        });
        pager.append(next);
      }
    } catch (e) {
      if (alive) showError(err, e);
    }
  })();
  return () => { alive = false; };
}

/* ---------- admin: keys and connections, names only ---------- */

function adminPage(main) {
  let alive = true;
  const err = errorBox("admin-error");
  const keys = h("tbody", { id: "keys-body" });
  const conns = h("tbody", { id: "connections-body" });
  main.append(
    h("section", { class: "intro" }, h("h1", {}, "Admin"),
      h("p", { class: "lead" }, "Your organization's API keys and connections. Key values and connection credentials are never shown: the server keeps only a hash of each key, and seals the credentials.")),
    err,
    h("section", { class: "card" }, h("h2", {}, "API keys"),
      h("div", { class: "tablewrap" }, h("table", { class: "runs" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Key"), h("th", { scope: "col" }, "Role"), h("th", { scope: "col" }, "Created"))),
        keys))),
    h("section", { class: "card" }, h("h2", {}, "Connections"),
      h("div", { class: "tablewrap" }, h("table", { class: "runs" },
        h("thead", {}, h("tr", {}, ...["Name", "Base URL", "Methods", "Paths", "Headers added"].map((c) => h("th", { scope: "col" }, c)))),
        conns))));
  (async () => {
    try {
      const k = await api.request("GET", "/v1/keys");
      api.setRole("admin");
      refreshAccount();
      if (!alive) return;
      for (const x of k.data)
        keys.append(h("tr", {}, h("td", {}, h("code", {}, x.id)), h("td", {}, x.role), h("td", {}, fmt.when(x.created_at))));
      const c = await api.request("GET", "/v1/connections");
      if (!alive) return;
      if (!c.data.length) conns.append(h("tr", {}, h("td", { colspan: "5", class: "hint" }, "No connection yet.")));
      for (const x of c.data)
        conns.append(h("tr", {},
          h("td", {}, h("code", {}, x.name)), h("td", {}, x.base_url),
          h("td", {}, (x.methods || []).join(", ")), h("td", {}, (x.path_prefixes || []).join(", ")),
          h("td", {}, (x.header_names || []).join(", ") || "—")));
    } catch (e) {
      if (e.status === 403) { api.setRole("member"); refreshAccount(); }
      if (alive) showError(err, e);
    }
  })();
  return () => { alive = false; };
}

/* ---------- start ---------- */

async function start() {
  setupKeyDialog();
  try {
    const r = await fetch("/assets/request.json", { cache: "no-cache" });
    if (r.ok) state.seed = await r.json();
  } catch { /* the form starts empty */ }
  route();
  refreshAccount();
}

start();
