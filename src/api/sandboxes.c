/*
 * sandboxes.c - /v1/sandboxes (docs/SANDBOXES.md): a sandbox a caller drives with its own agent.
 * Create (validation, idempotency, reservation), get, list, delete, its timeline, its commands
 * and its files. A sandbox is a row of runs of kind sandbox, worked by its own thread
 * (run/drive.h); every call on it is an operation that thread runs while the request waits,
 * parked.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "api/api.h"
#include "api/json.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/id.h"
#include "common/log.h"
#include "common/money.h"
#include "common/text.h"
#include "run/admit.h"
#include "run/cluster.h"
#include "run/drive.h"
#include "run/event_wire.h"
#include "run/live.h"

#define CANCEL_WAIT_SECONDS 5
/* A command's request: its text, stdin, environment (docs/SANDBOXES.md). */
#define COMMAND_MAX (64u << 10)
#define STDIN_MAX (1u << 20)
#define ENV_MAX 64
#define ENV_ENTRY_MAX 4096
/* A call waits this long by default for its operation (Prefer: wait=N changes it). */
#define CALL_WAIT_SECONDS 60
/* The least budget a sandbox takes: this many seconds of compute. */
#define MIN_BUDGET_SECONDS 10

#define BAD(param, ...)                                                                            \
    eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param, __VA_ARGS__)

static uint64_t deadline_in(unsigned seconds)
{
    return eph_clock_mono_ns() + (uint64_t)seconds * 1000000000u;
}

static json_t *sandbox_json(struct eph_api_req *req, const struct eph_run *r)
{
    return eph_sandbox_to_json(r, req->svc->cfg->retention_days);
}

static bool load(struct eph_api_req *req, const char *id, struct eph_run *r)
{
    return eph_api_load_kind(req, id, EPH_KIND_SANDBOX, r);
}

/* The sandbox as it is now, with status (after a long poll, or at once). */
static int answer_now(struct eph_api_req *req, unsigned status)
{
    struct eph_run r;
    if (!load(req, req->run_id, &r))
        return MHD_YES;
    json_t *o = sandbox_json(req, &r);
    eph_run_release(&r);
    if (status == 201) {
        char location[64];
        snprintf(location, sizeof(location), "/v1/sandboxes/%s", req->run_id);
        return eph_api_reply_json(req, 201, o, "Location", location);
    }
    return eph_api_reply_json(req, status, o, NULL, NULL);
}

static int get_resume(struct eph_api_req *req)
{
    return answer_now(req, 200);
}

/* ---- create ---- */

/* The org's sandboxes that are starting or ready, up to cap + 1. */
static int count_cb(const struct eph_run *r, void *ctx)
{
    (*(unsigned *)ctx)++;
    return 0;
}

static int live_count(struct eph_api_req *req, unsigned cap, unsigned *n)
{
    struct eph_store *st = req->svc->store;
    static const char *const live[] = {"queued", "starting", "running"};
    *n = 0;
    for (size_t i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
        bool more = false;
        int rc = st->ops->run_list(st, req->org_id, cap + 1, NULL, live[i], NULL, EPH_KIND_SANDBOX,
                                   count_cb, n, &more);
        if (rc)
            return rc;
    }
    return 0;
}

/* Parks a new sandbox's create until it is ready (or ended, or the wait is over): woken by each
 * of its events, it looks again. */
static int create_resume(struct eph_api_req *req);

static bool park_until_ready(struct eph_api_req *req)
{
    if (!req->live)
        return false;
    uint64_t seq;
    bool closed;
    eph_live_state(req->live, &seq, &closed);
    if (closed)
        return false;
    req->waiter.conn = req->conn;
    req->waiter.live = req->live;
    req->waiter.after_seq = seq;
    req->waiter.done = NULL;
    if (eph_api_park(req->parker, &req->waiter) != EPH_API_PARKED)
        return false;
    req->parked = true;
    req->resume = create_resume;
    return true;
}

static int create_resume(struct eph_api_req *req)
{
    struct eph_run r;
    if (!load(req, req->run_id, &r))
        return MHD_YES;
    bool starting = r.status == EPH_RUN_QUEUED || r.status == EPH_RUN_STARTING;
    eph_run_release(&r);
    if (starting && eph_clock_mono_ns() < req->waiter.deadline_ns && park_until_ready(req))
        return MHD_YES;
    return answer_now(req, 201);
}

