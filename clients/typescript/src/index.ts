// A client for the Ephemeral API on fetch, for Node >= 18 and browsers (docs/API.md).
import {
  EphemeralConnectionError,
  EphemeralError,
  EphemeralTimeoutError,
  NotFoundError,
  errorFromAnswer,
} from "./errors.js";
import type { components, operations } from "./openapi.js";
import { OPERATIONS, type OperationId } from "./operations.js";

export {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  EphemeralConnectionError,
  EphemeralError,
  EphemeralTimeoutError,
  InsufficientBalanceError,
  InternalServerError,
  NotBackgroundError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  SandboxBusyError,
  SandboxElsewhereError,
  SandboxEndedError,
  ServiceUnavailableError,
  UnprocessableEntityError,
  errorClass,
} from "./errors.js";
export {
  DEFAULT_TOLERANCE_SECONDS,
  SIGNATURE_HEADER,
  SignatureVerificationError,
  verifySignature,
} from "./webhooks.js";
export { OPERATIONS, type Operation, type OperationId } from "./operations.js";
export type { components, operations, paths } from "./openapi.js";

type Schemas = components["schemas"];
export type Run = Schemas["Run"];
export type RunCreate = Schemas["RunCreate"];
export type RunStatus = Schemas["RunStatus"];
export type RunEvent = Schemas["Event"];
export type Balance = Schemas["Balance"];
export type Model = Schemas["Model"];
export type ApiKey = Schemas["ApiKey"];
export type ApiKeyCreated = Schemas["ApiKeyCreated"];
export type Connection = Schemas["Connection"];
export type ConnectionCreate = Schemas["ConnectionCreate"];
export type Image = Schemas["Image"];
export type ImageCreate = Schemas["ImageCreate"];
export type ConnectionDeleted = Schemas["ConnectionDeleted"];
export type Deleted = Schemas["Deleted"];
export type Webhook = Schemas["Webhook"];
export type WebhookCreate = Schemas["WebhookCreate"];
export type WebhookCreated = Schemas["WebhookCreated"];
export type WebhookDelivery = Schemas["WebhookDelivery"];
export type WebhookDeliveryDetail = Schemas["WebhookDeliveryDetail"];
export type Health = Schemas["Health"];
export type Sandbox = Schemas["Sandbox"];
export type SandboxCreate = Schemas["SandboxCreate"];
export type SandboxStatus = Schemas["SandboxStatus"];
export type Command = Schemas["Command"];
export type CommandCreate = Schemas["CommandCreate"];
export type SandboxFileWritten = Schemas["SandboxFileWritten"];
export type SandboxFile = Schemas["SandboxFileList"]["data"][number];
/** A command's stream: its output as it comes, then its end. */
export type CommandEvent =
  | { type: "stdout" | "stderr"; text: string; offset: number }
  | ({ type: "exit" } & Command);
/** What a stream gives for a zero-data-retention run just before `worker.destroyed`. */
export interface ResultEvent {
  type: "result";
  result: string | null;
}
/** One line of a transcript (docs/AGENT.md, "The record"). */
export type TranscriptLine = { kind: string } & Record<string, unknown>;
export type ListRunsParams = {
  status?: RunStatus;
  metadata?: Record<string, string>;
  after?: string;
  /** The page size, 1 to 100. */
  limit?: number;
};

export const VERSION = "0.1.0";
export const DEFAULT_BASE_URL = "http://127.0.0.1:8080";
export const FINAL_EVENT = "worker.destroyed";
export const TERMINAL_STATUSES: readonly RunStatus[] = [
  "completed",
  "failed",
  "timed_out",
  "budget_exhausted",
  "cancelled",
];
/** The longest the server parks a `Prefer: wait`. */
export const MAX_WAIT_SECONDS = 600;
/** What the client reads of one JSON answer, and of one line of a stream. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;
export const MAX_LINE_BYTES = 64 * 1024 * 1024;
/** The least a stream waits for its next bytes: the server sends a keep-alive every 15 s. */
const STREAM_IDLE_MS = 45_000;
/** 503 codes that a retry cannot cure. */
const PERMANENT_CODES = new Set(["model_unavailable"]);
/** The operations that take no key (the operator's). */
const NO_KEY = new Set<OperationId>(["health", "healthHead", "metrics", "metricsHead"]);

/** What a HEAD answers: the GET's status and headers (lower-case names), no body. */
export interface HeadAnswer {
  status: number;
  headers: Record<string, string>;
}
type HeadOperationId = { [K in OperationId]: (typeof OPERATIONS)[K]["method"] extends "HEAD" ? K : never }[OperationId];

