#include "run/run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

static const char *const status_names[] = {
    [EPH_RUN_QUEUED] = "queued",
    [EPH_RUN_STARTING] = "starting",
    [EPH_RUN_RUNNING] = "running",
    [EPH_RUN_COMPLETED] = "completed",
    [EPH_RUN_FAILED] = "failed",
    [EPH_RUN_TIMED_OUT] = "timed_out",
    [EPH_RUN_BUDGET_EXHAUSTED] = "budget_exhausted",
    [EPH_RUN_CANCELLED] = "cancelled",
};

void eph_run_init(struct eph_run *r)
{
    memset(r, 0, sizeof(*r));
}

void eph_run_release(struct eph_run *r)
{
    free(r->model);
    free(r->prompt);
    json_decref(r->files);
    json_decref(r->connections);
    json_decref(r->web_allow);
    json_decref(r->metadata);
    free(r->result);
    free(r->error_type);
    free(r->error_code);
    free(r->error_message);
    free(r->sandbox_backend);
    memset(r, 0, sizeof(*r));
}

const char *eph_run_status_name(enum eph_run_status s)
{
    if ((unsigned)s >= sizeof(status_names) / sizeof(status_names[0]))
        return "unknown";
    return status_names[s];
}

int eph_run_status_parse(const char *s, enum eph_run_status *out)
{
    for (unsigned i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++) {
        if (strcmp(s, status_names[i]) == 0) {
            *out = (enum eph_run_status)i;
            return 0;
        }
    }
    return -EINVAL;
}

bool eph_run_status_terminal(enum eph_run_status s)
{
    return s >= EPH_RUN_COMPLETED;
}

bool eph_run_transition_ok(enum eph_run_status from, enum eph_run_status to)
{
    if (eph_run_status_terminal(from))
        return false;
    switch (to) {
    case EPH_RUN_QUEUED:
        return false;
    case EPH_RUN_STARTING:
        return from == EPH_RUN_QUEUED;
    case EPH_RUN_RUNNING:
        return from == EPH_RUN_STARTING;
    case EPH_RUN_COMPLETED:
        return from == EPH_RUN_RUNNING;
    default:
        /* failed, timed_out, budget_exhausted, cancelled: from any live state */
        return true;
    }
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int eph_run_set_error(struct eph_run *r, const char *type, const char *code, const char *message)
{
    free(r->error_type);
    free(r->error_code);
    free(r->error_message);
    r->error_type = dup_or_null(type);
    r->error_code = dup_or_null(code);
    r->error_message = dup_or_null(message);
    if ((type && !r->error_type) || (code && !r->error_code) || (message && !r->error_message))
        return -ENOMEM;
    return 0;
}

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    if (!ms)
        return json_null();
    return json_string(eph_clock_format_iso8601(ms, buf, sizeof(buf)));
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *eph_run_to_json(const struct eph_run *r, unsigned retention_days)
{
    json_t *files = json_array();
    if (r->files) {
        size_t i;
        json_t *f;
        json_array_foreach(r->files, i, f) json_array_append(files, json_object_get(f, "path"));
    }
    json_t *perm = json_pack(
        "{s:b, s:o, s:o, s:o, s:b, s:I, s:I}", "shell", r->shell, "web",
        /* As it was asked: true/false, or {"allow": [...]}. */
        r->web && r->web_allow ? json_pack("{s:O}", "allow", r->web_allow) : json_boolean(r->web),
        "connections", r->connections ? json_incref(r->connections) : json_array(), "files", files,
        "zero_data_retention", r->zdr, "timeout_seconds", (json_int_t)r->timeout_seconds,
        "max_cost_micros", (json_int_t)r->cost.reserved_micros);

    json_t *sandbox = json_null();
    if (r->sandbox_backend)
        sandbox = json_pack("{s:s, s:I, s:I}", "backend", r->sandbox_backend, "vcpus",
                            (json_int_t)r->vcpus, "memory_mib", (json_int_t)r->memory_mib);

    json_t *error = json_null();
    if (r->error_code)
        error =
            json_pack("{s:s, s:s, s:s}", "type", r->error_type ? r->error_type : "api_error",
                      "code", r->error_code, "message", r->error_message ? r->error_message : "");

    const struct eph_usage *u = &r->usage;
    json_t *usage = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "model_calls", (json_int_t)u->model_calls,
        "input_tokens", (json_int_t)u->input_tokens, "output_tokens", (json_int_t)u->output_tokens,
        "total_tokens", (json_int_t)(u->input_tokens + u->output_tokens), "shell_commands",
        (json_int_t)u->shell_commands, "web_requests", (json_int_t)u->web_requests,
        "connection_requests", (json_int_t)u->connection_requests);

    const struct eph_cost *c = &r->cost;
    bool terminal = eph_run_status_terminal(r->status);
    json_t *cost = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I}", "reserved_micros", (json_int_t)c->reserved_micros,
        "model_micros", (json_int_t)c->model_micros, "web_micros", (json_int_t)c->web_micros,
        "compute_micros", (json_int_t)c->compute_micros, "charged_micros",
        (json_int_t)(terminal ? c->charged_micros
                              : c->model_micros + c->web_micros + c->compute_micros),
        "released_micros", (json_int_t)(terminal ? c->released_micros : 0));

    json_t *retention;
    if (r->zdr)
        retention = json_pack("{s:i, s:n}", "log_kept_days", 0, "expires_at");
    else
        retention = json_pack("{s:I, s:o}", "log_kept_days", (json_int_t)retention_days,
                              "expires_at", time_or_null(r->log_expires_at_ms));

    return json_pack("{s:s, s:s, s:s, s:s?, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
                     "s:o}",
                     "id", r->id, "object", "run", "status", eph_run_status_name(r->status),
                     "model", r->model, "created_at", time_or_null(r->created_at_ms), "started_at",
                     time_or_null(r->started_at_ms), "finished_at", time_or_null(r->finished_at_ms),
                     "permissions", perm, "sandbox", sandbox, "result", str_or_null(r->result),
                     "error", error, "usage", usage, "cost", cost, "retention", retention,
                     "metadata", r->metadata ? json_incref(r->metadata) : json_object());
}
