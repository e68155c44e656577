/*
 * validate.c - the API's input rules as plain functions (validate.h).
 */
#include "api/validate.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "common/glob.h"
#include "common/id.h"
#include "image/image.h"
#include "common/text.h"
#include "run/run.h"
#include "store/store.h"

int eph_api_error_set(struct eph_api_error *e, unsigned status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return -EINVAL;
}

#define BAD(param, ...)                                                                            \
    eph_api_error_set(e, 400, "invalid_request_error", "invalid_parameter", param, __VA_ARGS__)

/* A JSON string without an embedded NUL. */
static bool plain_string(json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static int want_bool(json_t *body, const char *name, bool *out, struct eph_api_error *e)
{
    json_t *v = json_object_get(body, name);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BAD(name, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

static char *b64_encode(const unsigned char *data, size_t n)
{
    size_t len = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(len);
    if (out)
        sodium_bin2base64(out, len, data, n, sodium_base64_VARIANT_ORIGINAL);
    return out;
}

/* One file of the request: its fields, its path and its content, appended to norm as
 * {path, content_base64, size}; *total counts the decoded bytes so far. */
static int check_file(json_t *f, size_t i, json_t *norm, size_t *total, struct eph_api_error *e)
{
    char param[48];
    snprintf(param, sizeof(param), "files[%zu]", i);
    if (!json_is_object(f))
        return BAD(param, "each file must be an object with 'path' and 'content'");
    const char *key;
    json_t *v;
    json_object_foreach(f, key, v)
    {
        if (strcmp(key, "path") && strcmp(key, "content") && strcmp(key, "content_base64")) {
            snprintf(param, sizeof(param), "files[%zu].%.12s", i, key);
            return BAD(param, "unknown field '%.64s' in a file", key);
        }
    }
    json_t *path = json_object_get(f, "path");
    json_t *content = json_object_get(f, "content");
    json_t *b64 = json_object_get(f, "content_base64");
    snprintf(param, sizeof(param), "files[%zu].path", i);
    if (!json_is_string(path))
        return BAD(param, "a file needs a 'path' string");
    const char *why = eph_text_file_path_error(json_string_value(path), json_string_length(path));
    if (why)
        return BAD(param, "the file path cannot be used: %s", why);
    snprintf(param, sizeof(param), "files[%zu]", i);
    if ((content != NULL) == (b64 != NULL) || (content && !json_is_string(content)) ||
        (b64 && !json_is_string(b64)))
        return BAD(param, "a file needs exactly one of 'content' (string) or 'content_base64'");
    char *encoded;
    size_t size;
    if (content) {
        size = json_string_length(content);
        encoded = b64_encode((const unsigned char *)json_string_value(content), size);
    } else {
        const char *s = json_string_value(b64);
        size_t slen = json_string_length(b64);
        size_t cap = slen / 4 * 3 + 3;
        unsigned char *bin = malloc(cap);
        if (!bin || sodium_base642bin(bin, cap, s, slen, NULL, &size, NULL,
                                      sodium_base64_VARIANT_ORIGINAL)) {
            free(bin);
            snprintf(param, sizeof(param), "files[%zu].content_base64", i);
            return BAD(param, "'content_base64' is not valid base64");
        }
        free(bin);
        encoded = strdup(s);
    }
    *total += size;
    if (*total > EPH_API_FILES_BYTES_MAX) {
        free(encoded);
        return BAD("files", "files total over 10 MiB");
    }
    json_t *o = encoded ? json_pack("{s:O, s:s, s:I}", "path", path, "content_base64", encoded,
                                    "size", (json_int_t)size)
                        : NULL;
    free(encoded);
    if (!o || json_array_append_new(norm, o))
        return eph_api_error_set(e, 500, "api_error", "internal_error", NULL, "out of memory");
    return 0;
}

static int check_files(json_t *files, json_t **out, struct eph_api_error *e)
{
    if (!json_is_array(files))
        return BAD("files", "'files' must be an array");
    size_t n = json_array_size(files);
    if (n > EPH_API_FILES_MAX)
        return BAD("files", "at most %d files", EPH_API_FILES_MAX);
    json_t *norm = json_array();
    if (!norm)
        return eph_api_error_set(e, 500, "api_error", "internal_error", NULL, "out of memory");
    size_t total = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = check_file(json_array_get(files, i), i, norm, &total, e);
    /* Every path is valid on its own; now whether they can all be files at once. */
    const char *paths[EPH_API_FILES_MAX];
    for (size_t i = 0; i < n && !rc; i++)
        paths[i] = json_string_value(json_object_get(json_array_get(norm, i), "path"));
    size_t a, b;
    const char *why = rc ? NULL : eph_text_file_paths_conflict(paths, n, &a, &b);
    if (why) {
        char param[48];
        snprintf(param, sizeof(param), "files[%zu].path", b);
        rc = BAD(param, "'%.200s' and '%.200s' cannot both be files: %s", paths[a], paths[b], why);
    }
    if (rc) {
        json_decref(norm);
        return rc;
    }
    *out = norm;
    return 0;
}

/* The files to bring back (docs/API.md, "Outputs"): patterns relative to the scratch directory. */
static int check_outputs(json_t *outputs, struct eph_api_error *e)
{
    if (!json_is_array(outputs))
        return BAD("outputs", "'outputs' must be an array of patterns");
    if (json_array_size(outputs) > EPH_API_OUTPUTS_MAX)
        return BAD("outputs", "at most %d output patterns", EPH_API_OUTPUTS_MAX);
    size_t i;
    json_t *v;
    json_array_foreach(outputs, i, v)
    {
        char param[32];
        snprintf(param, sizeof(param), "outputs[%zu]", i);
        if (!json_is_string(v))
            return BAD(param, "output patterns must be strings");
        const char *why = eph_glob_pattern_error(json_string_value(v), json_string_length(v));
        if (why)
            return BAD(param, "bad output pattern: %s", why);
    }
    return 0;
}

static int check_metadata(json_t *md, struct eph_api_error *e)
{
    if (!json_is_object(md))
        return BAD("metadata", "'metadata' must be an object of strings");
    if (json_object_size(md) > EPH_API_METADATA_PAIRS_MAX)
        return BAD("metadata", "at most %d metadata pairs", EPH_API_METADATA_PAIRS_MAX);
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (strlen(k) == 0 || strlen(k) > EPH_API_METADATA_KEY_MAX)
            return BAD("metadata", "metadata keys must be 1 to 64 bytes");
        if (!plain_string(v) || json_string_length(v) > EPH_API_METADATA_VALUE_MAX)
            return BAD("metadata", "metadata values must be strings of at most 512 bytes");
    }
    return 0;
}

static int check_connections(json_t *conns, struct eph_api_error *e)
{
    if (!json_is_array(conns))
        return BAD("connections", "'connections' must be an array of connection names");
    if (json_array_size(conns) > EPH_API_CONNECTIONS_MAX)
        return BAD("connections", "at most %d connections", EPH_API_CONNECTIONS_MAX);
    size_t i;
    json_t *n;
    json_array_foreach(conns, i, n)
    {
        if (!plain_string(n) || json_string_length(n) == 0 || json_string_length(n) > 64)
            return BAD("connections", "'connections' must be an array of connection names");
    }
    return 0;
}

/* A domain of a web allow-list: "example.com" or "*.example.com"; labels of letters, digits and
 * inner hyphens, 1 to 63 bytes each, the whole at most 253 (RFC 1035), no trailing dot. */
static bool valid_domain(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    if (n > 2 && s[0] == '*' && s[1] == '.')
        s += 2, n -= 2;
    if (n == 0 || n > EPH_API_DOMAIN_MAX)
        return false;
    size_t label = 0;
    for (size_t i = 0; i <= n; i++) {
        char ch = i < n ? s[i] : '.';
        if (ch == '.') {
            if (label == 0 || label > 63 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || (ch == '-' && label > 0)) {
            label++;
        } else {
            return false;
        }
    }
    return true;
}

/* web: a boolean, or {"allow": [domain...]} (docs/API.md), which turns web on for those only. */
static int check_web(json_t *web, struct eph_api_create *c, struct eph_api_error *e)
{
    if (json_is_boolean(web)) {
        c->web = json_is_true(web);
        return 0;
    }
    json_t *allow = json_is_object(web) ? json_object_get(web, "allow") : NULL;
    if (!allow || json_object_size(web) != 1)
        return BAD("web", "'web' must be a boolean or {\"allow\": [domain, ...]}");
    if (!json_is_array(allow) || json_array_size(allow) == 0 ||
        json_array_size(allow) > EPH_API_WEB_ALLOW_MAX)
        return BAD("web", "'web.allow' must be an array of 1 to %d domains", EPH_API_WEB_ALLOW_MAX);
    size_t i;
    json_t *d;
    json_array_foreach(allow, i, d)
    {
        if (!json_is_string(d) || !valid_domain(json_string_value(d), json_string_length(d)))
            return BAD("web",
                       "'web.allow' entry %zu is not a domain ('example.com' or "
                       "'*.example.com')",
                       i);
    }
    c->web = true;
    c->web_allow = allow;
    return 0;
}

int eph_api_check_fields(json_t *body, const char *const *known, struct eph_api_error *e)
{
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v)
    {
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            ok |= strcmp(*k, key) == 0;
        if (!ok) {
            char shown[72];
            snprintf(shown, sizeof(shown), "%.64s", key);
            return eph_api_error_set(e, 400, "invalid_request_error", "unknown_parameter", shown,
                                     "unknown field '%s'", shown);
        }
    }
    return 0;
}

static int check_known_fields(json_t *body, struct eph_api_error *e)
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
                                        "replay_of",
                                        "image",
                                        "outputs",
                                        NULL};
    return eph_api_check_fields(body, known, e);
}

