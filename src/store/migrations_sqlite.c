#include "store/migrations.h"

/* Money columns are integer micro-dollars. Ledger entries are never updated or deleted; a run has
 * at most one entry of each kind (the unique index), so a retried settlement cannot double one. */
static const char v1[] =
    "CREATE TABLE orgs ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  created_at INTEGER NOT NULL);"
    "CREATE TABLE api_keys ("
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  key_hash TEXT NOT NULL UNIQUE,"
    "  role TEXT NOT NULL CHECK (role IN ('admin', 'member')),"
    "  created_at INTEGER NOT NULL,"
    "  revoked_at INTEGER);"
    "CREATE TABLE ledger ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  run_id TEXT,"
    "  kind TEXT NOT NULL CHECK (kind IN ('credit', 'reserve', 'charge', 'release')),"
    "  micros INTEGER NOT NULL CHECK (micros >= 0),"
    "  created_at INTEGER NOT NULL);"
    "CREATE UNIQUE INDEX ledger_run_kind ON ledger(run_id, kind) WHERE run_id IS NOT NULL;"
    "CREATE INDEX ledger_org ON ledger(org_id, kind);"
    "CREATE TABLE runs ("
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
    "  created_at INTEGER NOT NULL,"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  result TEXT,"
    "  error_type TEXT, error_code TEXT, error_message TEXT,"
    "  model_calls INTEGER NOT NULL DEFAULT 0,"
    "  input_tokens INTEGER NOT NULL DEFAULT 0,"
    "  output_tokens INTEGER NOT NULL DEFAULT 0,"
    "  shell_commands INTEGER NOT NULL DEFAULT 0,"
    "  web_requests INTEGER NOT NULL DEFAULT 0,"
    "  connection_requests INTEGER NOT NULL DEFAULT 0,"
    "  reserved_micros INTEGER NOT NULL,"
    "  model_micros INTEGER NOT NULL DEFAULT 0,"
    "  web_micros INTEGER NOT NULL DEFAULT 0,"
    "  compute_micros INTEGER NOT NULL DEFAULT 0,"
    "  charged_micros INTEGER NOT NULL DEFAULT 0,"
    "  released_micros INTEGER NOT NULL DEFAULT 0,"
    "  sandbox_backend TEXT,"
    "  vcpus INTEGER NOT NULL DEFAULT 0,"
    "  memory_mib INTEGER NOT NULL DEFAULT 0,"
    "  log_expires_at INTEGER,"
    "  log_purged INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX runs_org_created ON runs(org_id, created_at DESC, id DESC);"
    "CREATE INDEX runs_status ON runs(status);"
    "CREATE TABLE events ("
    "  run_id TEXT NOT NULL,"
    "  seq INTEGER NOT NULL,"
    "  t_ms INTEGER NOT NULL,"
    "  at_ms INTEGER NOT NULL,"
    "  source TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  message TEXT NOT NULL,"
    "  data TEXT NOT NULL DEFAULT '{}',"
    "  PRIMARY KEY (run_id, seq)) WITHOUT ROWID;"
    "CREATE TABLE idempotency ("
    "  org_id TEXT NOT NULL,"
    "  key TEXT NOT NULL,"
    "  request_hash TEXT NOT NULL,"
    "  status_code INTEGER NOT NULL DEFAULT 0,"
    "  response_body TEXT,"
    "  created_at INTEGER NOT NULL,"
    "  PRIMARY KEY (org_id, key));";

/* Keys get a short prefix to be listed by; connections (docs/BROKER.md) keep their credential
 * headers only as a sealed blob (nonce || secretbox), never in the clear; queued runs are counted
 * per org on every creation (the 429 limit), hence the index; the run list orders by rowid on ties.
 */
static const char v2[] = "ALTER TABLE api_keys ADD COLUMN prefix TEXT;"
                         "CREATE INDEX api_keys_org ON api_keys(org_id, created_at);"
                         "CREATE TABLE connections ("
                         "  id TEXT PRIMARY KEY,"
                         "  org_id TEXT NOT NULL REFERENCES orgs(id),"
                         "  name TEXT NOT NULL,"
                         "  base_url TEXT NOT NULL,"
                         "  methods TEXT NOT NULL,"
                         "  path_prefixes TEXT NOT NULL,"
                         "  header_names TEXT NOT NULL,"
                         "  sealed_headers BLOB NOT NULL,"
                         "  created_at INTEGER NOT NULL,"
                         "  UNIQUE (org_id, name));"
                         "CREATE INDEX runs_org_status ON runs(org_id, status);"
                         /* Newest first with ties in the same millisecond broken by insertion order
                          * (rowid), not by the random id. */
                         "CREATE INDEX runs_org_created_rowid ON runs(org_id, created_at);";

