/*
 * keys.c - /v1/keys (admin): create a key (shown once, in the answer), list the org's keys (id,
 * role, creation time and a short prefix: never the key or its hash), revoke one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"

/* "eph_" and four characters: enough to tell keys apart, far too little to guess one. */
#define KEY_PREFIX_LEN 8

static json_t *key_json(const struct eph_key_info *k)
{
    char at[32];
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", "object", "api_key", "id", k->id, "role", k->role,
                     "prefix", k->prefix, "created_at",
                     eph_clock_format_iso8601(k->created_at_ms, at, sizeof(at)));
}

int eph_api_keys_create(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    const char *role = "member";
    json_t *body = NULL;
    if (req->body.len) {
        if (!(body = eph_api_body_object(req)))
            return MHD_YES;
        const char *k;
        json_t *v;
        json_object_foreach(body, k, v)
        {
            if (strcmp(k, "role") != 0) {
                char shown[72];
                snprintf(shown, sizeof(shown), "%.64s", k);
                json_decref(body);
                return eph_api_reply_error(req, 400, "invalid_request_error", "unknown_parameter",
                                           shown, "unknown field '%s'", shown);
            }
        }
        json_t *r = json_object_get(body, "role");
        if (r) {
            role = json_string_value(r);
            if (!role || (strcmp(role, "admin") && strcmp(role, "member"))) {
                json_decref(body);
                return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter",
                                           "role", "'role' must be \"admin\" or \"member\"");
            }
        }
    }
    struct eph_store *st = req->svc->store;
    char key[EPH_API_KEY_LEN + 1], hash[65];
    struct eph_key_info info = {0};
    int rc = eph_id_base62("eph_", 40, key, sizeof(key));
    if (!rc) {
        eph_sha256_hex(key, strlen(key), hash);
        snprintf(info.prefix, sizeof(info.prefix), "%.*s", KEY_PREFIX_LEN, key);
        snprintf(info.role, sizeof(info.role), "%s", role);
        info.created_at_ms = eph_clock_real_ms();
        rc =
            st->ops->key_insert(st, req->org_id, hash, role, info.prefix, info.id, sizeof(info.id));
    }
    json_decref(body);
    if (rc) {
        sodium_memzero(key, sizeof(key));
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the key could not be stored");
    }
    EPH_INFO("api", "org %s: %s key %s created", req->org_id, info.role, info.id);
    json_t *o = key_json(&info);
    /* The only time the key is ever shown: it is not stored, only its hash. */
    json_object_set_new(o, "key", json_string(key));
    sodium_memzero(key, sizeof(key));
    return eph_api_reply_json(req, 201, o, NULL, NULL);
}

static int list_cb(const struct eph_key_info *k, void *ctx)
{
    json_array_append_new((json_t *)ctx, key_json(k));
    return 0;
}

int eph_api_keys_list(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    json_t *data = json_array();
    if (st->ops->key_list(st, req->org_id, list_cb, data)) {
        json_decref(data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, data, false);
}

struct admins {
    const char *id;   /* the key to revoke */
    bool is_admin;    /* it is an admin key */
    unsigned nadmins; /* the org's admin keys */
};

static int admins_cb(const struct eph_key_info *k, void *ctx)
{
    struct admins *a = ctx;
    bool admin = strcmp(k->role, "admin") == 0;
    a->nadmins += admin;
    if (strcmp(k->id, a->id) == 0)
        a->is_admin = admin;
    return 0;
}

int eph_api_keys_delete(struct eph_api_req *req, const char *id)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    /* Only an admin revokes keys, so the last admin key could only revoke itself, and then no
     * one could ever manage the org again through the API. */
    struct admins a = {.id = id};
    if (st->ops->key_list(st, req->org_id, admins_cb, &a))
        return eph_api_reply_store_unavailable(req);
    if (a.is_admin && a.nadmins == 1)
        return eph_api_reply_error(req, 409, "invalid_request_error", "last_admin_key", NULL,
                                   "'%.48s' is the organization's last admin key: create another "
                                   "admin key before revoking it",
                                   id);
    int rc = st->ops->key_revoke(st, req->org_id, id, eph_clock_real_ms());
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "key_not_found", NULL,
                                   "no such key '%.48s'", id);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    EPH_INFO("api", "org %s: key %.48s revoked", req->org_id, id);
    return eph_api_reply_json(
        req, 200, json_pack("{s:s, s:s, s:b}", "object", "api_key", "id", id, "deleted", 1), NULL,
        NULL);
}