export interface EphemeralOptions {
  /** Defaults to EPHEMERAL_URL (in Node), else http://127.0.0.1:8080. */
  baseUrl?: string;
  /** Defaults to EPHEMERAL_API_KEY (in Node). */
  apiKey?: string;
  /** Bounds each request, in milliseconds (a long poll adds its wait); default 60 s. */
  timeoutMs?: number;
  /** How many times a 429, a 503 or (when safe) a connection failure is retried; default 2. */
  maxRetries?: number;
  /** The longest wait before a retry, whatever Retry-After says; default 60 s. */
  maxRetryWaitMs?: number;
  /** Another fetch (a test's, a proxy's). */
  fetch?: typeof fetch;
  /** How the client waits between attempts; tests replace it to see the waits. */
  sleep?: (ms: number) => Promise<void>;
}

interface RequestOptions {
  path?: Record<string, string>;
  query?: Record<string, string | number | boolean | undefined | Record<string, string>>;
  body?: unknown;
  /** Raw bytes sent as application/octet-stream (a sandbox's file). */
  raw?: Uint8Array;
  headers?: Record<string, string>;
  auth?: boolean;
  accept?: string;
  timeoutMs?: number;
  safe?: boolean;
  signal?: AbortSignal | undefined;
  /** Keep the timeout off once the headers are in (a stream keeps its own idle timeout). */
  stream?: boolean;
}

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const value = proc?.env?.[name];
  return value ? value : undefined;
}

function newIdempotencyKey(): string {
  const c = (globalThis as { crypto?: Crypto }).crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  const bytes = new Uint8Array(16);
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i++) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function checkWait(wait: number | undefined): number | undefined {
  if (wait === undefined) return undefined;
  if (!Number.isInteger(wait) || wait < 0 || wait > MAX_WAIT_SECONDS) {
    throw new RangeError(`wait must be an integer from 0 to ${MAX_WAIT_SECONDS} (seconds)`);
  }
  return wait;
}

function retryAfterMs(value: string | null): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const when = Date.parse(v);
  return Number.isNaN(when) ? undefined : Math.max(0, when - Date.now());
}

function headersOf(res: Response): Record<string, string> {
  const out: Record<string, string> = {};
  res.headers.forEach((value, key) => {
    out[key.toLowerCase()] = value;
  });
  return out;
}

function isAbort(err: unknown): boolean {
  return (
    typeof err === "object" &&
    err !== null &&
    ((err as { name?: string }).name === "AbortError" || (err as { name?: string }).name === "TimeoutError")
  );
}

/** The body's lines (without their end of line), each capped; a cut connection throws. */
async function* readLines(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
  signal?: AbortSignal,
): AsyncGenerator<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const idle = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new EphemeralTimeoutError("the stream was idle too long")), idleMs);
      });
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        if (signal?.aborted) throw signal.reason ?? new Error("aborted");
        chunk = await Promise.race([reader.read(), idle]);
      } finally {
        clearTimeout(timer);
      }
      if (chunk.done) break;
      buffer += decoder.decode(chunk.value, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        let line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.endsWith("\r")) line = line.slice(0, -1);
        yield line;
      }
      if (buffer.length > MAX_LINE_BYTES) {
        throw new EphemeralConnectionError(`a line of the answer is over ${MAX_LINE_BYTES} bytes`);
      }
    }
    buffer += decoder.decode();
    if (buffer.length > 0) yield buffer;
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

interface SseMessage {
  event: string;
  id: string | undefined;
  data: string;
}

/** Server-Sent Events: each message a blank line ends; one cut short is never given. */
async function* sseMessages(lines: AsyncIterable<string>, final: { clean: boolean }): AsyncGenerator<SseMessage> {
  let event = "";
  let id: string | undefined;
  let data: string[] = [];
  for await (const line of lines) {
    if (line === "") {
      if (data.length > 0 || event) yield { event, id, data: data.join("\n") };
      event = "";
      id = undefined;
      data = [];
      continue;
    }
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") event = value;
    else if (field === "id" && !value.includes("\0")) id = value;
  }
  final.clean = true;
}

