#include "store/migrations.h"

/* The PostgreSQL schema: the same tables, columns and rules as the SQLite schema at its latest
 * version (migrations_sqlite.c), written once in PostgreSQL's types. Money and instants are
 * BIGINT micro-dollars and milliseconds; flags are INTEGER 0/1 like SQLite's; JSON is the text the
 * API serves. runs.seq orders runs created in the same millisecond (SQLite's rowid). */
static const char v1[] =
    "CREATE TABLE orgs ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  created_at BIGINT NOT NULL,"
    "  balance_micros BIGINT NOT NULL DEFAULT 0,"
    "  reserved_micros BIGINT NOT NULL DEFAULT 0 CHECK (reserved_micros >= 0));"
    "CREATE TABLE api_keys ("
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  key_hash TEXT NOT NULL UNIQUE,"
    "  role TEXT NOT NULL CHECK (role IN ('admin', 'member')),"
    "  created_at BIGINT NOT NULL,"
    "  revoked_at BIGINT,"
    "  prefix TEXT);"
    "CREATE INDEX api_keys_org ON api_keys(org_id, created_at);"
    "CREATE TABLE ledger ("
    "  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  run_id TEXT,"
    "  kind TEXT NOT NULL CHECK (kind IN ('credit', 'reserve', 'charge', 'release')),"
    "  micros BIGINT NOT NULL CHECK (micros >= 0),"
    "  created_at BIGINT NOT NULL);"
    "CREATE UNIQUE INDEX ledger_run_kind ON ledger(run_id, kind) WHERE run_id IS NOT NULL;"
    "CREATE INDEX ledger_org ON ledger(org_id, kind);"
    "CREATE TABLE runs ("
    "  seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,"
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  status TEXT NOT NULL,"
    "  model TEXT NOT NULL,"
    "  prompt TEXT,"
    "  files TEXT,"
    "  connections TEXT NOT NULL DEFAULT '[]',"
    "  metadata TEXT NOT NULL DEFAULT '{}',"
    "  shell INTEGER NOT NULL,"
    "  web INTEGER NOT NULL,"
    "  zdr INTEGER NOT NULL,"
    "  timeout_seconds INTEGER NOT NULL,"
    "  created_at BIGINT NOT NULL,"
    "  started_at BIGINT,"
    "  finished_at BIGINT,"
    "  result TEXT,"
    "  error_type TEXT, error_code TEXT, error_message TEXT,"
    "  model_calls BIGINT NOT NULL DEFAULT 0,"
    "  input_tokens BIGINT NOT NULL DEFAULT 0,"
    "  output_tokens BIGINT NOT NULL DEFAULT 0,"
    "  shell_commands BIGINT NOT NULL DEFAULT 0,"
    "  web_requests BIGINT NOT NULL DEFAULT 0,"
    "  connection_requests BIGINT NOT NULL DEFAULT 0,"
    "  reserved_micros BIGINT NOT NULL,"
    "  model_micros BIGINT NOT NULL DEFAULT 0,"
    "  web_micros BIGINT NOT NULL DEFAULT 0,"
    "  compute_micros BIGINT NOT NULL DEFAULT 0,"
    "  charged_micros BIGINT NOT NULL DEFAULT 0,"
    "  released_micros BIGINT NOT NULL DEFAULT 0,"
    "  sandbox_backend TEXT,"
    "  vcpus INTEGER NOT NULL DEFAULT 0,"
    "  memory_mib INTEGER NOT NULL DEFAULT 0,"
    "  log_expires_at BIGINT,"
    "  log_purged INTEGER NOT NULL DEFAULT 0,"
    "  node_id TEXT,"
    "  lease_expires_at BIGINT);"
    "CREATE INDEX runs_org_created ON runs(org_id, created_at DESC, seq DESC);"
    "CREATE INDEX runs_status ON runs(status);"
    "CREATE INDEX runs_org_status ON runs(org_id, status);"
    "CREATE INDEX runs_lease ON runs(lease_expires_at) WHERE node_id IS NOT NULL AND "
    "  status IN ('queued', 'starting', 'running');"
    "CREATE TABLE events ("
    "  run_id TEXT NOT NULL,"
    "  seq BIGINT NOT NULL,"
    "  t_ms BIGINT NOT NULL,"
    "  at_ms BIGINT NOT NULL,"
    "  source TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  message TEXT NOT NULL,"
    "  data TEXT NOT NULL DEFAULT '{}',"
    "  PRIMARY KEY (run_id, seq));"
    "CREATE TABLE idempotency ("
    "  org_id TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  request_hash TEXT NOT NULL,"
    "  status_code INTEGER NOT NULL DEFAULT 0,"
    "  response_body TEXT,"
    "  created_at BIGINT NOT NULL,"
    "  PRIMARY KEY (org_id, key));"
    "CREATE TABLE connections ("
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  name TEXT NOT NULL,"
    "  base_url TEXT NOT NULL,"
    "  methods TEXT NOT NULL,"
    "  path_prefixes TEXT NOT NULL,"
    "  header_names TEXT NOT NULL,"
    "  sealed_headers BYTEA NOT NULL,"
    "  created_at BIGINT NOT NULL,"
    "  UNIQUE (org_id, name));";