/* The balance becomes a running total kept on the org in the same transaction as each ledger entry
 * (no sum over the whole history per request); runs record the node that works on them and the
 * instant its lease ends (the lease renewal is also the compute checkpoint). */
static const char v3[] =
    "ALTER TABLE orgs ADD COLUMN balance_micros INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE orgs ADD COLUMN reserved_micros INTEGER NOT NULL DEFAULT 0;"
    "UPDATE orgs SET"
    "  balance_micros = (SELECT COALESCE(SUM(CASE kind WHEN 'credit' THEN micros"
    "    WHEN 'charge' THEN -micros ELSE 0 END), 0) FROM ledger WHERE org_id = orgs.id),"
    "  reserved_micros = (SELECT COALESCE(SUM(CASE kind WHEN 'reserve' THEN micros"
    "    WHEN 'credit' THEN 0 ELSE -micros END), 0) FROM ledger WHERE org_id = orgs.id);"
    "ALTER TABLE runs ADD COLUMN node_id TEXT;"
    "ALTER TABLE runs ADD COLUMN lease_expires_at INTEGER;";

/* A run's web allow-list (docs/API.md: a JSON array of domains; NULL is every public host), and the
 * names of a connection's query-parameter credentials (their values are in the sealed blob). */
static const char v4[] =
    "ALTER TABLE runs ADD COLUMN web_allow TEXT;"
    "ALTER TABLE connections ADD COLUMN query_names TEXT NOT NULL DEFAULT '[]';";

/* A replay (docs/AGENT.md): the run it replays, and how many tool results differed from the
 * original's. */
static const char v5[] = "ALTER TABLE runs ADD COLUMN replay_of TEXT;"
                         "ALTER TABLE runs ADD COLUMN divergences INTEGER NOT NULL DEFAULT 0;";

/* An event's wire form, as the API serves it, serialised once when the run layer emitted it. Rows
 * from before (and rows the retention reaper blanked) have none: the API makes it on read. */
static const char v6[] = "ALTER TABLE events ADD COLUMN wire TEXT;";

/* Fair claims (docs/STORE.md): each org's oldest queued run, and the count of its claimed runs,
 * each read from an index of its own, so that a claim costs a few lookups per org however many
 * runs are queued. */
static const char v7[] =
    "CREATE INDEX runs_org_queued ON runs(org_id, created_at) WHERE status = 'queued';"
    "CREATE INDEX runs_org_claimed ON runs(org_id) WHERE node_id IS NOT NULL AND "
    "  status IN ('queued', 'starting', 'running');";

/* A run's outputs (docs/STORE.md): the patterns it asked for, and the files that came back, kept
 * and purged with its log. A zero-data-retention run's never come here. */
static const char v8[] = "ALTER TABLE runs ADD COLUMN outputs TEXT;"
                         "CREATE TABLE run_outputs ("
                         "  run_id TEXT NOT NULL,"
                         "  path TEXT NOT NULL,"
                         "  type TEXT NOT NULL,"
                         "  size INTEGER NOT NULL,"
                         "  sha256 TEXT,"
                         "  content_type TEXT,"
                         "  target TEXT,"
                         "  content BLOB,"
                         "  PRIMARY KEY (run_id, path));";

/* Images (docs/IMAGES.md): an org's or the operator's (org_id ''), and the image a run uses.
 * Version 8 is another branch's (outputs); versions are applied by number, gaps allowed. */
static const char v9[] = "CREATE TABLE images ("
                         "  org_id TEXT NOT NULL DEFAULT '',"
                         "  name TEXT NOT NULL,"
                         "  status TEXT NOT NULL CHECK (status IN ('building', 'ready', 'failed')),"
                         "  digest TEXT NOT NULL,"
                         "  size_bytes INTEGER NOT NULL DEFAULT 0,"
                         "  recipe TEXT NOT NULL,"
                         "  created_at INTEGER NOT NULL,"
                         "  error TEXT,"
                         "  log_path TEXT,"
                         "  PRIMARY KEY (org_id, name));"
                         "ALTER TABLE runs ADD COLUMN image TEXT NOT NULL DEFAULT 'default';"
                         "ALTER TABLE runs ADD COLUMN image_digest TEXT;"
                         "CREATE INDEX runs_image_live ON runs(image) WHERE "
                         "  status IN ('queued', 'starting', 'running');";

/* Calls and attempts counted apart (docs/API.md, the run object's usage): a retried model call
 * counts once in model_calls and once per request in model_attempts. Before, model_calls counted
 * attempts; older rows keep that count in both. */
