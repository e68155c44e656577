// Every endpoint of docs/openapi.yaml is covered: the client's table (OPERATIONS) is the
// document's, method and path, each client method sends its row's request (to a stand-in that
// records them), and src/openapi.ts is what openapi-typescript makes of the document now.
// Runs without a server; the document is found from this file, or at $EPHEMERAL_OPENAPI.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Ephemeral, OPERATIONS } from "../dist/index.js";
import { documentOperations, reply, standIn } from "./standin.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, "..");
const openapi = process.env.EPHEMERAL_OPENAPI || path.join(pkg, "..", "..", "docs", "openapi.yaml");
const doc = fs.readFileSync(openapi, "utf8");

test("the document is parsed", () => {
  const ops = documentOperations(doc);
  assert.deepEqual(ops.createRun, ["POST", "/v1/runs"]);
  assert.deepEqual(ops.revokeKey, ["DELETE", "/v1/keys/{id}"]);
  assert.deepEqual(ops.getRunHead, ["HEAD", "/v1/runs/{id}"]);
  assert.equal(Object.keys(ops).length, doc.split("operationId:").length - 1);
});

test("every operation of the document is in the table, and no other", () => {
  const ops = documentOperations(doc);
  const table = Object.fromEntries(Object.entries(OPERATIONS).map(([k, v]) => [k, [v.method, v.path]]));
  assert.deepEqual(Object.keys(ops).filter((k) => !(k in table)), [], "operations the client lacks");
  assert.deepEqual(Object.keys(table).filter((k) => !(k in ops)), [], "operations not in the document");
  assert.deepEqual(table, ops);
});

test("the generated types are fresh", () => {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "eph-ts-")), "openapi.ts");
  execFileSync(process.execPath, [path.join(pkg, "node_modules", "openapi-typescript", "bin", "cli.js"), openapi, "--output", out], {
    stdio: "pipe",
  });
  const fresh = fs.readFileSync(out, "utf8");
  const committed = fs.readFileSync(path.join(pkg, "src", "openapi.ts"), "utf8");
  assert.ok(fresh === committed, "src/openapi.ts is stale: run `npm run generate` in clients/typescript");
});

// A sandbox file's {path} keeps its slashes; every other parameter is one segment.
const matches = (template, p) =>
  new RegExp(
    "^" +
      template
        .replace(/[.*+?^$()|[\]\\]/g, "\\$&")
        .replace("{path}", ".+")
        .replace(/\{[^}]+\}/g, "[^/]+") +
      "$",
  ).test(p);

