// app.js - the web UI: the header (key, balance, role), a small router, and the pages: the
// playground, a run (live timeline, replay, result, cost), the runs list, the sandboxes list, a
// sandbox (live timeline, cost, destroy) and the admin page.
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

// The banner under the header: a sentence, or nothing.
function notice(text) {
  const el = document.getElementById("notice");
  el.textContent = text || "";
  el.hidden = !text;
}

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
    notice(null);
  } catch (err) {
    bal.textContent = err.status === 401 ? "Key refused" : err.unreachable ? "Server unreachable" : "Balance unavailable";
    bal.title = err.message;
    bal.classList.add("bad");
    if (err.unreachable) notice(err.message);
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
  else if (p === "/sandboxes") page = "sandboxes";
  else if (p.startsWith("/sandboxes/")) page = "sandbox";
  for (const a of document.querySelectorAll("nav a[data-page]"))
    a.toggleAttribute("aria-current", a.dataset.page === page || (page === "run" && a.dataset.page === "runs")
                      || (page === "sandbox" && a.dataset.page === "sandboxes"));
  if (page === "runs") leavePage = runsPage(main, new URLSearchParams(location.search));
  else if (page === "run") leavePage = runPage(main, decodeURIComponent(p.slice(6)));
  else if (page === "keys") leavePage = adminPage(main, new URLSearchParams(location.search));
  else if (page === "sandboxes") leavePage = sandboxesPage(main, new URLSearchParams(location.search));
  else if (page === "sandbox") leavePage = sandboxPage(main, decodeURIComponent(p.slice(11)));
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
    image: r.image || "",
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
  if (f.image.trim() && f.image.trim() !== "default") b.image = f.image.trim();
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
  // The image the sandbox runs (docs/IMAGES.md): an admin picks from the ready ones.
  const image = h("input", { id: id("image"), name: "image", autocomplete: "off", placeholder: "default", list: id("images"), "aria-describedby": `${id("image")}-hint` });
  image.value = f.image;
  const images = h("datalist", { id: id("images") });
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
    field("Image", image, "The sandbox's root file system: default, or an image of your organization (Admin lists them)."),
    images,
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
    f.image = image.value;
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
      const at = { prompt, timeout_seconds: timeout, max_cost_micros: budget, model, image,
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
      try {
        const list = await api.request("GET", "/v1/images");
        if (alive) images.replaceChildren(h("option", { value: "default" }),
          ...list.data.filter((x) => x.status === "ready").map((x) => h("option", { value: x.name })));
      } catch { /* the datalist is a convenience */ }
    }
    try {
      const list = await api.request("GET", "/v1/models");
      if (!alive) return;
      models.replaceChildren(...list.data.filter((m) => m.available !== false).map((m) => h("option", { value: m.id })));
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

// The cost bar and its legend, settled or live (the cost so far). Each amount shown is rounded
// once, from the same totals, so that they add up: the compute part is the shown charge minus the
// shown model and web parts, and the released part the shown budget minus the shown charge.
function costParts(cost, reserved) {
  const model = cost.model_micros || 0;
  const web = cost.web_micros || 0;
  const charged = cost.charged_micros ?? model + web + (cost.compute_micros || 0);
  const mw = fmt.shown(model) + fmt.shown(web);
  return {
    model, web, charged, compute: cost.compute_micros || 0,
    computeText: fmt.shown(charged) >= mw ? fmt.money(fmt.shown(charged) - mw) : fmt.money(cost.compute_micros),
    releasedText: fmt.moneyRest(reserved, charged),
  };
}

function costBar(cost, reserved, live) {
  const total = reserved || 1;
  const pct = (v) => `${Math.max(0, Math.min(100, (100 * (v || 0)) / total))}%`;
  const p = costParts(cost, reserved);
  const bar = h("div", { class: `bar${live ? " live" : ""}`, role: "img",
    "aria-label": live ? `${fmt.money(p.charged)} so far of ${fmt.money(reserved)} reserved while the run is going`
      : `${fmt.money(p.charged)} charged, ${p.releasedText} released of ${fmt.money(reserved)}` });
  bar.append(h("span", { class: "seg model" }), h("span", { class: "seg web" }), h("span", { class: "seg compute" }));
  const [m, w, c] = bar.children;
  // A part too small to see still shows as a sliver (.seg has a minimum width); an empty part
  // is not drawn.
  for (const [el, v] of [[m, p.model], [w, p.web], [c, p.compute]]) {
    el.style.width = pct(v);
    el.hidden = !(v > 0);
  }
  const items = [["model", "Model", fmt.money(p.model)], ["web", "Web", fmt.money(p.web)],
                 ["compute", "Compute", p.computeText]];
  const legend = h("p", { class: "legend", id: "cost-legend" },
    ...items.map(([cls, name, v]) => h("span", { class: "item" }, h("span", { class: `key ${cls}` }), `${name} ${v}`)),
    live
      ? h("span", { class: "item", id: "cost-so-far" }, h("strong", {}, fmt.money(p.charged)), ` so far of ${fmt.money(reserved)}`)
      : h("span", { class: "item" }, h("span", { class: "key released" }), `Released ${p.releasedText}`));
  return [bar, legend];
}

/* ---------- a timeline: a run's or a sandbox's events ---------- */

// The rows of a timeline (docs/WEBUI.md, "Timeline"), shared by the run and sandbox views:
// add(ev) appends an event's row and answers false for a running command's output (shell.output),
// which shows under it as it comes and is folded (hidden) when the command's own row arrives.
function timelineView() {
  const events = [];
  const labelState = {};
  const rows = new Map();
  const tbody = h("tbody", { id: "timeline-body" });
  // A running command's output (shell.output), by its call's id: one row that grows under the
  // command as the output comes, replaced by the command's own row when it ends.
  const liveRows = new Map();
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

  // Every event has its row (rows, by seq: the replay counts them). A running command's output
  // (shell.output) shows under it as it comes, a row per text, the first naming the command;
  // when the command's own row arrives they are folded into it (hidden); a replay plays them
  // like every event.
  const liveOutput = (ev) => {
    const d = ev.data || {};
    const call = typeof d.call === "string" ? d.call : "";
    let lr = liveRows.get(call);
    const pre = h("pre", { class: d.stream === "stderr" ? "err live" : "out live" });
    // As text, never markup: the command's output is the sandbox's.
    pre.textContent = typeof d.text === "string" ? d.text : "";
    const msg = lr ? h("td", { class: "msg" }, pre)
      : h("td", { class: "msg" }, h("code", {}, ev.message), h("span", { class: "hint" }, " running…"), pre);
    if (!lr) {
      lr = { seqs: [] };
      liveRows.set(call, lr);
    }
    const tr = h("tr", { class: "ev shell running", "data-seq": ev.seq, "data-type": "shell.output", "data-call": call },
      h("td", { class: "t" }, fmt.seconds(ev.t)),
      h("td", { class: "src" }, h("span", { class: "src-label shell" }, "Shell")), msg);
    lr.seqs.push(ev.seq);
    rows.set(ev.seq, tr);
    tbody.append(tr);
  };

  const add = (ev) => {
    events.push(ev);
    if (ev.type === "shell.output") {
      liveOutput(ev);
      return false;
    }
    if (ev.type === "shell.command") {
      const lr = liveRows.get(ev.data?.call?.id ?? "");
      if (lr) {
        for (const seq of lr.seqs) rows.get(seq).hidden = true;
        liveRows.delete(ev.data.call.id);
      }
    }
    const tr = eventRow(ev);
    rows.set(ev.seq, tr);
    tbody.append(tr);
    return true;
  };
  return { events, rows, tbody, add };
}

function runPage(main, runId) {
  let run = null;
  let settledOnLoad = false;
  let stop = null;
  let eventModel = 0; // the model.call events' cost_micros, summed: the model part at once
  let poll = 0;
  let alive = true;
  const tl = timelineView();
  const { events, rows, tbody } = tl;

  const pill = h("span", { id: "run-status" });
  const summary = h("span", { class: "summary", id: "run-summary" });
  const meta = h("p", { class: "meta", id: "run-meta" });
  const liveState = h("span", { class: "livestate", id: "live-state", "aria-live": "polite" });
  const pageError = errorBox("run-error");
  const cancelBtn = h("button", { type: "button", class: "danger", id: "cancel", hidden: true }, "Cancel run");
  const bar = h("div", { class: "costbar card", id: "cost" });
  const result = h("div", { class: "md", id: "result" }, h("p", { class: "hint" }, "The result appears when the run ends."));
  const costLine = h("p", { class: "costline", id: "cost-line" });
  const perms = h("tbody", { id: "perms" });
  const usage = h("tbody", { id: "usage" });
  const replayBox = h("div", { class: "replay", id: "replay" });
  const outputs = h("div", { id: "outputs" }, h("p", { class: "hint" }, "Files the run brings back appear when it ends."));
  // A run's outputs (docs/WEBUI.md, "Outputs") are files the sandbox wrote: hostile. Text is
  // shown as text (textContent), a raster image through a blob: URL of its bytes typed by the
  // server's Content-Type; HTML, SVG and every other type only as a download, never rendered.
  const INLINE_IMAGES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  const INLINE_MAX = 1 << 20; // bytes read to show one output inline
  const TEXT_MAX = 65536; // characters of a text output shown
  const outputsCtl = new AbortController(); // leaving the page stops every outputs fetch
  const blobUrls = [];
  let outputsState = ""; // "waiting" (a ZDR run's list parked until it ends), then "done"
  const outputPath = (p) => `/v1/runs/${encodeURIComponent(runId)}/outputs/${p.split("/").map(encodeURIComponent).join("/")}`;
  const objectUrl = (blob) => {
    const u = URL.createObjectURL(blob);
    blobUrls.push(u);
    return u;
  };
  // The bytes of one listed file: inline in the list (a ZDR run's, content_base64, typed by the
  // list's content_type), or from GET …/outputs/{path}.
  const outputBytes = (o, max) => {
    if (typeof o.content_base64 === "string") {
      const bin = atob(o.content_base64);
      if (max && bin.length > max) return Promise.reject(new Error(`larger than ${max} bytes`));
      return Promise.resolve(new Blob([Uint8Array.from(bin, (c) => c.charCodeAt(0))],
                                      { type: o.content_type || "application/octet-stream" }));
    }
    return api.fetchBlob(outputPath(o.path), { max, signal: outputsCtl.signal });
  };
  const outputItem = (o) => {
    const path = typeof o.path === "string" ? o.path : "";
    const li = h("li", { "data-path": path }, h("code", { class: "opath" }, path), " ");
    if (o.type === "symlink") {
      li.append(h("span", { class: "hint" }, `symlink → ${cut(String(o.target ?? ""), 200)} (not followed, nothing to download)`));
      return li;
    }
    const type = typeof o.content_type === "string" ? o.content_type : "application/octet-stream";
    li.append(h("span", { class: "osize" }, `${fmt.thousands(o.size)} bytes`), h("span", { class: "hint" }, ` · ${type} `));
    const dl = h("button", { type: "button", class: "ghost small", "aria-label": `Download ${path}` }, "Download");
    dl.addEventListener("click", async () => {
      try {
        const blob = await outputBytes(o, 0);
        // A download, whatever the type: the blob is never opened as a page.
        const a = h("a", { href: objectUrl(blob), download: path.split("/").pop() || "output" });
        a.click();
      } catch (err) {
        if (err.name !== "AbortError" && alive) showError(pageError, err);
      }
    });
    li.append(dl);
    const inlineText = type.startsWith("text/");
    if ((inlineText || INLINE_IMAGES.includes(type)) && Number(o.size) <= INLINE_MAX) {
      const slot = h("div", { class: "oview" });
      li.append(slot);
      outputBytes(o, INLINE_MAX).then(async (blob) => {
        if (!alive) return;
        // The type the bytes came with decides, not the name or the list.
        if (INLINE_IMAGES.includes(blob.type)) {
          slot.replaceChildren(h("img", { src: objectUrl(blob), alt: path, class: "output-img" }));
        } else if (blob.type.startsWith("text/")) {
          const text = await blob.text();
          const pre = h("pre", { class: "output-text" });
          pre.textContent = text.length > TEXT_MAX ? `${text.slice(0, TEXT_MAX)}\n… (cut: download it for the whole file)` : text;
          slot.replaceChildren(pre);
        } else {
          slot.replaceChildren(h("p", { class: "hint" }, "Not shown: download it."));
        }
      }).catch((err) => {
        if (err.name !== "AbortError" && alive)
          slot.replaceChildren(h("p", { class: "hint" }, `Not shown: ${err.message}`));
      });
    }
    return li;
  };
  const showOutputs = (list) => {
    const data = Array.isArray(list?.data) ? list.data : [];
    outputs.replaceChildren(data.length
      ? h("ul", { class: "outputs", id: "outputs-list" }, ...data.map(outputItem))
      : h("p", { class: "hint" }, "No outputs."));
  };
  const drawOutputs = async () => {
    if (outputsState) return;
    outputsState = "done";
    if (run.permissions?.zero_data_retention) {
      outputs.replaceChildren(h("p", { class: "hint" },
        "Zero data retention: the outputs were shown only to a client following the run, and not kept."));
      return;
    }
    try {
      showOutputs(await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}/outputs`, { signal: outputsCtl.signal }));
    } catch (err) {
      if (err.name !== "AbortError" && alive) outputs.replaceChildren(h("p", { class: "errtext" }, `Outputs: ${err.message}`));
    }
  };
  // A zero-data-retention run's outputs reach only a client waiting when it ends: the list parked
  // with Prefer: wait (again while the run goes on), with each file's bytes inline.
  const waitOutputs = async () => {
    outputsState = "waiting";
    outputs.replaceChildren(h("p", { class: "hint" }, "Zero data retention: the files the run brings back are shown here when it ends, once."));
    try {
      for (;;) {
        const list = await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}/outputs`, { wait: 600, signal: outputsCtl.signal });
        if (!alive) return;
        if (list.data?.length) {
          showOutputs(list);
          break;
        }
        const r = await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}`, { signal: outputsCtl.signal });
        if (fmt.TERMINAL.includes(r.status)) {
          showOutputs(list);
          break;
        }
      }
    } catch (err) {
      if (err.name !== "AbortError" && alive) outputs.replaceChildren(h("p", { class: "errtext" }, `Outputs: ${err.message}`));
    }
    outputsState = "done";
  };

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
        h("h2", { class: "sub" }, "Result"), result, costLine,
        h("h2", { class: "sub" }, "Outputs"), outputs),
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
    const liveCost = terminal ? c : { ...c, model_micros: Math.max(c.model_micros || 0, eventModel) };
    if (!terminal)
      liveCost.charged_micros = liveCost.model_micros + (c.web_micros || 0) + (c.compute_micros || 0);
    summary.textContent = terminal
      ? `${fmt.money(c.charged_micros)} of ${fmt.money(reserved)}${run.finished_at ? ` · ${fmt.duration(run)}` : ""}`
      : `${fmt.money(liveCost.charged_micros)} so far of ${fmt.money(reserved)}`;
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
    bar.replaceChildren(...costBar(liveCost, reserved, !terminal));
    costLine.textContent = terminal
      ? `Model ${fmt.money(c.model_micros)} · Web ${fmt.money(c.web_micros)} · Compute ${costParts(c, reserved).computeText}`
      : "";
    perms.replaceChildren(...PERMS(run.permissions || {}, run).map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", {}, v))));
    const u = terminal ? run.usage || {} : {}; // counted at the settlement
    usage.replaceChildren(...[
      ["Model calls", u.model_attempts > u.model_calls ? `${fmt.thousands(u.model_calls)} (${fmt.thousands(u.model_attempts)} attempts)` : fmt.thousands(u.model_calls)],
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
      drawOutputs();
    }
  };

  const addEvent = (ev) => {
    if (!tl.add(ev)) return;
    if (ev.type === "model.call" && ev.data && Number.isSafeInteger(ev.data.cost_micros) && ev.data.cost_micros > 0) {
      eventModel += ev.data.cost_micros;
      if (run && !fmt.TERMINAL.includes(run.status)) drawRun();
    }
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
      // A command's live output plays at its time too, like every event.
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
    if (!settledOnLoad && run.permissions?.zero_data_retention) waitOutputs();
    drawRun();
    // The cost so far: the run object again every 2 s while the run goes on (the server measures
    // model and web as they are spent, compute at each model call and each lease renewal).
    const tick = async () => {
      if (!alive || !run || fmt.TERMINAL.includes(run.status)) return;
      try {
        const r = await api.request("GET", `/v1/runs/${encodeURIComponent(runId)}`);
        if (!alive) return;
        if (!fmt.TERMINAL.includes(r.status) && !fmt.TERMINAL.includes(run.status)) {
          const st = run.status;
          run = r;
          // The events may be ahead of the stored status (running before it is written).
          if (r.status === "queued" || r.status === "starting") run.status = st;
          drawRun();
        }
      } catch { /* the event stream says when the server is gone */ }
      if (alive) poll = setTimeout(tick, 2000);
    };
    if (!settledOnLoad) poll = setTimeout(tick, 2000);
    stop = api.followEvents(`/v1/runs/${encodeURIComponent(runId)}/events`, {
      onEvent: (ev) => { if (alive) addEvent(ev); },
      onResult: (text) => { result.dataset.zdr = "1"; renderMarkdown(result, text); },
      onState: (s, detail) => {
        liveState.dataset.state = s;
        liveState.textContent = s === "live" ? "● live" : s === "reconnecting" ? `reconnecting… ${detail || ""}`.trim() : "";
        liveState.title = detail || "";
        if (s === "done" && run && !fmt.TERMINAL.includes(run.status)) refetch();
        if (s === "done" && run && fmt.TERMINAL.includes(run.status)) drawReplay();
      },
      onError: (err) => showError(pageError, err),
    });
  })();

  return () => {
    alive = false;
    clearTimeout(poll);
    if (stop) stop();
    replay.playing = false;
    cancelAnimationFrame(replay.raf);
    outputsCtl.abort();
    for (const u of blobUrls) URL.revokeObjectURL(u);
  };
}

/* ---------- the runs list ---------- */

const cursorStack = [];

// The metadata filters of a page URL or an API query: [[key, value], ...] from metadata[KEY]=VALUE.
function metadataFilters(params) {
  const out = [];
  for (const [k, v] of params) {
    const m = /^metadata\[(.+)\]$/.exec(k);
    if (m) out.push([m[1], v]);
  }
  return out;
}

// A prompt as one line of at most n characters.
function cut(text, n) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > n ? `${line.slice(0, n - 1)}…` : line;
}

function promptCell(r) {
  if (typeof r.prompt === "string")
    return h("td", { class: "prompt", title: r.prompt }, cut(r.prompt, 80));
  if (r.permissions?.zero_data_retention)
    return h("td", { class: "prompt hint", title: "The prompt of a zero data retention run is never kept." }, "zero data retention");
  return h("td", { class: "prompt hint", title: "The prompt is no longer kept (the log was purged)." }, "—");
}

function metadataCell(md) {
  const pairs = md && typeof md === "object" ? Object.entries(md) : [];
  if (!pairs.length) return h("td", { class: "hint" }, "—");
  return h("td", {}, h("ul", { class: "chips" },
    ...pairs.map(([k, v]) => h("li", { class: "chip", title: `${k}=${v}` }, `${cut(k, 24)}=${cut(String(v), 32)}`))));
}

// The page size a list page's URL asks for (?limit=N, passed on to the API), 20 without one.
function pageLimit(params) {
  return /^\d{1,3}$/.test(params.get("limit") || "") ? params.get("limit") : "20";
}

// "More" under a list that grows in place, paged by the API's `after` cursor and `has_more`:
// show(list) takes each page once its rows are drawn and hides the button when none follows; a
// press reads path (its query already holding the limit) with after= the cursor of the last row
// and hands that page to add(data), which may answer what takes the focus should the button go.
// Errors go to onError (null once a page arrives).
function moreButton(id, label, path, cursor, add, onError) {
  let after = null;
  const btn = h("button", { type: "button", class: "ghost small", id, "aria-label": label, hidden: true }, "More");
  const show = (list) => {
    const last = list.data[list.data.length - 1];
    after = list.has_more && last ? cursor(last) : null;
    btn.hidden = !after;
  };
  btn.addEventListener("click", async () => {
    btn.disabled = true;
    try {
      const list = await api.request("GET", `${path}${path.includes("?") ? "&" : "?"}after=${encodeURIComponent(after)}`);
      if (!btn.isConnected) return;
      onError(null);
      const focus = add(list.data);
      show(list);
      // The last page: the button goes, and the focus with it to what add() answered.
      if (btn.hidden && focus) focus.focus();
    } catch (e) {
      if (btn.isConnected) onError(e);
    } finally {
      btn.disabled = false;
    }
  });
  return { el: h("div", { class: "pager" }, btn), show };
}

// "← Newer" and "Older →" of a list page at path (its query base, without the cursor): the
// cursors walked so far are kept in cursorStack, so that Newer goes back the way it came.
function pagerLinks(pager, path, base, after, list) {
  const withAfter = (id) => `${path}?${base ? `${base}&` : ""}after=${encodeURIComponent(id)}`;
  if (after) {
    const prev = h("a", { href: "#", class: "button ghost", id: "newer" }, "← Newer");
    prev.addEventListener("click", (e) => {
      e.preventDefault();
      const p = cursorStack.pop();
      navigate(p ? withAfter(p) : `${path}${base ? `?${base}` : ""}`);
    });
    pager.append(prev);
  }
  if (list.has_more && list.data.length) {
    const last = list.data[list.data.length - 1].id;
    const next = h("a", { href: withAfter(last), class: "button ghost", id: "older" }, "Older →");
    next.addEventListener("click", (e) => {
      e.preventDefault();
      if (after) cursorStack.push(after);
      navigate(next.getAttribute("href"));
    });
    pager.append(next);
  }
}

function runsPage(main, params) {
  const status = params.get("status") || "";
  const after = params.get("after") || "";
  const filters = metadataFilters(params);
  const limit = pageLimit(params);
  let alive = true;
  const select = h("select", { id: "status-filter", name: "status" },
    h("option", { value: "" }, "All statuses"),
    ...["queued", "starting", "running", ...fmt.TERMINAL].map((s) => h("option", { value: s, selected: s === status }, fmt.statusLabel(s))));
  const mdInput = h("input", { id: "metadata-filter", name: "metadata", autocomplete: "off", spellcheck: "false",
    placeholder: "key=value", "aria-describedby": "metadata-filter-hint" });
  mdInput.value = filters.map(([k, v]) => `${k}=${v}`).join(" ");
  const mdError = errorBox("metadata-filter-error");
  const mdForm = h("form", { class: "inline", id: "metadata-form", novalidate: true },
    h("label", { for: mdInput.id }, "Metadata"), mdInput,
    h("button", { type: "submit", class: "ghost small" }, "Filter"),
    h("span", { class: "hint", id: "metadata-filter-hint" }, "one key=value pair, matched exactly; empty for all"));
  const tbody = h("tbody", { id: "runs-body" });
  const err = errorBox("runs-error");
  const pager = h("div", { class: "pager" });
  const cols = ["Run", "Prompt", "Status", "Created", "Duration", "Cost", "Metadata"];
  main.append(
    h("section", { class: "intro" }, h("h1", {}, "Runs"), h("p", { class: "lead" }, "Newest first.")),
    h("div", { class: "toolbar" }, h("label", { for: select.id }, "Status"), select, mdForm),
    mdError,
    err,
    h("div", { class: "card tablewrap" },
      h("table", { class: "runs" },
        h("caption", { class: "visually-hidden" }, "Runs of your organization"),
        h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { scope: "col" }, c)))),
        tbody)),
    pager);
  // The page's query: the status, the metadata filters, the limit (the cursor is added apart).
  const query = (st, md) => {
    const q = new URLSearchParams();
    if (st) q.set("status", st);
    for (const [k, v] of md) q.append(`metadata[${k}]`, v);
    if (limit !== "20") q.set("limit", limit);
    return q;
  };
  const go = (q) => navigate(`/runs${String(q) ? `?${q}` : ""}`);
  select.addEventListener("change", () => {
    cursorStack.length = 0;
    go(query(select.value, filters));
  });
  mdForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = mdInput.value.trim();
    let md = [];
    if (text) {
      const eq = text.indexOf("=");
      if (eq <= 0) {
        mdInput.setAttribute("aria-invalid", "true");
        showError(mdError, { message: "Metadata filter: key=value, with a key before the “=”." });
        mdInput.focus();
        return;
      }
      md = [[text.slice(0, eq).trim(), text.slice(eq + 1).trim()]];
    }
    mdInput.removeAttribute("aria-invalid");
    showError(mdError, null);
    cursorStack.length = 0;
    go(query(status, md));
  });
  (async () => {
    const q = query(status, filters);
    q.set("limit", limit);
    if (after) q.set("after", after);
    try {
      const list = await api.request("GET", `/v1/runs?${q}`);
      if (!alive) return;
      if (!list.data.length)
        tbody.append(h("tr", {}, h("td", { colspan: String(cols.length), class: "hint" },
          status || filters.length ? "No run matches this filter." : "No run yet: start one in the playground.")));
      for (const r of list.data) {
        const c = r.cost || {};
        const terminal = fmt.TERMINAL.includes(r.status);
        tbody.append(h("tr", { "data-id": r.id },
          h("td", {}, h("a", { href: `/runs/${r.id}`, "data-nav": true, class: "runid", title: r.id }, `${r.id.slice(0, 12)}…`),
            h("p", { class: "hint model" }, r.model || "")),
          promptCell(r),
          h("td", {}, statusPill(r.status)),
          h("td", {}, fmt.when(r.created_at)),
          h("td", {}, terminal ? fmt.duration(r) : "—"),
          h("td", { class: "num cost" }, terminal ? `${fmt.money(c.charged_micros)} of ${fmt.money(c.reserved_micros)}` : `${fmt.money(c.charged_micros)} so far of ${fmt.money(c.reserved_micros ?? r.permissions?.max_cost_micros)}`),
          metadataCell(r.metadata)));
      }
      pagerLinks(pager, "/runs", String(query(status, filters)), after, list);
    } catch (e) {
      if (alive) showError(err, e);
    }
  })();
  return () => { alive = false; };
}

/* ---------- sandboxes: the list and one sandbox ---------- */

const sandboxTerminal = (s) => fmt.SANDBOX_TERMINAL.includes(s);

// A sandbox's cost as one line: charged of reserved once it ended, so far while it lives.
function sandboxCost(s) {
  const c = s.cost || {};
  const reserved = c.reserved_micros ?? s.permissions?.max_cost_micros;
  return sandboxTerminal(s.status)
    ? `${fmt.money(c.charged_micros)} of ${fmt.money(reserved)}`
    : `${fmt.money(c.charged_micros)} so far of ${fmt.money(reserved)}`;
}

function sandboxesPage(main, params) {
  const status = params.get("status") || "";
  const after = params.get("after") || "";
  const limit = pageLimit(params);
  let alive = true;
  const select = h("select", { id: "sbx-status-filter", name: "status" },
    h("option", { value: "" }, "All statuses"),
    ...[...fmt.SANDBOX_LIVE, ...fmt.SANDBOX_TERMINAL].map((s) => h("option", { value: s, selected: s === status }, fmt.statusLabel(s))));
  const tbody = h("tbody", { id: "sandboxes-body" });
  const err = errorBox("sandboxes-error");
  const pager = h("div", { class: "pager" });
  const cols = ["Sandbox", "Status", "Image", "Created", "Duration", "Cost", "Metadata"];
  main.append(
    h("section", { class: "intro" }, h("h1", {}, "Sandboxes"),
      h("p", { class: "lead" }, "Sandboxes driven through the API, live and ended; newest first.")),
    h("div", { class: "toolbar" }, h("label", { for: select.id }, "Status"), select),
    err,
    h("div", { class: "card tablewrap" },
      h("table", { class: "runs" },
        h("caption", { class: "visually-hidden" }, "Sandboxes of your organization"),
        h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { scope: "col" }, c)))),
        tbody)),
    pager);
  const query = (st) => {
    const q = new URLSearchParams();
    if (st) q.set("status", st);
    if (limit !== "20") q.set("limit", limit);
    return q;
  };
  select.addEventListener("change", () => {
    cursorStack.length = 0;
    const q = query(select.value);
    navigate(`/sandboxes${String(q) ? `?${q}` : ""}`);
  });
  (async () => {
    const q = query(status);
    q.set("limit", limit);
    if (after) q.set("after", after);
    try {
      const list = await api.request("GET", `/v1/sandboxes?${q}`);
      if (!alive) return;
      if (!list.data.length)
        tbody.append(h("tr", {}, h("td", { colspan: String(cols.length), class: "hint" },
          status ? "No sandbox matches this filter." : "No sandbox yet: POST /v1/sandboxes makes one (docs/SANDBOXES.md).")));
      for (const s of list.data) {
        const id = String(s.id);
        tbody.append(h("tr", { "data-id": id },
          h("td", {}, h("a", { href: `/sandboxes/${encodeURIComponent(id)}`, "data-nav": true, class: "runid", title: id }, `${id.slice(0, 14)}…`)),
          h("td", {}, statusPill(s.status)),
          h("td", {}, String(s.image ?? "default")),
          h("td", {}, fmt.when(s.created_at)),
          h("td", {}, sandboxTerminal(s.status) ? fmt.duration(s) : "—"),
          h("td", { class: "num cost" }, sandboxCost(s)),
          metadataCell(s.metadata)));
      }
      pagerLinks(pager, "/sandboxes", String(query(status)), after, list);
    } catch (e) {
      if (alive) showError(err, e);
    }
  })();
  return () => { alive = false; };
}

function sandboxPage(main, sbxId) {
  let sbx = null;
  let alive = true;
  let stop = null;
  let poll = 0;
  const path = `/v1/sandboxes/${encodeURIComponent(sbxId)}`;
  const tl = timelineView();
  const pill = h("span", { id: "sbx-status" });
  const summary = h("span", { class: "summary", id: "sbx-summary" });
  const meta = h("p", { class: "meta", id: "sbx-meta" });
  const liveState = h("span", { class: "livestate", id: "live-state", "aria-live": "polite" });
  const pageError = errorBox("sbx-error");
  const bar = h("div", { class: "costbar card", id: "cost" });
  const facts = h("tbody", { id: "sbx-facts" });
  const mdCell = h("div", { id: "sbx-metadata" });
  const destroyBtn = confirmButton("Destroy", "Really destroy?", "this sandbox", async () => {
    try {
      sbx = await api.request("DELETE", path);
      if (alive) draw();
    } catch (err) {
      if (alive) showError(pageError, err);
    }
    return !!sbx && sandboxTerminal(sbx.status);
  });
  destroyBtn.id = "destroy";
  destroyBtn.disabled = true;

  main.append(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "/sandboxes", "data-nav": true }, "← All sandboxes")),
    h("section", { class: "runhead" },
      h("h1", {}, pill, " ", h("code", { class: "runid" }, sbxId)),
      summary, meta, h("div", { class: "actions" }, destroyBtn)),
    pageError,
    bar,
    h("div", { class: "rungrid" },
      h("section", { class: "card timeline", "aria-labelledby": "tl-title" },
        h("div", { class: "cardhead" }, h("h2", { id: "tl-title" }, "Timeline"), liveState),
        h("table", { class: "tl" },
          h("caption", { class: "visually-hidden" }, "Events of the sandbox, in order"),
          h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "t" }, "t (s)"),
            h("th", { scope: "col", class: "src" }, "source"), h("th", { scope: "col" }, "message"))),
          tl.tbody)),
      h("aside", { class: "side" },
        h("section", { class: "card" }, h("h2", {}, "Sandbox"),
          h("table", { class: "kv" }, h("caption", { class: "visually-hidden" }, "The sandbox's settings, money and times"), facts)),
        h("section", { class: "card" }, h("h2", {}, "Metadata"), mdCell))));

  const secs = (n) => (Number.isFinite(n) ? `${fmt.thousands(n)} s` : "—");
  const draw = () => {
    if (!sbx) return;
    const terminal = sandboxTerminal(sbx.status);
    const c = sbx.cost || {};
    const reserved = c.reserved_micros ?? sbx.permissions?.max_cost_micros;
    pill.replaceChildren(statusPill(sbx.status));
    summary.textContent = `${sandboxCost(sbx)}${terminal && sbx.finished_at ? ` · ${fmt.duration(sbx)}` : ""}`;
    const bits = [`image ${sbx.image ?? "default"}`, `created ${fmt.when(sbx.created_at)}`];
    if (sbx.sandbox && sbx.sandbox.backend) bits.push(`${sbx.sandbox.backend} sandbox`);
    meta.replaceChildren(bits.join(" · "));
    if (sbx.error && sbx.error.message) meta.append(h("span", { class: "errtext" }, ` · ${sbx.error.message}`));
    destroyBtn.disabled = terminal;
    bar.replaceChildren(...costBar(c, reserved, !terminal));
    const p = sbx.permissions || {};
    const u = sbx.usage || {};
    facts.replaceChildren(...[
      ["Status", fmt.statusLabel(sbx.status)],
      ["Image", String(sbx.image ?? "default")],
      ["Timeout", secs(p.timeout_seconds)],
      ["Idle timeout", secs(p.idle_timeout_seconds)],
      ["Web", p.web ? "allowed" : "no"],
      ["Zero data retention", p.zero_data_retention ? "yes" : "no"],
      ["Reserved", fmt.money(reserved)],
      ["Charged", terminal ? fmt.money(c.charged_micros) : `${fmt.money(c.charged_micros)} so far`],
      ["Released", terminal ? fmt.moneyRest(reserved, c.charged_micros ?? 0) : "—"],
      ["Created", fmt.when(sbx.created_at)],
      ["Ready", sbx.ready_at ? fmt.when(sbx.ready_at) : "—"],
      ["Ended", sbx.finished_at ? fmt.when(sbx.finished_at) : "—"],
      ["Shell commands", terminal ? fmt.thousands(u.shell_commands) : "—"],
    ].map(([k, v]) => h("tr", {}, h("th", { scope: "row" }, k), h("td", { "data-fact": k }, v))));
    const pairs = sbx.metadata && typeof sbx.metadata === "object" ? Object.entries(sbx.metadata) : [];
    mdCell.replaceChildren(pairs.length
      ? h("ul", { class: "chips" }, ...pairs.map(([k, v]) => h("li", { class: "chip" }, `${k}=${v}`)))
      : h("p", { class: "hint" }, "None."));
  };
  const refetch = async () => {
    try {
      const s = await api.request("GET", path);
      if (!alive) return;
      sbx = s;
      draw();
      refreshAccount();
    } catch (err) {
      if (alive) showError(pageError, err);
    }
  };

  (async () => {
    if (!api.getKey()) {
      showError(pageError, new api.NoKeyError());
      return;
    }
    try {
      sbx = await api.request("GET", path);
    } catch (err) {
      if (alive) showError(pageError, err);
      return;
    }
    if (!alive) return;
    draw();
    // The cost so far: the sandbox again every 2 s while it lives (compute accrues at each
    // lease renewal, web as it is used).
    const tick = async () => {
      if (!alive || !sbx || sandboxTerminal(sbx.status)) return;
      try {
        const s = await api.request("GET", path);
        if (alive && !sandboxTerminal(sbx.status)) {
          sbx = s;
          draw();
        }
      } catch { /* the event stream says when the server is gone */ }
      if (alive) poll = setTimeout(tick, 2000);
    };
    poll = setTimeout(tick, 2000);
    stop = api.followEvents(`${path}/events`, {
      onEvent: (ev) => {
        if (!alive) return;
        tl.add(ev);
        // The settled sandbox (status, money, times) once its last event is in.
        if (ev.type === "worker.destroyed") refetch();
      },
      onState: (s, detail) => {
        liveState.dataset.state = s;
        liveState.textContent = s === "live" ? "● live" : s === "reconnecting" ? `reconnecting… ${detail || ""}`.trim() : "";
        liveState.title = detail || "";
        if (s === "done" && sbx && !sandboxTerminal(sbx.status)) refetch();
      },
      onError: (err) => showError(pageError, err),
    });
  })();

  return () => {
    alive = false;
    clearTimeout(poll);
    if (stop) stop();
  };
}

/* ---------- admin: keys, connections, credit and models ---------- */

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

// A button that asks once more before it acts: the first press turns it into "Confirm …".
function confirmButton(label, confirmLabel, name, act) {
  const btn = h("button", { type: "button", class: "danger small", "aria-label": `${label} ${name}` }, label);
  let armed = false;
  let timer = 0;
  btn.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      btn.textContent = confirmLabel;
      btn.setAttribute("aria-label", `${confirmLabel} ${name}`);
      timer = setTimeout(() => { armed = false; btn.textContent = label; btn.setAttribute("aria-label", `${label} ${name}`); }, 5000);
      return;
    }
    clearTimeout(timer);
    btn.disabled = true;
    // act() answering true keeps the button disabled (what it destroyed is gone).
    let keep = false;
    try { keep = (await act()) === true; } finally { btn.disabled = keep; armed = false; btn.textContent = label; }
  });
  return btn;
}

// Rows of a name and a write-only value (a password input): the connection's headers or query.
function pairRows(kind, namePlaceholder, valuePlaceholder) {
  const list = h("div", { class: "pairs", id: `conn-${kind}` });
  let n = 0;
  const add = () => {
    n++;
    const nm = h("input", { id: `conn-${kind}-name-${n}`, class: "pair-name", autocomplete: "off", spellcheck: "false", placeholder: namePlaceholder });
    const val = h("input", { id: `conn-${kind}-value-${n}`, class: "pair-value", type: "password", autocomplete: "new-password", spellcheck: "false", placeholder: valuePlaceholder });
    const row = h("div", { class: "pair" },
      h("label", { for: nm.id, class: "visually-hidden" }, `${kind === "headers" ? "Header" : "Query"} name ${n}`), nm,
      h("label", { for: val.id, class: "visually-hidden" }, `${kind === "headers" ? "Header" : "Query"} value ${n} (write-only)`), val);
    list.append(row);
    return nm;
  };
  add();
  return {
    el: list,
    add,
    // {name: value} of the rows with a name; throws when a value has no name.
    read() {
      const out = {};
      for (const row of list.children) {
        const k = row.querySelector(".pair-name").value.trim();
        const v = row.querySelector(".pair-value").value;
        if (!k && v) throw new Error(`${kind === "headers" ? "A header" : "A query parameter"} value without a name.`);
        if (k) out[k] = v;
      }
      return out;
    },
    clear() { list.replaceChildren(); add(); },
  };
}

/* Webhooks (docs/WEBHOOKS.md): add an endpoint (its secret shown once), see each one's recent
 * deliveries (limit a page, "More" for the next) and a delivery's attempts, delete. Returns the
 * section, its loader and what clears it when the page is left. */
const WEBHOOK_EVENTS = ["run.completed", "run.failed", "run.timed_out", "run.budget_exhausted", "run.cancelled", "sandbox.ended"];

function webhooksSection(table, isAlive, limit) {
  const body = h("tbody", { id: "webhooks-body" });
  const listError = errorBox("webhooks-error");
  const formError = errorBox("webhook-error");
  const url = h("input", { id: "webhook-url", name: "url", type: "url", autocomplete: "off", spellcheck: "false", placeholder: "https://example.com/hooks/ephemeral", required: true });
  const boxes = WEBHOOK_EVENTS.map((t) => h("label", { class: "toggle" },
    h("input", { type: "checkbox", name: "events", value: t, id: `webhook-event-${t}`, checked: true }), h("span", {}, t)));
  const secret = h("div", { class: "newkey", id: "new-webhook-secret", hidden: true });
  const deliveries = h("div", { id: "webhook-deliveries", hidden: true });
  const hideSecret = () => { secret.replaceChildren(); secret.hidden = true; };
  const form = h("form", { class: "form", id: "webhook-form", novalidate: true, "aria-label": "Add a webhook endpoint" },
    h("div", { class: "field" }, h("label", { for: url.id }, "URL"), url,
      h("p", { class: "hint" }, "http(s) on a public address (or a range the operator opened); each ended run is POSTed to it, signed.")),
    h("fieldset", { class: "perms" }, h("legend", {}, "Events"), h("div", { class: "row wrap" }, ...boxes)),
    formError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "webhook-add" }, "Add endpoint")));

  const httpText = (n) => (n === null || n === undefined ? "—" : String(n));
  const msText = (n) => (n === null || n === undefined ? "—" : `${n} ms`);

  // One delivery's attempts (GET …/deliveries/{event_id}, its history) under the list: opened
  // from the event's button, which it gives the focus back to when closed; a refusal goes to error.
  const attemptsPanel = (w, error) => {
    const panel = h("div", { id: "webhook-attempts", role: "region", "aria-labelledby": "webhook-attempts-title", hidden: true });
    let opener = null;
    let asked = 0;
    const close = () => {
      asked++;
      panel.hidden = true;
      panel.replaceChildren();
      if (!opener) return;
      opener.setAttribute("aria-expanded", "false");
      opener.closest("tr").classList.remove("current");
      const back = opener;
      opener = null;
      if (panel.isConnected) back.focus();
    };
    panel.addEventListener("keydown", (e) => { if (e.key === "Escape") close(); });
    const open = async (eventId, btn) => {
      if (opener === btn) { close(); return; }
      if (opener) { opener.setAttribute("aria-expanded", "false"); opener.closest("tr").classList.remove("current"); }
      opener = btn;
      btn.setAttribute("aria-expanded", "true");
      btn.closest("tr").classList.add("current");
      const mine = ++asked;
      let d;
      try {
        d = await api.request("GET", `/v1/webhooks/${encodeURIComponent(w.id)}/deliveries/${encodeURIComponent(eventId)}`);
      } catch (e) {
        if (isAlive() && mine === asked) { close(); showError(error, e); }
        return;
      }
      if (!isAlive() || mine !== asked) return;
      showError(error, null);
      const history = d.history || [];
      const rows = history.length ? history.map((a) => h("tr", { "data-attempt": String(a.attempt) },
        h("td", { class: "num" }, String(a.attempt)),
        h("td", { class: a.outcome === "failed" ? "errtext" : "" }, a.outcome),
        h("td", {}, a.at ? h("time", { datetime: a.at }, fmt.when(a.at)) : "—"),
        h("td", { class: "num" }, httpText(a.http_status)),
        h("td", { class: "num" }, msText(a.duration_ms)),
        h("td", {}, a.error || "—")))
        : [h("tr", {}, h("td", { colspan: "6", class: "hint" }, d.status === "pending" ? "No attempt yet." : "No attempt was made."))];
      const shut = h("button", { type: "button", class: "ghost small", id: "webhook-attempts-close", "aria-label": `Close the attempts of ${d.event_id}` }, "Close");
      shut.addEventListener("click", close);
      const title = h("h3", { id: "webhook-attempts-title", tabindex: "-1" }, "Attempts of ", h("code", {}, d.event_id));
      const summary = `${d.type}, ${d.status}${d.attempts ? ` after ${d.attempts} attempt${d.attempts === 1 ? "" : "s"}` : ", never attempted"}`
        + (d.attempts > history.length && history.length ? ` (the last ${history.length} shown)` : "")
        + (d.next_attempt_at ? `; the next is due ${fmt.when(d.next_attempt_at)}` : "")
        + (!history.length && d.error ? `: ${d.error}` : "");
      panel.replaceChildren(title, h("p", { class: "hint", id: "webhook-attempts-summary" }, summary),
        table(`Attempts to deliver ${d.event_id} to ${w.url}, oldest first`, ["Attempt", "Outcome", "Time", "HTTP", "Duration", "Error"],
          h("tbody", { id: "webhook-attempts-body" }, ...rows)),
        h("div", { class: "actions" }, shut));
      panel.hidden = false;
      title.focus();
    };
    return { el: panel, open };
  };

  const showDeliveries = async (w) => {
    const path = `/v1/webhooks/${encodeURIComponent(w.id)}/deliveries?limit=${limit}`;
    const list = await api.request("GET", path);
    if (!isAlive()) return;
    const error = errorBox("webhook-deliveries-error");
    const attempts = attemptsPanel(w, error);
    const row = (d) => {
      const btn = h("button", { type: "button", class: "ghost small", "aria-expanded": "false", "aria-controls": "webhook-attempts",
        "aria-label": `Attempts of ${d.event_id}` }, h("code", {}, d.event_id));
      btn.addEventListener("click", () => attempts.open(d.event_id, btn));
      return h("tr", { "data-event": d.event_id },
        h("td", {}, btn), h("td", {}, d.type),
        h("td", { class: d.status === "failed" ? "errtext" : "" }, d.status),
        h("td", { class: "num" }, String(d.attempts)),
        h("td", { class: "num" }, httpText(d.http_status)),
        h("td", { class: "num" }, msText(d.duration_ms)),
        h("td", {}, d.error || "—"),
        h("td", {}, d.next_attempt_at ? fmt.when(d.next_attempt_at) : "—"));
    };
    const tbody = h("tbody", { id: "webhook-deliveries-body" }, ...(list.data.length ? list.data.map(row)
      : [h("tr", {}, h("td", { colspan: "8", class: "hint" }, "No delivery yet: one is made when a run of the organization ends."))]));
    const more = moreButton("webhook-deliveries-more", `More deliveries to ${w.url}`, path, (d) => d.event_id, (data) => {
      const rows = data.map(row);
      tbody.append(...rows);
      return rows[0]?.querySelector("button");
    }, (e) => showError(error, e));
    more.show(list);
    deliveries.replaceChildren(h("h3", {}, "Recent deliveries to ", h("code", {}, w.url)),
      h("p", { class: "hint" }, "Newest first. An event's button shows each attempt to deliver it."),
      error,
      table(`Deliveries to ${w.url}`, ["Event", "Type", "Status", "Attempts", "HTTP", "Duration", "Last error", "Next attempt"], tbody),
      more.el, attempts.el);
    deliveries.hidden = false;
  };

  const load = async () => {
    const list = await api.request("GET", "/v1/webhooks");
    if (!isAlive()) return;
    if (!list.data.length) { body.replaceChildren(h("tr", {}, h("td", { colspan: "5", class: "hint" }, "No endpoint yet."))); return; }
    body.replaceChildren(...list.data.map((w) => {
      const show = h("button", { type: "button", class: "ghost small", "aria-label": `Deliveries to ${w.url}` }, "Deliveries");
      show.addEventListener("click", () => showDeliveries(w).catch((e) => showError(listError, e)));
      return h("tr", { "data-webhook": w.id },
        h("td", {}, w.url), h("td", {}, (w.events || []).join(", ")),
        h("td", { class: "num" }, `${w.timeout_seconds} s`), h("td", {}, h("code", {}, w.id)),
        h("td", { class: "num" }, show, " ", confirmButton("Delete", "Confirm delete", w.url, async () => {
          try {
            await api.request("DELETE", `/v1/webhooks/${encodeURIComponent(w.id)}`);
            showError(listError, null);
            deliveries.hidden = true;
          } catch (e) {
            showError(listError, e);
          }
          await load();
        })));
    }));
  };

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError(formError, null);
    hideSecret();
    const events = boxes.map((l) => l.querySelector("input")).filter((x) => x.checked).map((x) => x.value);
    if (!events.length) { showError(formError, { message: "Events: choose at least one." }); return; }
    try {
      const w = await api.request("POST", "/v1/webhooks", { body: { url: url.value.trim(), events } });
      if (!isAlive()) return;
      url.value = "";
      const code = h("code", { id: "new-webhook-secret-value" }, w.secret);
      const copy = h("button", { type: "button", class: "ghost small", id: "new-webhook-secret-copy", "aria-label": "Copy the signing secret" }, "Copy");
      copy.addEventListener("click", () => copyText(copy, code.textContent));
      const done = h("button", { type: "button", class: "primary small", id: "new-webhook-secret-done" }, "I have copied it");
      done.addEventListener("click", () => { hideSecret(); url.focus(); });
      secret.replaceChildren(
        h("p", { class: "warn", role: "status" }, h("strong", {}, "Copy this signing secret now: it will not be shown again. "),
          "Check each delivery's Ephemeral-Signature with it (the clients' verify_signature)."),
        h("div", { class: "codeblock" }, h("pre", { tabindex: "0" }, code), h("div", { class: "actions" }, copy, done)));
      secret.hidden = false;
      copy.focus();
      await load();
    } catch (ex) {
      if (isAlive()) showError(formError, ex);
    }
  });

  const el = h("section", { class: "card", "aria-labelledby": "webhooks-title" }, h("h2", { id: "webhooks-title" }, "Webhooks"),
    h("p", { class: "hint" }, "Endpoints that get a signed POST of each ended run (docs/WEBHOOKS.md), retried for up to a day."),
    listError,
    table("The organization's webhook endpoints", ["URL", "Events", "Timeout", "Id", ""], body),
    deliveries, h("h3", {}, "Add an endpoint"), secret, form);
  return { el, load, leave: hideSecret };
}

function adminPage(main, params) {
  let alive = true;
  const err = errorBox("admin-error");
  const keys = h("tbody", { id: "keys-body" });
  const conns = h("tbody", { id: "connections-body" });
  const imagesBody = h("tbody", { id: "images-body" });
  const imagesError = errorBox("images-error");
  const modelsBody = h("tbody", { id: "models-body" });
  const adminOnly = h("div", { id: "admin-sections", hidden: true });

  /* Keys: create (the value shown once), revoke (never the last admin key). */
  const keyRole = h("select", { id: "key-role", name: "role" },
    h("option", { value: "member" }, "member"), h("option", { value: "admin" }, "admin"));
  const keyError = errorBox("key-create-error");
  const keyForm = h("form", { class: "inline", id: "key-create-form", novalidate: true, "aria-label": "Create an API key" },
    h("label", { for: keyRole.id }, "Role"), keyRole,
    h("button", { type: "submit", class: "primary small", id: "key-create" }, "Create key"));
  const newKey = h("div", { class: "newkey", id: "new-key", hidden: true });
  const keysError = errorBox("keys-error");
  let keyList = [];

  const hideNewKey = () => { newKey.replaceChildren(); newKey.hidden = true; };
  const showNewKey = (k) => {
    const code = h("code", { id: "new-key-value" }, k.key);
    const copy = h("button", { type: "button", class: "ghost small", id: "new-key-copy", "aria-label": "Copy the new key" }, "Copy");
    copy.addEventListener("click", () => copyText(copy, code.textContent));
    const done = h("button", { type: "button", class: "primary small", id: "new-key-done" }, "I have copied it");
    done.addEventListener("click", () => { hideNewKey(); keyRole.focus(); });
    newKey.replaceChildren(
      h("p", { class: "warn", role: "status" }, h("strong", {}, "Copy this key now: it will not be shown again. "),
        `A new ${k.role} key, ${k.prefix}…`),
      h("div", { class: "codeblock" }, h("pre", { tabindex: "0" }, code),
        h("div", { class: "actions" }, copy, done)));
    newKey.hidden = false;
    copy.focus();
  };

  const drawKeys = () => {
    const mine = api.getKey().slice(0, 8);
    const admins = keyList.filter((x) => x.role === "admin").length;
    keys.replaceChildren(...keyList.map((x) => {
      const last = x.role === "admin" && admins <= 1;
      const revoke = last
        ? h("button", { type: "button", class: "danger small", disabled: true, "aria-label": `Revoke ${x.prefix}`,
                        title: "The organization's last admin key: create another admin key first." }, "Revoke")
        : confirmButton("Revoke", "Confirm revoke", x.prefix, async () => {
          try {
            await api.request("DELETE", `/v1/keys/${encodeURIComponent(x.id)}`);
            showError(keysError, null);
          } catch (e) {
            showError(keysError, e);
          }
          await loadKeys();
        });
      return h("tr", { "data-key-id": x.id },
        h("td", {}, h("code", { class: "prefix" }, `${x.prefix || ""}…`),
          x.prefix && x.prefix === mine ? h("span", { class: "badge" }, " this tab's key") : null),
        h("td", {}, x.role), h("td", {}, fmt.when(x.created_at)),
        h("td", {}, h("code", { class: "hint" }, x.id)),
        h("td", { class: "num" }, revoke, last ? h("p", { class: "hint" }, "last admin key") : null));
    }));
  };
  const loadKeys = async () => {
    const k = await api.request("GET", "/v1/keys");
    if (!alive) return;
    keyList = k.data;
    drawKeys();
  };
  keyForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError(keyError, null);
    hideNewKey();
    try {
      const k = await api.request("POST", "/v1/keys", { body: { role: keyRole.value } });
      if (!alive) return;
      showNewKey(k);
      await loadKeys();
    } catch (ex) {
      if (alive) showError(keyError, ex);
    }
  });

  /* Connections: add (credentials write-only), view, delete. */
  const cName = h("input", { id: "conn-name", name: "name", autocomplete: "off", spellcheck: "false", placeholder: "github", required: true, "aria-describedby": "conn-name-hint" });
  const cBase = h("input", { id: "conn-base", name: "base_url", autocomplete: "off", spellcheck: "false", placeholder: "https://api.example.com", required: true });
  const cPaths = h("input", { id: "conn-paths", name: "path_prefixes", autocomplete: "off", spellcheck: "false", placeholder: "/", "aria-describedby": "conn-paths-hint" });
  const methodBoxes = METHODS.map((m) => h("label", { class: "toggle" },
    h("input", { type: "checkbox", name: "methods", value: m, id: `conn-method-${m}`, checked: m === "GET" }), h("span", {}, m)));
  const headers = pairRows("headers", "Authorization", "Bearer …");
  const query = pairRows("query", "api_key", "value");
  const addPair = (rows, what) => {
    const b = h("button", { type: "button", class: "ghost small", id: `conn-add-${what}` }, `Add a ${what === "headers" ? "header" : "query parameter"}`);
    b.addEventListener("click", () => rows.add().focus());
    return b;
  };
  const connError = errorBox("conn-error");
  const connsError = errorBox("connections-error");
  const field = (label, input, hint) => h("div", { class: "field" }, h("label", { for: input.id }, label), input,
    hint ? h("p", { class: "hint", id: `${input.id}-hint` }, hint) : null);
  const connForm = h("form", { class: "form", id: "conn-form", novalidate: true, "aria-label": "Add a connection" },
    h("div", { class: "row three" },
      field("Name", cName, "a-z, 0-9, - and _; what a run asks for"),
      field("Base URL", cBase),
      field("Path prefixes", cPaths, "separated by spaces or commas; / for all")),
    h("fieldset", { class: "perms" }, h("legend", {}, "Methods"), h("div", { class: "row wrap" }, ...methodBoxes)),
    h("fieldset", { class: "perms" }, h("legend", {}, "Headers added to each request"),
      h("p", { class: "hint" }, "The values are credentials: sealed by the server, never shown again, not even here."),
      headers.el, addPair(headers, "headers")),
    h("fieldset", { class: "perms" }, h("legend", {}, "Query parameters added to each request"),
      query.el, addPair(query, "query")),
    connError,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "conn-add" }, "Add connection")));

  /* Images: the organization's and the operator's, with their state; a build's error shown. */
  const loadImages = async () => {
    const list = await api.request("GET", "/v1/images");
    if (!alive) return;
    if (!list.data.length) { imagesBody.replaceChildren(h("tr", {}, h("td", { colspan: "7", class: "hint" }, "No image yet: runs use the default image."))); return; }
    imagesBody.replaceChildren(...list.data.map((x) => h("tr", { "data-image": x.name },
      h("td", {}, h("code", {}, x.name)),
      h("td", { class: x.status === "failed" ? "errtext" : "" }, x.status, x.error ? `: ${x.error}` : ""),
      h("td", {}, (x.packages || []).join(", ") || "—"),
      h("td", { class: "num" }, x.size_bytes ? `${(x.size_bytes / 1048576).toFixed(1)} MiB` : "—"),
      h("td", {}, h("code", { title: x.digest }, String(x.digest || "").slice(0, 19))),
      h("td", {}, x.owner === "operator" ? "operator (every organization)" : "this organization"),
      h("td", { class: "num" }, x.owner === "operator" ? null : confirmButton("Delete", "Confirm delete", x.name, async () => {
        try {
          await api.request("DELETE", `/v1/images/${encodeURIComponent(x.name)}`);
          showError(imagesError, null);
        } catch (e) {
          showError(imagesError, e);
        }
        await loadImages();
      })))));
  };

  const loadConns = async () => {
    const c = await api.request("GET", "/v1/connections");
    if (!alive) return;
    if (!c.data.length) { conns.replaceChildren(h("tr", {}, h("td", { colspan: "7", class: "hint" }, "No connection yet."))); return; }
    conns.replaceChildren(...c.data.map((x) => h("tr", { "data-connection": x.name },
      h("td", {}, h("code", {}, x.name)), h("td", {}, x.base_url),
      h("td", {}, (x.methods || []).join(", ")), h("td", {}, (x.path_prefixes || []).join(", ")),
      h("td", {}, (x.header_names || []).join(", ") || "—"),
      h("td", {}, (x.query_names || []).join(", ") || "—"),
      h("td", { class: "num" }, confirmButton("Delete", "Confirm delete", x.name, async () => {
        try {
          await api.request("DELETE", `/v1/connections/${encodeURIComponent(x.id || x.name)}`);
          showError(connsError, null);
        } catch (e) {
          showError(connsError, e);
        }
        await loadConns();
      })))));
  };
  connForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError(connError, null);
    let body;
    try {
      body = { name: cName.value.trim(), base_url: cBase.value.trim() };
      const methods = methodBoxes.map((l) => l.querySelector("input")).filter((x) => x.checked).map((x) => x.value);
      if (methods.length) body.methods = methods;
      const paths = cPaths.value.split(/[\s,]+/).filter(Boolean);
      if (paths.length) body.path_prefixes = paths;
      const hd = headers.read();
      if (Object.keys(hd).length) body.headers = hd;
      const q = query.read();
      if (Object.keys(q).length) body.query = q;
    } catch (ex) {
      showError(connError, ex);
      return;
    }
    try {
      await api.request("POST", "/v1/connections", { body });
      body = null;
      if (!alive) return;
      // Nothing of it stays in the page: the credentials least of all.
      headers.clear();
      query.clear();
      cName.value = "";
      cBase.value = "";
      cPaths.value = "";
      for (const l of methodBoxes) { const x = l.querySelector("input"); x.checked = x.value === "GET"; }
      await loadConns();
    } catch (ex) {
      if (alive) showError(connError, ex);
    }
  });

  /* Credit. */
  const creditInput = h("input", { id: "credit-amount", name: "amount", inputmode: "decimal", autocomplete: "off", placeholder: "10.00", "aria-describedby": "credit-hint" });
  const creditError = errorBox("credit-error");
  const creditDone = h("p", { class: "hint", id: "credit-done", role: "status" });
  const creditForm = h("form", { class: "inline", id: "credit-form", novalidate: true, "aria-label": "Add credit" },
    h("label", { for: creditInput.id }, "Amount (dollars)"), creditInput,
    h("button", { type: "submit", class: "primary small", id: "credit-add" }, "Add credit"),
    h("span", { class: "hint", id: "credit-hint" }, "added to the organization's balance"));
  creditForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    showError(creditError, null);
    creditDone.textContent = "";
    const micros = fmt.parseDollars(creditInput.value);
    if (micros === null || micros <= 0) {
      creditInput.setAttribute("aria-invalid", "true");
      showError(creditError, { message: "Amount: dollars above zero, like 10 or 0.50 (at most 6 decimals)." });
      creditInput.focus();
      return;
    }
    creditInput.removeAttribute("aria-invalid");
    try {
      const b = await api.request("POST", "/v1/credits", { body: { micros },
        headers: { "Idempotency-Key": api.newIdempotencyKey() } });
      if (!alive) return;
      creditInput.value = "";
      creditDone.textContent = b.object === "balance"
        ? `Added ${fmt.money(micros)}: the balance is ${fmt.money(b.balance_micros)}, ${fmt.money(b.available_micros)} available.`
        : `Added ${fmt.money(micros)}.`;
      refreshAccount();
    } catch (ex) {
      if (alive) showError(creditError, ex);
    }
  });

  const table = (caption, cols, body) => h("div", { class: "tablewrap" }, h("table", { class: "runs" },
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, ...cols.map((c) => h("th", { scope: "col" }, c)))), body));
  const hooks = webhooksSection(table, () => alive, pageLimit(params));

  adminOnly.append(
    h("section", { class: "card", "aria-labelledby": "keys-title" }, h("h2", { id: "keys-title" }, "API keys"),
      h("p", { class: "hint" }, "A key is shown by its prefix, its first 8 characters: compare it with the start of yours. The server keeps only a hash of each key."),
      keyForm, keyError, newKey, keysError,
      table("The organization's API keys", ["Prefix", "Role", "Created", "Id", ""], keys)),
    h("section", { class: "card", "aria-labelledby": "conns-title" }, h("h2", { id: "conns-title" }, "Connections"),
      connsError,
      table("The organization's connections", ["Name", "Base URL", "Methods", "Paths", "Headers added", "Query added", ""], conns),
      h("h3", {}, "Add a connection"), connForm),
    h("section", { class: "card", "aria-labelledby": "images-title" }, h("h2", { id: "images-title" }, "Images"),
      h("p", { class: "hint" }, "Root file systems runs may name instead of the default. Define one with POST /v1/images (a recipe of Debian packages, npm packages, files and commands) or, as the operator, ephemerald image create; see docs/IMAGES.md."),
      imagesError,
      table("The images the organization sees", ["Name", "State", "Packages", "Size", "Digest", "Owner", ""], imagesBody)),
    hooks.el,
    h("section", { class: "card", "aria-labelledby": "credit-title" }, h("h2", { id: "credit-title" }, "Credit"),
      creditForm, creditError, creditDone));
  main.append(
    h("section", { class: "intro" }, h("h1", {}, "Admin"),
      h("p", { class: "lead" }, "Your organization's API keys, connections, images, webhooks, credit and models. Key values and connection credentials are never shown back: the server keeps only a hash of each key, and seals the credentials.")),
    err,
    adminOnly,
    h("section", { class: "card", "aria-labelledby": "models-title" }, h("h2", { id: "models-title" }, "Models"),
      errorBox("models-error"),
      table("The server's models", ["Model", "Provider", "Input / Mtok", "Output / Mtok", "Cached input / Mtok", "Max output tokens", "Available"], modelsBody)));

  (async () => {
    try {
      const m = await api.request("GET", "/v1/models");
      if (!alive) return;
      modelsBody.replaceChildren(...m.data.map((x) => {
        const p = x.prices || {};
        return h("tr", { "data-model": x.id },
          h("td", {}, h("code", {}, x.id), x.default ? h("span", { class: "badge" }, " default") : null),
          h("td", {}, x.provider || "—"),
          h("td", { class: "num" }, fmt.money(p.input_micros_per_mtok)),
          h("td", { class: "num" }, fmt.money(p.output_micros_per_mtok)),
          h("td", { class: "num" }, fmt.money(p.cached_input_micros_per_mtok)),
          h("td", { class: "num" }, fmt.thousands(x.max_output_tokens)),
          h("td", { class: x.available ? "" : "errtext" }, x.available ? "yes" : `no: ${x.unavailable_reason || "unavailable"}`));
      }));
    } catch (e) {
      if (alive) showError(document.getElementById("models-error"), e);
    }
  })();
  (async () => {
    try {
      await loadKeys();
      api.setRole("admin");
      refreshAccount();
      if (!alive) return;
      adminOnly.hidden = false;
      await loadConns();
      await loadImages().catch((e) => { if (alive) showError(imagesError, e); });
      await hooks.load().catch((e) => { if (alive) showError(document.getElementById("webhooks-error"), e); });
    } catch (e) {
      if (e.status === 403) { api.setRole("member"); refreshAccount(); }
      if (alive) showError(err, e);
    }
  })();
  return () => {
    alive = false;
    // The new key's value and any typed credential leave with the page.
    hideNewKey();
    hooks.leave();
    headers.clear();
    query.clear();
  };
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