/* SQLite version 4: a run's web allow-list, a connection's query-parameter credential names. */
static const char v2[] =
    "ALTER TABLE runs ADD COLUMN web_allow TEXT;"
    "ALTER TABLE connections ADD COLUMN query_names TEXT NOT NULL DEFAULT '[]';";

/* SQLite version 5 (SQLite's version 4 is version 2 here): a replay (docs/AGENT.md), the run it
 * replays and how many tool results differed from the original's. */
static const char v3[] = "ALTER TABLE runs ADD COLUMN replay_of TEXT;"
                         "ALTER TABLE runs ADD COLUMN divergences BIGINT NOT NULL DEFAULT 0;";

/* SQLite version 6: an event's wire form, as the API serves it (NULL on older and reaped rows:
 * the API makes it on read). */
static const char v4[] = "ALTER TABLE events ADD COLUMN wire TEXT;";

/* SQLite version 7: fair claims (docs/STORE.md), each org's oldest queued run and the count of
 * its claimed runs read from indexes of their own. */
static const char v5[] =
    "CREATE INDEX runs_org_queued ON runs(org_id, created_at, seq) WHERE status = 'queued';"
    "CREATE INDEX runs_org_claimed ON runs(org_id) WHERE node_id IS NOT NULL AND "
    "  status IN ('queued', 'starting', 'running');";

/* SQLite version 8: a run's outputs, the patterns and the files that came back. */
static const char v6[] = "ALTER TABLE runs ADD COLUMN outputs TEXT;"
                         "CREATE TABLE run_outputs ("
                         "  run_id TEXT NOT NULL,"
                         "  path TEXT NOT NULL,"
                         "  type TEXT NOT NULL,"
                         "  size BIGINT NOT NULL,"
                         "  sha256 TEXT,"
                         "  content_type TEXT,"
                         "  target TEXT,"
                         "  content BYTEA,"
                         "  PRIMARY KEY (run_id, path));";

/* SQLite version 9: images (docs/IMAGES.md) and the image a run uses. Version 6 is another
 * branch's (outputs); versions are applied by number, gaps allowed. */
static const char v7[] = "CREATE TABLE images ("
                         "  org_id TEXT NOT NULL DEFAULT '',"
                         "  name TEXT NOT NULL,"
                         "  status TEXT NOT NULL CHECK (status IN ('building', 'ready', 'failed')),"
                         "  digest TEXT NOT NULL,"
                         "  size_bytes BIGINT NOT NULL DEFAULT 0,"
                         "  recipe TEXT NOT NULL,"
                         "  created_at BIGINT NOT NULL,"
                         "  error TEXT,"
                         "  log_path TEXT,"
                         "  PRIMARY KEY (org_id, name));"
                         "ALTER TABLE runs ADD COLUMN image TEXT NOT NULL DEFAULT 'default';"
                         "ALTER TABLE runs ADD COLUMN image_digest TEXT;"
                         "CREATE INDEX runs_image_live ON runs(image) WHERE "
                         "  status IN ('queued', 'starting', 'running');";

/* SQLite version 10: webhooks (docs/WEBHOOKS.md), their deliveries and the claim that keeps one
 * node on each. */