/** A client of one Ephemeral server. */
export class Ephemeral {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly maxRetryWaitMs: number;
  readonly runs: Runs;
  readonly models: Models;
  readonly keys: Keys;
  readonly connections: Connections;
  readonly images: Images;
  readonly webhooks: Webhooks;
  readonly credits: Credits;
  readonly sandboxes: Sandboxes;
  /** @internal */
  readonly sleep: (ms: number) => Promise<void>;
  readonly #apiKey: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: EphemeralOptions = {}) {
    const base = options.baseUrl ?? env("EPHEMERAL_URL") ?? DEFAULT_BASE_URL;
    let url: URL;
    try {
      url = new URL(base);
    } catch {
      throw new TypeError("baseUrl must be an http:// or https:// URL");
    }
    if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname) {
      throw new TypeError("baseUrl must be an http:// or https:// URL with a host");
    }
    if (url.username || url.password) throw new TypeError("baseUrl must not hold a user or a password: use apiKey");
    if (url.search || url.hash) throw new TypeError("baseUrl must not have a query or a fragment");
    const key = options.apiKey ?? env("EPHEMERAL_API_KEY");
    if (key !== undefined && !/^[\x21-\x7e]+$/.test(key)) {
      throw new TypeError("apiKey must be printable ASCII without spaces");
    }
    this.baseUrl = base.replace(/\/+$/, "");
    this.#apiKey = key;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.maxRetries = options.maxRetries ?? 2;
    this.maxRetryWaitMs = options.maxRetryWaitMs ?? 60_000;
    if (!(this.timeoutMs > 0)) throw new RangeError("timeoutMs must be positive");
    if (!Number.isInteger(this.maxRetries) || this.maxRetries < 0) throw new RangeError("maxRetries must be an integer >= 0");
    const f = options.fetch ?? (globalThis.fetch as typeof fetch | undefined);
    if (!f) throw new TypeError("no fetch: Node >= 18 or a browser, or pass options.fetch");
    this.#fetch = f;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.runs = new Runs(this);
    this.models = new Models(this);
    this.keys = new Keys(this);
    this.connections = new Connections(this);
    this.images = new Images(this);
    this.webhooks = new Webhooks(this);
    this.credits = new Credits(this);
    this.sandboxes = new Sandboxes(this);
  }

  /** GET /v1/balance. */
  balance(): Promise<Balance> {
    return this.json<Balance>("getBalance");
  }

  /** GET /healthz (no key): the readiness report, also when it says unavailable (503). */
  async health(): Promise<Health> {
    try {
      return await this.json<Health>("health", { auth: false });
    } catch (err) {
      if (err instanceof EphemeralError && err.status === 503 && typeof err.body === "object" && err.body && "status" in err.body) {
        return err.body as Health;
      }
      throw err;
    }
  }

  /** GET /metrics (no key): the Prometheus text. */
  async metrics(): Promise<string> {
    const res = await this.request("metrics", { auth: false, accept: "text/plain" });
    return readText(res);
  }

  /**
   * The HEAD of an operation (`listRunsHead`, `getRunHead`, ...): the status and headers its GET
   * would answer, without the body. An error status throws, as the GET's would (with no message
   * from the server).
   */
  async head(
    operationId: HeadOperationId,
    options: { path?: Record<string, string>; query?: RequestOptions["query"] } = {},
  ): Promise<HeadAnswer> {
    if (OPERATIONS[operationId]?.method !== "HEAD") {
      throw new TypeError(`${String(operationId)} is not a HEAD operation of the API`);
    }
    const res = await this.request(operationId, { ...options, auth: !NO_KEY.has(operationId) });
    await readText(res);
    return { status: res.status, headers: headersOf(res) };
  }

  toJSON(): { baseUrl: string } {
    return { baseUrl: this.baseUrl }; // never the key
  }

  /** @internal */
  backoffMs(attempt: number): number {
    const base = Math.min(this.maxRetryWaitMs, 500 * 2 ** attempt);
    return base / 2 + Math.random() * (base / 2);
  }

  /** @internal The URL of an operation. */
  url(op: OperationId, options: RequestOptions): string {
    let target: string = OPERATIONS[op].path;
    for (const [name, value] of Object.entries(options.path ?? {})) {
      if (typeof value !== "string" || value === "") throw new TypeError(`${name} must be a non-empty string`);
      // a sandbox file's path keeps its slashes (files//tmp/x is the absolute /tmp/x)
      // fetch's URL would resolve "." and ".." segments away: a path with one is refused here
      if (name === "path" && value.split("/").some((seg) => seg === "." || seg === "..")) {
        throw new TypeError("a sandbox path must not have '.' or '..' components");
      }
      const encoded = name === "path" ? value.split("/").map(encodeURIComponent).join("/") : encodeURIComponent(value);
      target = target.replace(`{${name}}`, encoded);
    }
    if (target.includes("{")) throw new TypeError(`${op}: a path parameter is missing`);
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value === undefined) continue;
      if (typeof value === "object") {
        for (const [k, v] of Object.entries(value)) params.append(`${name}[${k}]`, String(v));
      } else {
        params.append(name, String(value));
      }
    }
    const qs = params.toString();
    return this.baseUrl + target + (qs ? `?${qs}` : "");
  }

  /** @internal One operation with its retries: answers below 400, throws EphemeralError above. */
  async request(op: OperationId, options: RequestOptions = {}): Promise<Response> {
    const { method } = OPERATIONS[op];
    const url = this.url(op, options);
    const headers: Record<string, string> = { Accept: options.accept ?? "application/json" };
    if (options.auth !== false && this.#apiKey) headers["Authorization"] = `Bearer ${this.#apiKey}`;
    let body: string | Uint8Array | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["Content-Type"] = "application/json";
    } else if (options.raw !== undefined) {
      body = options.raw;
      headers["Content-Type"] = "application/octet-stream";
    }
    Object.assign(headers, options.headers ?? {});
    const safe = options.safe ?? (method === "GET" || method === "HEAD" || "Idempotency-Key" in headers);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeoutMs);
      const onAbort = () => controller.abort();
      options.signal?.addEventListener("abort", onAbort, { once: true });
      let res: Response;
      try {
        const init: RequestInit = { method, headers, signal: controller.signal };
        if (body !== undefined) init.body = body as BodyInit;
        res = await this.#fetch(url, init);
      } catch (err) {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        if (options.signal?.aborted) throw err;
        if (safe && attempt < this.maxRetries) {
          await this.sleep(this.backoffMs(attempt));
          continue;
        }
        const where = `${method} ${OPERATIONS[op].path}`;
        if (timedOut) throw new EphemeralTimeoutError(`timed out on ${where}`, { cause: err });
        throw new EphemeralConnectionError(`connection failed on ${where}: ${String(err)}`, { cause: err });
      }
      if (options.stream) {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
      }
      if (res.status < 400) {
        if (!options.stream) {
          // The timer keeps running while the body is read; cleared once it is.
          return withCleanup(res, () => {
            clearTimeout(timer);
            options.signal?.removeEventListener("abort", onAbort);
          });
        }
        return res;
      }
      let text: string;
      try {
        text = await readText(res);
      } finally {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
      }
      const error = errorFromAnswer(res.status, res.statusText, headersOf(res), text);
      if ((res.status === 429 || res.status === 503) && attempt < this.maxRetries && !PERMANENT_CODES.has(error.code ?? "")) {
        const wait = retryAfterMs(res.headers.get("retry-after")) ?? this.backoffMs(attempt);
        await this.sleep(Math.min(wait, this.maxRetryWaitMs));
        continue;
      }
      throw error;
    }
  }

  /** @internal */
  async json<T>(op: OperationId, options: RequestOptions = {}): Promise<T> {
    const res = await this.request(op, options);
    const text = await readText(res);
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new EphemeralConnectionError(`the answer is not JSON: ${String(err)}`, { cause: err });
    }
  }
}

