// The client against a real ephemerald (tests/blackbox/client_typescript.sh starts it and sets
// EPHEMERAL_URL, EPHEMERAL_API_KEY (a member key), EPHEMERAL_ADMIN_KEY and EPHEMERAL_SEED);
// stand-in servers in front of it cut streams and answer 503.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { randomUUID } from "node:crypto";
import {
  AuthenticationError,
  BadRequestError,
  Ephemeral,
  EphemeralConnectionError,
  EphemeralError,
  EphemeralTimeoutError,
  FINAL_EVENT,
  NotBackgroundError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  SandboxEndedError,
  UnprocessableEntityError,
} from "../dist/index.js";
import { proxy, rejects, reply, standIn } from "./standin.mjs";

const env = ["EPHEMERAL_URL", "EPHEMERAL_API_KEY", "EPHEMERAL_ADMIN_KEY", "EPHEMERAL_SEED"];
const missing = env.filter((n) => !process.env[n]);
if (missing.length) throw new Error(`run through tests/blackbox/client_typescript.sh: ${missing.join(", ")} unset`);
const upstream = process.env.EPHEMERAL_URL;
const seed = () => JSON.parse(fs.readFileSync(process.env.EPHEMERAL_SEED, "utf8"));
const client = new Ephemeral(); // from EPHEMERAL_URL and EPHEMERAL_API_KEY
const admin = new Ephemeral({ apiKey: process.env.EPHEMERAL_ADMIN_KEY });
const collect = async (it) => {
  const out = [];
  for await (const x of it) out.push(x);
  return out;
};
const settled = (run) => {
  const c = run.cost;
  assert.equal(c.charged_micros + c.released_micros, c.reserved_micros);
  assert.equal(c.model_micros + c.web_micros + c.compute_micros, c.charged_micros);
};

test("the seed example end to end", async () => {
  const run = await client.runs.create(seed(), { wait: 120 });
  assert.match(run.id, /^run_[0-9a-f]{32}$/);
  assert.equal(run.status, "completed", JSON.stringify(run.error));
  assert.ok(run.result.includes("2 3 5 7 11 13 17 19 23 29 31 37 41 43 47"));
  assert.equal(run.prompt, seed().prompt);
  assert.equal(run.cost.reserved_micros, seed().max_cost_micros);
  settled(run);
  const events = await collect(client.runs.events(run.id));
  assert.equal(events.at(-1).type, FINAL_EVENT);
  assert.equal(events[0].type, "run.queued");
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
  assert.deepEqual(events, await collect(client.runs.events(run.id, { follow: false })), "the stream gives the stored events");
  assert.equal(events.filter((e) => e.type === "shell.command").length, 4);
  const transcript = await collect(client.runs.transcript(run.id));
  assert.equal(transcript[0].kind, "run");
  assert.equal(transcript.filter((l) => l.kind === "model_turn").length, 3);
  assert.equal((await client.runs.cancel(run.id)).status, "completed");
  assert.equal((await client.balance()).reserved_micros, 0);
});

test("the list pages through runs and filters on metadata", async () => {
  const tag = randomUUID();
  const created = [];
  for (let i = 0; i < 5; i++) created.push((await client.runs.create({ ...seed(), metadata: { suite: tag, i: String(i) } })).id);
  for (const id of created) await client.runs.wait(id, { timeoutMs: 120_000 });
  const listed = (await collect(client.runs.list({ metadata: { suite: tag }, limit: 2 }))).map((r) => r.id);
  assert.deepEqual(listed, [...created].reverse());
  assert.deepEqual((await collect(client.runs.list({ metadata: { suite: tag, i: "3" } }))).map((r) => r.id), [created[3]]);
  assert.deepEqual(await collect(client.runs.list({ metadata: { suite: "no-such-" + tag } })), []);
  const everything = (await collect(client.runs.list({ limit: 1 }))).map((r) => r.id);
  assert.ok(created.every((id) => everything.includes(id)));
  assert.equal(new Set(everything).size, everything.length);
  const done = (await collect(client.runs.list({ status: "completed", metadata: { suite: tag } }))).map((r) => r.id);
  assert.deepEqual(done, [...created].reverse());
});

