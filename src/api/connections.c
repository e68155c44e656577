/*
 * connections.c - /v1/connections (admin): the external APIs a run may call through the broker
 * (SPEC 7). A connection is a name, a base URL, the methods and path prefixes allowed, and the
 * headers the broker adds to each call. Those header values are credentials: they are sealed with
 * the server's key file (common/secret.h) before they reach the store, and no answer and no log
 * line ever carries them: the API shows the header names only.
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

#define NAME_MAX_LEN 64
#define BASE_URL_MAX 2048
#define PREFIXES_MAX 32
#define PREFIX_MAX_LEN 512
#define HEADERS_MAX 32
#define HEADER_NAME_MAX 128
#define HEADER_VALUE_MAX 8192

static const char *const methods_allowed[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};

static bool valid_name(const char *s, size_t n)
{
    if (n == 0 || n > NAME_MAX_LEN || strlen(s) != n)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return false;
    return true;
}

static bool valid_base_url(const char *s, size_t n)
{
    const char *host;
    if (strncmp(s, "https://", 8) == 0)
        host = s + 8;
    else if (strncmp(s, "http://", 7) == 0)
        host = s + 7;
    else
        return false;
    if (n > BASE_URL_MAX || strlen(s) != n || !*host || *host == '/' || *host == ':' ||
        *host == '@')
        return false;
    /* No userinfo ("https://user:pass@host"): credentials belong in the sealed headers, and an
     * '@' before the first '/', '?' or '#' would make the host something else than it looks. */
    size_t authority = strcspn(host, "/?#");
    if (memchr(host, '@', authority))
        return false;
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return false;
    return true;
}

/* An HTTP token (RFC 9110 5.6.2). */
static bool valid_header_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > HEADER_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

/* No CR, LF or NUL (no header injection), no other control character but tab. */
static bool valid_header_value(const char *s, size_t n)
{
    if (n > HEADER_VALUE_MAX || strlen(s) != n)
        return false;
    for (; *s; s++)
        if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
            return false;
    return true;
}

static bool valid_prefix(const char *s, size_t n)
{
    if (n == 0 || n > PREFIX_MAX_LEN || strlen(s) != n || s[0] != '/' || strstr(s, ".."))
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
            return false;
    return true;
}

#define FAIL(p, ...)                                                                               \
    do {                                                                                           \
        *param = (p);                                                                              \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        rc = -EINVAL;                                                                              \
        goto out;                                                                                  \
    } while (0)

int eph_api_connection_check(json_t *body, struct eph_connection *c, const char **param, char *err,
                             size_t errlen)
{
    int rc = 0;
    memset(c, 0, sizeof(*c));
    *param = NULL;
    json_t *name = json_object_get(body, "name");
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        FAIL("name", "'name' must be 1 to 64 characters from a-z, 0-9, '_' and '-'");
    snprintf(c->name, sizeof(c->name), "%s", json_string_value(name));
    json_t *url = json_object_get(body, "base_url");
    if (!json_is_string(url) || !valid_base_url(json_string_value(url), json_string_length(url)))
        FAIL("base_url",
             "'base_url' must be an https:// or http:// URL with a host, without "
             "user:password@ (put credentials in 'headers'), spaces or control characters, of "
             "at most %d bytes",
             BASE_URL_MAX);
    c->base_url = strdup(json_string_value(url));

    c->methods = json_array();
    json_t *ms = json_object_get(body, "methods");
    if (ms) {
        if (!json_is_array(ms) || json_array_size(ms) == 0)
            FAIL("methods", "'methods' must be a non-empty array of GET, POST, PUT, PATCH, "
                            "DELETE, HEAD");
        size_t i;
        json_t *m;
        json_array_foreach(ms, i, m)
        {
            const char *s = json_string_value(m);
            size_t j, nm = sizeof(methods_allowed) / sizeof(methods_allowed[0]);
            for (j = 0; s && j < nm; j++)
                if (strcmp(s, methods_allowed[j]) == 0)
                    break;
            if (!s || j == nm)
                FAIL("methods", "'methods' must be a non-empty array of GET, POST, PUT, PATCH, "
                                "DELETE, HEAD");
            bool dup = false;
            size_t x;
            json_t *have;
            json_array_foreach(c->methods, x, have) dup |= strcmp(json_string_value(have), s) == 0;
            if (!dup)
                json_array_append_new(c->methods, json_string(s));
        }
    } else {
        json_array_append_new(c->methods, json_string("GET"));
    }

    c->path_prefixes = json_array();
    json_t *ps = json_object_get(body, "path_prefixes");
    if (ps) {
        if (!json_is_array(ps) || json_array_size(ps) > PREFIXES_MAX)
            FAIL("path_prefixes", "'path_prefixes' must be an array of at most %d paths",
                 PREFIXES_MAX);
        size_t i;
        json_t *p;
        json_array_foreach(ps, i, p)
        {
            if (!json_is_string(p) || !valid_prefix(json_string_value(p), json_string_length(p)))
                FAIL("path_prefixes",
                     "each path prefix must start with '/', have no '..', no "
                     "space or control character, and at most %d bytes",
                     PREFIX_MAX_LEN);
            json_array_append(c->path_prefixes, p);
        }
    }
    if (json_array_size(c->path_prefixes) == 0)
        json_array_append_new(c->path_prefixes, json_string("/"));

    c->header_names = json_array();
    json_t *hs = json_object_get(body, "headers");
    if (hs) {
        if (!json_is_object(hs) || json_object_size(hs) > HEADERS_MAX)
            FAIL("headers",
                 "'headers' must be an object of at most %d header names to string "
                 "values",
                 HEADERS_MAX);
        const char *hn;
        json_t *hv;
        json_object_foreach(hs, hn, hv)
        {
            /* The message names the header, never its value. */
            if (!valid_header_name(hn))
                FAIL("headers", "header name '%.64s' is not a valid HTTP header name", hn);
            if (!json_is_string(hv) ||
                !valid_header_value(json_string_value(hv), json_string_length(hv)))
                FAIL("headers",
                     "the value of header '%.64s' must be a string of at most %d "
                     "bytes without control characters",
                     hn, HEADER_VALUE_MAX);
            json_array_append_new(c->header_names, json_string(hn));
        }
    }
    if (!c->base_url)
        rc = -ENOMEM;
out:
    if (rc)
        eph_connection_release(c);
    return rc;
}

int eph_api_connection_build(json_t *body, const char *key_path, struct eph_connection *c,
                             const char **param, char *err, size_t errlen)
{
    int rc = eph_api_connection_check(body, c, param, err, errlen);
    if (rc)
        return rc;
    json_t *hs = json_object_get(body, "headers");
    json_t *empty = hs ? NULL : json_object();
    char *plain = json_dumps(hs ? hs : empty, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(empty);
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
        snprintf(err, errlen, "cannot seal the connection's headers");
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
    return json_pack("{s:s, s:s, s:s, s:s, s:O, s:O, s:O, s:s}", "object", "connection", "id",
                     c->id, "name", c->name, "base_url", c->base_url, "methods", c->methods,
                     "path_prefixes", c->path_prefixes, "header_names", c->header_names,
                     "created_at", eph_clock_format_iso8601(c->created_at_ms, at, sizeof(at)));
}

int eph_api_connections_create(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    static const char *const known[] = {"name",          "base_url", "methods",
                                        "path_prefixes", "headers",  NULL};
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
    EPH_INFO("api", "org %s: connection '%s' created (%zu headers)", req->org_id, c.name,
             json_array_size(c.header_names));
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