const cleanups = new WeakMap<Response, () => void>();

function withCleanup(res: Response, cleanup: () => void): Response {
  cleanups.set(res, cleanup);
  return res;
}

/** A whole body as text, capped; a cut or timed-out body throws EphemeralConnectionError. */
async function readText(res: Response): Promise<string> {
  return new TextDecoder().decode(await readBytes(res));
}

/** The whole body, at most MAX_BODY_BYTES. */
async function readBytes(res: Response): Promise<Uint8Array> {
  const cleanup = cleanups.get(res);
  try {
    if (!res.body) return new Uint8Array(0);
    const reader = res.body.getReader();
    const parts: Uint8Array[] = [];
    let size = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) {
        reader.cancel().catch(() => undefined);
        throw new EphemeralConnectionError(`the answer is over ${MAX_BODY_BYTES} bytes`);
      }
      parts.push(value);
    }
    const all = new Uint8Array(size);
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.byteLength;
    }
    return all;
  } catch (err) {
    if (err instanceof EphemeralConnectionError) throw err;
    if (isAbort(err)) throw new EphemeralTimeoutError("timed out reading the answer", { cause: err });
    throw new EphemeralConnectionError(`reading the answer failed: ${String(err)}`, { cause: err });
  } finally {
    cleanup?.();
  }
}

/** `client.runs`. */
/** A create with an Idempotency-Key (a new UUID unless given) and `Prefer: wait=N`. */
function createWaited<T>(
  client: Ephemeral,
  op: "createRun" | "createSandbox",
  fields: unknown,
  options: { idempotencyKey?: string; wait?: number },
): Promise<T> {
  const wait = checkWait(options.wait);
  const headers: Record<string, string> = { "Idempotency-Key": options.idempotencyKey ?? newIdempotencyKey() };
  if (wait !== undefined) headers["Prefer"] = `wait=${wait}`;
  return client.json<T>(op, { body: fields, headers, timeoutMs: client.timeoutMs + (wait ?? 0) * 1000 });
}