test("a sandbox driven: create, files, exec waited and streamed, background and kill, delete, events", async () => {
  const sbx = client.sandboxes;
  const key = "ts-sbx-" + randomUUID();
  const box = await sbx.create({ max_cost_micros: 200000, metadata: { suite: key } }, { idempotencyKey: key, wait: 120 });
  assert.match(box.id, /^sbx_[0-9a-f]{32}$/);
  assert.equal(box.status, "ready");
  const again = await sbx.create({ max_cost_micros: 200000, metadata: { suite: key } }, { idempotencyKey: key });
  assert.equal(again.id, box.id, "an idempotent create makes one sandbox");
  assert.deepEqual((await collect(sbx.list({ metadata: { suite: key }, limit: 1 }))).map((b) => b.id), [box.id]);
  assert.equal((await sbx.get(box.id)).status, "ready");
  const written = await sbx.upload(box.id, "in/data.txt", new Uint8Array([97, 0, 98, 10]));
  assert.deepEqual([written.path, written.size], ["in/data.txt", 4]);
  assert.deepEqual([...(await sbx.download(box.id, "in/data.txt"))], [97, 0, 98, 10]);
  assert.deepEqual((await sbx.files(box.id, "in")).map((f) => [f.path, f.type, f.size]), [["in/data.txt", "file", 4]]);
  const done = await sbx.exec(box.id, "wc -c < in/data.txt; echo err >&2; exit 3", { wait: 60 });
  assert.deepEqual([done.status, done.exit_code, done.stdout?.trim(), done.stderr], ["exited", 3, "4", "err\n"]);
  const events = await collect(sbx.stream(box.id, "echo one; echo two >&2"));
  const last = events[events.length - 1];
  assert.equal(last.type, "exit");
  assert.equal(last.exit_code, 0);
  assert.equal(events.filter((e) => e.type === "stdout").map((e) => e.text).join(""), "one\n");
  assert.equal(events.filter((e) => e.type === "stderr").map((e) => e.text).join(""), "two\n");
  const bg = await sbx.background(box.id, "echo started; sleep 600");
  assert.deepEqual([bg.status, bg.background], ["running", true]);
  assert.equal((await sbx.command(box.id, bg.id)).status, "running");
  await assert.rejects(sbx.kill(box.id, done.id), NotBackgroundError);
  assert.equal((await sbx.kill(box.id, bg.id)).status, "killed");
  const tail = await collect(sbx.follow(box.id, bg.id));
  assert.equal(tail[tail.length - 1].type, "exit");
  assert.equal(tail[tail.length - 1].status, "killed");
  await assert.rejects(sbx.download(box.id, "no/such"), (e) => e instanceof NotFoundError && e.code === "file_not_found");
  // fetch would resolve ".." away: the client refuses it before sending; the server refuses a
  // path through a symlink out of the sandbox's areas
  await assert.rejects(sbx.upload(box.id, "../escape", "x"), TypeError);
  await sbx.exec(box.id, "ln -s /etc out");
  await assert.rejects(sbx.upload(box.id, "out/x", "x"), BadRequestError);
  const ended = await sbx.delete(box.id);
  assert.equal(ended.status, "stopped");
  assert.equal(ended.cost.charged_micros + ended.cost.released_micros, ended.cost.reserved_micros);
  await assert.rejects(sbx.exec(box.id, "true"), SandboxEndedError);
  const timeline = (await collect(sbx.events(box.id))).map((e) => e.type);
  assert.equal(timeline[0], "sandbox.created");
  assert.equal(timeline[timeline.length - 1], FINAL_EVENT);
  assert.deepEqual(timeline, (await collect(sbx.events(box.id, { follow: false }))).map((e) => e.type));
  await assert.rejects(sbx.get("sbx_" + "0".repeat(32)), NotFoundError);
});

test("a 404 is an EphemeralError with its fields", async () => {
  const id = "run_" + "0".repeat(32);
  await rejects(client.runs.get(id), (err) => {
    assert.ok(err instanceof NotFoundError);
    assert.ok(err instanceof EphemeralError);
    assert.equal(err.name, "NotFoundError");
    assert.equal(err.status, 404);
    assert.equal(err.type, "not_found_error");
    assert.equal(err.code, "run_not_found");
    assert.equal(err.param, undefined);
    assert.match(err.requestId, /^req_[0-9a-f]{16}$/);
    assert.ok(err.message.includes(id));
  });
  await rejects(client.runs.create({ ...seed(), timeout_seconds: 0 }), (err) => {
    assert.ok(err instanceof BadRequestError);
    assert.equal(err.status, 400);
    assert.equal(err.param, "timeout_seconds");
  });
  await rejects(client.runs.create({ ...seed(), sheel: true }), (err) => assert.equal(err.param, "sheel"));
});

test("a 401 and a 403", async () => {
  const bad = new Ephemeral({ apiKey: "eph_" + "x".repeat(40) });
  await rejects(bad.balance(), (err) => {
    assert.ok(err instanceof AuthenticationError);
    assert.equal(err.status, 401);
    assert.equal(err.type, "authentication_error");
    assert.ok(!err.message.includes("x".repeat(40)));
  });
  await rejects(client.keys.list(), (err) => {
    assert.ok(err instanceof PermissionDeniedError);
    assert.equal(err.status, 403);
  });
});

