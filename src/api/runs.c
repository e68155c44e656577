/*
 * runs.c - /v1/runs: create (validation, idempotency, reservation), get (long poll), list,
 * events (JSON and Server-Sent Events), cancel.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"
#include "common/money.h"
#include "common/text.h"
#include "run/live.h"

#define PROMPT_MAX (64u << 10)
#define FILES_MAX 100
#define FILES_BYTES_MAX (10u << 20)
#define METADATA_PAIRS_MAX 16
#define WAIT_MAX 600
#define CONNECTIONS_MAX 32
#define CANCEL_WAIT_SECONDS 5

/* ---- validation ---- */

struct create_req {
    const char *prompt;
    const char *model;
    bool shell, web, zdr;
    json_t *connections; /* borrowed */
    json_t *files;       /* new: normalised to {path, content_base64} */
    json_t *metadata;    /* borrowed */
    unsigned timeout;
    int64_t max_cost;
};

#define BAD(param, ...)                                                                            \
    eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param, __VA_ARGS__)

static bool want_bool(struct eph_api_req *req, json_t *body, const char *name, bool *out)
{
    json_t *v = json_object_get(body, name);
    if (!v)
        return true;
    if (!json_is_boolean(v)) {
        BAD(name, "'%s' must be a boolean", name);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

static char *b64_encode(const unsigned char *data, size_t n)
{
    size_t len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len);
    if (out)
        sodium_bin2base64(out, len, data, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

static bool check_files(struct eph_api_req *req, json_t *files, json_t **out)
{
    if (!json_is_array(files)) {
        BAD("files", "'files' must be an array");
        return false;
    }
    if (json_array_size(files) > FILES_MAX) {
        BAD("files", "at most %d files", FILES_MAX);
        return false;
    }
    json_t *norm = json_array();
    size_t total = 0, i;
    json_t *f;
    char param[32];
    json_array_foreach(files, i, f)
    {
        snprintf(param, sizeof(param), "files[%zu]", i);
        if (!json_is_object(f)) {
            BAD(param, "each file must be an object with 'path' and 'content'");
            goto fail;
        }
        const char *key;
        json_t *v;
        json_object_foreach(f, key, v)
        {
            if (strcmp(key, "path") && strcmp(key, "content") && strcmp(key, "content_base64")) {
                snprintf(param, sizeof(param), "files[%zu].%.12s", i, key);
                BAD(param, "unknown field '%s' in a file", key);
                goto fail;
            }
        }
        json_t *path = json_object_get(f, "path");
        json_t *content = json_object_get(f, "content");
        json_t *b64 = json_object_get(f, "content_base64");
        if (!json_is_string(path) ||
            !eph_text_safe_relpath(json_string_value(path), json_string_length(path))) {
            snprintf(param, sizeof(param), "files[%zu].path", i);
            BAD(param, "a file path must be relative, inside the scratch directory, without "
                       "'..' or NUL");
            goto fail;
        }
        if ((content != NULL) == (b64 != NULL) || (content && !json_is_string(content)) ||
            (b64 && !json_is_string(b64))) {
            BAD(param, "a file needs exactly one of 'content' (string) or 'content_base64'");
            goto fail;
        }
        char *encoded;
        size_t size;
        if (content) {
            size = json_string_length(content);
            encoded = b64_encode((const unsigned char *)json_string_value(content), size);
        } else {
            const char *s = json_string_value(b64);
            size_t slen = json_string_length(b64);
            unsigned char *bin = malloc(slen / 4 * 3 + 3);
            if (!bin || sodium_base642bin(bin, slen / 4 * 3 + 3, s, slen, NULL, &size, NULL,
                                          sodium_base64_VARIANT_ORIGINAL)) {
                free(bin);
                snprintf(param, sizeof(param), "files[%zu].content_base64", i);
                BAD(param, "'content_base64' is not valid base64");
                goto fail;
            }
            free(bin);
            encoded = strdup(s);
        }
        total += size;
        if (total > FILES_BYTES_MAX) {
            free(encoded);
            BAD("files", "files total over 10 MiB");
            goto fail;
        }
        json_array_append_new(norm, json_pack("{s:O, s:s, s:I}", "path", path, "content_base64",
                                              encoded ? encoded : "", "size", (json_int_t)size));
        free(encoded);
    }
    *out = norm;
    return true;
fail:
    json_decref(norm);
    return false;
}

static bool check_metadata(struct eph_api_req *req, json_t *md)
{
    if (!json_is_object(md)) {
        BAD("metadata", "'metadata' must be an object of strings");
        return false;
    }
    if (json_object_size(md) > METADATA_PAIRS_MAX) {
        BAD("metadata", "at most %d metadata pairs", METADATA_PAIRS_MAX);
        return false;
    }
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (strlen(k) == 0 || strlen(k) > 64) {
            BAD("metadata", "metadata keys must be 1 to 64 bytes");
            return false;
        }
        if (!json_is_string(v) || json_string_length(v) > 512 ||
            strlen(json_string_value(v)) != json_string_length(v)) {
            BAD("metadata", "metadata values must be strings of at most 512 bytes");
            return false;
        }
    }
    return true;
}

/* Validates the body; on failure answers 400 and returns false. */
static bool validate_create(struct eph_api_req *req, json_t *body, struct create_req *c)
{
    static const char *const known[] = {"prompt",
                                        "model",
                                        "shell",
                                        "web",
                                        "connections",
                                        "files",
                                        "timeout_seconds",
                                        "max_cost_micros",
                                        "zero_data_retention",
                                        "metadata",
                                        NULL};
    const struct eph_config *cfg = req->svc->cfg;
    memset(c, 0, sizeof(*c));
    c->shell = true;
    c->timeout = 120;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            ok |= strcmp(*k, key) == 0;
        if (!ok) {
            char shown[80];
            snprintf(shown, sizeof(shown), "%.64s", key);
            eph_api_reply_error(req, 400, "invalid_request_error", "unknown_parameter", shown,
                                "unknown field '%s'", shown);
            return false;
        }
    }
    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt) {
        eph_api_reply_error(req, 400, "invalid_request_error", "missing_parameter", "prompt",
                            "'prompt' is required");
        return false;
    }
    if (!json_is_string(prompt) || json_string_length(prompt) == 0 ||
        json_string_length(prompt) > PROMPT_MAX ||
        strlen(json_string_value(prompt)) != json_string_length(prompt)) {
        BAD("prompt", "'prompt' must be a string of 1 byte to 64 KiB, without NUL");
        return false;
    }
    c->prompt = json_string_value(prompt);
    json_t *model = json_object_get(body, "model");
    if (model) {
        if (!json_is_string(model) ||
            strlen(json_string_value(model)) != json_string_length(model) ||
            !eph_config_model(cfg, json_string_value(model))) {
            BAD("model", "'model' must be one of the configured models");
            return false;
        }
        c->model = json_string_value(model);
    } else {
        c->model = cfg->default_model;
    }
    if (!want_bool(req, body, "shell", &c->shell) || !want_bool(req, body, "web", &c->web) ||
        !want_bool(req, body, "zero_data_retention", &c->zdr))
        return false;
    json_t *conns = json_object_get(body, "connections");
    if (conns) {
        if (!json_is_array(conns)) {
            BAD("connections", "'connections' must be an array of connection names");
            return false;
        }
        if (json_array_size(conns) > CONNECTIONS_MAX) {
            BAD("connections", "at most %d connections", CONNECTIONS_MAX);
            return false;
        }
        size_t i;
        json_t *n;
        json_array_foreach(conns, i, n)
        {
            if (!json_is_string(n) || strlen(json_string_value(n)) != json_string_length(n)) {
                BAD("connections", "'connections' must be an array of connection names");
                return false;
            }
            /* A name must be one of the org's connections now; the broker checks it again
             * when the run uses it, since a connection may be deleted in between. */
            struct eph_connection found;
            int rc = req->svc->store->ops->conn_get(req->svc->store, req->org_id,
                                                    json_string_value(n), &found);
            if (rc == 0) {
                eph_connection_release(&found);
                continue;
            }
            if (rc == -ENOENT) {
                BAD("connections", "unknown connection '%.64s'", json_string_value(n));
            } else {
                eph_api_reply_store_unavailable(req);
            }
            return false;
        }
        c->connections = conns;
    }
    json_t *files = json_object_get(body, "files");
    if (files && !check_files(req, files, &c->files))
        return false;
    json_t *t = json_object_get(body, "timeout_seconds");
    if (t) {
        unsigned max = cfg->max_timeout_seconds < 3600 ? cfg->max_timeout_seconds : 3600;
        if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > max) {
            json_decref(c->files);
            c->files = NULL;
            BAD("timeout_seconds", "'timeout_seconds' must be an integer from 1 to %u", max);
            return false;
        }
        c->timeout = (unsigned)json_integer_value(t);
    }
    json_t *mc = json_object_get(body, "max_cost_micros");
    if (!mc) {
        json_decref(c->files);
        c->files = NULL;
        eph_api_reply_error(req, 400, "invalid_request_error", "missing_parameter",
                            "max_cost_micros", "'max_cost_micros' is required");
        return false;
    }
    if (!json_is_integer(mc) || json_integer_value(mc) <= 0) {
        json_decref(c->files);
        c->files = NULL;
        BAD("max_cost_micros", "'max_cost_micros' must be a positive integer");
        return false;
    }
    c->max_cost = json_integer_value(mc);
    json_t *md = json_object_get(body, "metadata");
    if (md && !check_metadata(req, md)) {
        json_decref(c->files);
        c->files = NULL;
        return false;
    }
    c->metadata = md;
    return true;
}