/* Webhooks (docs/WEBHOOKS.md): the endpoints and one row per event and endpoint, which is its
 * delivery's state and the outcome of its last attempt. A claim (claimed_by until
 * claim_expires_at) keeps one sender on a delivery. */
static const char v10[] =
    "CREATE TABLE webhooks ("
    "  id TEXT PRIMARY KEY,"
    "  org_id TEXT NOT NULL REFERENCES orgs(id),"
    "  url TEXT NOT NULL,"
    "  events TEXT NOT NULL,"
    "  secret TEXT NOT NULL,"
    "  timeout_seconds INTEGER NOT NULL,"
    "  created_at INTEGER NOT NULL,"
    "  disabled INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX webhooks_org ON webhooks(org_id, disabled);"
    "CREATE TABLE webhook_deliveries ("
    "  event_id TEXT NOT NULL,"
    "  webhook_id TEXT NOT NULL REFERENCES webhooks(id),"
    "  org_id TEXT NOT NULL,"
    "  type TEXT NOT NULL,"
    "  body TEXT NOT NULL,"
    "  state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL,"
    "  next_attempt_at INTEGER NOT NULL,"
    "  last_attempt_at INTEGER,"
    "  last_status INTEGER,"
    "  last_error TEXT,"
    "  last_duration_ms INTEGER,"
    "  claimed_by TEXT,"
    "  claim_expires_at INTEGER,"
    "  PRIMARY KEY (event_id, webhook_id));"
    "CREATE INDEX webhook_deliveries_due ON webhook_deliveries(next_attempt_at) "
    "  WHERE state = 'pending';"
    "CREATE INDEX webhook_deliveries_log ON webhook_deliveries(webhook_id, "
    "  created_at);";

static const char v11[] = "ALTER TABLE runs ADD COLUMN model_attempts INTEGER NOT NULL DEFAULT 0;"
                          "UPDATE runs SET model_attempts = model_calls;";

/* Sandboxes a caller drives (docs/SANDBOXES.md): rows of runs of their own kind, with the same
 * money, lease and timeline, and an idle timeout. */
static const char v12[] = "ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run' "
                          "  CHECK (kind IN ('run', 'sandbox'));"
                          "ALTER TABLE runs ADD COLUMN idle_timeout_seconds INTEGER NOT NULL "
                          "  DEFAULT 0;"
                          "CREATE INDEX runs_org_kind ON runs(org_id, kind, created_at);";

/* Webhooks' attempt history (docs/WEBHOOKS.md): one row per attempt of a delivery, written with
 * the outcome it records. A delivery made before has its last attempt, the one it kept. */
static const char v13[] =
    "CREATE TABLE webhook_attempts ("
    "  event_id TEXT NOT NULL,"
    "  webhook_id TEXT NOT NULL REFERENCES webhooks(id),"
    "  org_id TEXT NOT NULL,"
    "  attempt INTEGER NOT NULL,"
    "  outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'retried', 'failed')),"
    "  at INTEGER NOT NULL,"
    "  http_status INTEGER,"
    "  duration_ms INTEGER NOT NULL,"
    "  error TEXT,"
    "  PRIMARY KEY (webhook_id, event_id, attempt));"
    "INSERT INTO webhook_attempts (event_id, webhook_id, org_id, attempt, outcome, at, "
    "  http_status, duration_ms, error) SELECT event_id, webhook_id, org_id, attempts, "
    "  CASE state WHEN 'pending' THEN 'retried' ELSE state END, last_attempt_at, last_status, "
    "  COALESCE(last_duration_ms, 0), last_error FROM webhook_deliveries WHERE attempts > 0 AND "
    "  last_attempt_at IS NOT NULL;";

/* Where each node's API is reached by the others (a sandbox's calls go to its node). */
static const char v14[] = "CREATE TABLE nodes ("
                          "  id TEXT PRIMARY KEY,"
                          "  url TEXT NOT NULL,"
                          "  updated_at INTEGER NOT NULL);";

const struct eph_migration eph_sqlite_migrations[] = {
    {1, "initial schema", v1},
    {2, "key prefixes, connections", v2},
    {3, "running balance, leases", v3},
    {4, "web allow-lists, query-parameter credentials", v4},
    {5, "replays", v5},
    {6, "events stored as served", v6},
    {7, "fair claims across orgs", v7},
    {8, "run outputs", v8},
    {9, "images", v9},
    {10, "webhooks", v10},
    {11, "model attempts apart from calls", v11},
    {12, "sandboxes", v12},
    {13, "webhook attempt history", v13},
    {14, "node addresses", v14},
};
const unsigned eph_sqlite_migrations_count =
    sizeof(eph_sqlite_migrations) / sizeof(eph_sqlite_migrations[0]);