/* Everything but files, in the order a reader of the request would check it. */
static int check_scalars(json_t *body, const struct eph_config *cfg, struct eph_api_create *c,
                         struct eph_api_error *e)
{
    json_t *replay_of = json_object_get(body, "replay_of");
    if (replay_of) {
        if (!plain_string(replay_of) || !eph_id_is_run(json_string_value(replay_of)))
            return BAD("replay_of", "'replay_of' must be a run id (run_ and 32 hex digits)");
        c->replay_of = json_string_value(replay_of);
    }
    json_t *image = json_object_get(body, "image");
    if (image) {
        if (!plain_string(image) || !eph_image_name_valid(json_string_value(image)))
            return BAD("image", "'image' must be an image name (a-z, 0-9 and '-', at most 63)");
        c->image = json_string_value(image);
    }
    json_t *prompt = json_object_get(body, "prompt");
    /* A replay's prompt is the original's unless given. */
    if (!prompt && !replay_of)
        return eph_api_error_set(e, 400, "invalid_request_error", "missing_parameter", "prompt",
                                 "'prompt' is required");
    if (prompt && (!plain_string(prompt) || json_string_length(prompt) == 0 ||
                   json_string_length(prompt) > EPH_API_PROMPT_MAX))
        return BAD("prompt", "'prompt' must be a string of 1 byte to 64 KiB, without NUL");
    c->prompt = json_string_value(prompt);
    json_t *model = json_object_get(body, "model");
    if (model) {
        if (!plain_string(model) || !eph_config_model(cfg, json_string_value(model))) {
            /* The models there are, so that the caller can pick one (GET /v1/models has them
             * with their prices). */
            char names[512] = "";
            size_t o = 0;
            for (size_t i = 0; i < cfg->nmodels && o + 1 < sizeof(names); i++) {
                int n = snprintf(names + o, sizeof(names) - o, "%s'%s'", i ? ", " : "",
                                 cfg->models[i].id);
                if (n < 0 || (size_t)n >= sizeof(names) - o) {
                    names[o] = '\0'; /* the names that fit, whole */
                    break;
                }
                o += (size_t)n;
            }
            return BAD("model", "'model' must be one of the configured models: %s", names);
        }
        c->model = json_string_value(model);
    } else {
        c->model = cfg->default_model;
    }
    int rc;
    if ((rc = want_bool(body, "shell", &c->shell, e)) ||
        (rc = want_bool(body, "zero_data_retention", &c->zdr, e)))
        return rc;
    json_t *web = json_object_get(body, "web");
    if (web && (rc = check_web(web, c, e)))
        return rc;
    json_t *conns = json_object_get(body, "connections");
    if (conns && (rc = check_connections(conns, e)))
        return rc;
    c->connections = conns;
    json_t *t = json_object_get(body, "timeout_seconds");
    if (t) {
        unsigned max = cfg->max_timeout_seconds < 3600 ? cfg->max_timeout_seconds : 3600;
        if (!json_is_integer(t) || json_integer_value(t) < 1 || json_integer_value(t) > max)
            return BAD("timeout_seconds", "'timeout_seconds' must be an integer from 1 to %u", max);
        c->timeout = (unsigned)json_integer_value(t);
    }
    json_t *mc = json_object_get(body, "max_cost_micros");
    if (!mc)
        return eph_api_error_set(e, 400, "invalid_request_error", "missing_parameter",
                                 "max_cost_micros", "'max_cost_micros' is required");
    if (!json_is_integer(mc) || json_integer_value(mc) <= 0)
        return BAD("max_cost_micros", "'max_cost_micros' must be a positive integer");
    c->max_cost = json_integer_value(mc);
    json_t *md = json_object_get(body, "metadata");
    if (md && (rc = check_metadata(md, e)))
        return rc;
    c->metadata = md;
    json_t *outputs = json_object_get(body, "outputs");
    if (outputs && (rc = check_outputs(outputs, e)))
        return rc;
    c->outputs = outputs;
    return 0;
}