/* The run object as the API shows it: from the store, plus a ZDR result held for waiters. */
static json_t *run_json(struct eph_api_req *req, const struct eph_run *r, struct eph_live *live)
{
    json_t *o = eph_run_to_json(r, req->svc->cfg->retention_days);
    if (r->zdr && live) {
        char *res = eph_live_zdr_result(live);
        if (res)
            json_object_set_new(o, "result", json_string(res));
        free(res);
    }
    return o;
}

static uint64_t deadline_in(unsigned seconds)
{
    return eph_clock_mono_ns() + (uint64_t)seconds * 1000000000u;
}

/* After a long poll on a new run: the run as it is now, 201. */
static int create_resume(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    struct eph_run r;
    if (st->ops->run_get(st, req->run_id, req->org_id, &r))
        return eph_api_reply_store_unavailable(req);
    json_t *obj = run_json(req, &r, req->live);
    eph_run_release(&r);
    char location[64];
    snprintf(location, sizeof(location), "/v1/runs/%s", req->run_id);
    return eph_api_reply_json(req, 201, obj, "Location", location);
}

int eph_api_runs_create(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    struct eph_store *st = svc->store;
    if (atomic_load(&svc->shutting_down))
        return eph_api_reply_error(req, 503, "api_error", "shutting_down", NULL,
                                   "the server is shutting down");
    const char *ct = eph_api_header(req, "Content-Type");
    if (ct && strncasecmp(ct, "application/json", 16) != 0)
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_content_type", NULL,
                                   "the body must be application/json");
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    struct create_req c;
    if (!validate_create(req, body, &c)) {
        json_decref(body);
        return MHD_YES;
    }

    struct eph_run r;
    eph_run_init(&r);
    int rc = eph_id_hex("run_", 16, r.id, sizeof(r.id));
    snprintf(r.org_id, sizeof(r.org_id), "%s", req->org_id);
    r.status = EPH_RUN_QUEUED;
    r.model = strdup(c.model);
    r.zdr = c.zdr;
    r.prompt = c.zdr ? NULL : strdup(c.prompt);
    r.files = c.zdr ? NULL : json_incref(c.files);
    r.connections = c.connections ? json_incref(c.connections) : json_array();
    r.metadata = c.metadata ? json_incref(c.metadata) : json_object();
    r.shell = c.shell;
    r.web = c.web;
    r.timeout_seconds = c.timeout;
    r.created_at_ms = eph_clock_real_ms();
    r.cost.reserved_micros = c.max_cost;
    if (c.zdr) {
        /* Its prompt lives only in this process: this node holds it from birth (a lease its
         * keeper renews), and no other node may claim it. */
        snprintf(r.node_id, sizeof(r.node_id), "%s", svc->node_id);
        r.lease_expires_at_ms = r.created_at_ms + (int64_t)svc->cfg->lease_seconds * 1000;
    }

    char money[EPH_MONEY_FMT_MAX];
    struct eph_event first = {.seq = 1, .t_ms = 0, .at_ms = r.created_at_ms};
    snprintf(first.source, sizeof(first.source), "queue");
    snprintf(first.type, sizeof(first.type), "run.queued");
    if (asprintf(&first.message, "budget of %s reserved", eph_money_format(c.max_cost, money)) < 0)
        first.message = NULL;
    first.data = json_pack("{s:I}", "reserved_micros", (json_int_t)c.max_cost);

    /* The queue limit, the balance check, the reservation, the run and its first event: one
     * transaction, so that concurrent creations can exceed neither the limit nor the balance. */
    if (!rc)
        rc = st->ops->run_insert_capped(st, &r, &first, svc->cfg->max_queued_per_org);
    eph_event_release(&first);
    if (rc) {
        eph_run_release(&r);
        json_decref(body);
        json_decref(c.files);
        if (rc == -EDQUOT) {
            struct eph_balance b = {0};
            st->ops->balance(st, req->org_id, &b);
            char avail[EPH_MONEY_FMT_MAX];
            return eph_api_reply_error(
                req, 402, "insufficient_balance_error", "insufficient_balance", "max_cost_micros",
                "max_cost_micros %s is more than the available balance %s",
                eph_money_format(c.max_cost, money), eph_money_format(b.available_micros, avail));
        }
        if (rc == -EAGAIN)
            return eph_api_reply_error(req, 429, "rate_limit_error", "too_many_queued_runs", NULL,
                                       "the organization already has %u queued runs; retry "
                                       "when some have started",
                                       svc->cfg->max_queued_per_org);
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the run could not be stored");
    }

    /* The prompt of a zero-data-retention run lives only in this process, on the live entry's
     * worker, never in the store: the worker reads it from here. */
    int lrc = eph_live_register(r.id, r.created_at_ms, 1);
    if (!lrc && c.zdr)
        lrc = eph_live_set_prompt(r.id, c.prompt, c.files);
    if (!lrc)
        req->live = eph_live_get(r.id); /* before submitting: the run may settle at once */
    if (!lrc && c.zdr && req->live)
        eph_live_set_worked_here(req->live); /* this node holds it from birth */
    if (lrc || eph_scheduler_submit(r.id))
        EPH_ERROR("api", "run %s: cannot queue: out of memory", r.id);
    EPH_INFO("api", "run %s queued (org %s, budget %s)", r.id, r.org_id, money);

    json_t *obj = eph_run_to_json(&r, svc->cfg->retention_days);
    /* A retry with the same key gets the run from now on, even while this request waits. */
    eph_api_idem_settle(req, 201, obj);
    snprintf(req->run_id, sizeof(req->run_id), "%s", r.id);
    json_decref(body);
    json_decref(c.files);
    eph_run_release(&r);
    unsigned wait = eph_api_prefer_wait(req, WAIT_MAX);
    if (wait && eph_api_park_until_settled(req, deadline_in(wait), create_resume)) {
        json_decref(obj);
        return MHD_YES;
    }
    if (wait) {
        json_decref(obj);
        return create_resume(req);
    }
    char location[64];
    snprintf(location, sizeof(location), "/v1/runs/%s", req->run_id);
    return eph_api_reply_json(req, 201, obj, "Location", location);
}

