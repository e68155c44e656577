// Every operation of docs/openapi.yaml, by its operationId: the method and path the client sends.
// The client builds each request from this table. `satisfies` makes the build fail when the
// generated types (src/openapi.ts, from the document) have an operation the table lacks, has one
// they do not, or a path they do not; test/coverage.test.mjs checks the methods and paths against
// the document itself and that each client method sends its row's request. A new endpoint is
// a row here and a method on its resource.
import type { operations, paths } from "./openapi.js";

export type Method = "GET" | "HEAD" | "POST" | "PUT" | "DELETE";

export interface Operation {
  readonly method: Method;
  readonly path: keyof paths;
}

export const OPERATIONS = {
  createRun: { method: "POST", path: "/v1/runs" },
  listRuns: { method: "GET", path: "/v1/runs" },
  listRunsHead: { method: "HEAD", path: "/v1/runs" },
  getRun: { method: "GET", path: "/v1/runs/{id}" },
  getRunHead: { method: "HEAD", path: "/v1/runs/{id}" },
  listRunEvents: { method: "GET", path: "/v1/runs/{id}/events" },
  listRunEventsHead: { method: "HEAD", path: "/v1/runs/{id}/events" },
  getRunTranscript: { method: "GET", path: "/v1/runs/{id}/transcript" },
  getRunTranscriptHead: { method: "HEAD", path: "/v1/runs/{id}/transcript" },
  cancelRun: { method: "POST", path: "/v1/runs/{id}/cancel" },
  createSandbox: { method: "POST", path: "/v1/sandboxes" },
  listSandboxes: { method: "GET", path: "/v1/sandboxes" },
  getSandbox: { method: "GET", path: "/v1/sandboxes/{id}" },
  deleteSandbox: { method: "DELETE", path: "/v1/sandboxes/{id}" },
  listSandboxEvents: { method: "GET", path: "/v1/sandboxes/{id}/events" },
  runSandboxCommand: { method: "POST", path: "/v1/sandboxes/{id}/commands" },
  getSandboxCommand: { method: "GET", path: "/v1/sandboxes/{id}/commands/{cid}" },
  streamSandboxCommand: { method: "GET", path: "/v1/sandboxes/{id}/commands/{cid}/events" },
  killSandboxCommand: { method: "POST", path: "/v1/sandboxes/{id}/commands/{cid}/kill" },
  listSandboxFiles: { method: "GET", path: "/v1/sandboxes/{id}/files" },
  writeSandboxFile: { method: "PUT", path: "/v1/sandboxes/{id}/files/{path}" },
  readSandboxFile: { method: "GET", path: "/v1/sandboxes/{id}/files/{path}" },
  getBalance: { method: "GET", path: "/v1/balance" },
  getBalanceHead: { method: "HEAD", path: "/v1/balance" },
  listModels: { method: "GET", path: "/v1/models" },
  listModelsHead: { method: "HEAD", path: "/v1/models" },
  addCredit: { method: "POST", path: "/v1/credits" },
  createKey: { method: "POST", path: "/v1/keys" },
  listKeys: { method: "GET", path: "/v1/keys" },
  listKeysHead: { method: "HEAD", path: "/v1/keys" },
  revokeKey: { method: "DELETE", path: "/v1/keys/{id}" },
  createConnection: { method: "POST", path: "/v1/connections" },
  listConnections: { method: "GET", path: "/v1/connections" },
  listConnectionsHead: { method: "HEAD", path: "/v1/connections" },
  getConnection: { method: "GET", path: "/v1/connections/{name}" },
  getConnectionHead: { method: "HEAD", path: "/v1/connections/{name}" },
  deleteConnection: { method: "DELETE", path: "/v1/connections/{name}" },
  createImage: { method: "POST", path: "/v1/images" },
  listImages: { method: "GET", path: "/v1/images" },
  listImagesHead: { method: "HEAD", path: "/v1/images" },
  getImage: { method: "GET", path: "/v1/images/{name}" },
  getImageHead: { method: "HEAD", path: "/v1/images/{name}" },
  deleteImage: { method: "DELETE", path: "/v1/images/{name}" },
  getImageLog: { method: "GET", path: "/v1/images/{name}/log" },
  getImageLogHead: { method: "HEAD", path: "/v1/images/{name}/log" },
  createWebhook: { method: "POST", path: "/v1/webhooks" },
  listWebhooks: { method: "GET", path: "/v1/webhooks" },
  listWebhooksHead: { method: "HEAD", path: "/v1/webhooks" },
  getWebhook: { method: "GET", path: "/v1/webhooks/{id}" },
  getWebhookHead: { method: "HEAD", path: "/v1/webhooks/{id}" },
  deleteWebhook: { method: "DELETE", path: "/v1/webhooks/{id}" },
  listWebhookDeliveries: { method: "GET", path: "/v1/webhooks/{id}/deliveries" },
  listWebhookDeliveriesHead: { method: "HEAD", path: "/v1/webhooks/{id}/deliveries" },
  getWebhookDelivery: { method: "GET", path: "/v1/webhooks/{id}/deliveries/{event_id}" },
  getWebhookDeliveryHead: { method: "HEAD", path: "/v1/webhooks/{id}/deliveries/{event_id}" },
  health: { method: "GET", path: "/healthz" },
  healthHead: { method: "HEAD", path: "/healthz" },
  metrics: { method: "GET", path: "/metrics" },
  metricsHead: { method: "HEAD", path: "/metrics" },
} as const satisfies { readonly [K in keyof operations]: Operation };

export type OperationId = keyof typeof OPERATIONS;