int eph_api_validate_create(json_t *body, const struct eph_config *cfg, struct eph_api_create *c,
                            struct eph_api_error *e)
{
    memset(c, 0, sizeof(*c));
    c->shell = true;
    c->timeout = 120;
    if (!json_is_object(body))
        return eph_api_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                                 "the body must be a JSON object");
    int rc = check_known_fields(body, e);
    if (!rc)
        rc = check_scalars(body, cfg, c, e);
    json_t *files = json_object_get(body, "files");
    if (!rc && files)
        rc = check_files(files, &c->files, e);
    if (rc)
        eph_api_create_release(c);
    return rc;
}

/* An integer field from lo to hi into *out, left as it is when absent. */
static int want_uint(json_t *body, const char *name, unsigned lo, unsigned hi, unsigned *out,
                     struct eph_api_error *e)
{
    json_t *v = json_object_get(body, name);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return BAD(name, "'%s' must be an integer from %u to %u", name, lo, hi);
    *out = (unsigned)json_integer_value(v);
    return 0;
}

int eph_api_validate_sandbox_create(json_t *body, const struct eph_config *cfg,
                                    struct eph_api_create *c, struct eph_api_error *e)
{
    static const char *const known[] = {"image",           "web",
                                        "connections",     "files",
                                        "timeout_seconds", "idle_timeout_seconds",
                                        "max_cost_micros", "zero_data_retention",
                                        "metadata",        NULL};
    memset(c, 0, sizeof(*c));
    c->shell = true;
    c->timeout = EPH_API_SANDBOX_TIMEOUT_DEFAULT;
    c->idle_timeout = EPH_API_SANDBOX_TIMEOUT_DEFAULT;
    if (!json_is_object(body))
        return eph_api_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                                 "the body must be a JSON object");
    int rc = eph_api_check_fields(body, known, e);
    unsigned max = cfg->sandboxes.max_timeout_seconds;
    json_t *image = json_object_get(body, "image");
    if (!rc && image) {
        if (!plain_string(image) || !eph_image_name_valid(json_string_value(image)))
            return BAD("image", "'image' must be an image name (a-z, 0-9 and '-', at most 63)");
        c->image = json_string_value(image);
    }
    json_t *web = json_object_get(body, "web");
    json_t *conns = json_object_get(body, "connections");
    if (!rc && web)
        rc = check_web(web, c, e);
    if (!rc && conns && !(rc = check_connections(conns, e)))
        c->connections = conns;
    if (!rc)
        rc = want_bool(body, "zero_data_retention", &c->zdr, e);
    if (!rc)
        rc = want_uint(body, "timeout_seconds", 1, max, &c->timeout, e);
    if (!rc)
        rc = want_uint(body, "idle_timeout_seconds", 1, max, &c->idle_timeout, e);
    json_t *mc = json_object_get(body, "max_cost_micros");
    if (!rc && !mc)
        return eph_api_error_set(e, 400, "invalid_request_error", "missing_parameter",
                                 "max_cost_micros", "'max_cost_micros' is required");
    if (!rc && (!json_is_integer(mc) || json_integer_value(mc) <= 0))
        return BAD("max_cost_micros", "'max_cost_micros' must be a positive integer");
    if (!rc)
        c->max_cost = json_integer_value(mc);
    json_t *md = json_object_get(body, "metadata");
    if (!rc && md && !(rc = check_metadata(md, e)))
        c->metadata = md;
    json_t *files = json_object_get(body, "files");
    if (!rc && files)
        rc = check_files(files, &c->files, e);
    if (rc)
        eph_api_create_release(c);
    return rc;
}

