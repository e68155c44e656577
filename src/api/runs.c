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

#include "agent/agent.h"
#include "api/api.h"
#include "image/service.h"
#include "api/json.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/id.h"
#include "common/log.h"
#include "common/money.h"
#include "common/text.h"
#include "run/admit.h"
#include "run/cluster.h"
#include "run/event_wire.h"
#include "run/live.h"
#include "run/scheduler.h"

#define CANCEL_WAIT_SECONDS 5

#define BAD(param, ...)                                                                            \
    eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param, __VA_ARGS__)

/* Each connection a create names must be one of the org's now; the broker checks it again when
 * the run uses it, since a connection may be deleted in between. True when they all exist. */
bool eph_api_connections_exist(struct eph_api_req *req, json_t *conns)
{
    size_t i;
    json_t *n;
    json_array_foreach(conns, i, n)
    {
        struct eph_connection found;
        int rc = req->svc->store->ops->conn_get(req->svc->store, req->org_id, json_string_value(n),
                                                &found);
        if (rc == 0) {
            eph_connection_release(&found);
            continue;
        }
        if (rc == -ENOENT)
            BAD("connections", "unknown connection '%.64s'", json_string_value(n));
        else
            eph_api_reply_store_unavailable(req);
        return false;
    }
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

/* A run that cannot succeed is refused before anything is reserved (docs/API.md, "Runs that
 * cannot succeed"; the run layer judges, run/admit.h). False after answering. */
static bool run_can_succeed(struct eph_api_req *req, const struct eph_api_create *c)
{
    const struct eph_run_ask ask = {
        .model = c->model,
        .prompt = c->prompt,
        .recording = json_string_value(json_object_get(c->metadata, "transcript")),
        .replay_of = c->replay_of,
        .shell = c->shell,
        .web = c->web,
        .zdr = c->zdr,
        .timeout_seconds = c->timeout,
        .max_cost = c->max_cost,
    };
    struct eph_run_refusal why;
    if (!eph_run_check(req->svc, &ask, &why))
        return true;
    static const struct {
        unsigned status;
        const char *type, *code, *param;
    } answer[] = {
        [EPH_RUN_MODEL_UNAVAILABLE] = {503, "api_error", "model_unavailable", "model"},
        [EPH_RUN_NO_RECORDING] = {422, "invalid_request_error", "no_recording", "prompt"},
        [EPH_RUN_BUDGET_TOO_SMALL] = {402, "invalid_request_error", "budget_too_small",
                                      "max_cost_micros"},
    };
    eph_api_reply_error(req, answer[why.kind].status, answer[why.kind].type, answer[why.kind].code,
                        answer[why.kind].param, "%s", why.message);
    return false;
}

static int image_name_cb(const struct eph_image_rec *im, void *ctx)
{
    return eph_buf_appendf(ctx, ", '%s'", im->name);
}

/* The image a create names (docs/IMAGES.md), into name and digest; a replay's is its original's
 * (the same root, by digest). Unknown: 400 unknown_image naming those there are; not ready: 409
 * image_not_ready. False when it answered. Before anything is reserved. */
bool eph_api_image_resolve(struct eph_api_req *req, const struct eph_api_create *c,
                           const struct eph_run *orig, char name[64], char digest[72])
{
    struct eph_service *svc = req->svc;
    struct eph_store *st = svc->store;
    digest[0] = '\0';
    if (c->replay_of) {
        const char *was = orig->image[0] ? orig->image : "default";
        if (c->image && strcmp(c->image, was)) {
            eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", "image",
                                "a replay runs on its original's image, '%s'", was);
            return false;
        }
        snprintf(name, 64, "%s", was);
        if (strcmp(was, "default") && orig->image_digest[0]) {
            snprintf(digest, 72, "%s", orig->image_digest);
            if (!eph_images_in_cache(digest)) {
                eph_api_reply_error(req, 409, "invalid_request_error", "image_not_ready", "image",
                                    "the original's image '%s' (%.19s) is no longer built here",
                                    was, digest);
                return false;
            }
            return true;
        }
    } else {
        snprintf(name, 64, "%s", c->image ? c->image : "default");
    }
    if (!strcmp(name, "default")) {
        if (svc->images && eph_images_default_digest(svc->images, digest))
            digest[0] = '\0';
        return true;
    }
    struct eph_image_rec im;
    int rc = st->ops->image_get(st, req->org_id, name, &im);
    if (rc == -ENOENT) {
        struct eph_buf names;
        eph_buf_init(&names, 8192);
        /* A list cut short by its cap still names the first ones. */
        if (!eph_buf_appends(&names, "'default'"))
            rc = st->ops->image_list(st, req->org_id, image_name_cb, &names);
        eph_api_reply_error(req, 400, "invalid_request_error", "unknown_image", "image",
                            "no image named '%s'; the images there are: %s", name,
                            names.data ? names.data : "'default'");
        eph_buf_release(&names);
        return false;
    }
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return false;
    }
    bool ready = !strcmp(im.status, "ready") && eph_images_in_cache(im.digest);
    if (!ready)
        eph_api_reply_error(req, 409, "invalid_request_error", "image_not_ready", "image",
                            "image '%s' is %s%s%s", name,
                            strcmp(im.status, "ready") ? im.status : "not built on this node",
                            im.error ? ": " : "", im.error ? im.error : "");
    else
        snprintf(digest, 72, "%s", im.digest);
    eph_image_rec_release(&im);
    return ready;
}