test("each method sends the request of its operation", async () => {
  const server = await standIn((r, res) => {
    const sse = String(r.headers.accept).includes("text/event-stream");
    if (sse && (r.route.endsWith("/commands") || r.route.includes("/commands/"))) {
      reply(res, 200, 'event: exit\ndata: {"id":"cmd_1","status":"exited"}\n\n', {}, "text/event-stream");
    } else if (r.route.includes("/files/") && r.method === "GET") {
      reply(res, 200, "bytes", {}, "application/octet-stream");
    } else if (r.route.endsWith("/events") && sse) {
      reply(res, 200, 'id: 1\nevent: worker.destroyed\ndata: {"seq":1,"type":"worker.destroyed"}\n\n', {}, "text/event-stream");
    } else if (r.route.endsWith("/transcript")) {
      reply(res, 200, '{"kind":"run"}\n', {}, "application/x-ndjson");
    } else if (r.route.endsWith("/log")) {
      reply(res, 200, "building\n", {}, "text/plain");
    } else if (r.route === "/metrics") {
      reply(res, 200, "ephemeral_store_up 1\n", {}, "text/plain");
    } else {
      reply(res, 200, '{"object":"list","data":[],"has_more":false,"id":"x","status":"completed"}');
    }
  });
  const rid = "run_" + "0".repeat(32);
  const all = async (it) => {
    for await (const _ of it);
  };
  const sid = "sbx_" + "0".repeat(32);
  const calls = {
    createSandbox: (c) => c.sandboxes.create({ max_cost_micros: 1 }),
    listSandboxes: (c) => all(c.sandboxes.list()),
    getSandbox: (c) => c.sandboxes.get(sid),
    deleteSandbox: (c) => c.sandboxes.delete(sid),
    listSandboxEvents: (c) => all(c.sandboxes.events(sid)),
    runSandboxCommand: (c) => c.sandboxes.exec(sid, "true"),
    getSandboxCommand: (c) => c.sandboxes.command(sid, "cmd_1"),
    streamSandboxCommand: (c) => all(c.sandboxes.follow(sid, "cmd_1")),
    killSandboxCommand: (c) => c.sandboxes.kill(sid, "cmd_1"),
    listSandboxFiles: (c) => c.sandboxes.files(sid),
    writeSandboxFile: (c) => c.sandboxes.upload(sid, "d/a.txt", "x"),
    readSandboxFile: (c) => c.sandboxes.download(sid, "d/a.txt"),
    createRun: (c) => c.runs.create({ prompt: "p", max_cost_micros: 1 }),
    listRuns: (c) => all(c.runs.list()),
    getRun: (c) => c.runs.get(rid),
    listRunEvents: (c) => all(c.runs.events(rid)),
    getRunTranscript: (c) => all(c.runs.transcript(rid)),
    cancelRun: (c) => c.runs.cancel(rid),
    getBalance: (c) => c.balance(),
    listModels: (c) => c.models.list(),
    addCredit: (c) => c.credits.add(5),
    createKey: (c) => c.keys.create(),
    listKeys: (c) => c.keys.list(),
    revokeKey: (c) => c.keys.revoke("key_" + "0".repeat(24)),
    createImage: (c) => c.images.create({ name: "tools", packages: ["jq"] }),
    listImages: (c) => c.images.list(),
    getImage: (c) => c.images.get("tools"),
    deleteImage: (c) => c.images.delete("tools"),
    getImageLog: (c) => all(c.images.log("tools")),
    createConnection: (c) => c.connections.create({ name: "n", base_url: "https://api.example.com" }),
    listConnections: (c) => c.connections.list(),
    getConnection: (c) => c.connections.get("n"),
    deleteConnection: (c) => c.connections.delete("n"),
    health: (c) => c.health(),
    metrics: (c) => c.metrics(),
    createWebhook: (c) => c.webhooks.create({ url: "https://hooks.example.com/x" }),
    listWebhooks: (c) => c.webhooks.list(),
    getWebhook: (c) => c.webhooks.get("wh_1"),
    deleteWebhook: (c) => c.webhooks.delete("wh_1"),
    listWebhookDeliveries: (c) => c.webhooks.deliveries("wh_1", { limit: 5 }),
    getWebhookDelivery: (c) => c.webhooks.delivery("wh_1", "evt_1"),
    listRunsHead: (c) => c.head("listRunsHead"),
    getRunHead: (c) => c.runs.exists(rid),
    listRunEventsHead: (c) => c.head("listRunEventsHead", { path: { id: rid } }),
    getRunTranscriptHead: (c) => c.head("getRunTranscriptHead", { path: { id: rid } }),
    getBalanceHead: (c) => c.head("getBalanceHead"),
    listModelsHead: (c) => c.head("listModelsHead"),
    listKeysHead: (c) => c.head("listKeysHead"),
    listConnectionsHead: (c) => c.head("listConnectionsHead"),
    getConnectionHead: (c) => c.head("getConnectionHead", { path: { name: "n" } }),
    listImagesHead: (c) => c.head("listImagesHead"),
    getImageHead: (c) => c.head("getImageHead", { path: { name: "tools" } }),
    getImageLogHead: (c) => c.head("getImageLogHead", { path: { name: "tools" } }),
    listWebhooksHead: (c) => c.head("listWebhooksHead"),
    getWebhookHead: (c) => c.head("getWebhookHead", { path: { id: "wh_1" } }),
    listWebhookDeliveriesHead: (c) => c.head("listWebhookDeliveriesHead", { path: { id: "wh_1" } }),
    getWebhookDeliveryHead: (c) =>
      c.head("getWebhookDeliveryHead", { path: { id: "wh_1", event_id: "evt_1" } }),
    healthHead: (c) => c.head("healthHead"),
    metricsHead: (c) => c.head("metricsHead"),
  };
  try {
    assert.deepEqual(Object.keys(calls).sort(), Object.keys(OPERATIONS).sort(), "a call for each operation");
    const client = new Ephemeral({ baseUrl: server.url, apiKey: "eph_test", maxRetries: 0 });
    for (const [op, call] of Object.entries(calls)) {
      server.requests.length = 0;
      await call(client);
      const { method, path: template } = OPERATIONS[op];
      assert.ok(server.requests.length > 0, `${op}: no request`);
      assert.equal(server.requests[0].method, method, `${op}: method`);
      assert.ok(matches(template, server.requests[0].route), `${op}: ${server.requests[0].route} is not ${template}`);
    }
  } finally {
    await server.close();
  }
});