static int new_sandbox(struct eph_api_req *req, const struct eph_api_create *c, struct eph_run *r,
                       struct eph_event *first)
{
    struct eph_service *svc = req->svc;
    eph_run_init(r);
    memset(first, 0, sizeof(*first));
    int rc = 0;
    /* The server chose it already (server.c): the id its idempotency record names. */
    if (req->run_id[0])
        snprintf(r->id, sizeof(r->id), "%s", req->run_id);
    else
        rc = eph_id_hex("sbx_", 16, r->id, sizeof(r->id));
    snprintf(r->org_id, sizeof(r->org_id), "%s", req->org_id);
    r->kind = EPH_KIND_SANDBOX;
    r->status = EPH_RUN_QUEUED;
    r->model = strdup("");
    r->zdr = c->zdr;
    r->files = c->zdr ? NULL : json_incref(c->files);
    r->connections = c->connections ? json_incref(c->connections) : json_array();
    r->metadata = c->metadata ? json_incref(c->metadata) : json_object();
    r->shell = true;
    r->web = c->web;
    r->web_allow = c->web_allow ? json_incref(c->web_allow) : NULL;
    r->timeout_seconds = c->timeout;
    r->idle_timeout_seconds = c->idle_timeout;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = c->max_cost;
    /* Its caller drives it through this process: this node holds it from birth, and no other
     * node may claim it. */
    snprintf(r->node_id, sizeof(r->node_id), "%s", svc->node_id);
    r->lease_expires_at_ms = r->created_at_ms + (int64_t)svc->cfg->lease_seconds * 1000;
    if (!rc && (!r->model || !r->connections || !r->metadata))
        rc = -ENOMEM;
    int frc =
        eph_api_first_event(first, "sandbox", "sandbox.created", r->created_at_ms, c->max_cost);
    return rc ? rc : frc;
}

/* What a create must hold before anything is reserved: the org's cap on live sandboxes, and a
 * budget that pays for the sandbox's start. False after answering. */
static bool can_create(struct eph_api_req *req, const struct eph_api_create *c)
{
    struct eph_service *svc = req->svc;
    unsigned cap = svc->cfg->sandboxes.max_live_per_org, n = 0;
    if (live_count(req, cap, &n)) {
        eph_api_reply_store_unavailable(req);
        return false;
    }
    if (cap && n >= cap) {
        eph_api_reply_error(req, 429, "rate_limit_error", "too_many_sandboxes", NULL,
                            "the organization already has %u live sandboxes (the limit); delete "
                            "one or retry when one has ended; nothing was reserved",
                            cap);
        return false;
    }
    int64_t least = (int64_t)svc->cfg->prices.compute_micros_per_second * MIN_BUDGET_SECONDS;
    if (c->max_cost < least) {
        char want[EPH_MONEY_FMT_MAX];
        eph_api_reply_error(req, 402, "invalid_request_error", "budget_too_small",
                            "max_cost_micros",
                            "a sandbox needs at least %s (%d seconds of compute); nothing was "
                            "reserved",
                            eph_money_format(least, want), MIN_BUDGET_SECONDS);
        return false;
    }
    return true;
}

static int admit_refused(struct eph_api_req *req, int rc, bool queue_failed, int64_t max_cost)
{
    if (queue_failed)
        return eph_api_reply_error(req, 503, "api_error", "sandbox_unavailable", NULL,
                                   "the sandbox could not be started; nothing was reserved, retry");
    return eph_api_store_refused(req, rc, max_cost);
}

