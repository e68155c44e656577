/*
 * account.c - /v1/balance, /v1/credits and /healthz.
 */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "common/log.h"

int eph_api_balance(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    struct eph_balance b;
    if (st->ops->balance(st, req->org_id, &b))
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the store is unavailable");
    return eph_api_reply_json(req, 200,
                              json_pack("{s:s, s:I, s:I, s:I}", "object", "balance",
                                        "balance_micros", (json_int_t)b.balance_micros,
                                        "reserved_micros", (json_int_t)b.reserved_micros,
                                        "available_micros", (json_int_t)b.available_micros),
                              NULL, NULL);
}

int eph_api_credits(struct eph_api_req *req)
{
    struct eph_store *st = req->svc->store;
    if (strcmp(req->role, "admin") != 0)
        return eph_api_reply_error(req, 403, "permission_error", "admin_required", NULL,
                                   "adding credit needs an admin key");
    json_t *body = json_loadb(req->body.data ? req->body.data : "", req->body.len,
                              JSON_REJECT_DUPLICATES, NULL);
    json_t *m = json_object_get(body, "micros");
    if (!json_is_object(body) || json_object_size(body) != 1 || !json_is_integer(m) ||
        json_integer_value(m) <= 0 || json_integer_value(m) > (json_int_t)1000000000000000) {
        json_decref(body);
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter",
                                   "micros", "the body must be {\"micros\": N} with N > 0");
    }
    int rc = st->ops->credit_add(st, req->org_id, json_integer_value(m));
    json_decref(body);
    if (rc)
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the credit could not be stored");
    EPH_INFO("api", "credit added to org %s", req->org_id);
    return eph_api_balance(req);
}

int eph_api_healthz(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    bool store_ok = svc->store->ops->ping(svc->store) == 0;
    bool shutting = atomic_load(&svc->shutting_down);
    bool ok = store_ok && svc->sandbox_ops && !shutting;
    return eph_api_reply_json(
        req, ok ? 200 : 503,
        json_pack("{s:s, s:b, s:s, s:b}", "status", ok ? "ok" : "unavailable", "store", store_ok,
                  "sandbox", svc->sandbox_ops ? svc->sandbox_ops->name : "none", "shutting_down",
                  shutting),
        NULL, NULL);
}
