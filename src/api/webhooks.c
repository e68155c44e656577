/*
 * webhooks.c - /v1/webhooks (docs/WEBHOOKS.md, docs/API.md): an org's endpoints, created with
 * their secret shown once, listed, deleted, and each one's delivery log. Admin keys only.
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
#include "common/secret.h"
#include "run/webhooks.h"
#include "store/store.h"

#define BAD(param, ...)                                                                            \
    eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param, __VA_ARGS__)

static json_t *webhook_json(const struct eph_webhook *w)
{
    char at[32];
    return json_pack("{s:s, s:s, s:s, s:O, s:I, s:s}", "object", "webhook", "id", w->id, "url",
                     w->url, "events", w->events, "timeout_seconds", (json_int_t)w->timeout_seconds,
                     "created_at", eph_clock_format_iso8601(w->created_at_ms, at, sizeof(at)));
}

static int count_cb(const struct eph_webhook *w, void *ctx)
{
    (void)w;
    (*(size_t *)ctx)++;
    return 0;
}

/* The body's events (every terminal event when absent) into a new array; NULL after a 400. */
static json_t *events_from(struct eph_api_req *req, json_t *v)
{
    json_t *out = json_array();
    if (!v) {
        for (size_t i = 0; eph_webhook_event_types[i]; i++)
            json_array_append_new(out, json_string(eph_webhook_event_types[i]));
        return out;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) {
        json_decref(out);
        BAD("events", "'events' must be a non-empty array of event types");
        return NULL;
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *t = json_string_value(e);
        if (!t || !eph_webhook_event_type_known(t)) {
            json_decref(out);
            BAD("events",
                "unknown event type '%.40s' (known: run.completed, run.failed, "
                "run.timed_out, run.budget_exhausted, run.cancelled, sandbox.ended)",
                t ? t : "(not a string)");
            return NULL;
        }
        size_t j;
        json_t *seen;
        bool dup = false;
        json_array_foreach(out, j, seen) dup |= strcmp(json_string_value(seen), t) == 0;
        if (!dup)
            json_array_append_new(out, json_string(t));
    }
    return out;
}

/* The secret sealed with the server's key file, hex-encoded, into w. */
static int seal_secret(const char *key_path, const char *secret, struct eph_webhook *w)
{
    struct eph_secret key;
    char err[256];
    unsigned char *sealed = NULL;
    size_t len = 0;
    int rc = eph_secret_load(key_path, true, &key, err, sizeof(err));
    if (rc) {
        EPH_ERROR("api", "cannot seal a webhook's secret: %s", err);
        return rc;
    }
    rc = eph_secret_seal(&key, secret, strlen(secret), &sealed, &len);
    eph_secret_clear(&key);
    if (rc)
        return rc;
    w->secret_sealed = malloc(2 * len + 1);
    if (w->secret_sealed)
        sodium_bin2hex(w->secret_sealed, 2 * len + 1, sealed, len);
    free(sealed);
    return w->secret_sealed ? 0 : -ENOMEM;
}

/* The fields of a create into w (url, events, timeout); false after a 400. */
static bool create_fields(struct eph_api_req *req, json_t *body, struct eph_webhook *w)
{
    static const char *const known[] = {"url", "events", "timeout_seconds", NULL};
    const char *unknown = eph_api_unknown_field(body, known);
    if (unknown) {
        eph_api_reply_error(req, 400, "invalid_request_error", "unknown_parameter", NULL,
                            "unknown field '%.64s'", unknown);
        return false;
    }
    const char *url = json_string_value(json_object_get(body, "url"));
    if (!url) {
        BAD("url", "'url' is required: the endpoint's http:// or https:// URL");
        return false;
    }
    char why[200];
    if (eph_webhook_check_url(req->svc->cfg, &req->svc->broker_own, url, NULL, why, sizeof(why))) {
        BAD("url", "%s", why);
        return false;
    }
    json_t *t = json_object_get(body, "timeout_seconds");
    w->timeout_seconds = req->svc->cfg->webhooks.timeout_seconds;
    if (!w->timeout_seconds)
        w->timeout_seconds = 10;
    if (t && (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > 60)) {
        BAD("timeout_seconds", "'timeout_seconds' must be an integer from 1 to 60");
        return false;
    }
    if (t)
        w->timeout_seconds = (unsigned)json_integer_value(t);
    if (!(w->events = events_from(req, json_object_get(body, "events"))))
        return false;
    w->url = strdup(url);
    return true;
}

