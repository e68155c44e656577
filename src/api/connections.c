/*
 * connections.c - /v1/connections (admin): the external APIs a run may call through the broker
 * (docs/BROKER.md). A connection is a name, a base URL, the methods and path prefixes allowed, and
 * the headers the broker adds to each call. Those header values are credentials: they are sealed
 * with the server's key file (common/secret.h) before they reach the store, and no answer and no
 * log line ever carries them: the API shows the header names only. The same holds for the query
 * parameters the broker adds for APIs that want "?key=" (docs/BROKER.md): sealed with the headers,
 * shown by name only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/secret.h"
#include "store/store.h"

int eph_api_connection_build(json_t *body, const char *key_path, struct eph_connection *c,
                             const char **param, char *err, size_t errlen)
{
    int rc = eph_api_connection_check(body, c, param, err, errlen);
    if (rc)
        return rc;
    json_t *hs = json_object_get(body, "headers"), *qs = json_object_get(body, "query");
    json_t *sealed = json_pack("{s:o, s:o}", "headers", hs ? json_incref(hs) : json_object(),
                               "query", qs ? json_incref(qs) : json_object());
    char *plain = sealed ? json_dumps(sealed, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(sealed);
    if (!plain) {
        rc = -ENOMEM;
        goto out;
    }
    struct eph_secret key;
    if ((rc = eph_secret_load(key_path, true, &key, err, errlen)))
        goto out;
    rc = eph_secret_seal(&key, plain, strlen(plain), &c->sealed, &c->sealed_len);
    eph_secret_clear(&key);
    if (rc)
        snprintf(err, errlen, "cannot seal the connection's credentials");
    c->created_at_ms = eph_clock_real_ms();
out:
    if (plain) {
        sodium_memzero(plain, strlen(plain));
        free(plain);
    }
    if (rc)
        eph_connection_release(c);
    return rc;
}

static json_t *conn_json(const struct eph_connection *c)
{
    char at[32];
    json_t *no_query = c->query_names ? NULL : json_array();
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:O, s:O, s:s}", "object", "connection", "id",
                  c->id, "name", c->name, "base_url", c->base_url, "methods", c->methods,
                  "path_prefixes", c->path_prefixes, "header_names", c->header_names, "query_names",
                  c->query_names ? c->query_names : no_query, "created_at",
                  eph_clock_format_iso8601(c->created_at_ms, at, sizeof(at)));
    json_decref(no_query);
    return o;
}

int eph_api_connections_create(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    static const char *const known[] = {"name",    "base_url", "methods", "path_prefixes",
                                        "headers", "query",    NULL};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        bool ok = false;
        for (const char *const *kn = known; *kn; kn++)
            ok |= strcmp(*kn, k) == 0;
        if (!ok) {
            char shown[72];
            snprintf(shown, sizeof(shown), "%.64s", k);
            json_decref(body);
            return eph_api_reply_error(req, 400, "invalid_request_error", "unknown_parameter",
                                       shown, "unknown field '%s'", shown);
        }
    }
    struct eph_connection c;
    const char *param;
    char err[256];
    int rc = eph_api_connection_build(body, req->svc->cfg->secret_key_file, &c, &param, err,
                                      sizeof(err));
    /* The body holds credentials: drop it before anything else happens. */
    json_decref(body);
    if (rc == -EINVAL && param)
        return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param,
                                   "%s", err);
    if (rc) {
        EPH_ERROR("api", "cannot create a connection: %s", err);
        return eph_api_reply_error(req, 500, "api_error", "secret_key_unavailable", NULL,
                                   "the server's secret key is unavailable");
    }
    struct eph_store *st = req->svc->store;
    rc = st->ops->conn_insert(st, req->org_id, &c, c.id, sizeof(c.id));
    if (rc == -EEXIST) {
        eph_connection_release(&c);
        return eph_api_reply_error(req, 409, "invalid_request_error", "connection_exists", "name",
                                   "a connection named '%s' exists already", c.name);
    }
    if (rc) {
        eph_connection_release(&c);
        return eph_api_reply_error(req, 503, "api_error", "store_unavailable", NULL,
                                   "the connection could not be stored");
    }
    EPH_INFO("api", "org %s: connection '%s' created (%zu headers, %zu query parameters)",
             req->org_id, c.name, json_array_size(c.header_names), json_array_size(c.query_names));
    json_t *o = conn_json(&c);
    eph_connection_release(&c);
    return eph_api_reply_json(req, 201, o, NULL, NULL);
}

static int list_cb(const struct eph_connection *c, void *ctx)
{
    json_array_append_new((json_t *)ctx, conn_json(c));
    return 0;
}

int eph_api_connections_list(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    json_t *data = json_array();
    if (st->ops->conn_list(st, req->org_id, list_cb, data)) {
        json_decref(data);
        return eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, data, false);
}

struct by_id {
    const char *id;
    json_t *found; /* the connection's JSON form */
};

static int by_id_cb(const struct eph_connection *c, void *ctx)
{
    struct by_id *b = ctx;
    if (!b->found && strcmp(c->id, b->id) == 0)
        b->found = conn_json(c);
    return 0;
}

/* The org's connection named or numbered ref, as the API shows it; answers 404 or 503 and returns
 * NULL when there is none. */
static json_t *find_connection(struct eph_api_req *req, const char *ref)
{
    struct eph_store *st = req->svc->store;
    struct eph_connection c;
    int rc = st->ops->conn_get(st, req->org_id, ref, &c);
    if (rc == 0) {
        json_t *o = conn_json(&c);
        eph_connection_release(&c);
        return o;
    }
    struct by_id b = {.id = ref};
    if (rc == -ENOENT && (rc = st->ops->conn_list(st, req->org_id, by_id_cb, &b)) == 0 && b.found)
        return b.found;
    json_decref(b.found);
    if (rc == 0 || rc == -ENOENT)
        eph_api_reply_error(req, 404, "not_found_error", "connection_not_found", NULL,
                            "no such connection '%.64s'", ref);
    else
        eph_api_reply_store_unavailable(req);
    return NULL;
}

int eph_api_connections_get(struct eph_api_req *req, const char *ref)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *o = find_connection(req, ref);
    return o ? eph_api_reply_json(req, 200, o, NULL, NULL) : MHD_YES;
}

int eph_api_connections_delete(struct eph_api_req *req, const char *ref)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *o = find_connection(req, ref);
    if (!o)
        return MHD_YES;
    /* By its id, whichever way it was named: the answer carries both. */
    char id[64], name[72];
    snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(o, "id")));
    snprintf(name, sizeof(name), "%s", json_string_value(json_object_get(o, "name")));
    json_decref(o);
    struct eph_store *st = req->svc->store;
    int rc = st->ops->conn_delete(st, req->org_id, id);
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "connection_not_found", NULL,
                                   "no such connection '%.64s'", ref);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    EPH_INFO("api", "org %s: connection '%s' (%s) deleted", req->org_id, name, id);
    return eph_api_reply_json(req, 200,
                              json_pack("{s:s, s:s, s:s, s:b}", "object", "connection", "id", id,
                                        "name", name, "deleted", 1),
                              NULL, NULL);
}
