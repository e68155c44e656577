/*
 * run_row.c - a row of the runs table to struct eph_run, for both stores (run_row.h).
 */
#include "store/run_row.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

enum eph_run_column {
    C_ID,
    C_ORG_ID,
    C_STATUS,
    C_MODEL,
    C_PROMPT,
    C_FILES,
    C_CONNECTIONS,
    C_METADATA,
    C_SHELL,
    C_WEB,
    C_ZDR,
    C_TIMEOUT_SECONDS,
    C_CREATED_AT,
    C_STARTED_AT,
    C_FINISHED_AT,
    C_RESULT,
    C_ERROR_TYPE,
    C_ERROR_CODE,
    C_ERROR_MESSAGE,
    C_MODEL_CALLS,
    C_INPUT_TOKENS,
    C_OUTPUT_TOKENS,
    C_SHELL_COMMANDS,
    C_WEB_REQUESTS,
    C_CONNECTION_REQUESTS,
    C_RESERVED_MICROS,
    C_MODEL_MICROS,
    C_WEB_MICROS,
    C_COMPUTE_MICROS,
    C_CHARGED_MICROS,
    C_RELEASED_MICROS,
    C_SANDBOX_BACKEND,
    C_VCPUS,
    C_MEMORY_MIB,
    C_LOG_EXPIRES_AT,
    C_LOG_PURGED,
    C_NODE_ID,
    C_LEASE_EXPIRES_AT,
    C_WEB_ALLOW,
    C_REPLAY_OF,
    C_DIVERGENCES,
    C_MODEL_ATTEMPTS,
    C_IMAGE,
    C_IMAGE_DIGEST,
    C_OUTPUTS,
    C_KIND,
    C_IDLE_TIMEOUT_SECONDS,
    C_COUNT
};

size_t eph_run_column_count(void)
{
    return C_COUNT;
}

/* The column's text copied, NULL for a NULL column; a copy that cannot be made sets *err. */
static char *text_dup(const struct eph_row *row, int col, int *err)
{
    const char *t = row->text(row, col);
    char *s = t ? strdup(t) : NULL;
    if (t && !s)
        *err = -ENOMEM;
    return s;
}

/* The column's JSON, NULL for a NULL column (or for a text that is not JSON, as before); a parse
 * that ran out of memory sets *err (a syntax error has a line, a parse that failed without one did
 * not get that far). */
static json_t *text_json(const struct eph_row *row, int col, int *err)
{
    const char *t = row->text(row, col);
    json_error_t jerr;
    json_t *j = t ? json_loads(t, JSON_DECODE_ANY, &jerr) : NULL;
    if (t && !j && jerr.line < 0)
        *err = -ENOMEM;
    return j;
}

static void text_copy(const struct eph_row *row, int col, char *out, size_t len)
{
    const char *t = row->text(row, col);
    snprintf(out, len, "%s", t ? t : "");
}

int eph_run_from_row(const struct eph_row *row, struct eph_run *r)
{
    eph_run_init(r);
    int err = 0;
    int64_t (*n)(const struct eph_row *, int) = row->i64;
    text_copy(row, C_ID, r->id, sizeof(r->id));
    text_copy(row, C_ORG_ID, r->org_id, sizeof(r->org_id));
    const char *status = row->text(row, C_STATUS);
    eph_run_status_parse(status ? status : "", &r->status);
    r->model = text_dup(row, C_MODEL, &err);
    r->prompt = text_dup(row, C_PROMPT, &err);
    r->files = text_json(row, C_FILES, &err);
    r->connections = text_json(row, C_CONNECTIONS, &err);
    r->metadata = text_json(row, C_METADATA, &err);
    r->shell = n(row, C_SHELL) != 0;
    r->web = n(row, C_WEB) != 0;
    r->zdr = n(row, C_ZDR) != 0;
    r->timeout_seconds = (unsigned)n(row, C_TIMEOUT_SECONDS);
    r->created_at_ms = n(row, C_CREATED_AT);
    r->started_at_ms = n(row, C_STARTED_AT);
    r->finished_at_ms = n(row, C_FINISHED_AT);
    r->result = text_dup(row, C_RESULT, &err);
    r->error_type = text_dup(row, C_ERROR_TYPE, &err);
    r->error_code = text_dup(row, C_ERROR_CODE, &err);
    r->error_message = text_dup(row, C_ERROR_MESSAGE, &err);
    r->usage.model_calls = (uint64_t)n(row, C_MODEL_CALLS);
    r->usage.model_attempts = (uint64_t)n(row, C_MODEL_ATTEMPTS);
    r->usage.input_tokens = (uint64_t)n(row, C_INPUT_TOKENS);
    r->usage.output_tokens = (uint64_t)n(row, C_OUTPUT_TOKENS);
    r->usage.shell_commands = (uint64_t)n(row, C_SHELL_COMMANDS);
    r->usage.web_requests = (uint64_t)n(row, C_WEB_REQUESTS);
    r->usage.connection_requests = (uint64_t)n(row, C_CONNECTION_REQUESTS);
    r->cost.reserved_micros = n(row, C_RESERVED_MICROS);
    r->cost.model_micros = n(row, C_MODEL_MICROS);
    r->cost.web_micros = n(row, C_WEB_MICROS);
    r->cost.compute_micros = n(row, C_COMPUTE_MICROS);
    r->cost.charged_micros = n(row, C_CHARGED_MICROS);
    r->cost.released_micros = n(row, C_RELEASED_MICROS);
    r->sandbox_backend = text_dup(row, C_SANDBOX_BACKEND, &err);
    r->vcpus = (unsigned)n(row, C_VCPUS);
    r->memory_mib = (unsigned)n(row, C_MEMORY_MIB);
    r->log_expires_at_ms = n(row, C_LOG_EXPIRES_AT);
    r->log_purged = n(row, C_LOG_PURGED) != 0;
    text_copy(row, C_NODE_ID, r->node_id, sizeof(r->node_id));
    r->lease_expires_at_ms = n(row, C_LEASE_EXPIRES_AT);
    r->web_allow = text_json(row, C_WEB_ALLOW, &err);
    r->replay_of = text_dup(row, C_REPLAY_OF, &err);
    r->divergences = (uint64_t)n(row, C_DIVERGENCES);
    const char *image = row->text(row, C_IMAGE);
    snprintf(r->image, sizeof(r->image), "%s", image ? image : "default");
    text_copy(row, C_IMAGE_DIGEST, r->image_digest, sizeof(r->image_digest));
    r->outputs = text_json(row, C_OUTPUTS, &err);
    const char *kind = row->text(row, C_KIND);
    r->kind = kind && !strcmp(kind, "sandbox") ? EPH_KIND_SANDBOX : EPH_KIND_RUN;
    r->idle_timeout_seconds = (unsigned)n(row, C_IDLE_TIMEOUT_SECONDS);
    if (err)
        eph_run_release(r);
    return err;
}