/** A GET by id that long-polls `wait` seconds. */
function getWaited<T>(client: Ephemeral, op: "getRun" | "getSandbox", id: string, options: { wait?: number }): Promise<T> {
  const wait = checkWait(options.wait);
  return client.json<T>(op, {
    path: { id },
    headers: wait !== undefined ? { Prefer: `wait=${wait}` } : {},
    timeoutMs: client.timeoutMs + (wait ?? 0) * 1000,
  });
}

export class Runs {
  constructor(private readonly client: Ephemeral) {}

  /**
   * POST /v1/runs. An Idempotency-Key is always sent (a new UUID unless given), so a retry after
   * a lost answer creates nothing more; `wait` (seconds, <= 600) is `Prefer: wait=N`.
   */
  create(fields: RunCreate, options: { idempotencyKey?: string; wait?: number } = {}): Promise<Run> {
    return createWaited<Run>(this.client, "createRun", fields, options);
  }

  /** GET /v1/runs/{id}; `wait` long-polls up to that many seconds for a terminal state. */
  get(id: string, options: { wait?: number } = {}): Promise<Run> {
    return getWaited<Run>(this.client, "getRun", id, options);
  }

  /** HEAD /v1/runs/{id}: whether the key's organization has this run. */
  async exists(id: string): Promise<boolean> {
    try {
      await this.client.head("getRunHead", { path: { id } });
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** The run once it is terminal (long polls), or as it is after `timeoutMs`. */
  async wait(id: string, options: { timeoutMs?: number } = {}): Promise<Run> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    for (;;) {
      const left = deadline === undefined ? MAX_WAIT_SECONDS : Math.max(0, (deadline - Date.now()) / 1000);
      const run = await this.get(id, { wait: Math.floor(Math.min(MAX_WAIT_SECONDS, left)) });
      if (TERMINAL_STATUSES.includes(run.status) || (deadline !== undefined && Date.now() >= deadline)) return run;
    }
  }

  /** Every run, newest first, page after page (GET /v1/runs with `after`). */
  async *list(params: ListRunsParams = {}): AsyncGenerator<Run> {
    let after = params.after;
    for (;;) {
      const page = await this.client.json<Schemas["RunList"]>("listRuns", {
        query: { limit: params.limit, after, status: params.status, metadata: params.metadata },
      });
      yield* page.data;
      const last = page.data[page.data.length - 1];
      if (!page.has_more || !last) return;
      after = last.id;
    }
  }

  /**
   * The run's events. Following (the default): the Server-Sent Events stream, past events then
   * live ones, to `worker.destroyed`; a dropped or stalled stream is resumed with Last-Event-ID,
   * so no event is lost or repeated. `follow: false`: the events stored so far (one request).
   */
  async *events(
    id: string,
    options: { after?: number; follow?: boolean; signal?: AbortSignal } = {},
    /** @internal a sandbox's timeline: its operation, and whether it has ended */
    of: { op: "listRunEvents" | "listSandboxEvents"; ended: () => Promise<boolean> } = {
      op: "listRunEvents",
      ended: async () => TERMINAL_STATUSES.includes((await this.get(id)).status),
    },
  ): AsyncGenerator<RunEvent | ResultEvent> {
    const client = this.client;
    if (options.follow === false) {
      const page = await client.json<Schemas["EventList"]>(of.op, { path: { id }, query: { after: options.after } });
      yield* page.data;
      return;
    }
    let last = options.after;
    let failures = 0;
    for (;;) {
      const headers: Record<string, string> = {};
      if (last !== undefined) headers["Last-Event-ID"] = String(last);
      const res = await client.request(of.op, {
        path: { id },
        headers,
        accept: "text/event-stream",
        stream: true,
        signal: options.signal,
      });
      let progressed = false;
      const end = { clean: false };
      try {
        if (!res.body) throw new EphemeralConnectionError("the stream has no body");
        const idle = Math.max(client.timeoutMs, STREAM_IDLE_MS);
        for await (const msg of sseMessages(readLines(res.body, idle, options.signal), end)) {
          let event: Record<string, unknown>;
          try {
            event = msg.data ? (JSON.parse(msg.data) as Record<string, unknown>) : {};
          } catch (err) {
            throw new EphemeralConnectionError(`an event is not JSON: ${String(err)}`, { cause: err });
          }
          if (typeof event !== "object" || event === null || Array.isArray(event)) {
            throw new EphemeralConnectionError("an event is not a JSON object");
          }
          if (!("type" in event) && msg.event) event["type"] = msg.event;
          if (msg.id !== undefined) {
            const n = Number(msg.id);
            if (!Number.isInteger(n)) throw new EphemeralConnectionError("an event id is not a number");
            last = n;
          }
          progressed = true;
          yield event as unknown as RunEvent | ResultEvent;
          if (event["type"] === FINAL_EVENT) return;
        }
      } catch (err) {
        if (options.signal?.aborted) throw err;
        if (err instanceof EphemeralConnectionError && !(err instanceof EphemeralTimeoutError) &&
            !/stream has no body/.test(err.message)) {
          throw err; // malformed: resuming would not help
        }
        // a cut or stalled stream: resumed below
      }
      if (end.clean && !progressed) {
        // Closed with nothing new: the end, if the run is over.
        if (await of.ended()) return;
      }
      failures = progressed ? 0 : failures + 1;
      if (failures > client.maxRetries) {
        throw new EphemeralConnectionError(
          `the event stream of ${id} ended before ${FINAL_EVENT}, ${failures} times in a row without a new event`,
        );
      }
      if (!progressed) await client.sleep(client.backoffMs(failures - 1));
    }
  }

  /** POST /v1/runs/{id}/cancel: the run once settled (or after 5 s); idempotent. */
  cancel(id: string): Promise<Run> {
    return this.client.json<Run>("cancelRun", { path: { id }, safe: true, timeoutMs: this.client.timeoutMs + 5000 });
  }

  /** GET /v1/runs/{id}/transcript: the run's record, one object per JSON line, streamed. */
  async *transcript(id: string): AsyncGenerator<TranscriptLine> {
    const res = await this.client.request("getRunTranscript", {
      path: { id },
      accept: "application/x-ndjson",
      stream: true,
    });
    if (!res.body) return;
    try {
      for await (const line of readLines(res.body, Math.max(this.client.timeoutMs, STREAM_IDLE_MS))) {
        if (line.trim() === "") continue;
        let parsed: TranscriptLine;
        try {
          parsed = JSON.parse(line) as TranscriptLine;
        } catch (err) {
          throw new EphemeralConnectionError(`a transcript line is not JSON: ${String(err)}`, { cause: err });
        }
        yield parsed;
      }
    } catch (err) {
      if (err instanceof EphemeralConnectionError) throw err;
      throw new EphemeralConnectionError(`reading the transcript failed: ${String(err)}`, { cause: err });
    }
  }
}

/** `client.models`. */
export class Models {
  constructor(private readonly client: Ephemeral) {}