int eph_api_sandboxes_create(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    unsigned wait;
    json_t *body;
    struct eph_api_create c;
    if (!eph_api_create_begin(req, eph_api_validate_sandbox_create, &wait, &body, &c))
        return MHD_YES;
    char image[64], digest[72];
    if (!eph_api_image_resolve(req, &c, NULL, image, digest) ||
        (c.connections && !eph_api_connections_exist(req, c.connections)) || !can_create(req, &c)) {
        eph_api_create_release(&c);
        json_decref(body);
        return MHD_YES;
    }
    struct eph_run r;
    struct eph_event first;
    bool queue_failed = false;
    int rc = new_sandbox(req, &c, &r, &first);
    snprintf(r.image, sizeof(r.image), "%s", image);
    snprintf(r.image_digest, sizeof(r.image_digest), "%s", digest);
    if (!rc)
        rc = eph_run_admit(svc, &r, &first, "", c.files, eph_service_submit_sandbox, &queue_failed);
    eph_event_release(&first);
    int64_t max_cost = c.max_cost;
    eph_api_create_release(&c);
    json_decref(body);
    if (rc) {
        eph_run_release(&r);
        return admit_refused(req, rc, queue_failed, max_cost);
    }
    snprintf(req->run_id, sizeof(req->run_id), "%s", r.id);
    req->live = eph_live_get(svc->live, r.id);
    char money[EPH_MONEY_FMT_MAX];
    EPH_INFO("api", "sandbox %s created (org %s, budget %s)", r.id, r.org_id,
             eph_money_format(max_cost, money));
    json_t *obj = sandbox_json(req, &r);
    eph_run_release(&r);
    /* A retry with the same key gets the sandbox from now on, even while this request waits. */
    eph_api_idem_settle(req, 201, obj);
    json_decref(obj);
    req->waiter.deadline_ns = deadline_in(wait);
    if (wait && park_until_ready(req))
        return MHD_YES;
    return answer_now(req, 201);
}

/* ---- get, list, delete ---- */

/* The request's sandbox (req->run_id set) and whether it has ended; false after answering. */
static bool load_ended(struct eph_api_req *req, const char *id, bool *ended)
{
    struct eph_run r;
    if (!load(req, id, &r))
        return false;
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    *ended = eph_run_status_terminal(r.status);
    eph_run_release(&r);
    return true;
}

int eph_api_sandboxes_get(struct eph_api_req *req, const char *id)
{
    bool terminal;
    if (!load_ended(req, id, &terminal))
        return MHD_YES;
    unsigned wait;
    if (!eph_api_prefer_wait(req, EPH_API_WAIT_MAX, &wait))
        return MHD_YES;
    if (!terminal && wait) {
        req->live = eph_cluster_follow(req->svc, id);
        if (eph_api_park_until_settled(req, deadline_in(wait), get_resume))
            return MHD_YES;
    }
    return get_resume(req);
}

struct list_ctx {
    struct eph_api_req *req;
    json_t *data;
};

static int list_cb(const struct eph_run *r, void *ctx)
{
    struct list_ctx *l = ctx;
    return json_array_append_new(l->data, sandbox_json(l->req, r)) ? -ENOMEM : 0;
}

int eph_api_sandboxes_list(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    const struct eph_api_query *q = &req->query;
    json_t *md = NULL;
    if (q->nmeta) {
        md = json_object();
        for (unsigned i = 0; md && i < q->nmeta; i++)
            json_object_set_new(md, q->meta_keys[i], json_string(q->meta_values[i]));
    }
    struct list_ctx l = {req, json_array()};
    bool more = false;
    int rc = l.data ? st->ops->run_list(st, req->org_id, q->limit, q->after, q->status, md,
                                        EPH_KIND_SANDBOX, list_cb, &l, &more)
                    : -ENOMEM;
    json_decref(md);
    if (rc) {
        json_decref(l.data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, l.data, more);
}

int eph_api_sandboxes_delete(struct eph_api_req *req, const char *id)
{
    bool terminal;
    if (!load_ended(req, id, &terminal))
        return MHD_YES;
    /* Deleting an ended sandbox changes nothing: the answer is the sandbox as it is. */
    if (!terminal && (req->live = eph_cluster_follow(req->svc, id))) {
        eph_live_cancel(req->live);
        EPH_INFO("api", "sandbox %s: delete requested", id);
        if (!eph_live_worked_here(req->live) && eph_cluster_cancel(req->svc, id))
            EPH_WARN("api", "sandbox %s: cannot tell the node working on it", id);
        if (eph_api_park_until_settled(req, deadline_in(CANCEL_WAIT_SECONDS), get_resume))
            return MHD_YES;
    }
    return get_resume(req);
}

/* ---- calls: commands and files ---- */

/* The live sandbox of a call, or an answer: 404 (not the org's), 409 sandbox_ended, or 409 when
 * another node serves it. */
static struct eph_drive *drive_of(struct eph_api_req *req, const char *id)
{
    struct eph_run r;
    if (!load(req, id, &r))
        return NULL;
    bool ended = eph_run_status_terminal(r.status);
    char node[sizeof(r.node_id)];
    snprintf(node, sizeof(node), "%s", r.node_id);
    eph_run_release(&r);
    struct eph_drive *d = ended ? NULL : eph_drive_get(req->svc->drives, id);
    if (d)
        return d;
    if (!ended && strcmp(node, req->svc->node_id))
        eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_elsewhere", NULL,
                            "sandbox '%s' is served by node '%s': send its calls there", id, node);
    else
        eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_ended", NULL,
                            "sandbox '%s' has ended", id);
    return NULL;
}