void eph_api_create_release(struct eph_api_create *c)
{
    json_decref(c->files);
    c->files = NULL;
}

/* ---- query arguments ---- */

/* A decimal number without sign, spaces or leading '+': strtoull would take all three. */
static bool parse_decimal(const char *s, uint64_t max, uint64_t *out)
{
    if (!*s || strlen(s) > 20)
        return false;
    uint64_t n = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        unsigned d = (unsigned)(*p - '0');
        if (n > (max - d) / 10)
            return false;
        n = n * 10 + d;
    }
    *out = n;
    return true;
}

static int query_arg(const char *route, const char *name, const char *value,
                     struct eph_api_query *q, struct eph_api_error *e)
{
    bool sandboxes = strcmp(route, "/v1/sandboxes") == 0;
    bool list = sandboxes || strcmp(route, "/v1/runs") == 0;
    bool events = strcmp(route, "/v1/runs/{id}/events") == 0 ||
                  strcmp(route, "/v1/sandboxes/{id}/events") == 0;
    bool deliveries = strcmp(route, "/v1/webhooks/{id}/deliveries") == 0;
    uint64_t n;
    if (strcmp(route, "/v1/sandboxes/{id}/files") == 0 && strcmp(name, "path") == 0) {
        q->path = value;
        return 0;
    }
    if (sandboxes && strcmp(name, "after") == 0) {
        if (!eph_id_is_sandbox(value))
            return BAD("after", "'after' must be a sandbox id");
        q->after = value;
        return 0;
    }
    if (sandboxes && strcmp(name, "status") == 0) {
        /* A sandbox's status is a run status in other words (docs/SANDBOXES.md). */
        static const char *const names[][2] = {{"starting", "starting"},
                                               {"ready", "running"},
                                               {"stopped", "completed"},
                                               {"timed_out", "timed_out"},
                                               {"budget_exhausted", "budget_exhausted"},
                                               {"failed", "failed"}};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(value, names[i][0]) == 0) {
                q->status = names[i][1];
                return 0;
            }
        return BAD("status", "unknown status '%.32s'", value);
    }
    if ((list || deliveries) && strcmp(name, "limit") == 0) {
        if (!parse_decimal(value, 100, &n) || n < 1)
            return BAD("limit", "'limit' must be an integer from 1 to 100");
        q->limit = (unsigned)n;
        return 0;
    }
    if (deliveries && strcmp(name, "after") == 0) {
        if (!eph_id_is_event(value))
            return BAD("after", "'after' must be an event id (evt_...)");
        q->after = value;
        return 0;
    }
    if (list && strcmp(name, "after") == 0) {
        if (!eph_id_is_run(value))
            return BAD("after", "'after' must be a run id");
        q->after = value;
        return 0;
    }
    if (list && strcmp(name, "status") == 0) {
        enum eph_run_status s;
        if (eph_run_status_parse(value, &s))
            return BAD("status", "unknown status '%.32s'", value);
        q->status = value;
        return 0;
    }
    if (list && strncmp(name, "metadata[", 9) == 0) {
        /* metadata[KEY]=VALUE: KEY as a metadata key may be (docs/API.md), VALUE as a value.
         * KEY runs to the name's last ']', so a key may hold brackets of its own. */
        size_t nlen = strlen(name);
        size_t klen = nlen > 10 ? nlen - 10 : 0;
        if (name[nlen - 1] != ']' || klen < 1 || klen > EPH_API_METADATA_KEY_MAX)
            return BAD("metadata", "a metadata filter is metadata[KEY]=VALUE, KEY 1 to %d bytes",
                       EPH_API_METADATA_KEY_MAX);
        if (strlen(value) > EPH_API_METADATA_VALUE_MAX)
            return BAD("metadata", "a metadata filter's value is at most %d bytes",
                       EPH_API_METADATA_VALUE_MAX);
        if (q->nmeta == EPH_API_METADATA_FILTERS_MAX)
            return BAD("metadata", "at most %d metadata filters", EPH_API_METADATA_FILTERS_MAX);
        memcpy(q->meta_keys[q->nmeta], name + 9, klen);
        q->meta_keys[q->nmeta][klen] = '\0';
        q->meta_values[q->nmeta++] = value;
        return 0;
    }
    if (events && strcmp(name, "after") == 0) {
        if (!parse_decimal(value, UINT64_MAX, &q->after_seq))
            return BAD("after", "'after' must be an event sequence number");
        q->has_after_seq = true;
        return 0;
    }
    char shown[72];
    snprintf(shown, sizeof(shown), "%.64s", name);
    return eph_api_error_set(e, 400, "invalid_request_error", "unknown_parameter", shown,
                             "unknown query parameter '%s'", shown);
}