static const char v8[] =
    "CREATE TABLE webhooks ("
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  url TEXT NOT NULL,"
    "  events TEXT NOT NULL,"
    "  secret TEXT NOT NULL,"
    "  timeout_seconds INTEGER NOT NULL,"
    "  created_at BIGINT NOT NULL,"
    "  disabled BOOLEAN NOT NULL DEFAULT FALSE);"
    "CREATE INDEX webhooks_org ON webhooks(org_id, disabled);"
    "CREATE TABLE webhook_deliveries ("
    "  event_id TEXT NOT NULL,"
    "  webhook_id TEXT NOT NULL REFERENCES webhooks(id),"
    "  org_id TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  body TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  created_at BIGINT NOT NULL,"
    "  next_attempt_at BIGINT NOT NULL,"
    "  last_attempt_at BIGINT,"
    "  last_status INTEGER,"
    "  last_error TEXT,"
    "  last_duration_ms BIGINT,"
    "  claimed_by TEXT,"
    "  claim_expires_at BIGINT,"
    "  PRIMARY KEY (event_id, webhook_id));"
    "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) "
    "  WHERE state = 'pending';"
    "CREATE INDEX webhook_deliveries_log ON webhook_deliveries(webhook_id, "
    "  created_at);";

/* SQLite version 11: model calls and attempts counted apart; older rows keep their count (of
 * attempts) in both. */
static const char v9[] = "ALTER TABLE runs ADD COLUMN model_attempts BIGINT NOT NULL DEFAULT 0;"
                         "UPDATE runs SET model_attempts = model_calls;";

/* SQLite version 12: sandboxes a caller drives are rows of runs of their own kind
 * (docs/SANDBOXES.md), with an idle timeout. */
static const char v10[] = "ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run' "
                          "  CHECK (kind IN ('run', 'sandbox'));"
                          "ALTER TABLE runs ADD COLUMN idle_timeout_seconds BIGINT NOT NULL "
                          "  DEFAULT 0;"
                          "CREATE INDEX runs_org_kind ON runs(org_id, kind, created_at);";

/* SQLite version 13: webhooks' attempt history (docs/WEBHOOKS.md), one row per attempt, a
 * delivery made before with its last attempt. */
static const char v11[] =
    "CREATE TABLE webhook_attempts ("
    "  event_id TEXT NOT NULL,"
    "  webhook_id TEXT NOT NULL REFERENCES webhooks(id),"
    "  org_id TEXT NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'retried', 'failed')),"
    "  at BIGINT NOT NULL,"
    "  http_status INTEGER,"
    "  duration_ms BIGINT NOT NULL,"
    "  error TEXT,"
    "  PRIMARY KEY (webhook_id, event_id, attempt));"
    "INSERT INTO webhook_attempts (event_id, webhook_id, org_id, attempt, outcome, at, "
    "  http_status, duration_ms, error) SELECT event_id, webhook_id, org_id, attempts, "
    "  CASE state WHEN 'pending' THEN 'retried' ELSE state END, last_attempt_at, last_status, "
    "  COALESCE(last_duration_ms, 0), last_error FROM webhook_deliveries WHERE attempts > 0 AND "
    "  last_attempt_at IS NOT NULL;";

/* Where each node's API is reached by the others (a sandbox's calls go to its node). */
static const char v12[] = "CREATE TABLE nodes ("
                          "  id TEXT PRIMARY KEY,"
                          "  url TEXT NOT NULL,"
                          "  updated_at BIGINT NOT NULL);";

const struct eph_migration eph_postgres_migrations[] = {
    {1, "initial schema (SQLite version 3)", v1},
    {2, "web allow-lists, query-parameter credentials (SQLite version 4)", v2},
    {3, "replays (SQLite version 5)", v3},
    {4, "events stored as served (SQLite version 6)", v4},
    {5, "fair claims across orgs (SQLite version 7)", v5},
    {6, "run outputs (SQLite version 8)", v6},
    {7, "images (SQLite version 9)", v7},
    {8, "webhooks (SQLite version 10)", v8},
    {9, "model attempts apart from calls (SQLite version 11)", v9},
    {10, "sandboxes (SQLite version 12)", v10},
    {11, "webhook attempt history (SQLite version 13)", v11},
    {12, "node addresses (SQLite version 14)", v12},
};
const unsigned eph_postgres_migrations_count =
    sizeof(eph_postgres_migrations) / sizeof(eph_postgres_migrations[0]);