static int not_found(struct eph_api_req *req, const char *id)
{
    char shown[64];
    snprintf(shown, sizeof(shown), "%.40s", id);
    return eph_api_reply_error(req, 404, "not_found_error", "run_not_found", NULL,
                               "no such run '%s'", shown);
}

/* Loads the request's run (an id of this org) or answers 404/503; true when loaded. */
static bool load_run(struct eph_api_req *req, const char *id, struct eph_run *r)
{
    struct eph_store *st = req->svc->store;
    if (!eph_id_is_run(id)) {
        not_found(req, id);
        return false;
    }
    int rc = st->ops->run_get(st, id, req->org_id, r);
    if (rc == -ENOENT)
        not_found(req, id);
    else if (rc)
        eph_api_reply_store_unavailable(req);
    return rc == 0;
}

/* The run as it is now (after a long poll, or at once). */
static int get_resume(struct eph_api_req *req)
{
    struct eph_run r;
    if (!load_run(req, req->run_id, &r))
        return MHD_YES;
    json_t *o = run_json(req, &r, req->live);
    eph_run_release(&r);
    return eph_api_reply_json(req, 200, o, NULL, NULL);
}

int eph_api_runs_get(struct eph_api_req *req, const char *id)
{
    struct eph_run r;
    if (!load_run(req, id, &r))
        return MHD_YES;
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    bool terminal = eph_run_status_terminal(r.status);
    bool zdr = r.zdr;
    eph_run_release(&r);
    /* A live reference: to wait on the run, or for the result a ZDR run keeps only in memory. */
    if (!terminal || zdr)
        req->live = eph_cluster_follow(req->svc, id);
    unsigned wait = terminal ? 0 : eph_api_prefer_wait(req, WAIT_MAX);
    if (wait && eph_api_park_until_settled(req, deadline_in(wait), get_resume))
        return MHD_YES;
    return get_resume(req);
}