int eph_api_first_event(struct eph_event *first, const char *source, const char *type,
                        int64_t at_ms, int64_t reserved)
{
    char money[EPH_MONEY_FMT_MAX];
    first->seq = 1;
    first->at_ms = at_ms;
    snprintf(first->source, sizeof(first->source), "%s", source);
    snprintf(first->type, sizeof(first->type), "%s", type);
    if (asprintf(&first->message, "budget of %s reserved", eph_money_format(reserved, money)) < 0) {
        first->message = NULL;
        return -ENOMEM;
    }
    first->data = json_pack("{s:I}", "reserved_micros", (json_int_t)reserved);
    return eph_event_serialise(first); /* stored as served */
}

/* The run record of a validated create, queued, with its first event. */
static int new_run(struct eph_api_req *req, const struct eph_api_create *c, struct eph_run *r,
                   struct eph_event *first)
{
    eph_run_init(r);
    memset(first, 0, sizeof(*first));
    /* The server chose it already (server.c): the id its idempotency record names. */
    int rc = 0;
    if (req->run_id[0])
        snprintf(r->id, sizeof(r->id), "%s", req->run_id);
    else
        rc = eph_id_hex("run_", 16, r->id, sizeof(r->id));
    snprintf(r->org_id, sizeof(r->org_id), "%s", req->org_id);
    r->status = EPH_RUN_QUEUED;
    r->model = strdup(c->model);
    r->zdr = c->zdr;
    r->prompt = c->zdr ? NULL : strdup(c->prompt);
    r->files = c->zdr ? NULL : json_incref(c->files);
    r->connections = c->connections ? json_incref(c->connections) : json_array();
    r->metadata = c->metadata ? json_incref(c->metadata) : json_object();
    r->shell = c->shell;
    r->web = c->web;
    r->web_allow = c->web_allow ? json_incref(c->web_allow) : NULL;
    r->timeout_seconds = c->timeout;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = c->max_cost;
    r->replay_of = c->replay_of ? strdup(c->replay_of) : NULL;
    r->outputs = c->outputs && json_array_size(c->outputs) ? json_incref(c->outputs) : NULL;
    if (c->zdr) {
        /* Its prompt lives only in this process: this node holds it from birth (a lease its
         * keeper renews), and no other node may claim it. */
        snprintf(r->node_id, sizeof(r->node_id), "%s", req->svc->node_id);
        r->lease_expires_at_ms = r->created_at_ms + (int64_t)req->svc->cfg->lease_seconds * 1000;
    }
    if (!rc && (!r->model || (!c->zdr && !r->prompt) || !r->connections || !r->metadata ||
                (c->replay_of && !r->replay_of)))
        rc = -ENOMEM;

    int frc = eph_api_first_event(first, "queue", "run.queued", r->created_at_ms, c->max_cost);
    return rc ? rc : frc;
}