/* Submits op to the sandbox; false after answering (busy, ended). */
static bool submit(struct eph_api_req *req, struct eph_drive *d, struct eph_drive_op *op)
{
    int rc = eph_drive_submit(d, op);
    if (rc == -EBUSY)
        eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_busy", NULL,
                            "a command is already running in sandbox '%s'; wait for it, or run "
                            "it in the background",
                            req->run_id);
    else if (rc == -ENOSPC)
        eph_api_reply_error(req, 429, "rate_limit_error", "too_many_commands", NULL,
                            "sandbox '%s' already runs %d background commands", req->run_id,
                            EPH_DRIVE_BACKGROUND_MAX);
    else if (rc == -ESHUTDOWN)
        eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_ended", NULL,
                            "sandbox '%s' has ended", req->run_id);
    else if (rc)
        eph_api_reply_error(req, 503, "api_error", "internal_error", NULL,
                            "the call could not be queued");
    return rc == 0;
}

/* Parks the request until req->op is done (or the wait is over); the server then calls resume. */
static bool park_op(struct eph_api_req *req, unsigned wait, int (*resume)(struct eph_api_req *req))
{
    if (!req->live || eph_drive_op_done(req->op))
        return false;
    req->waiter.conn = req->conn;
    req->waiter.live = req->live;
    req->waiter.after_seq = UINT64_MAX;
    req->waiter.deadline_ns = deadline_in(wait);
    req->waiter.done = (bool (*)(const void *))eph_drive_op_done;
    req->waiter.done_arg = req->op;
    if (eph_api_park(req->parker, &req->waiter) != EPH_API_PARKED)
        return false;
    req->parked = true;
    req->resume = resume;
    return true;
}

/* An operation that failed in the sandbox, or was not done when the wait ended, answered (a file
 * call's errors mean the path). */
static int op_failed(struct eph_api_req *req, const struct eph_drive_op *op, const char *what)
{
    if (!eph_drive_op_done(op))
        return eph_api_reply_error(req, 504, "api_error", "sandbox_timeout", NULL,
                                   "the sandbox did not %s in time", what);
    int rc = op->rc;
    if (rc == -ESHUTDOWN)
        return eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_ended", NULL,
                                   "the sandbox ended before the call ran");
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "file_not_found", "path",
                                   "no such file in the sandbox");
    if (rc == -ELOOP || rc == -ENOTDIR || rc == -EISDIR || rc == -EINVAL || rc == -EACCES ||
        rc == -EPERM || rc == -EROFS)
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_path", "path",
                                   "the path cannot be used: %s (a symlink, a directory, or "
                                   "outside the writable areas)",
                                   eph_strerror(rc));
    if (rc == -EMSGSIZE)
        return eph_api_reply_error(req, 413, "invalid_request_error", "file_too_large", "path",
                                   "the file is larger than %llu bytes",
                                   (unsigned long long)req->svc->cfg->sandboxes.max_download_bytes);
    return eph_api_reply_error(req, 502, "api_error", "sandbox_error", NULL,
                               "the sandbox failed the call: %s", eph_strerror(rc));
}

/* A command's result (the answer of a waited command, and a stream's exit event). */
static json_t *command_json(const struct eph_drive_op *op)
{
    bool done = eph_drive_op_done(op);
    json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "id", op->id, "object", "command", "status",
                          !done        ? "running"
                          : op->rc     ? "failed"
                          : op->killed ? "killed"
                                       : "exited",
                          "background", op->background);
    if (!o || !done)
        return o;
    if (op->rc) {
        json_object_set_new(o, "error", json_string(eph_strerror(op->rc)));
    } else {
        const struct eph_exec_result *r = &op->res;
        char *out = eph_text_utf8_sanitize(r->out.data ? r->out.data : "", r->out.len);
        char *err = eph_text_utf8_sanitize(r->err.data ? r->err.data : "", r->err.len);
        json_object_set_new(o, "exit_code",
                            json_integer(r->signal ? 128 + r->signal : r->exit_code));
        json_object_set_new(o, "signal", r->signal ? json_integer(r->signal) : json_null());
        json_object_set_new(o, "stdout", json_string(out ? out : ""));
        json_object_set_new(o, "stderr", json_string(err ? err : ""));
        json_object_set_new(o, "stdout_bytes", json_integer((json_int_t)r->stdout_total));
        json_object_set_new(o, "stderr_bytes", json_integer((json_int_t)r->stderr_total));
        json_object_set_new(o, "stdout_truncated", json_boolean(r->stdout_total > r->out.len));
        json_object_set_new(o, "stderr_truncated", json_boolean(r->stderr_total > r->err.len));
        json_object_set_new(o, "duration_ms", json_integer((json_int_t)(r->duration_us / 1000)));
        json_object_set_new(o, "timed_out", json_boolean(r->timed_out));
        free(out);
        free(err);
    }
    json_object_set_new(o, "sandbox_ended", op->stopped ? json_string(op->stopped) : json_null());
    return o;
}