struct list_ctx {
    json_t *data;
    unsigned retention;
};

static int list_cb(const struct eph_run *r, void *ctx)
{
    struct list_ctx *l = ctx;
    json_array_append_new(l->data, eph_run_to_json(r, l->retention));
    return 0;
}

int eph_api_runs_list(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    unsigned limit = 20;
    const char *ls = eph_api_query(req, "limit");
    if (ls) {
        char *end;
        unsigned long n = strtoul(ls, &end, 10);
        if (*end || end == ls || n < 1 || n > 100)
            return BAD("limit", "'limit' must be an integer from 1 to 100");
        limit = (unsigned)n;
    }
    const char *after = eph_api_query(req, "after");
    if (after && !eph_id_is_run(after))
        return BAD("after", "'after' must be a run id");
    const char *status = eph_api_query(req, "status");
    enum eph_run_status s;
    if (status && eph_run_status_parse(status, &s))
        return BAD("status", "unknown status '%.32s'", status);
    struct list_ctx l = {json_array(), req->svc->cfg->retention_days};
    bool more = false;
    int rc = st->ops->run_list(st, req->org_id, limit, after, status, list_cb, &l, &more);
    if (rc) {
        json_decref(l.data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, l.data, more);
}

/* ---- events ---- */

static int events_cb(const struct eph_event *e, void *ctx)
{
    json_array_append_new((json_t *)ctx, eph_event_to_json(e));
    return 0;
}

/* One event stream. The content reader runs on a polling thread and never blocks: with nothing
 * to send it parks the connection until the run has a new event, settles, or the keep-alive is
 * due. */
struct sse {
    struct eph_service *svc;
    char id[EPH_RUN_ID_LEN + 1];
    struct eph_live *live;  /* NULL once the run is settled */
    uint64_t last_seq;      /* last event sent */
    bool done;              /* the final event was sent */
    bool zdr;               /* zero data retention: the result goes out once, unstored */
    uint64_t keepalive_ns;  /* the interval */
    uint64_t keepalive_due; /* CLOCK_MONOTONIC */
    struct eph_buf pending; /* bytes not yet handed to the server */
    size_t pending_off;
    struct eph_api_waiter waiter;
};

/* Zero data retention: the result is never stored, so a client following the stream gets it as
 * one event without an id (it cannot be resumed: it is not part of the timeline), just before the
 * final event. */
static int sse_zdr_result(struct sse *s)
{
    char *res = s->live ? eph_live_zdr_result(s->live) : NULL;
    if (!res)
        return 0;
    json_t *o = json_pack("{s:s}", "result", res);
    free(res);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int rc = text ? eph_buf_appendf(&s->pending, "event: result\ndata: %s\n\n", text) : -ENOMEM;
    free(text);
    return rc;
}

static int sse_event_cb(const struct eph_event *e, void *ctx)
{
    struct sse *s = ctx;
    if (s->zdr && strcmp(e->type, "worker.destroyed") == 0) {
        int zrc = sse_zdr_result(s);
        if (zrc)
            return zrc;
    }
    json_t *o = eph_event_to_json(e);
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(o);
    int rc = text ? eph_buf_appendf(&s->pending, "id: %llu\nevent: %s\ndata: %s\n\n",
                                    (unsigned long long)e->seq, e->type, text)
                  : -ENOMEM;
    free(text);
    s->last_seq = e->seq;
    if (strcmp(e->type, "worker.destroyed") == 0)
        s->done = true;
    return rc;
}

enum sse_fill { SSE_DATA, SSE_PARKED, SSE_END };

/* Refills the pending buffer: stored events after last_seq, else a keep-alive comment when one
 * is due, else the connection parks. */
static enum sse_fill sse_fill(struct sse *s)
{
    struct eph_store *st = s->svc->store;
    for (;;) {
        if (s->done)
            return SSE_END;
        eph_buf_reset(&s->pending);
        s->pending_off = 0;
        if (st->ops->events_list(st, s->id, s->last_seq, 64, sse_event_cb, s))
            return SSE_END;
        uint64_t now = eph_clock_mono_ns();
        if (s->pending.len) {
            s->keepalive_due = now + s->keepalive_ns;
            return SSE_DATA;
        }
        if (!s->live) {
            /* Not live and nothing new: the run is settled (or was never ours to follow). */
            return SSE_END;
        }
        uint64_t seq;
        bool closed;
        eph_live_state(s->live, &seq, &closed);
        if (closed) {
            /* Settled: what the store has now is all there will be; one more read ends it. */
            eph_live_put(s->live);
            s->live = NULL;
            continue;
        }
        if (seq > s->last_seq) {
            /* Numbered but not readable yet (a settlement in flight): look again shortly. */
            s->waiter.after_seq = UINT64_MAX;
            s->waiter.deadline_ns = now + 20000000u;
        } else {
            if (atomic_load(&s->svc->shutting_down))
                return SSE_END;
            if (now >= s->keepalive_due) {
                s->keepalive_due = now + s->keepalive_ns;
                if (eph_buf_appends(&s->pending, ": keep-alive\n\n"))
                    return SSE_END;
                return SSE_DATA;
            }
            s->waiter.after_seq = s->last_seq;
            s->waiter.deadline_ns = s->keepalive_due;
        }
        s->waiter.live = s->live;
        enum eph_api_park_result pr = eph_api_park(&s->waiter);
        if (pr == EPH_API_PARKED)
            return SSE_PARKED;
        if (pr == EPH_API_STOPPING)
            return SSE_END;
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sse *s = cls;
    if (s->pending_off >= s->pending.len) {
        switch (sse_fill(s)) {
        case SSE_END:
            return MHD_CONTENT_READER_END_OF_STREAM;
        case SSE_PARKED:
            return 0; /* MHD calls again once the connection is resumed */
        case SSE_DATA:
            break;
        }
    }
    size_t n = s->pending.len - s->pending_off;
    if (n > max)
        n = max;
    memcpy(buf, s->pending.data + s->pending_off, n);
    s->pending_off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls)
{
    struct sse *s = cls;
    eph_live_put(s->live);
    eph_buf_release(&s->pending);
    free(s);
}

int eph_api_runs_events(struct eph_api_req *req, const char *id)
{
    struct eph_store *st = req->svc->store;
    struct eph_run r;
    if (!load_run(req, id, &r))
        return MHD_YES;
    bool zdr = r.zdr;
    eph_run_release(&r);

    uint64_t after = 0;
    const char *a = eph_api_query(req, "after");
    const char *last = eph_api_header(req, "Last-Event-ID");
    const char *from = last ? last : a;
    if (from) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(from, &end, 10);
        if (*end || end == from || errno || from[0] == '-')
            return BAD(last ? "Last-Event-ID" : "after", "must be an event sequence number");
        after = n;
    }
    const char *accept = eph_api_header(req, "Accept");
    if (!accept || !strstr(accept, "text/event-stream")) {
        json_t *data = json_array();
        if (st->ops->events_list(st, id, after, 0, events_cb, data)) {
            json_decref(data);
            return eph_api_reply_store_unavailable(req);
        }
        return eph_api_reply_json(req, 200, json_pack("{s:s, s:o}", "object", "list", "data", data),
                                  NULL, NULL);
    }
    struct sse *s = calloc(1, sizeof(*s));
    if (!s)
        return MHD_NO;
    s->svc = req->svc;
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->last_seq = after;
    s->zdr = zdr;
    unsigned ka = req->svc->cfg->sse_keepalive_seconds ? req->svc->cfg->sse_keepalive_seconds : 15;
    s->keepalive_ns = (uint64_t)ka * 1000000000u;
    s->keepalive_due = eph_clock_mono_ns() + s->keepalive_ns;
    s->waiter.conn = req->conn;
    /* Take the live reference before reading the store, so that no event falls between. */
    s->live = eph_cluster_follow(req->svc, id);
    eph_buf_init(&s->pending, 1u << 20);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, s, sse_free);
    if (!resp) {
        sse_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    int rc = MHD_queue_response(req->conn, 200, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = 200;
    return rc;
}

/* ---- cancel ---- */

static int cancel_resume(struct eph_api_req *req)
{
    return get_resume(req);
}

int eph_api_runs_cancel(struct eph_api_req *req, const char *id)
{
    struct eph_run r;
    if (!load_run(req, id, &r))
        return MHD_YES;
    snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    bool terminal = eph_run_status_terminal(r.status);
    bool zdr = r.zdr;
    eph_run_release(&r);
    /* Cancelling a finished run changes nothing: the answer is the run as it is. */
    if (!terminal || zdr)
        req->live = eph_cluster_follow(req->svc, id);
    if (!terminal && req->live) {
        eph_live_cancel(req->live);
        EPH_INFO("api", "run %s: cancel requested", id);
        struct eph_store *st = req->svc->store;
        /* A run still waiting for a worker would wait for one just to be cancelled: take it out
         * of the queue and settle it here. With the cancel flag set, the worker's code settles
         * it at once (nothing started, everything released) without a sandbox. On a shared
         * store, a queued run no node holds is claimed here for that; one another node works
         * on is cancelled there. */
        if (eph_scheduler_withdraw(id) == 0 ||
            (st->ops->shared && !eph_live_worked_here(req->live) &&
             st->ops->run_claim(st, id, req->svc->node_id,
                                eph_clock_real_ms() +
                                    (int64_t)req->svc->cfg->lease_seconds * 1000) == 0))
            eph_worker_run(req->svc, id);
        if (!eph_live_worked_here(req->live) && eph_cluster_cancel(req->svc, id))
            EPH_WARN("api", "run %s: cannot tell the node working on it", id);
        /* Cancelling is prompt: wait briefly so the answer usually shows the final state. */
        if (eph_api_park_until_settled(req, deadline_in(CANCEL_WAIT_SECONDS), cancel_resume))
            return MHD_YES;
    }
    return cancel_resume(req);
}
