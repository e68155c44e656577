// api.js - the API from the page: the key from session storage, every answer checked, every
// failure turned into a sentence, and the event stream read with fetch (EventSource cannot send
// the Authorization header) and resumed after a drop with Last-Event-ID.

const KEY = "ephemeral.api_key";
const ROLE = "ephemeral.role";

export function getKey() {
  try { return sessionStorage.getItem(KEY) || ""; } catch { return ""; }
}
export function setKey(k) {
  try {
    if (k) sessionStorage.setItem(KEY, k); else sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ROLE);
  } catch { /* private mode */ }
}

// The key's role, once the admin page has learnt it ("admin" or "member"; "" while unknown). The
// API has no endpoint that says it without a refusal, so the page does not probe for it.
export function getRole() {
  try { return sessionStorage.getItem(ROLE) || ""; } catch { return ""; }
}
export function setRole(r) {
  try { sessionStorage.setItem(ROLE, r); } catch { /* private mode */ }
}

export class ApiError extends Error {
  constructor(status, body, fallback) {
    const e = body && body.error ? body.error : null;
    super(ApiError.words(status, e, fallback));
    this.status = status;
    this.type = e ? e.type : null;
    this.code = e ? e.code : null;
    this.param = e ? e.param : null;
  }
  // The server's message, introduced by what it means for the person at the keyboard.
  static words(status, e, fallback) {
    const msg = e && typeof e.message === "string" ? e.message : fallback;
    const lead = {
      401: "The server refused the API key",
      402: "Not enough balance for this budget",
      403: "This needs an admin key",
      404: "Not found",
      409: "Conflict",
      413: "The request is too large",
      422: "Idempotency key reused",
      429: "Too many runs queued",
      503: "The server is unavailable",
    }[status] || (status === 400 ? "The request is invalid" : `The server answered ${status}`);
    // A 429 is also the limit on keys that are not valid, per address (docs/API.md, "Connections").
    const limited = e && e.code === "too_many_failed_authentications";
    const param = e && e.param ? ` (${e.param})` : "";
    return `${limited ? "Too many refused API keys from this address" : lead}${param}: ${msg}`;
  }
}

// What a failed fetch (the server down, the network gone) says, instead of the browser's own
// "Failed to fetch".
export function unreachable() {
  return `cannot reach the server at ${location.origin}`;
}

export class NoKeyError extends Error {
  constructor() { super("No API key: choose “API key” at the top right and paste one."); }
}

export async function request(method, path, { body, headers = {}, signal, wait } = {}) {
  const key = getKey();
  if (!key) throw new NoKeyError();
  const h = { Authorization: `Bearer ${key}`, Accept: "application/json", ...headers };
  if (body !== undefined) h["Content-Type"] = "application/json";
  if (wait) h.Prefer = `wait=${wait}`;
  let resp;
  try {
    resp = await fetch(path, { method, headers: h, signal, cache: "no-store",
                               body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    const e = new Error(`C${unreachable().slice(1)}.`);
    e.unreachable = true;
    throw e;
  }
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON: said below */ }
  if (!resp.ok) throw new ApiError(resp.status, json, resp.statusText || "no message");
  if (json === null) throw new Error(`The server answered ${resp.status} without JSON`);
  return json;
}

/* A run output's bytes as a Blob typed by the API's Content-Type (never guessed here). With max,
 * a body longer than max bytes is not read further: the fetch is cancelled and an Error says so. */
export async function fetchBlob(path, { max = 0, signal } = {}) {
  const key = getKey();
  if (!key) throw new NoKeyError();
  let resp;
  try {
    resp = await fetch(path, { headers: { Authorization: `Bearer ${key}` }, cache: "no-store", signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new Error(`C${unreachable().slice(1)}.`);
  }
  if (!resp.ok) {
    let json = null;
    try { json = await resp.json(); } catch { /* said by the status */ }
    throw new ApiError(resp.status, json, resp.statusText || "no message");
  }
  const type = resp.headers.get("Content-Type") || "application/octet-stream";
  const tooLarge = () => new Error(`larger than ${max} bytes`);
  if (max && Number(resp.headers.get("Content-Length") || 0) > max) {
    resp.body?.cancel().catch(() => {});
    throw tooLarge();
  }
  const parts = [];
  let n = 0;
  const reader = resp.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    n += value.length;
    if (max && n > max) {
      reader.cancel().catch(() => {});
      throw tooLarge();
    }
    parts.push(value);
  }
  return new Blob(parts, { type });
}

export function newIdempotencyKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// Follows a timeline (a run's or a sandbox's events, eventsPath): onEvent(event) once per seq, in order, past ones first; onResult(text)
// for a zero-data-retention run's result; onState("live" | "reconnecting" | "done", detail).
// Returns a function that stops it. A drop (network, server restart) reconnects with
// Last-Event-ID = the last seq received, backing off up to 5 s; events at or below it are never
// delivered twice.
export function followEvents(eventsPath, { onEvent, onResult, onState, onError }) {
  let lastSeq = -1;
  let stopped = false;
  let ctrl = null;
  let delay = 500;
  let timer = null;

  const deliver = (ev) => {
    if (ev.event === "result") {
      try { onResult && onResult(JSON.parse(ev.data).result); } catch { /* ignored */ }
      return false;
    }
    let obj;
    try { obj = JSON.parse(ev.data); } catch { return false; }
    if (typeof obj.seq !== "number" || obj.seq <= lastSeq) return false;
    lastSeq = obj.seq;
    onEvent(obj);
    return obj.type === "worker.destroyed";
  };

  const connect = async () => {
    if (stopped) return;
    const key = getKey();
    if (!key) { onError(new NoKeyError()); return; }
    ctrl = new AbortController();
    const headers = { Authorization: `Bearer ${key}`, Accept: "text/event-stream" };
    if (lastSeq >= 0) headers["Last-Event-ID"] = String(lastSeq);
    let finished = false;
    try {
      const resp = await fetch(eventsPath,
                               { headers, signal: ctrl.signal, cache: "no-store" });
      if (!resp.ok) {
        let json = null;
        try { json = await resp.json(); } catch { /* said below */ }
        const err = new ApiError(resp.status, json, resp.statusText || "no message");
        if (resp.status < 500) { stopped = true; onError(err); return; }
        throw err;
      }
      onState("live");
      delay = 500;
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      let ev = { data: [], event: "", id: null };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf[nl] === "\r" && buf[nl + 1] === "\n" ? 2 : 1));
          if (line === "") {
            if (ev.data.length && deliver({ event: ev.event, data: ev.data.join("\n") }))
              finished = true;
            ev = { data: [], event: "", id: null };
            continue;
          }
          if (line.startsWith(":")) continue; // keep-alive
          const c = line.indexOf(":");
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? "" : line.slice(c + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "data") ev.data.push(val);
          else if (field === "event") ev.event = val;
          else if (field === "id") ev.id = val;
        }
        if (buf.length > 4 * 1024 * 1024) throw new Error("an event over 4 MiB");
      }
    } catch (err) {
      if (stopped || (err && err.name === "AbortError")) return;
      onState("reconnecting", err instanceof ApiError ? err.message : unreachable());
    }
    if (stopped) return;
    if (finished) { onState("done"); return; }
    // The stream ended before the run's last event: a drop. Resume after the last seq.
    onState("reconnecting", "the event stream was interrupted");
    timer = setTimeout(connect, delay);
    delay = Math.min(delay * 2, 5000);
  };
  connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (ctrl) ctrl.abort();
  };
}
