// What a server sends, parsed without the real server: Retry-After as a date, error bodies that
// are not the API's, answers that are not JSON, events that are not objects.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Ephemeral,
  EphemeralConnectionError,
  EphemeralError,
  InternalServerError,
  ServiceUnavailableError,
} from "../dist/index.js";
import { rejects, reply, standIn } from "./standin.mjs";

test("Retry-After as an HTTP date", async () => {
  const when = new Date(Date.now() + 120_000).toUTCString();
  const server = await standIn((r, res, n) =>
    n === 1 ? reply(res, 503, "{}", { "Retry-After": when }) : reply(res, 200, '{"object":"balance"}'),
  );
  try {
    const waits = [];
    const c = new Ephemeral({ baseUrl: server.url, maxRetryWaitMs: 600_000, sleep: async (ms) => void waits.push(ms) });
    assert.equal((await c.balance()).object, "balance");
    assert.equal(waits.length, 1);
    assert.ok(waits[0] > 100_000 && waits[0] <= 120_000, String(waits[0]));
  } finally {
    await server.close();
  }
});

test("error bodies that are not the API's, and answers that are not JSON", async () => {
  const bodies = ["<html>bad gateway</html>", "", "[1,2]", '{"error":"text"}'];
  let i = 0;
  const server = await standIn((r, res) => {
    if (r.route === "/v1/models") return reply(res, 200, "not json");
    if (r.route.endsWith("/events")) return reply(res, 200, "id: 1\ndata: [1]\n\n", {}, "text/event-stream");
    if (r.route === "/v1/keys") return reply(res, 503, "", { "Request-Id": "req_h" });
    reply(res, 502, bodies[i++ % bodies.length], { "Request-Id": "req_h" }, "text/html");
  });
  try {
    const c = new Ephemeral({ baseUrl: server.url, maxRetries: 0 });
    for (const body of bodies) {
      await rejects(c.balance(), (err) => {
        assert.ok(err instanceof InternalServerError, body);
        assert.equal(err.status, 502);
        assert.equal(err.requestId, "req_h");
        assert.equal(err.type, "api_error");
      });
    }
    await rejects(c.keys.list(), (err) => assert.ok(err instanceof ServiceUnavailableError));
    await rejects(c.models.list(), (err) => {
      assert.ok(err instanceof EphemeralConnectionError);
      assert.ok(!(err instanceof EphemeralError));
    });
    const events = async () => {
      for await (const _ of c.runs.events("run_" + "0".repeat(32)));
    };
    await rejects(events(), (err) => assert.match(err.message, /not a JSON object/));
  } finally {
    await server.close();
  }
});

test("bad arguments are refused before anything is sent", async () => {
  for (const baseUrl of ["ftp://h", "http://", "localhost:8080", "http://u:p@h", "http://h/?q=1", "http://h/#f", "not a url"]) {
    assert.throws(() => new Ephemeral({ baseUrl, apiKey: "eph_k" }), TypeError, baseUrl);
  }
  for (const apiKey of ["", "eph k", "eph_\n", "eph_é"]) {
    assert.throws(() => new Ephemeral({ baseUrl: "http://127.0.0.1:1", apiKey }), TypeError, JSON.stringify(apiKey));
  }
  for (const o of [{ timeoutMs: 0 }, { timeoutMs: -1 }, { maxRetries: -1 }, { maxRetries: 1.5 }]) {
    assert.throws(() => new Ephemeral({ baseUrl: "http://127.0.0.1:1", apiKey: "eph_k", ...o }), RangeError, JSON.stringify(o));
  }
  assert.ok(!JSON.stringify(new Ephemeral({ baseUrl: "http://127.0.0.1:1", apiKey: "eph_secret" })).includes("eph_secret"));
  // Port 1 on loopback: a call that got through would fail to connect, not throw these.
  const c = new Ephemeral({ baseUrl: "http://127.0.0.1:1", apiKey: "eph_k", maxRetries: 0 });
  const rid = "run_" + "0".repeat(32);
  for (const wait of [-1, 601, 1.5]) {
    assert.throws(() => c.runs.get(rid, { wait }), RangeError, String(wait));
    assert.throws(() => c.runs.create({ prompt: "p", max_cost_micros: 1 }, { wait }), RangeError, String(wait));
  }
  for (const micros of [0, -5, 1.5, Number.MAX_SAFE_INTEGER + 2]) {
    assert.throws(() => c.credits.add(micros), RangeError, String(micros));
  }
  await assert.rejects(c.runs.get(""), TypeError);
});