const char *eph_api_unknown_field(const json_t *body, const char *const *known)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v)
    {
        const char *const *k = known;
        while (*k && strcmp(*k, key) != 0)
            k++;
        if (!*k)
            return key;
    }
    return NULL;
}

int eph_api_validate_query(const char *route, const char *method, size_t n,
                           const char *const *names, const char *const *values,
                           struct eph_api_query *q, struct eph_api_error *e)
{
    memset(q, 0, sizeof(*q));
    q->limit = 20;
    /* The web UI's pages keep their own state in the query string; the server reads none of it. */
    if (strcmp(route, "web") == 0)
        return 0;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) {
                char shown[72];
                snprintf(shown, sizeof(shown), "%.64s", names[i]);
                return BAD(shown, "query parameter '%s' is given twice", shown);
            }
        int rc = query_arg(get ? route : "", names[i], values[i] ? values[i] : "", q, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- headers ---- */

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

int eph_api_validate_prefer(const char *header, unsigned max, unsigned *wait,
                            struct eph_api_error *e)
{
    *wait = 0;
    if (!header)
        return 0;
    bool seen = false;
    for (const char *p = header; *p;) {
        p = skip_ows(p);
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* A preference's name ends at '=', ';' or whitespace. */
        size_t name = strcspn(p, "=; \t,");
        if (name == 4 && strncasecmp(p, "wait", 4) == 0) {
            if (seen)
                return BAD("Prefer", "'Prefer' carries 'wait' twice");
            /* wait = N, with optional whitespace around '=' and after N. */
            const char *v = skip_ows(p + 4);
            const char *stop = p + len;
            char value[24];
            size_t vlen = 0;
            if (v < stop && *v == '=') {
                for (v = skip_ows(v + 1); v < stop && *v != ' ' && *v != '\t'; v++) {
                    if (vlen < sizeof(value) - 1)
                        value[vlen++] = *v;
                    else
                        vlen = sizeof(value); /* too long: refused below */
                }
            }
            value[vlen < sizeof(value) ? vlen : 0] = '\0';
            uint64_t n;
            if (skip_ows(v) != stop || vlen >= sizeof(value) || !parse_decimal(value, max, &n))
                return BAD("Prefer", "'Prefer: wait' must be an integer from 0 to %u", max);
            *wait = (unsigned)n;
            seen = true;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

bool eph_api_content_type_is_json(const char *ct)
{
    ct = skip_ows(ct);
    if (strncasecmp(ct, "application/json", 16) != 0)
        return false;
    const char *rest = skip_ows(ct + 16);
    return *rest == '\0' || *rest == ';';
}

/* ---- connections (docs/BROKER.md) ---- */

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

/* A connection's 'methods': a non-empty array of the methods allowed, each kept once; GET alone
 * when absent. */
static int conn_methods(json_t *ms, json_t *into, const char **param, char *err, size_t errlen)
{
    int rc = 0;
    if (!ms) {
        json_array_append_new(into, json_string("GET"));
        return 0;
    }
    if (!json_is_array(ms) || json_array_size(ms) == 0)
        FAIL("methods", "'methods' must be a non-empty array of GET, POST, PUT, PATCH, DELETE, "
                        "HEAD");
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
        json_array_foreach(into, x, have) dup |= strcmp(json_string_value(have), s) == 0;
        if (!dup)
            json_array_append_new(into, json_string(s));
    }
out:
    return rc;
}

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
    if ((rc = conn_methods(json_object_get(body, "methods"), c->methods, param, err, errlen)))
        goto out;

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

    c->query_names = json_array();
    json_t *qs = json_object_get(body, "query");
    if (qs) {
        if (!json_is_object(qs) || json_object_size(qs) > HEADERS_MAX)
            FAIL("query",
                 "'query' must be an object of at most %d parameter names to string values",
                 HEADERS_MAX);
        const char *qn;
        json_t *qv;
        json_object_foreach(qs, qn, qv)
        {
            /* Like a header: a token for the name (it goes into the URL escaped all the same),
             * a value without control characters; the message names the parameter only. */
            if (!valid_header_name(qn))
                FAIL("query", "query parameter name '%.64s' is not a valid name", qn);
            if (!json_is_string(qv) ||
                !valid_header_value(json_string_value(qv), json_string_length(qv)) ||
                json_string_length(qv) == 0)
                FAIL("query",
                     "the value of query parameter '%.64s' must be a non-empty string of at "
                     "most %d bytes without control characters",
                     qn, HEADER_VALUE_MAX);
            json_array_append_new(c->query_names, json_string(qn));
        }
    }
    if (!c->base_url)
        rc = -ENOMEM;
out:
    if (rc)
        eph_connection_release(c);
    return rc;
}
