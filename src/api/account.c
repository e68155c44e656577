/*
 * account.c - /v1/balance, /v1/credits, /healthz and /metrics.
 */
#include <errno.h>
#include <string.h>

#include <microhttpd.h>

#include "api/api.h"
#include "common/log.h"
#include "common/money.h"
#include "common/metrics.h"
#include "run/scheduler.h"
#include "sandbox/sandbox.h"

static int balance_reply(struct eph_api_req *req, const struct eph_balance *bal)
{
    struct eph_balance b = *bal;
    return eph_api_reply_json(req, 200,
                              json_pack("{s:s, s:I, s:I, s:I}", "object", "balance",
                                        "balance_micros", (json_int_t)b.balance_micros,
                                        "reserved_micros", (json_int_t)b.reserved_micros,
                                        "available_micros", (json_int_t)b.available_micros),
                              NULL, NULL);
}

int eph_api_balance(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    struct eph_balance b;
    if (st->ops->balance(st, req->org_id, &b))
        return eph_api_reply_store_unavailable(req);
    return balance_reply(req, &b);
}

int eph_api_credits(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "micros") != 0) {
            char shown[72];
            snprintf(shown, sizeof(shown), "%.64s", k);
            json_decref(body);
            return eph_api_reply_error(req, 400, "invalid_request_error", "unknown_parameter",
                                       shown, "unknown field '%s'", shown);
        }
    }
    json_t *m = json_object_get(body, "micros");
    if (!json_is_integer(m) || json_integer_value(m) <= 0) {
        json_decref(body);
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", "micros",
                                   "the body must be {\"micros\": N} with N a positive integer");
    }
    int64_t micros = json_integer_value(m);
    json_decref(body);
    struct eph_balance b;
    if (st->ops->balance(st, req->org_id, &b))
        return eph_api_reply_store_unavailable(req);
    /* The same bound as `ephemerald admin credit`: no total can overflow. */
    const char *why = eph_money_credit_refusal(micros, b.balance_micros);
    if (why)
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", "micros",
                                   "%s", why);
    int rc = st->ops->credit_add(st, req->org_id, micros);
    if (rc == -EOVERFLOW) /* another credit landed between the check and ours */
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", "micros",
                                   "the balance would exceed the largest amount it can hold");
    if (rc)
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the credit could not be stored");
    EPH_INFO("api", "credit added to org %s", req->org_id);
    /* The credit is applied: from here the answer is a success whatever happens, so that the
     * idempotency key remembers it and a retry does not apply it twice. */
    if (st->ops->balance(st, req->org_id, &b) == 0)
        return balance_reply(req, &b);
    return eph_api_reply_json(
        req, 200, json_pack("{s:s, s:I}", "object", "credit", "micros", (json_int_t)micros), NULL,
        NULL);
}

/* Each part of the server (store, image, backend) with what to do about an unusable one; 503
 * while one is unusable or the server is shutting down (the service's readiness_ops). */
/* The models that cannot take a run (an unset key variable), each with why: a run on one is
 * refused at create (503 model_unavailable). The server stays ready for its other models. */
static json_t *models_report(struct eph_service *svc)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < svc->cfg->nmodels; i++) {
        char why[256];
        const struct eph_model_config *m = &svc->cfg->models[i];
        if (eph_model_unavailable(eph_service_model(svc, m->id), why, sizeof(why)))
            json_array_append_new(out, json_pack("{s:s, s:s}", "id", m->id, "reason", why));
    }
    return out;
}

int eph_api_healthz(struct eph_api_req *req)
{
    bool ok = false;
    struct eph_service *svc = req->svc;
    json_t *body = svc->readiness_ops->report(svc->readiness, svc, &ok);
    if (!body)
        return eph_api_reply_error(req, 503, "api_error", "out_of_memory", NULL,
                                   "the health report could not be built");
    json_object_set_new(body, "models_unavailable", models_report(svc));
    return eph_api_reply_json(req, ok ? 200 : 503, body, NULL, NULL);
}

/* Runs by status, with every status present (0 when none) so that a dashboard's series exist. */
static int status_cb(const char *status, uint64_t count, void *ctx)
{
    json_object_set_new((json_t *)ctx, status, json_integer((json_int_t)count));
    return 0;
}