int eph_api_webhooks_create(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    struct eph_webhook w = {0};
    bool ok = create_fields(req, body, &w);
    json_decref(body);
    if (!ok) {
        eph_webhook_release(&w);
        return MHD_YES;
    }
    struct eph_store *st = req->svc->store;
    size_t have = 0;
    if (st->ops->webhook_list(st, req->org_id, count_cb, &have)) {
        eph_webhook_release(&w);
        return eph_api_reply_store_unavailable(req);
    }
    if (have >= EPH_WEBHOOKS_PER_ORG) {
        eph_webhook_release(&w);
        return eph_api_reply_error(req, 400, "invalid_request_error", "too_many_webhooks", NULL,
                                   "an organization has at most %d webhook endpoints",
                                   EPH_WEBHOOKS_PER_ORG);
    }
    char secret[EPH_WEBHOOK_SECRET_LEN];
    eph_webhook_secret_new(secret);
    snprintf(w.org_id, sizeof(w.org_id), "%s", req->org_id);
    w.created_at_ms = eph_clock_real_ms();
    int rc = w.url ? eph_id_hex("wh_", 12, w.id, sizeof(w.id)) : -ENOMEM;
    if (!rc)
        rc = seal_secret(req->svc->cfg->secret_key_file, secret, &w);
    if (rc) {
        sodium_memzero(secret, sizeof(secret));
        eph_webhook_release(&w);
        return eph_api_reply_error(req, 500, "api_error", "secret_key_unavailable", NULL,
                                   "the server's secret key is unavailable");
    }
    if ((rc = st->ops->webhook_insert(st, &w))) {
        sodium_memzero(secret, sizeof(secret));
        eph_webhook_release(&w);
        return eph_api_reply_store_unavailable(req);
    }
    EPH_INFO("api", "org %s: webhook %s created (%zu event types)", req->org_id, w.id,
             json_array_size(w.events));
    json_t *o = webhook_json(&w);
    /* Shown this once: the store keeps it sealed. */
    json_object_set_new(o, "secret", json_string(secret));
    sodium_memzero(secret, sizeof(secret));
    eph_webhook_release(&w);
    return eph_api_reply_json(req, 201, o, NULL, NULL);
}

static int list_cb(const struct eph_webhook *w, void *ctx)
{
    json_array_append_new((json_t *)ctx, webhook_json(w));
    return 0;
}

int eph_api_webhooks_list(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    json_t *data = json_array();
    if (st->ops->webhook_list(st, req->org_id, list_cb, data)) {
        json_decref(data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, data, false);
}

/* The org's endpoint id into w; false after a 404 or a 503. */
static bool find_webhook(struct eph_api_req *req, const char *id, struct eph_webhook *w)
{
    struct eph_store *st = req->svc->store;
    int rc = st->ops->webhook_get(st, req->org_id, id, w);
    if (rc == -ENOENT)
        eph_api_reply_error(req, 404, "not_found_error", "webhook_not_found", NULL,
                            "no such webhook '%.48s'", id);
    else if (rc)
        eph_api_reply_store_unavailable(req);
    return rc == 0;
}

int eph_api_webhooks_get(struct eph_api_req *req, const char *id)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_webhook w;
    if (!find_webhook(req, id, &w))
        return MHD_YES;
    json_t *o = webhook_json(&w);
    eph_webhook_release(&w);
    return eph_api_reply_json(req, 200, o, NULL, NULL);
}

