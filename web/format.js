// format.js - how amounts, times, statuses and event sources read on the page (docs/MONEY.md, docs/API.md),
// the same as the command-line client prints them.

// Micro-dollars as dollars: up to 5 decimals, trailing zeros trimmed, at least 2 (docs/MONEY.md):
// 40000 -> "$0.04", 3530 -> "$0.00353". Integer arithmetic only (amounts are integers < 2^53).
export function money(micros) {
  if (typeof micros !== "number" || !Number.isFinite(micros)) return "—";
  let sign = "";
  let m = Math.trunc(micros);
  if (m < 0) { sign = "-"; m = -m; }
  const tens = Math.floor(m / 10) + (m % 10 >= 5 ? 1 : 0); // half up to the fifth decimal
  const dollars = Math.floor(tens / 100000);
  let digits = String(tens % 100000).padStart(5, "0");
  while (digits.length > 2 && digits.endsWith("0")) digits = digits.slice(0, -1);
  return `${sign}$${dollars}.${digits}`;
}

// micros rounded half up to the fifth decimal, as money() shows them.
export function shown(micros) {
  const m = Math.trunc(micros);
  return m < 0 ? -shown(-m) : (Math.floor(m / 10) + (m % 10 >= 5 ? 1 : 0)) * 10;
}

// The rest of a total once a part is taken, as the shown total minus the shown part, so that the
// two amounts on the page add up to the total shown (the CLI's eph_money_format_rest).
export function moneyRest(total, part) {
  if (typeof total !== "number" || typeof part !== "number") return "—";
  if (part < 0 || part > total) return money(total - part);
  return money(shown(total) - shown(part));
}

// "0.04", "$1", "12.5" -> micros, or null when it is not an amount (at most 6 decimals).
export function parseDollars(text) {
  const m = /^\s*\$?(\d{1,9})(?:\.(\d{1,6}))?\s*$/.exec(text);
  if (!m) return null;
  return Number(m[1]) * 1000000 + Number((m[2] || "").padEnd(6, "0"));
}

// Micros as the shortest exact dollar string for a form field: 40000 -> "0.04".
export function dollarsField(micros) {
  const whole = Math.floor(micros / 1000000);
  let frac = String(micros % 1000000).padStart(6, "0").replace(/0+$/, "");
  return frac ? `${whole}.${frac}` : String(whole);
}

export function thousands(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : "—";
}

export function seconds(t) {
  return typeof t === "number" ? t.toFixed(2) : "";
}

export function duration(run) {
  const a = Date.parse(run.started_at || run.created_at);
  const b = Date.parse(run.finished_at);
  if (!Number.isFinite(a) || !Number.isFinite(b)) return "—";
  const s = Math.max(0, (b - a) / 1000);
  return s < 60 ? `${s.toFixed(2)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function when(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "—";
  return d.toLocaleString("en-GB", { day: "numeric", month: "short", hour: "2-digit",
                                     minute: "2-digit", second: "2-digit" });
}

const STATUS = {
  queued: "Queued", starting: "Starting", running: "Running", completed: "Completed",
  failed: "Failed", timed_out: "Timed out", budget_exhausted: "Budget exhausted",
  cancelled: "Cancelled", ready: "Ready", stopped: "Stopped",
};
export const TERMINAL = ["completed", "failed", "timed_out", "budget_exhausted", "cancelled"];
// A sandbox's statuses in its own words (docs/SANDBOXES.md, "Status"), and those that are an end.
export const SANDBOX_LIVE = ["starting", "ready"];
export const SANDBOX_TERMINAL = ["stopped", "timed_out", "budget_exhausted", "failed"];

export function statusLabel(s) {
  return STATUS[s] || wordLabel(s);
}

function wordLabel(s) {
  const w = String(s || "event").replace(/[^A-Za-z0-9]+/g, " ").trim().slice(0, 16);
  return w ? w[0].toUpperCase() + w.slice(1) : "Event";
}

function sandboxLabel(message) {
  const m = String(message || "").toLowerCase();
  if (m.includes("microvm")) return "MicroVM";
  if (m.includes("gvisor")) return "gVisor";
  return "Sandbox";
}

// The source column of the seed's timeline: "Queued", "MicroVM", "Shell", "Completed", ...
// state.sandbox remembers the sandbox's name for the worker's first line, as the seed shows it.
export function sourceLabel(ev, state) {
  const { type = "", source = "" } = ev;
  if (type === "run.queued" || source === "queue") return "Queued";
  if (type.startsWith("run.")) return statusLabel(type.slice(4));
  if (type === "worker.destroyed") return "Worker destroyed";
  if (source === "sandbox" || type.startsWith("sandbox.")) {
    state.sandbox = sandboxLabel(ev.message);
    return state.sandbox;
  }
  if (type === "worker.started") return state.sandbox || "Worker";
  if (type === "replay.divergence") return "Divergence";
  const known = { worker: "Worker", model: "Model", shell: "Shell", web: "Web",
                  connection: "Connection", file: "File", agent: "Agent" };
  return known[source] || wordLabel(source || type);
}

// A CSS class for the source's colour.
export function sourceClass(ev) {
  const t = ev.type || "";
  if (t === "run.completed") return "ok";
  if (t.startsWith("run.") && t !== "run.queued") return "bad";
  if (t === "replay.divergence" || t === "tool.rejected") return "warn";
  if (ev.data && (ev.data.denied || (typeof ev.data.exit_code === "number" && ev.data.exit_code !== 0)))
    return "warn";
  return ev.source || "other";
}