  /** GET /v1/models: every configured model, its prices, whether it is available. */
  async list(): Promise<Model[]> {
    type Answer = operations["listModels"]["responses"][200]["content"]["application/json"];
    return (await this.client.json<Answer>("listModels")).data;
  }
}

/** `client.keys` (admin). */
export class Keys {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/keys: the new key; its secret `key` is in this answer only. */
  create(role: "member" | "admin" = "member"): Promise<ApiKeyCreated> {
    return this.client.json<ApiKeyCreated>("createKey", { body: { role } });
  }

  /** GET /v1/keys: the organization's live keys (never a secret). */
  async list(): Promise<ApiKey[]> {
    return (await this.client.json<Schemas["ApiKeyList"]>("listKeys")).data;
  }

  /** DELETE /v1/keys/{id}: the key gets 401 from then on. */
  revoke(id: string): Promise<Deleted> {
    return this.client.json<Deleted>("revokeKey", { path: { id } });
  }
}

/** `client.connections` (admin). */
export class Connections {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/connections: header and query values are credentials, sealed, never shown again. */
  create(connection: ConnectionCreate): Promise<Connection> {
    return this.client.json<Connection>("createConnection", { body: connection });
  }

  /** GET /v1/connections. */
  async list(): Promise<Connection[]> {
    return (await this.client.json<Schemas["ConnectionList"]>("listConnections")).data;
  }

  /** GET /v1/connections/{name} (a name or an id). */
  get(name: string): Promise<Connection> {
    return this.client.json<Connection>("getConnection", { path: { name } });
  }

  /** DELETE /v1/connections/{name} (a name or an id). */
  delete(name: string): Promise<ConnectionDeleted> {
    return this.client.json<ConnectionDeleted>("deleteConnection", { path: { name } });
  }
}

/** `client.images`: the images runs may name (admin for create and delete; docs/IMAGES.md). */
export class Images {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/images: starts a build (202); the image, "building" (or "ready" for a recipe built before). */
  create(image: ImageCreate): Promise<Image> {
    return this.client.json<Image>("createImage", { body: image });
  }

  /** GET /v1/images: the organization's images and the operator's. */
  async list(): Promise<Image[]> {
    return (await this.client.json<Schemas["ImageList"]>("listImages")).data;
  }

  /** GET /v1/images/{name}. */
  get(name: string): Promise<Image> {
    return this.client.json<Image>("getImage", { path: { name } });
  }