int eph_api_webhooks_delete(struct eph_api_req *req, const char *id)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    int rc = st->ops->webhook_delete(st, req->org_id, id, eph_clock_real_ms());
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "webhook_not_found", NULL,
                                   "no such webhook '%.48s'", id);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    EPH_INFO("api", "org %s: webhook %.48s deleted", req->org_id, id);
    return eph_api_reply_json(
        req, 200, json_pack("{s:s, s:s, s:b}", "object", "webhook", "id", id, "deleted", 1), NULL,
        NULL);
}

static json_t *time_or_null(int64_t ms)
{
    char at[32];
    return ms ? json_string(eph_clock_format_iso8601(ms, at, sizeof(at))) : json_null();
}

static json_t *delivery_json(const struct eph_webhook_delivery *d)
{
    bool pending = strcmp(d->state, "pending") == 0;
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "object",
                     "webhook_delivery", "event_id", d->event_id, "type", d->type, "status",
                     d->state, "attempts", (json_int_t)d->attempts, "http_status",
                     d->last_status ? json_integer(d->last_status) : json_null(), "duration_ms",
                     d->last_attempt_at_ms ? json_integer(d->last_duration_ms) : json_null(),
                     "error", d->last_error ? json_string(d->last_error) : json_null(),
                     "created_at", time_or_null(d->created_at_ms), "last_attempt_at",
                     time_or_null(d->last_attempt_at_ms), "next_attempt_at",
                     time_or_null(pending ? d->next_attempt_at_ms : 0));
}

static int delivery_cb(const struct eph_webhook_delivery *d, void *ctx)
{
    json_array_append_new((json_t *)ctx, delivery_json(d));
    return 0;
}

int eph_api_webhooks_deliveries(struct eph_api_req *req, const char *id)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_webhook w;
    if (!find_webhook(req, id, &w))
        return MHD_YES;
    eph_webhook_release(&w);
    struct eph_store *st = req->svc->store;
    json_t *data = json_array();
    bool more = false;
    if (st->ops->webhook_deliveries(st, req->org_id, id, req->query.limit, req->query.after,
                                    delivery_cb, data, &more)) {
        json_decref(data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, data, more);
}

static int attempt_cb(const struct eph_webhook_attempt_row *a, void *ctx)
{
    json_array_append_new((json_t *)ctx,
                          json_pack("{s:I, s:s, s:o, s:o, s:I, s:o}", "attempt",
                                    (json_int_t)a->attempt, "outcome", a->outcome, "at",
                                    time_or_null(a->at_ms), "http_status",
                                    a->status ? json_integer(a->status) : json_null(),
                                    "duration_ms", (json_int_t)a->duration_ms, "error",
                                    a->error[0] ? json_string(a->error) : json_null()));
    return 0;
}

int eph_api_webhooks_delivery(struct eph_api_req *req, const char *id)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    const char *eid = strstr(req->path, "/deliveries/") + 12;
    if (!eph_id_is_event(eid))
        return eph_api_reply_error(req, 404, "not_found_error", "delivery_not_found", NULL,
                                   "'%.48s' is not an event id (evt_...)", eid);
    struct eph_webhook w;
    if (!find_webhook(req, id, &w))
        return MHD_YES;
    eph_webhook_release(&w);
    struct eph_store *st = req->svc->store;
    struct eph_webhook_delivery d;
    int rc = st->ops->webhook_delivery_get(st, req->org_id, id, eid, &d);
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "delivery_not_found", NULL,
                                   "webhook '%s' has no delivery of event '%s'", id, eid);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    json_t *o = delivery_json(&d);
    eph_webhook_delivery_release(&d);
    json_t *history = json_array();
    json_object_set_new(o, "history", history);
    if (st->ops->webhook_attempts(st, req->org_id, id, eid, EPH_WEBHOOK_ATTEMPTS_MAX, attempt_cb,
                                  history)) {
        json_decref(o);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_json(req, 200, o, NULL, NULL);
}