static int command_resume(struct eph_api_req *req)
{
    const struct eph_drive_op *op = req->op;
    bool done = eph_drive_op_done(op);
    if (done && op->rc == -ESHUTDOWN)
        return op_failed(req, op, "run the command");
    /* Not done within the wait: 202, and the caller follows it with GET …/commands/{id}. */
    return eph_api_reply_json(req, done ? 200 : 202, command_json(op), NULL, NULL);
}

/* The env object ({"NAME": "value"}) as NULL-terminated "K=V" strings; false after answering. */
static bool env_of(struct eph_api_req *req, json_t *env, char ***out)
{
    *out = NULL;
    if (!env)
        return true;
    if (!json_is_object(env) || json_object_size(env) > ENV_MAX) {
        BAD("env", "'env' must be an object of at most %d string values", ENV_MAX);
        return false;
    }
    char **v = calloc(json_object_size(env) + 1, sizeof(*v));
    if (!v) {
        eph_api_reply_error(req, 503, "api_error", "internal_error", NULL, "out of memory");
        return false;
    }
    *out = v;
    const char *k;
    json_t *val;
    size_t i = 0;
    json_object_foreach(env, k, val)
    {
        size_t kl = strlen(k);
        bool name_ok = kl > 0 && !(k[0] >= '0' && k[0] <= '9');
        for (size_t j = 0; j < kl; j++)
            name_ok &= (k[j] >= 'A' && k[j] <= 'Z') || (k[j] >= 'a' && k[j] <= 'z') ||
                       (k[j] >= '0' && k[j] <= '9') || k[j] == '_';
        if (!name_ok || !json_is_string(val) ||
            strlen(json_string_value(val)) != json_string_length(val) ||
            kl + json_string_length(val) + 2 > ENV_ENTRY_MAX) {
            BAD("env",
                "'env' entry '%.64s' must be a name of letters, digits and '_' with a "
                "string value without NUL, at most %d bytes together",
                k, ENV_ENTRY_MAX);
            return false;
        }
        if (asprintf(&v[i], "%s=%s", k, json_string_value(val)) < 0) {
            v[i] = NULL;
            eph_api_reply_error(req, 503, "api_error", "internal_error", NULL, "out of memory");
            return false;
        }
        i++;
    }
    return true;
}

/* A path a call names: relative to the scratch directory, or absolute under /tmp (the writable
 * areas); no "." or ".." component, no empty one. The sandbox refuses a symlink on the way. */
static bool path_ok(const char *p)
{
    size_t n = strlen(p);
    if (!n || n > 4000)
        return false;
    if (p[0] == '/') {
        if (strncmp(p, "/tmp/", 5) || !p[5])
            return false;
        return eph_text_safe_relpath(p + 5, n - 5);
    }
    return eph_text_safe_relpath(p, n);
}