static int queue_unavailable(struct eph_api_req *req)
{
    return eph_api_reply_error(req, 503, "api_error", "queue_unavailable", NULL,
                               "the run could not be queued; nothing was reserved, retry");
}

/* The answer to a run that could not be admitted. */
static int admit_refused(struct eph_api_req *req, int rc, bool queue_failed, int64_t max_cost)
{
    if (queue_failed)
        return queue_unavailable(req);
    return eph_api_store_refused(req, rc, max_cost);
}

int eph_api_store_refused(struct eph_api_req *req, int rc, int64_t max_cost)
{
    struct eph_store *st = req->svc->store;
    if (rc == -EDQUOT) {
        struct eph_balance b = {0};
        st->ops->balance(st, req->org_id, &b);
        char want[EPH_MONEY_FMT_MAX], avail[EPH_MONEY_FMT_MAX];
        return eph_api_reply_error(
            req, 402, "insufficient_balance_error", "insufficient_balance", "max_cost_micros",
            "max_cost_micros %s is more than the available balance %s",
            eph_money_format(max_cost, want), eph_money_format(b.available_micros, avail));
    }
    if (rc == -EAGAIN)
        return eph_api_reply_error(req, 429, "rate_limit_error", "too_many_queued_runs", NULL,
                                   "the organization already has %u queued runs; retry "
                                   "when some have started",
                                   req->svc->cfg->max_queued_per_org);
    return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                               "the run could not be stored");
}

bool eph_api_refuse_unready(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    if (atomic_load(&svc->shutting_down)) {
        eph_api_reply_error(req, 503, "api_error", "shutting_down", NULL,
                            "the server is shutting down");
        return true;
    }
    /* A server started not ready (on_unready "serve") takes nothing it could only fail: nothing
     * is reserved, and the caller is told what the operator must do. */
    char why[512];
    if (svc->readiness && !svc->readiness_ops->can_run(svc->readiness, svc, why, sizeof(why))) {
        eph_api_reply_error(req, 503, "api_error", "not_ready", NULL,
                            "the server is not ready to run: %s", why);
        return true;
    }
    return false;
}

bool eph_api_create_begin(struct eph_api_req *req,
                          int (*validate)(json_t *body, const struct eph_config *cfg,
                                          struct eph_api_create *c, struct eph_api_error *e),
                          unsigned *wait, json_t **body, struct eph_api_create *c)
{
    *body = NULL;
    if (eph_api_refuse_unready(req) || !eph_api_prefer_wait(req, EPH_API_WAIT_MAX, wait) ||
        !(*body = eph_api_body_object(req)))
        return false;
    struct eph_api_error e;
    if (validate(*body, req->svc->cfg, c, &e)) {
        json_decref(*body);
        *body = NULL;
        eph_api_reply_invalid(req, &e);
        return false;
    }
    return true;
}