test("an idempotent create: the same key, the same run", async () => {
  const idempotencyKey = randomUUID();
  const first = await client.runs.create(seed(), { idempotencyKey });
  const again = await client.runs.create(seed(), { idempotencyKey });
  assert.equal(again.id, first.id);
  await rejects(client.runs.create({ ...seed(), max_cost_micros: 50000 }, { idempotencyKey }), (err) => {
    assert.ok(err instanceof UnprocessableEntityError);
    assert.equal(err.status, 422);
    assert.equal(err.type, "idempotency_error");
  });
  await client.runs.wait(first.id, { timeoutMs: 120_000 });
  const other = await client.runs.create(seed(), { wait: 120 });
  assert.notEqual(other.id, first.id, "without a key given, a new one each time");
});

test("HEAD operations", async () => {
  const run = await client.runs.create(seed(), { wait: 120 });
  assert.equal(await client.runs.exists(run.id), true);
  assert.equal(await client.runs.exists("run_" + "0".repeat(32)), false);
  const head = await client.head("getBalanceHead");
  assert.equal(head.status, 200);
  assert.ok(head.headers["content-type"].includes("application/json"));
  assert.match(head.headers["request-id"], /^req_[0-9a-f]{16}$/);
  assert.equal((await client.head("healthHead")).status, 200); // no key needed
  assert.equal((await client.head("listRunEventsHead", { path: { id: run.id } })).status, 200);
  await rejects(client.head("getRunTranscriptHead", { path: { id: "run_" + "0".repeat(32) } }), (err) => {
    assert.ok(err instanceof NotFoundError);
    assert.equal(err.status, 404);
  });
  await rejects(new Ephemeral({ apiKey: "eph_" + "y".repeat(40) }).head("listRunsHead"), (err) =>
    assert.ok(err instanceof AuthenticationError),
  );
  await rejects(client.head("createRun"), (err) => assert.ok(err instanceof TypeError));
});

test("models and balance", async () => {
  const models = await client.models.list();
  assert.ok(models.length > 0);
  assert.equal(models.filter((m) => m.default).length, 1);
  for (const m of models) assert.equal(typeof m.prices.input_micros_per_mtok, "number");
  const b = await client.balance();
  assert.equal(b.object, "balance");
  assert.equal(b.available_micros, b.balance_micros - b.reserved_micros);
});

test("keys, connections, credits, health and metrics", async () => {
  const before = (await admin.balance()).balance_micros;
  const idempotencyKey = randomUUID();
  assert.equal((await admin.credits.add(1000, { idempotencyKey })).balance_micros, before + 1000);
  await admin.credits.add(1000, { idempotencyKey }); // a retry: credited once
  assert.equal((await admin.balance()).balance_micros, before + 1000);
  const made = await admin.keys.create("member");
  assert.ok(made.key.startsWith("eph_"));
  assert.ok((await admin.keys.list()).some((k) => k.id === made.id));
  assert.equal((await new Ephemeral({ apiKey: made.key }).balance()).object, "balance");
  await admin.keys.revoke(made.id);
  await rejects(new Ephemeral({ apiKey: made.key }).balance(), (err) => assert.equal(err.status, 401));
  const name = "c" + randomUUID().slice(0, 8);
  const conn = await admin.connections.create({ name, base_url: "https://api.example.com", headers: { Authorization: "Bearer secret-value" } });
  assert.deepEqual(conn.header_names, ["Authorization"]);
  assert.ok(!JSON.stringify(await admin.connections.get(name)).includes("secret-value"));
  assert.ok((await admin.connections.list()).some((c) => c.name === name));
  assert.equal((await admin.connections.delete(name)).deleted, true);
  await rejects(admin.connections.get(name), (err) => assert.equal(err.status, 404));
  assert.equal((await client.health()).status, "ok");
  assert.ok((await client.metrics()).includes("ephemeral_store_up"));
});

test("a 503 is retried after its Retry-After, with the same idempotency key", async () => {
  const server = await standIn((r, res, n) => {
    if (n === 1) {
      reply(res, 503, '{"error":{"type":"api_error","code":"shutting_down","message":"shutting down"}}', { "Retry-After": "1" });
    } else proxy(r, res, upstream);
  });
  try {
    const waits = [];
    const c = new Ephemeral({ baseUrl: server.url, sleep: async (ms) => void waits.push(ms) });
    const run = await c.runs.create(seed(), { wait: 120 });
    assert.equal(run.status, "completed");
    assert.deepEqual(waits, [1000], "slept what Retry-After said");
    assert.equal(server.requests.length, 2);
    const keys = server.requests.map((r) => r.headers["idempotency-key"]);
    assert.ok(keys[0]);
    assert.equal(keys[1], keys[0]);
  } finally {
    await server.close();
  }
});