static char *plain_string_dup(json_t *v, size_t max)
{
    if (!json_is_string(v) || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return strdup(json_string_value(v));
}

/* The command's body into op; false after answering. */
static bool command_parse(struct eph_api_req *req, json_t *body, struct eph_drive_op *op)
{
    static const char *const known[] = {"command", "timeout_seconds", "cwd", "env",
                                        "stdin",   "background",      NULL};
    struct eph_api_error e;
    if (eph_api_check_fields(body, known, &e)) {
        eph_api_reply_invalid(req, &e);
        return false;
    }
    json_t *cmd = json_object_get(body, "command");
    if (!cmd || !(op->command = plain_string_dup(cmd, COMMAND_MAX)) || !op->command[0]) {
        BAD("command", "'command' must be a string of 1 byte to 64 KiB, without NUL");
        return false;
    }
    json_t *bg = json_object_get(body, "background");
    if (bg && !json_is_boolean(bg)) {
        BAD("background", "'background' must be a boolean");
        return false;
    }
    op->background = json_is_true(bg);
    json_t *t = json_object_get(body, "timeout_seconds");
    if (t && op->background) {
        BAD("timeout_seconds", "a background command runs until it ends or is killed: no "
                               "'timeout_seconds'");
        return false;
    }
    unsigned max = req->svc->cfg->sandbox.command_timeout_seconds;
    if (t) {
        if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > max) {
            BAD("timeout_seconds", "'timeout_seconds' must be an integer from 1 to %u", max);
            return false;
        }
        op->timeout_ms = (uint32_t)json_integer_value(t) * 1000u;
    }
    json_t *cwd = json_object_get(body, "cwd");
    if (cwd && (!(op->cwd = plain_string_dup(cwd, 4000)) || !path_ok(op->cwd))) {
        BAD("cwd", "'cwd' must be a directory relative to the scratch directory or under /tmp, "
                   "without '.' or '..'");
        return false;
    }
    json_t *in = json_object_get(body, "stdin");
    if (in) {
        if (!json_is_string(in) || json_string_length(in) > STDIN_MAX) {
            BAD("stdin", "'stdin' must be a string of at most 1 MiB");
            return false;
        }
        op->stdin_len = json_string_length(in);
        op->stdin_data = malloc(op->stdin_len ? op->stdin_len : 1);
        if (!op->stdin_data) {
            eph_api_reply_error(req, 503, "api_error", "internal_error", NULL, "out of memory");
            return false;
        }
        memcpy(op->stdin_data, json_string_value(in), op->stdin_len);
    }
    return env_of(req, json_object_get(body, "env"), &op->env);
}

static int commands_create(struct eph_api_req *req, const char *id)
{
    unsigned wait = CALL_WAIT_SECONDS;
    const char *prefer = eph_api_header(req, "Prefer");
    if (prefer && !eph_api_prefer_wait(req, EPH_API_WAIT_MAX, &wait))
        return MHD_YES;
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    struct eph_drive_op *op = eph_drive_op_new(EPH_DRIVE_EXEC);
    if (!op) {
        json_decref(body);
        return MHD_NO;
    }
    bool ok = command_parse(req, body, op);
    json_decref(body);
    if (!ok || eph_id_hex("cmd_", 12, op->id, sizeof(op->id))) {
        eph_drive_op_put(op);
        return ok ? MHD_NO : MHD_YES;
    }
    struct eph_drive *d = drive_of(req, id);
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    /* The live reference first: the stream reads the events after the submission from it. */
    req->live = d ? eph_live_get(req->svc->live, id) : NULL;
    uint64_t seq = 0;
    bool closed = false;
    if (req->live)
        eph_live_state(req->live, &seq, &closed);
    if (!d || !submit(req, d, op)) {
        eph_drive_put(d);
        eph_drive_op_put(op);
        return MHD_YES;
    }
    eph_drive_put(d);
    req->op = op;
    const char *accept = eph_api_header(req, "Accept");
    if (op->background) /* answered at once: followed by id */
        return eph_api_reply_json(req, 202, command_json(op), NULL, NULL);
    if (accept && strstr(accept, "text/event-stream"))
        return eph_api_command_stream(req, id, seq, op, command_json);
    if (wait && park_op(req, wait, command_resume))
        return MHD_YES;
    return command_resume(req);
}

/* A command of the sandbox by id (a reference in req->op); false after answering 404/409. */
static bool find_command(struct eph_api_req *req, const char *id, const char *cid)
{
    struct eph_drive *d = drive_of(req, id);
    if (!d)
        return false;
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    req->op = eph_drive_find(d, cid);
    if (req->op)
        req->live = eph_live_get(req->svc->live, id);
    eph_drive_put(d);
    if (!req->op)
        eph_api_reply_error(req, 404, "not_found_error", "command_not_found", NULL,
                            "sandbox '%s' has no command '%.40s' (it keeps its last %d)", id, cid,
                            EPH_DRIVE_RECENT);
    return req->op != NULL;
}

static int kill_resume(struct eph_api_req *req)
{
    return eph_api_reply_json(req, 200, command_json(req->op->target), NULL, NULL);
}