int eph_api_runs_create(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    unsigned wait;
    json_t *body;
    struct eph_api_create c;
    if (!eph_api_create_begin(req, eph_api_validate_create, &wait, &body, &c))
        return MHD_YES;
    /* A replay: the original decides what the body leaves out; c borrows from orig. */
    struct eph_run orig;
    eph_run_init(&orig);
    char image[64], digest[72];
    if ((c.replay_of && eph_api_replay_prepare(req, body, &c, &orig)) ||
        !eph_api_image_resolve(req, &c, &orig, image, digest) ||
        (c.connections && !eph_api_connections_exist(req, c.connections)) ||
        !run_can_succeed(req, &c)) {
        eph_run_release(&orig);
        eph_api_create_release(&c);
        json_decref(body);
        return MHD_YES;
    }

    struct eph_run r;
    struct eph_event first;
    bool queue_failed = false;
    int rc = new_run(req, &c, &r, &first);
    snprintf(r.image, sizeof(r.image), "%s", image);
    snprintf(r.image_digest, sizeof(r.image_digest), "%s", digest);
    if (!rc)
        rc = eph_run_admit(svc, &r, &first, c.prompt, c.files, eph_service_submit, &queue_failed);
    eph_event_release(&first);
    eph_run_release(&orig);
    if (rc && queue_failed) {
        /* Stored but refused: the settler releases its reservation. The answer waits for that
         * (parked, no thread held), so that "nothing was reserved" is true when it arrives. */
        req->live = eph_live_get(svc->live, r.id);
        snprintf(req->run_id, sizeof(req->run_id), "%s", r.id);
    }
    if (rc) {
        eph_run_release(&r);
        eph_api_create_release(&c);
        json_decref(body);
        if (queue_failed &&
            eph_api_park_until_settled(req, deadline_in(CANCEL_WAIT_SECONDS), queue_unavailable))
            return MHD_YES;
        return admit_refused(req, rc, queue_failed, c.max_cost);
    }
    req->live = eph_live_get(svc->live, r.id);
    char money[EPH_MONEY_FMT_MAX];
    EPH_INFO("api", "run %s queued (org %s, budget %s)", r.id, r.org_id,
             eph_money_format(c.max_cost, money));

    json_t *obj = eph_run_to_json(&r, svc->cfg->retention_days);
    /* A retry with the same key gets the run from now on, even while this request waits. */
    eph_api_idem_settle(req, 201, obj);
    snprintf(req->run_id, sizeof(req->run_id), "%s", r.id);
    json_decref(body);
    eph_api_create_release(&c);
    eph_run_release(&r);
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

static int not_found(struct eph_api_req *req, const char *id, enum eph_run_kind kind)
{
    char shown[64];
    snprintf(shown, sizeof(shown), "%.40s", id);
    return eph_api_reply_error(req, 404, "not_found_error",
                               kind == EPH_KIND_SANDBOX ? "sandbox_not_found" : "run_not_found",
                               NULL, "no such %s '%s'", eph_run_kind_name(kind), shown);
}

bool eph_api_load_kind(struct eph_api_req *req, const char *id, enum eph_run_kind kind,
                       struct eph_run *r)
{
    struct eph_store *st = req->svc->store;
    if (!(kind == EPH_KIND_SANDBOX ? eph_id_is_sandbox(id) : eph_id_is_run(id))) {
        not_found(req, id, kind);
        return false;
    }
    int rc = st->ops->run_get(st, id, req->org_id, r);
    if (rc == 0 && r->kind != kind) {
        eph_run_release(r);
        rc = -ENOENT;
    }
    if (rc == -ENOENT)
        not_found(req, id, kind);
    else if (rc)
        eph_api_reply_store_unavailable(req);
    return rc == 0;
}

/* Loads the request's run (an id of this org) or answers 404/503; true when loaded. */
static bool load_run(struct eph_api_req *req, const char *id, struct eph_run *r)
{
    return eph_api_load_kind(req, id, EPH_KIND_RUN, r);
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
    unsigned wait;
    if (!eph_api_prefer_wait(req, EPH_API_WAIT_MAX, &wait))
        return MHD_YES;
    if (terminal)
        wait = 0;
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
    const struct eph_api_query *q = &req->query;
    /* A page after a run that is not the org's would be an empty last page: say so instead. */
    if (q->after) {
        struct eph_run ar;
        int arc = st->ops->run_get(st, q->after, req->org_id, &ar);
        if (arc == -ENOENT)
            return BAD("after", "no run '%.40s' to list after", q->after);
        if (arc)
            return eph_api_reply_store_unavailable(req);
        eph_run_release(&ar);
    }
    unsigned limit = q->limit;
    const char *after = q->after, *status = q->status;
    /* The filters as one JSON object (KEY → VALUE): the stores match it whole. A key or value
     * that is not UTF-8 matches no run, since no run's metadata can hold it. */
    EPH_AUTOJSON json_t *md = NULL;
    if (q->nmeta) {
        md = json_object();
        if (!md)
            return eph_api_reply_store_unavailable(req);
        for (unsigned i = 0; i < q->nmeta; i++)
            if (json_object_set_new(md, q->meta_keys[i], json_string(q->meta_values[i])))
                return eph_api_reply_list(req, json_array(), false);
    }
    struct list_ctx l = {json_array(), req->svc->cfg->retention_days};
    bool more = false;
    int rc = st->ops->run_list(st, req->org_id, limit, after, status, md, EPH_KIND_RUN, list_cb, &l,
                               &more);
    if (rc) {
        json_decref(l.data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, l.data, more);
}

/* ---- events ---- */

#define EVENTS_LIST_HEAD "{\"object\":\"list\",\"data\":["
#define EVENTS_LIST_HEAD_LEN (sizeof(EVENTS_LIST_HEAD) - 1)

/* The list of a run's events, written as {"object":"list","data":[...]} around each event's text
 * as stored: nothing is parsed or serialised again per read. */
static int events_cb(const struct eph_event *e, void *ctx)
{
    struct eph_buf *b = ctx;
    char *made;
    const char *wire = eph_event_wire(e, &made);
    if (!wire)
        return -ENOMEM;
    int rc = eph_buf_appends(b, b->len > EVENTS_LIST_HEAD_LEN ? "," : "");
    if (!rc)
        rc = eph_buf_appends(b, wire);
    free(made);
    return rc;
}

/* One event stream. The content reader runs on a polling thread and never blocks: with nothing
 * to send it parks the connection until the run has a new event, settles, or the keep-alive is
 * due. */
struct sse {
    struct eph_service *svc;
    struct eph_api_parker *parker;
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
    /* A sandbox's command (eph_api_command_stream): only its output events, as stdout and stderr,
     * then its result as exit once it is done. NULL: the whole timeline. */
    struct eph_drive_op *op;
    json_t *(*result)(const struct eph_drive_op *op); /* the exit event's data */
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

/* A command's stream: its shell.output events as stdout and stderr ({text, offset}). */
static int sse_command_event(struct sse *s, const struct eph_event *e)
{
    s->last_seq = e->seq;
    const char *call = json_string_value(json_object_get(e->data, "call"));
    if (strcmp(e->type, "shell.output") || !call || strcmp(call, s->op->id))
        return 0;
    json_t *o = json_pack("{s:O, s:O}", "text", json_object_get(e->data, "text"), "offset",
                          json_object_get(e->data, "offset"));
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    const char *stream = json_string_value(json_object_get(e->data, "stream"));
    int rc = text ? eph_buf_appendf(&s->pending, "id: %llu\nevent: %s\ndata: %s\n\n",
                                    (unsigned long long)e->seq,
                                    stream && !strcmp(stream, "stderr") ? "stderr" : "stdout", text)
                  : -ENOMEM;
    free(text);
    return rc;
}

/* The command is done and its output events are sent: its result, and the end. */
static int sse_command_exit(struct sse *s)
{
    json_t *o = s->result(s->op);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int rc = text ? eph_buf_appendf(&s->pending, "event: exit\ndata: %s\n\n", text) : -ENOMEM;
    free(text);
    s->done = true;
    return rc;
}

static int sse_event_cb(const struct eph_event *e, void *ctx)
{
    struct sse *s = ctx;
    if (s->op)
        return sse_command_event(s, e);
    if (s->zdr && strcmp(e->type, "worker.destroyed") == 0) {
        int zrc = sse_zdr_result(s);
        if (zrc)
            return zrc;
    }
    /* The text as stored, written out as is. */
    char *made;
    const char *text = eph_event_wire(e, &made);
    int rc = text ? eph_buf_appendf(&s->pending, "id: %llu\nevent: %s\ndata: %s\n\n",
                                    (unsigned long long)e->seq, e->type, text)
                  : -ENOMEM;
    free(made);
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
        /* A command's stream ends with its result once every output event before it is out. */
        if (s->op && eph_drive_op_done(s->op)) {
            uint64_t seq;
            bool closed;
            if (s->live)
                eph_live_state(s->live, &seq, &closed);
            if (!s->live || closed || seq <= s->last_seq)
                return sse_command_exit(s) ? SSE_END : SSE_DATA;
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
        if (s->op) {
            s->waiter.done = (bool (*)(const void *))eph_drive_op_done;
            s->waiter.done_arg = s->op;
        }
        enum eph_api_park_result pr = eph_api_park(s->parker, &s->waiter);
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
    eph_drive_op_put(s->op);
    eph_live_put(s->live);
    eph_buf_release(&s->pending);
    free(s);
}

/* Answers the event stream s (steals it). */
static int sse_answer(struct eph_api_req *req, struct sse *s)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, s, sse_free);
    if (!resp) {
        sse_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    eph_api_add_common_headers(req, resp, 200);
    int rc = MHD_queue_response(req->conn, 200, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = 200;
    return rc;
}

static struct sse *sse_new(struct eph_api_req *req, const char *id, uint64_t after, bool zdr)
{
    struct sse *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->svc = req->svc;
    s->parker = req->parker;
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
    return s;
}

int eph_api_command_stream(struct eph_api_req *req, const char *sandbox_id, uint64_t after_seq,
                           struct eph_drive_op *op,
                           json_t *(*result)(const struct eph_drive_op *op))
{
    struct sse *s = sse_new(req, sandbox_id, after_seq, false);
    if (!s)
        return MHD_NO;
    atomic_fetch_add(&op->refs, 1);
    s->op = op;
    s->result = result;
    return sse_answer(req, s);
}

int eph_api_runs_events(struct eph_api_req *req, const char *id)
{
    return eph_api_events(req, id, EPH_KIND_RUN);
}

int eph_api_events(struct eph_api_req *req, const char *id, enum eph_run_kind kind)
{
    struct eph_store *st = req->svc->store;
    struct eph_run r;
    if (!eph_api_load_kind(req, id, kind, &r))
        return MHD_YES;
    bool zdr = r.zdr;
    eph_run_release(&r);

    uint64_t after = req->query.has_after_seq ? req->query.after_seq : 0;
    const char *last = eph_api_header(req, "Last-Event-ID");
    if (last) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(last, &end, 10);
        if (*end || end == last || errno || !(last[0] >= '0' && last[0] <= '9'))
            return BAD("Last-Event-ID", "'Last-Event-ID' must be an event sequence number");
        after = n;
    }
    const char *accept = eph_api_header(req, "Accept");
    if (!accept || !strstr(accept, "text/event-stream")) {
        struct eph_buf b;
        eph_buf_init(&b, SIZE_MAX);
        int rc = eph_buf_appends(&b, EVENTS_LIST_HEAD);
        if (!rc)
            rc = st->ops->events_list(st, id, after, 0, events_cb, &b);
        if (!rc)
            rc = eph_buf_appends(&b, "]}\n");
        if (rc) {
            eph_buf_release(&b);
            return rc == -ENOMEM ? MHD_NO : eph_api_reply_store_unavailable(req);
        }
        return eph_api_reply_json_text(req, 200, eph_buf_steal(&b));
    }
    struct sse *s = sse_new(req, id, after, zdr);
    return s ? sse_answer(req, s) : MHD_NO;
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
        /* A run still waiting for a worker would wait for one just to be cancelled: take it out
         * of the queue and hand it to the settler thread. With the cancel flag set, the worker's
         * code settles it at once (nothing started, everything released) without a sandbox. This
         * thread never runs it: a settlement that retries would hold an HTTP thread. */
        struct eph_service *svc = req->svc;
        struct eph_store *st = svc->store;
        /* On a shared store, a queued run no node holds is claimed here for that; one another
         * node works on is cancelled there. */
        if (eph_scheduler_withdraw(svc->sched, id) == 0 ||
            (st->ops->shared && !eph_live_worked_here(req->live) &&
             st->ops->run_claim(st, id, svc->node_id,
                                eph_clock_real_ms() + (int64_t)svc->cfg->lease_seconds * 1000) ==
                 0)) {
            int src = eph_scheduler_settle(svc->sched, id);
            /* Back in the queue then: a worker settles it (the cancel flag is set). */
            if (src && (src = eph_service_submit(svc, id)))
                EPH_ERROR("api", "run %s: cannot hand the cancelled run on: %s", id,
                          eph_strerror(src));
        }
        if (!eph_live_worked_here(req->live) && eph_cluster_cancel(req->svc, id))
            EPH_WARN("api", "run %s: cannot tell the node working on it", id);
        /* Cancelling is prompt: wait briefly so the answer usually shows the final state. */
        if (eph_api_park_until_settled(req, deadline_in(CANCEL_WAIT_SECONDS), cancel_resume))
            return MHD_YES;
    }
    return cancel_resume(req);
}