  /** DELETE /v1/images/{name} (409 while a run uses it). */
  delete(name: string): Promise<Schemas["ImageDeleted"]> {
    return this.client.json<Schemas["ImageDeleted"]>("deleteImage", { path: { name } });
  }

  /** GET /v1/images/{name}/log: the build's log, line by line, streamed until the build ends. */
  async *log(name: string): AsyncGenerator<string> {
    const res = await this.client.request("getImageLog", { path: { name }, accept: "text/plain", stream: true });
    if (!res.body) return;
    try {
      for await (const line of readLines(res.body, Math.max(this.client.timeoutMs, STREAM_IDLE_MS))) yield line;
    } catch (err) {
      throw new EphemeralConnectionError(`reading the image's log failed: ${String(err)}`, { cause: err });
    }
  }
}

/** `client.webhooks` (admin): endpoints that get a signed POST of each ended run's event (docs/WEBHOOKS.md); `verifySignature` checks one. */
export class Webhooks {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/webhooks: the endpoint with its `secret`, which is shown this once. */
  create(webhook: WebhookCreate): Promise<WebhookCreated> {
    return this.client.json<WebhookCreated>("createWebhook", { body: webhook });
  }

  /** GET /v1/webhooks. */
  async list(): Promise<Webhook[]> {
    return (await this.client.json<Schemas["WebhookList"]>("listWebhooks")).data;
  }

  /** GET /v1/webhooks/{id}. */
  get(id: string): Promise<Webhook> {
    return this.client.json<Webhook>("getWebhook", { path: { id } });
  }

  /** DELETE /v1/webhooks/{id}: nothing more is sent to it. */
  delete(id: string): Promise<Deleted> {
    return this.client.json<Deleted>("deleteWebhook", { path: { id } });
  }

  /** GET /v1/webhooks/{id}/deliveries: the newest first, each with its last attempt. */
  async deliveries(
    id: string,
    options: { limit?: number; after?: string } = {},
  ): Promise<WebhookDelivery[]> {
    const page = await this.client.json<Schemas["WebhookDeliveryList"]>("listWebhookDeliveries", {
      path: { id },
      query: { limit: options.limit, after: options.after },
    });
    return page.data;
  }

  /** GET /v1/webhooks/{id}/deliveries/{event_id}: one delivery with its `history` of attempts. */
  delivery(id: string, eventId: string): Promise<WebhookDeliveryDetail> {
    return this.client.json<WebhookDeliveryDetail>("getWebhookDelivery", {
      path: { id, event_id: eventId },
    });
  }
}

/** `client.credits` (admin). */
export class Credits {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/credits, always with an Idempotency-Key, so a retry never credits twice. */
  add(micros: number, options: { idempotencyKey?: string } = {}): Promise<Balance> {
    if (!Number.isSafeInteger(micros) || micros < 1) throw new RangeError("micros must be a positive integer");
    return this.client.json<Balance>("addCredit", {
      body: { micros },
      headers: { "Idempotency-Key": options.idempotencyKey ?? newIdempotencyKey() },
    });
  }
}

export const SANDBOX_ENDED: readonly SandboxStatus[] = ["stopped", "timed_out", "budget_exhausted", "failed"];

/** A command's Server-Sent Events: stdout / stderr `{text, offset}`, then one `exit`. */
async function* commandStream(res: Response, idleMs: number): AsyncGenerator<CommandEvent> {
  if (!res.body) throw new EphemeralConnectionError("the command's stream has no body");
  const end = { clean: false };
  for await (const msg of sseMessages(readLines(res.body, idleMs), end)) {
    let data: Record<string, unknown>;
    try {
      data = msg.data ? (JSON.parse(msg.data) as Record<string, unknown>) : {};
    } catch (err) {
      throw new EphemeralConnectionError(`a command event is not JSON: ${String(err)}`, { cause: err });
    }
    if (typeof data !== "object" || data === null || Array.isArray(data)) {
      throw new EphemeralConnectionError("a command event is not a JSON object");
    }
    yield { ...data, type: msg.event } as unknown as CommandEvent;
    if (msg.event === "exit") return;
  }
  throw new EphemeralConnectionError("the command's stream ended before its exit event");
}

/** `client.sandboxes`: sandboxes you drive (docs/SANDBOXES.md). */
export class Sandboxes {
  constructor(private readonly client: Ephemeral) {}

  /** POST /v1/sandboxes; an Idempotency-Key is always sent; `wait` answers once it is ready. */
  create(fields: SandboxCreate, options: { idempotencyKey?: string; wait?: number } = {}): Promise<Sandbox> {
    return createWaited<Sandbox>(this.client, "createSandbox", fields, options);
  }