/* GET …/commands/{cid}, GET …/commands/{cid}/events, POST …/commands/{cid}/kill. */
static int command_call(struct eph_api_req *req, const char *id, const char *tail)
{
    char cid[48];
    const char *slash = strchr(tail, '/');
    size_t n = slash ? (size_t)(slash - tail) : strlen(tail);
    if (n >= sizeof(cid))
        n = sizeof(cid) - 1;
    memcpy(cid, tail, n);
    cid[n] = '\0';
    const char *what = slash ? slash : "";
    if (!find_command(req, id, cid))
        return MHD_YES;
    if (!*what)
        return eph_api_reply_json(req, 200, command_json(req->op), NULL, NULL);
    if (!strcmp(what, "/events"))
        return eph_api_command_stream(req, id, 0, req->op, command_json);
    /* /kill */
    struct eph_drive_op *target = req->op;
    if (!target->background)
        return eph_api_reply_error(req, 409, "invalid_request_error", "not_background", NULL,
                                   "command '%s' is not a background command: give a command a "
                                   "timeout_seconds, or delete the sandbox",
                                   cid);
    if (eph_drive_op_done(target))
        return eph_api_reply_json(req, 200, command_json(target), NULL, NULL);
    struct eph_drive_op *kop = eph_drive_op_new(EPH_DRIVE_KILL);
    struct eph_drive *d = kop ? eph_drive_get(req->svc->drives, id) : NULL;
    if (!d) {
        eph_drive_op_put(kop);
        return eph_api_reply_error(req, 409, "invalid_request_error", "sandbox_ended", NULL,
                                   "sandbox '%s' has ended", id);
    }
    kop->target = target; /* the request's reference moves to the kill */
    req->op = kop;
    bool queued = submit(req, d, kop);
    eph_drive_put(d);
    if (!queued)
        return MHD_YES;
    if (park_op(req, CALL_WAIT_SECONDS, kill_resume))
        return MHD_YES;
    return kill_resume(req);
}

/* ---- files ---- */

static int file_put_resume(struct eph_api_req *req)
{
    const struct eph_drive_op *op = req->op;
    if (!eph_drive_op_done(op) || op->rc)
        return op_failed(req, op, "write the file");
    return eph_api_reply_json(req, 200,
                              json_pack("{s:s, s:s, s:I}", "object", "file", "path", op->path,
                                        "size", (json_int_t)op->len),
                              NULL, NULL);
}

static int file_get_resume(struct eph_api_req *req)
{
    struct eph_drive_op *op = req->op;
    if (!eph_drive_op_done(op) || op->rc)
        return op_failed(req, op, "read the file");
    size_t len = op->file.len;
    unsigned char *data = (unsigned char *)eph_buf_steal(&op->file);
    const char *base = strrchr(op->path, '/');
    base = base ? base + 1 : op->path;
    /* The name as an attachment, quoted safely: only plain characters are kept. */
    char name[128];
    size_t o = 0;
    for (const char *p = base; *p && o + 1 < sizeof(name); p++)
        name[o++] = ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_')
                        ? *p
                        : '_';
    name[o] = '\0';
    char disp[192];
    snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", o ? name : "file");
    return eph_api_reply_bytes(req, "application/octet-stream", data, len, disp);
}

static int list_resume(struct eph_api_req *req)
{
    struct eph_drive_op *op = req->op;
    if (!eph_drive_op_done(op) || op->rc)
        return op_failed(req, op, "list its files");
    const char *dir = op->path;
    size_t dl = dir ? strlen(dir) : 0;
    json_t *data = json_array();
    for (size_t i = 0; data && i < op->listing.n; i++) {
        const struct eph_sandbox_file *f = &op->listing.v[i];
        if (dl && (strncmp(f->path, dir, dl) || f->path[dl] != '/'))
            continue;
        static const char *const types[] = {"", "file", "directory", "symlink"};
        json_t *e = json_pack("{s:s, s:s, s:I}", "path", f->path, "type", types[f->type], "size",
                              (json_int_t)f->size);
        if (e && f->target)
            json_object_set_new(e, "target", json_string(f->target));
        json_array_append_new(data, e);
    }
    if (!data)
        return MHD_NO;
    return eph_api_reply_list(req, data, op->listing.truncated);
}