int eph_api_metrics(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    static const char *const statuses[] = {"queued", "starting",  "running",          "completed",
                                           "failed", "timed_out", "budget_exhausted", "cancelled"};
    json_t *counts = json_object();
    bool store_ok = svc->store->ops->runs_count_by_status(svc->store, status_cb, counts) == 0;
    pid_t launcher_pid;
    unsigned long launcher_clones;
    eph_sandbox_launcher_info(&launcher_pid, &launcher_clones);
    struct eph_buf b;
    eph_buf_init(&b, 4u << 20);
    int rc = eph_buf_appends(&b, "# HELP ephemeral_runs Runs in the store by status.\n"
                                 "# TYPE ephemeral_runs gauge\n");
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]) && !rc; i++)
        rc = eph_buf_appendf(&b, "ephemeral_runs{status=\"%s\"} %lld\n", statuses[i],
                             (long long)json_integer_value(json_object_get(counts, statuses[i])));
    json_decref(counts);
    if (!rc)
        rc = eph_buf_appendf(&b,
                             "# HELP ephemeral_store_up Whether the store answered.\n"
                             "# TYPE ephemeral_store_up gauge\n"
                             "ephemeral_store_up %d\n"
                             "# HELP ephemeral_queue_depth Runs waiting for a worker.\n"
                             "# TYPE ephemeral_queue_depth gauge\n"
                             "ephemeral_queue_depth %u\n"
                             "# HELP ephemeral_runs_executing Runs a worker is executing.\n"
                             "# TYPE ephemeral_runs_executing gauge\n"
                             "ephemeral_runs_executing %u\n"
                             "# HELP ephemeral_http_parked_requests Requests parked on a run "
                             "(long polls, idle event streams).\n"
                             "# TYPE ephemeral_http_parked_requests gauge\n"
                             "ephemeral_http_parked_requests %u\n"
                             "# HELP ephemeral_sandboxes_live Sandboxes a caller drives that "
                             "this node serves (starting or ready).\n"
                             "# TYPE ephemeral_sandboxes_live gauge\n"
                             "ephemeral_sandboxes_live %u\n"
                             "# HELP ephemeral_forwarded_calls Calls for sandboxes another node "
                             "serves, being sent on to it.\n"
                             "# TYPE ephemeral_forwarded_calls gauge\n"
                             "ephemeral_forwarded_calls %u\n"
                             "# HELP ephemeral_sandbox_launcher_up Whether the sandbox launcher "
                             "runs (it clones the namespaces backend's sandboxes).\n"
                             "# TYPE ephemeral_sandbox_launcher_up gauge\n"
                             "ephemeral_sandbox_launcher_up %d\n"
                             "# HELP ephemeral_sandbox_launcher_clones_total Sandboxes the "
                             "launcher cloned.\n"
                             "# TYPE ephemeral_sandbox_launcher_clones_total counter\n"
                             "ephemeral_sandbox_launcher_clones_total %lu\n",
                             store_ok ? 1 : 0, eph_scheduler_queue_depth(req->svc->sched),
                             eph_scheduler_running(req->svc->sched),
                             eph_api_parked_count(req->parker), eph_drives_count(req->svc->drives),
                             eph_api_forwarded_count(req->forwarder), launcher_pid ? 1 : 0,
                             launcher_clones);
    if (!rc && strcmp(svc->store->ops->name, "postgres") == 0)
        rc = eph_buf_appendf(&b,
                             "# HELP ephemeral_store_round_trips_total Round trips this node made "
                             "to PostgreSQL (a statement, a prepare, a batch of a step).\n"
                             "# TYPE ephemeral_store_round_trips_total counter\n"
                             "ephemeral_store_round_trips_total %lu\n",
                             eph_store_postgres_round_trips(svc->store));
    if (!rc)
        rc = eph_metrics_render(&b);
    if (rc) {
        eph_buf_release(&b);
        return eph_api_reply_error(req, 500, "api_error", "internal_error", NULL,
                                   "the metrics could not be rendered");
    }
    rc = eph_api_reply_text(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    eph_buf_release(&b);
    return rc;
}