  /** GET /v1/sandboxes/{id}; `wait` long-polls until it has ended. */
  get(id: string, options: { wait?: number } = {}): Promise<Sandbox> {
    return getWaited<Sandbox>(this.client, "getSandbox", id, options);
  }

  /** Every sandbox, newest first, page after page. */
  async *list(
    params: { status?: SandboxStatus; metadata?: Record<string, string>; after?: string; limit?: number } = {},
  ): AsyncGenerator<Sandbox> {
    let after = params.after;
    for (;;) {
      const page = await this.client.json<Schemas["SandboxList"]>("listSandboxes", {
        query: { limit: params.limit, after, status: params.status, metadata: params.metadata },
      });
      yield* page.data;
      const last = page.data[page.data.length - 1];
      if (!page.has_more || !last) return;
      after = last.id;
    }
  }

  /** DELETE /v1/sandboxes/{id}: stops it; answers it once settled (or after 5 s); idempotent. */
  delete(id: string): Promise<Sandbox> {
    return this.client.json<Sandbox>("deleteSandbox", { path: { id }, timeoutMs: this.client.timeoutMs + 5000 });
  }

  /** One command, answered once finished, or `running` when `wait` (60 s by default) passed first. Never retried. */
  exec(id: string, command: string, options: Omit<CommandCreate, "command" | "background"> & { wait?: number } = {}): Promise<Command> {
    const { wait: w, ...fields } = options;
    const wait = checkWait(w);
    return this.client.json<Command>("runSandboxCommand", {
      path: { id },
      body: { command, ...fields },
      headers: wait !== undefined ? { Prefer: `wait=${wait}` } : {},
      safe: false,
      timeoutMs: this.client.timeoutMs + (wait ?? 60) * 1000,
    });
  }

  /** One command, its output as it comes (stdout / stderr events), then its `exit` event. */
  async *stream(id: string, command: string, options: Omit<CommandCreate, "command" | "background"> = {}): AsyncGenerator<CommandEvent> {
    const res = await this.client.request("runSandboxCommand", {
      path: { id },
      body: { command, ...options },
      accept: "text/event-stream",
      safe: false,
      stream: true,
    });
    yield* commandStream(res, Math.max(this.client.timeoutMs, STREAM_IDLE_MS));
  }

  /** A background command, answered at once (`running`). */
  background(id: string, command: string, options: Pick<CommandCreate, "cwd" | "env" | "stdin"> = {}): Promise<Command> {
    return this.client.json<Command>("runSandboxCommand", {
      path: { id },
      body: { command, background: true, ...options },
      safe: false,
    });
  }

  /** GET …/commands/{cid}: one of the sandbox's last 64 commands. */
  command(id: string, commandId: string): Promise<Command> {
    return this.client.json<Command>("getSandboxCommand", { path: { id, cid: commandId } });
  }

  /** A background command's output as it comes, then its `exit` event. */
  async *follow(id: string, commandId: string): AsyncGenerator<CommandEvent> {
    const res = await this.client.request("streamSandboxCommand", {
      path: { id, cid: commandId },
      accept: "text/event-stream",
      stream: true,
    });
    yield* commandStream(res, Math.max(this.client.timeoutMs, STREAM_IDLE_MS));
  }

  /** Kills a background command's process group; a foreground one is NotBackgroundError. */
  kill(id: string, commandId: string): Promise<Command> {
    return this.client.json<Command>("killSandboxCommand", { path: { id, cid: commandId }, safe: true });
  }

  /** PUT …/files/{path}: relative to the scratch directory, or absolute under /tmp. */
  upload(id: string, path: string, data: Uint8Array | string): Promise<SandboxFileWritten> {
    const raw = typeof data === "string" ? new TextEncoder().encode(data) : data;
    return this.client.json<SandboxFileWritten>("writeSandboxFile", { path: { id, path }, raw, safe: true });
  }

  /** GET …/files/{path}: the file's bytes. */
  async download(id: string, path: string): Promise<Uint8Array> {
    const res = await this.client.request("readSandboxFile", {
      path: { id, path },
      accept: "application/octet-stream",
    });
    return readBytes(res);
  }

  /** GET …/files: the scratch directory's entries (or `path`'s in it), symlinks never followed. */
  async files(id: string, path?: string): Promise<SandboxFile[]> {
    const page = await this.client.json<Schemas["SandboxFileList"]>("listSandboxFiles", { path: { id }, query: { path } });
    return page.data;
  }

  /** The sandbox's timeline, as `runs.events` gives a run's. */
  events(id: string, options: { after?: number; follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<RunEvent | ResultEvent> {
    return this.client.runs.events(id, options, {
      op: "listSandboxEvents",
      ended: async () => SANDBOX_ENDED.includes((await this.get(id)).status),
    });
  }
}