/* A file call: the operation made, submitted and waited for. */
static int file_call(struct eph_api_req *req, const char *id, struct eph_drive_op *op,
                     int (*resume)(struct eph_api_req *req))
{
    struct eph_drive *d = drive_of(req, id);
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    req->live = d ? eph_live_get(req->svc->live, id) : NULL;
    if (!d || !submit(req, d, op)) {
        eph_drive_put(d);
        eph_drive_op_put(op);
        return MHD_YES;
    }
    eph_drive_put(d);
    req->op = op;
    if (park_op(req, CALL_WAIT_SECONDS, resume))
        return MHD_YES;
    return resume(req);
}

static int files(struct eph_api_req *req, const char *id, const char *path)
{
    bool put = !strcmp(req->method, "PUT");
    bool get = !strcmp(req->method, "GET") || !strcmp(req->method, "HEAD");
    if (!put && !get)
        return eph_api_reply_error(req, 405, "invalid_request_error", "method_not_allowed", NULL,
                                   "use GET or PUT on a sandbox's files");
    if (path && !path_ok(path))
        return BAD("path", "the path must be relative to the scratch directory or under /tmp, "
                           "without '.', '..' or empty components");
    struct eph_drive_op *op = NULL;
    if (!path) {
        if (put)
            return BAD("path", "PUT names a file: /v1/sandboxes/{id}/files/{path}");
        const char *dir = req->query.path;
        if (dir && *dir && (dir[0] == '/' || !eph_text_safe_relpath(dir, strlen(dir))))
            return BAD("path", "'path' must be a directory relative to the scratch directory");
        if (!(op = eph_drive_op_new(EPH_DRIVE_LIST)) ||
            (dir && *dir && !(op->path = strdup(dir)))) {
            eph_drive_op_put(op);
            return MHD_NO;
        }
        return file_call(req, id, op, list_resume);
    }
    op = eph_drive_op_new(put ? EPH_DRIVE_WRITE : EPH_DRIVE_READ);
    if (!op || !(op->path = strdup(path))) {
        eph_drive_op_put(op);
        return MHD_NO;
    }
    if (get) {
        op->cap = req->svc->cfg->sandboxes.max_download_bytes;
        return file_call(req, id, op, file_get_resume);
    }
    op->len = req->body.len;
    op->data = (unsigned char *)eph_buf_steal(&req->body);
    return file_call(req, id, op, file_put_resume);
}

/* ---- the routes under /v1/sandboxes/{id}/ ---- */

/* A call that needs the sandbox itself, for a live sandbox another node serves, is sent on to
 * that node (forward.c); true when answered here (forwarded, 404, a store failure). A call that
 * was already sent on once, or for a node that never said where it is, goes on here, to the
 * answers of drive_of. */
static bool sent_on(struct eph_api_req *req, const char *id)
{
    struct eph_drive *d = eph_drive_get(req->svc->drives, id);
    if (d) {
        eph_drive_put(d);
        return false;
    }
    struct eph_run r;
    if (!load(req, id, &r))
        return true;
    bool ended = eph_run_status_terminal(r.status);
    char node[sizeof(r.node_id)];
    snprintf(node, sizeof(node), "%s", r.node_id);
    eph_run_release(&r);
    if (ended || !node[0] || !strcmp(node, req->svc->node_id) ||
        eph_api_header(req, "Ephemeral-Forwarded"))
        return false;
    char url[512];
    struct eph_store *st = req->svc->store;
    int rc = st->ops->node_url(st, node, url, sizeof(url));
    if (rc == -ENOENT || rc == -ENAMETOOLONG)
        return false;
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return true;
    }
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    eph_api_forward(req, url, node);
    return true;
}

int eph_api_sandboxes_sub(struct eph_api_req *req, const char *id)
{
    /* The tail after the id: /events, /commands, /files or /files/{path} (server.c matched it). */
    const char *tail = req->path + strlen("/v1/sandboxes/") + strlen(id);
    if (!strcmp(tail, "/events"))
        return eph_api_events(req, id, EPH_KIND_SANDBOX);
    if (sent_on(req, id))
        return req->answered || req->parked ? MHD_YES : MHD_NO;
    if (!strcmp(tail, "/commands"))
        return commands_create(req, id);
    if (!strncmp(tail, "/commands/", 10))
        return command_call(req, id, tail + 10);
    if (!strcmp(tail, "/files"))
        return files(req, id, NULL);
    return files(req, id, tail + strlen("/files/"));
}