test("Retry-After is bounded, and the retries end", async () => {
  const server = await standIn((r, res) =>
    reply(res, 429, '{"error":{"type":"rate_limit_error","code":"too_many_queued_runs","message":"slow down"}}', { "Retry-After": "3600" }),
  );
  try {
    const waits = [];
    const c = new Ephemeral({ baseUrl: server.url, maxRetries: 2, maxRetryWaitMs: 5000, sleep: async (ms) => void waits.push(ms) });
    await rejects(c.runs.create(seed()), (err) => {
      assert.ok(err instanceof RateLimitError);
      assert.equal(err.status, 429);
      assert.equal(err.code, "too_many_queued_runs");
    });
    assert.deepEqual(waits, [5000, 5000]);
    assert.equal(server.requests.length, 3);
  } finally {
    await server.close();
  }
});

test("a connection failure is retried only when the request is safe", async () => {
  const answer = (r, res, n) => (n === 1 ? res.socket.destroy() : proxy(r, res, upstream));
  let server = await standIn(answer);
  try {
    const c = new Ephemeral({ baseUrl: server.url, sleep: async () => {} });
    assert.equal((await c.balance()).object, "balance");
    assert.equal(server.requests.length, 2);
  } finally {
    await server.close();
  }
  server = await standIn(answer);
  try {
    const c = new Ephemeral({ baseUrl: server.url, apiKey: process.env.EPHEMERAL_ADMIN_KEY, sleep: async () => {} });
    await rejects(c.keys.create(), (err) => assert.ok(err instanceof EphemeralConnectionError));
    assert.equal(server.requests.length, 1, "a POST without an idempotency key is not sent twice");
  } finally {
    await server.close();
  }
});

test("a request that gets no answer times out, and a GET is retried once", async () => {
  const server = await standIn(() => {}); // never answers
  try {
    const c = new Ephemeral({ baseUrl: server.url, timeoutMs: 500, maxRetries: 1, sleep: async () => {} });
    await rejects(c.balance(), (err) => {
      assert.ok(err instanceof EphemeralTimeoutError, String(err));
      assert.ok(err instanceof EphemeralConnectionError);
    });
    assert.equal(server.requests.length, 2);
  } finally {
    await server.close();
  }
});

test("events resume after a stream cut in the middle of a message", async () => {
  const run = await client.runs.create(seed(), { wait: 120 });
  const stored = await collect(client.runs.events(run.id, { follow: false }));
  assert.ok(stored.length > 5);
  // After the 4th message's id and event lines, before its data.
  const cut = (sent) => (sent.match(/^id: /gm) || []).length === 4 && /\nevent: [^\n]*\n$/.test(sent);
  const server = await standIn((r, res, n) => proxy(r, res, upstream, n === 1 ? cut : undefined));
  try {
    const events = await collect(new Ephemeral({ baseUrl: server.url }).runs.events(run.id));
    assert.equal(server.requests.length, 2, "one resume");
    assert.equal(server.requests[0].headers["last-event-id"], undefined);
    assert.equal(server.requests[1].headers["last-event-id"], "3");
    assert.deepEqual(events, stored, "every event once, in order, to worker.destroyed");
  } finally {
    await server.close();
  }
});

test("a stream that brings nothing new is given up after maxRetries resumes", async () => {
  const run = await client.runs.create(seed(), { wait: 120 });
  // One message a stream. A client that does not resume where it was would go round for ever:
  // past 100 requests the stand-in answers 500.
  let server = await standIn((r, res, n) =>
    n > 100 ? reply(res, 500, '{"error":{"type":"api_error","message":"too many resumes"}}') : proxy(r, res, upstream, (sent) => sent.endsWith("\n\n")),
  );
  try {
    const events = await collect(new Ephemeral({ baseUrl: server.url }).runs.events(run.id));
    assert.equal(events.at(-1).type, FINAL_EVENT);
    assert.equal(server.requests.length, events.length, "one message a stream, each resumed");
  } finally {
    await server.close();
  }
  server = await standIn((r, res) =>
    r.route.endsWith("/events")
      ? reply(res, 200, ": keep-alive\n\n", {}, "text/event-stream")
      : reply(res, 200, JSON.stringify({ ...run, status: "running" })),
  );
  try {
    const c = new Ephemeral({ baseUrl: server.url, maxRetries: 2, sleep: async () => {} });
    await rejects(collect(c.runs.events(run.id)), (err) => assert.ok(err instanceof EphemeralConnectionError));
    assert.equal(server.requests.filter((r) => r.route.endsWith("/events")).length, 3, "the first try and two resumes");
  } finally {
    await server.close();
  }
});
