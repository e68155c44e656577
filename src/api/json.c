#include "api/json.h"

#include "common/clock.h"

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
        sandbox = json_pack("{s:s, s:I, s:I, s:s, s:s?}", "backend", r->sandbox_backend, "vcpus",
                            (json_int_t)r->vcpus, "memory_mib", (json_int_t)r->memory_mib, "image",
                            r->image[0] ? r->image : "default", "image_digest",
                            r->image_digest[0] ? r->image_digest : NULL);

    json_t *error = json_null();
    if (r->error_code)
        error =
            json_pack("{s:s, s:s, s:s}", "type", r->error_type ? r->error_type : "api_error",
                      "code", r->error_code, "message", r->error_message ? r->error_message : "");

    const struct eph_usage *u = &r->usage;
    json_t *usage = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "model_calls", (json_int_t)u->model_calls,
        "model_attempts", (json_int_t)u->model_attempts, "input_tokens",
        (json_int_t)u->input_tokens, "output_tokens", (json_int_t)u->output_tokens, "total_tokens",
        (json_int_t)(u->input_tokens + u->output_tokens), "shell_commands",
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

    /* A replay says of what, and how many tool results differed from the original's. */
    json_t *replay = r->replay_of ? json_pack("{s:s, s:I}", "of", r->replay_of, "divergences",
                                              (json_int_t)r->divergences)
                                  : NULL;
    /* The prompt is there until the log is purged; a zero-data-retention run never had it. */
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s?, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, "
                  "s:o, s:o, s:o*}",
                  "id", r->id, "object", "run", "status", eph_run_status_name(r->status), "model",
                  r->model, "prompt", str_or_null(r->zdr ? NULL : r->prompt), "created_at",
                  time_or_null(r->created_at_ms), "started_at", time_or_null(r->started_at_ms),
                  "finished_at", time_or_null(r->finished_at_ms), "permissions", perm, "sandbox",
                  sandbox, "result", str_or_null(r->result), "error", error, "usage", usage, "cost",
                  cost, "retention", retention, "metadata",
                  r->metadata ? json_incref(r->metadata) : json_object(), "replay", replay);
    /* The image it runs on (docs/IMAGES.md). A replay object that could not be made is not a
     * run without one ("s:o*" leaves a NULL out): the whole object fails. */
    json_t *image = o ? json_string(r->image[0] ? r->image : "default") : NULL;
    if (o && (!image || json_object_set_new(o, "image", image) || (r->replay_of && !replay))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* A sandbox's status in its own words (docs/SANDBOXES.md). */
const char *eph_sandbox_status_name(enum eph_run_status s)
{
    switch (s) {
    case EPH_RUN_QUEUED:
    case EPH_RUN_STARTING:
        return "starting";
    case EPH_RUN_RUNNING:
        return "ready";
    case EPH_RUN_COMPLETED:
    case EPH_RUN_CANCELLED:
        return "stopped";
    case EPH_RUN_TIMED_OUT:
        return "timed_out";
    case EPH_RUN_BUDGET_EXHAUSTED:
        return "budget_exhausted";
    case EPH_RUN_FAILED:
        break;
    }
    return "failed";
}

json_t *eph_sandbox_to_json(const struct eph_run *r, unsigned retention_days)
{
    /* The run object without what only an agent has, in a sandbox's words. */
    json_t *o = eph_run_to_json(r, retention_days);
    if (!o)
        return NULL;
    static const char *const agent_only[] = {"model", "prompt", "result", "replay", "started_at"};
    for (size_t i = 0; i < sizeof(agent_only) / sizeof(agent_only[0]); i++)
        json_object_del(o, agent_only[i]);
    json_t *usage = json_object_get(o, "usage");
    static const char *const model_usage[] = {"model_calls", "model_attempts", "input_tokens",
                                              "output_tokens", "total_tokens"};
    for (size_t i = 0; usage && i < sizeof(model_usage) / sizeof(model_usage[0]); i++)
        json_object_del(usage, model_usage[i]);
    json_object_del(json_object_get(o, "cost"), "model_micros");
    json_t *perm = json_object_get(o, "permissions");
    json_object_del(perm, "shell");
    json_object_set_new(perm, "idle_timeout_seconds",
                        json_integer((json_int_t)r->idle_timeout_seconds));
    json_object_set_new(o, "object", json_string("sandbox"));
    json_object_set_new(o, "status", json_string(eph_sandbox_status_name(r->status)));
    /* A sandbox is ready when it starts running: the worker records that instant as its start. */
    bool ready = r->status != EPH_RUN_QUEUED && r->status != EPH_RUN_STARTING && r->sandbox_backend;
    json_object_set_new(o, "ready_at", ready ? time_or_null(r->started_at_ms) : json_null());
    return o;
}
