#include "daemon/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/model.h"
#include "agent/providers.h"
#include "broker/broker.h"
#include "daemon/commands.h"
#include "sandbox/sandbox.h"

int eph_config_set(char **field, const char *value)
{
    char *v = value ? strdup(value) : NULL;
    if (value && !v)
        return -ENOMEM;
    free(*field);
    *field = v;
    return 0;
}

static void model_release(struct eph_model_config *m)
{
    free(m->id);
    free(m->provider);
    free(m->base_url);
    free(m->api_key_env);
    free(m->transcripts);
    free(m->upstream_model);
}

int eph_config_defaults(struct eph_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = strdup("127.0.0.1:8080");
    cfg->db = strdup("var/ephemeral.db");
    cfg->log_format = strdup("text");
    cfg->log_level = strdup("info");
    cfg->retention_days = 30;
    cfg->reaper_interval_ms = 60000;
    cfg->max_concurrent_runs = 64;
    cfg->max_queued_per_org = 1000;
    cfg->max_timeout_seconds = 3600;
    cfg->max_body_bytes = 16u << 20;
    cfg->turn_limit = 30;
    cfg->shutdown_grace_seconds = 30;
    cfg->secret_key_file = strdup("var/secret.key");
    cfg->idempotency_ttl_seconds = 86400;
    cfg->sse_keepalive_seconds = 15;
    cfg->lease_seconds = 30;
    cfg->lease_renew_seconds = 10;
    cfg->db_pool_size = 4;
    cfg->on_unready = strdup("refuse");
    cfg->sandbox.backend = strdup("auto");
    cfg->sandbox.image = strdup(eph_default_image_path());
    cfg->sandbox.init_path = strdup(eph_default_init_path());
    eph_sandbox_limits_default(&cfg->sandbox.limits);
    cfg->sandbox.command_timeout_seconds = 60;
    cfg->sandbox.output_cap_bytes = 16384;
    cfg->sandbox.live_output_bytes = 65536;
    cfg->outputs.max_files = 100;
    cfg->outputs.max_bytes = 50u << 20;
    cfg->webhooks.timeout_seconds = 10;
    cfg->webhooks.retry_base_ms = 30000;
    cfg->webhooks.max_age_seconds = 86400;
    cfg->sandboxes.max_live_per_org = 10;
    cfg->sandboxes.max_timeout_seconds = 86400;
    cfg->sandboxes.max_upload_bytes = 64u << 20;
    cfg->sandboxes.max_download_bytes = 64u << 20;
    /* Resolved once the backend is known: a pooled namespaces sandbox costs under a megabyte
     * and no CPU while it waits; a pooled VM costs its memory (docs/SANDBOX.md). */
    cfg->sandbox.warm_pool = EPH_WARM_POOL_AUTO;
    cfg->prices.compute_micros_per_second = 240;
    cfg->prices.web_micros_per_request = 100;
    cfg->prices.web_micros_per_mib = 50;
    cfg->http.max_connections = 4096;
    cfg->http.max_connections_per_address = 256;
    cfg->http.request_head_seconds = 10;
    cfg->http.auth_failures_per_minute = 30;
    cfg->images.build_timeout_seconds = 1800;
    cfg->images.max_size_mib = 4096;
    cfg->images.max_concurrent_builds = 1;
    cfg->broker.max_request_bytes = 10u << 20;
    cfg->broker.max_response_bytes = 50u << 20;
    cfg->broker.request_timeout_seconds = 60;
    cfg->broker.max_tunnels_per_run = 16;
    cfg->broker.record_body_max_bytes = 256u << 10;
    cfg->default_model = strdup("openai/gpt-6-luna");
    cfg->models = calloc(1, sizeof(*cfg->models));
    if (!cfg->listen || !cfg->db || !cfg->log_format || !cfg->log_level || !cfg->sandbox.backend ||
        !cfg->sandbox.image || !cfg->sandbox.init_path || !cfg->default_model || !cfg->models ||
        !cfg->secret_key_file || !cfg->on_unready)
        return -ENOMEM;
    cfg->nmodels = 1;
    struct eph_model_config *m = &cfg->models[0];
    m->id = strdup("openai/gpt-6-luna");
    m->provider = strdup("replay");
    m->transcripts = strdup("examples");
    m->input_micros_per_mtok = 50000;
    m->output_micros_per_mtok = 200000;
    m->max_output_tokens = 1024;
    m->timeout_seconds = 120;
    if (!m->id || !m->provider || !m->transcripts)
        return -ENOMEM;
    return 0;
}

void eph_config_release(struct eph_config *cfg)
{
    free(cfg->listen);
    free(cfg->db);
    free(cfg->log_format);
    free(cfg->log_level);
    free(cfg->sandbox.backend);
    free(cfg->sandbox.image);
    free(cfg->sandbox.init_path);
    free(cfg->default_model);
    free(cfg->secret_key_file);
    free(cfg->node_id);
    free(cfg->node_url);
    free(cfg->on_unready);
    for (size_t i = 0; i < cfg->broker.nallow_private_cidrs; i++)
        free(cfg->broker.allow_private_cidrs[i]);
    free(cfg->broker.allow_private_cidrs);
    for (size_t i = 0; i < cfg->webhooks.nallow_private_cidrs; i++)
        free(cfg->webhooks.allow_private_cidrs[i]);
    free(cfg->webhooks.allow_private_cidrs);
    for (size_t i = 0; i < cfg->broker.nweb_private_cidrs; i++)
        free(cfg->broker.web_private_cidrs[i]);
    free(cfg->broker.web_private_cidrs);
    free(cfg->broker.extra_ca_file);
    for (size_t i = 0; i < cfg->nmodels; i++)
        model_release(&cfg->models[i]);
    free(cfg->models);
    memset(cfg, 0, sizeof(*cfg));
}

/* Reading the file: every key is looked up in a table; a key not in the table is an error. */

enum kind { K_STR, K_UINT, K_U64, K_SIZE };
struct key {
    const char *name;
    enum kind kind;
    size_t off;
    uint64_t max;
};

#define KS(n, f)                                                                                   \
    {                                                                                              \
        n, K_STR, offsetof(struct eph_config, f), 0                                                \
    }
#define KU(n, f, m)                                                                                \
    {                                                                                              \
        n, K_UINT, offsetof(struct eph_config, f), m                                               \
    }
#define KL(n, f, m)                                                                                \
    {                                                                                              \
        n, K_U64, offsetof(struct eph_config, f), m                                                \
    }
#define KZ(n, f, m)                                                                                \
    {                                                                                              \
        n, K_SIZE, offsetof(struct eph_config, f), m                                               \
    }

static const struct key top_keys[] = {
    KS("listen", listen),
    KS("db", db),
    KS("log_format", log_format),
    KS("log_level", log_level),
    KU("retention_days", retention_days, 36500),
    KU("retention_seconds", retention_seconds, 3153600000u),
    KU("reaper_interval_ms", reaper_interval_ms, 86400000),
    KU("max_concurrent_runs", max_concurrent_runs, 4096),
    KU("max_queued_runs_per_org", max_queued_per_org, 1000000),
    KU("max_concurrent_runs_per_org", max_running_per_org, 4096),
    KU("max_timeout_seconds", max_timeout_seconds, 86400),
    KZ("max_body_bytes", max_body_bytes, 1u << 30),
    KU("turn_limit", turn_limit, 1000),
    KU("shutdown_grace_seconds", shutdown_grace_seconds, 3600),
    KS("default_model", default_model),
    KS("secret_key_file", secret_key_file),
    KU("idempotency_ttl_seconds", idempotency_ttl_seconds, 30 * 86400),
    KU("sse_keepalive_seconds", sse_keepalive_seconds, 3600),
    KS("node_id", node_id),
    KS("node_url", node_url),
    KU("lease_seconds", lease_seconds, 86400),
    KU("lease_renew_seconds", lease_renew_seconds, 3600),
    KU("db_pool_size", db_pool_size, 256),
    KS("on_unready", on_unready),
    {NULL, K_STR, 0, 0},
};

static const struct key sandbox_keys[] = {
    KS("backend", sandbox.backend),
    KS("image", sandbox.image),
    KS("init_path", sandbox.init_path),
    KU("vcpus", sandbox.limits.vcpus, 64),
    KU("memory_mib", sandbox.limits.memory_mib, 1u << 20),
    KU("pids", sandbox.limits.pids, 1u << 20),
    KU("disk_mib", sandbox.limits.disk_mib, 1u << 20),
    KU("nofile", sandbox.limits.nofile, 1u << 20),
    KU("command_timeout_seconds", sandbox.command_timeout_seconds, 86400),
    KU("output_cap_bytes", sandbox.output_cap_bytes, 1u << 24),
    KU("live_output_bytes", sandbox.live_output_bytes, 1u << 24),
    KU("warm_pool", sandbox.warm_pool, 64),
    {NULL, K_STR, 0, 0},
};

static const struct key price_keys[] = {
    KL("compute_micros_per_second", prices.compute_micros_per_second, 1000000000),
    KL("web_micros_per_request", prices.web_micros_per_request, 1000000000),
    KL("web_micros_per_mib", prices.web_micros_per_mib, 1000000000),
    {NULL, K_STR, 0, 0},
};

static const struct key broker_keys[] = {
    KL("max_request_bytes", broker.max_request_bytes, 1ull << 40),
    KL("max_response_bytes", broker.max_response_bytes, 1ull << 40),
    KU("request_timeout_seconds", broker.request_timeout_seconds, 86400),
    KU("max_tunnels_per_run", broker.max_tunnels_per_run, 64),
    KL("record_body_max_bytes", broker.record_body_max_bytes, 16u << 20),
    {NULL, K_STR, 0, 0},
};

static const struct key http_keys[] = {
    KU("max_connections", http.max_connections, 65536),
    KU("max_connections_per_address", http.max_connections_per_address, 65536),
    KU("request_head_seconds", http.request_head_seconds, 3600),
    KU("auth_failures_per_minute", http.auth_failures_per_minute, 1000000),
    {NULL, K_STR, 0, 0},
};

static const struct key image_keys[] = {
    KU("build_timeout_seconds", images.build_timeout_seconds, 86400),
    KU("max_size_mib", images.max_size_mib, 1u << 20),
    KU("max_concurrent_builds", images.max_concurrent_builds, 64),
    {NULL, K_STR, 0, 0},
};

static const struct key output_keys[] = {
    KU("max_files", outputs.max_files, 10000),
    KL("max_bytes", outputs.max_bytes, 1ull << 32),
    {NULL, K_STR, 0, 0},
};

static const struct key sandboxes_keys[] = {
    KU("max_live_per_org", sandboxes.max_live_per_org, 100000),
    KU("max_timeout_seconds", sandboxes.max_timeout_seconds, 86400),
    KL("max_upload_bytes", sandboxes.max_upload_bytes, 1ull << 30),
    KL("max_download_bytes", sandboxes.max_download_bytes, 1ull << 30),
    {NULL, K_STR, 0, 0},
};

static const struct key webhook_keys[] = {
    KU("timeout_seconds", webhooks.timeout_seconds, 60),
    KU("retry_base_ms", webhooks.retry_base_ms, 3600000),
    KU("max_age_seconds", webhooks.max_age_seconds, 7 * 86400),
    {NULL, K_STR, 0, 0},
};

static int set_key(void *base, const struct key *k, json_t *v, const char *where, char *err,
                   size_t errlen)
{
    char *p = (char *)base + k->off;
    if (k->kind == K_STR) {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "config: '%s%s' must be a string", where, k->name);
            return -EINVAL;
        }
        return eph_config_set((char **)p, json_string_value(v));
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) > k->max) {
        snprintf(err, errlen, "config: '%s%s' must be an integer from 0 to %llu", where, k->name,
                 (unsigned long long)k->max);
        return -EINVAL;
    }
    uint64_t n = (uint64_t)json_integer_value(v);
    if (k->kind == K_UINT)
        *(unsigned *)p = (unsigned)n;
    else if (k->kind == K_U64)
        *(uint64_t *)p = n;
    else
        *(size_t *)p = (size_t)n;
    return 0;
}

static int load_object(void *base, const struct key *keys, json_t *obj, const char *where,
                       const char *const *skip, char *err, size_t errlen)
{
    const char *name;
    json_t *v;
    json_object_foreach(obj, name, v)
    {
        bool skipped = false;
        for (const char *const *s = skip; s && *s; s++)
            if (strcmp(*s, name) == 0)
                skipped = true;
        if (skipped)
            continue;
        const struct key *k;
        for (k = keys; k->name; k++)
            if (strcmp(k->name, name) == 0)
                break;
        if (!k->name) {
            snprintf(err, errlen, "config: unknown key '%s%s'", where, name);
            return -EINVAL;
        }
        int rc = set_key(base, k, v, where, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* A list of CIDRs (broker.allow_private_cidrs, broker.web_private_cidrs,
 * webhooks.allow_private_cidrs: key with its section's where), each one the broker can parse, into
 * *out (replacing what was there). */
static int load_cidrs_in(json_t *o, const char *where, const char *key, char ***out, size_t *nout,
                         char *err, size_t errlen)
{
    json_t *list = json_object_get(o, key);
    if (!list)
        return 0;
    if (!json_is_array(list) || json_array_size(list) > EPH_BROKER_MAX_ALLOW_CIDRS) {
        snprintf(err, errlen, "config: '%s%s' must be an array of at most %d CIDRs", where, key,
                 EPH_BROKER_MAX_ALLOW_CIDRS);
        return -EINVAL;
    }
    size_t n = json_array_size(list);
    char **v = calloc(n + 1, sizeof(char *));
    if (!v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        struct eph_cidr c;
        if (!json_is_string(e) || eph_cidr_parse(json_string_value(e), &c) != 0) {
            snprintf(err, errlen, "config: %s%s[%zu] is not a CIDR (a.b.c.d/n or an IPv6 prefix)",
                     where, key, i);
            for (size_t k = 0; k < i; k++)
                free(v[k]);
            free(v);
            return -EINVAL;
        }
        if (!(v[i] = strdup(json_string_value(e)))) {
            for (size_t k = 0; k < i; k++)
                free(v[k]);
            free(v);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < *nout; i++)
        free((*out)[i]);
    free(*out);
    *out = v;
    *nout = n;
    return 0;
}

static int load_cidrs(json_t *o, const char *key, char ***out, size_t *nout, char *err,
                      size_t errlen)
{
    return load_cidrs_in(o, "broker.", key, out, nout, err, errlen);
}

/* webhooks.*: the scalar keys and the endpoints' allow-list. */
static int load_webhooks(struct eph_config *cfg, json_t *o, char *err, size_t errlen)
{
    static const char *const special[] = {"allow_private_cidrs", NULL};
    int rc = load_object(cfg, webhook_keys, o, "webhooks.", special, err, errlen);
    if (!rc)
        rc =
            load_cidrs_in(o, "webhooks.", "allow_private_cidrs", &cfg->webhooks.allow_private_cidrs,
                          &cfg->webhooks.nallow_private_cidrs, err, errlen);
    return rc;
}

/* broker.*: the scalar keys, the two allow-lists (each entry a CIDR the broker can parse) and the
 * extra CA file (a path, or null). */
static int load_broker(struct eph_config *cfg, json_t *o, char *err, size_t errlen)
{
    static const char *const special[] = {"allow_private_cidrs", "web_private_cidrs",
                                          "extra_ca_file", NULL};
    int rc = load_object(cfg, broker_keys, o, "broker.", special, err, errlen);
    if (rc)
        return rc;
    json_t *ca = json_object_get(o, "extra_ca_file");
    if (ca && !json_is_null(ca)) {
        if (!json_is_string(ca) || !json_string_value(ca)[0]) {
            snprintf(err, errlen, "config: 'broker.extra_ca_file' must be a path or null");
            return -EINVAL;
        }
        if (eph_config_set(&cfg->broker.extra_ca_file, json_string_value(ca)))
            return -ENOMEM;
    }
    rc = load_cidrs(o, "allow_private_cidrs", &cfg->broker.allow_private_cidrs,
                    &cfg->broker.nallow_private_cidrs, err, errlen);
    if (!rc)
        rc = load_cidrs(o, "web_private_cidrs", &cfg->broker.web_private_cidrs,
                        &cfg->broker.nweb_private_cidrs, err, errlen);
    return rc;
}

/* Cache writes and the input overhead as each provider bills them (docs/MODELS.md): Anthropic
 * bills a 5-minute cache write at 1.25 times the input price and a 1-hour one at twice it, and
 * adds a tool-use system prompt of a few hundred tokens (at most 530 in its published table);
 * OpenAI bills cache writes as plain input and adds a little framing per message and tool. */
/* What a model entry leaves out, from its provider's table entry (agent/providers.h): the cache
 * write prices by the provider's rule, and the input its framing adds. The replay model has none.
 */
static void model_defaults(struct eph_model_config *m, bool overhead_set)
{
    const struct eph_http_provider *p = eph_http_provider_find(m->provider);
    bool premium = p && p->cache_write == EPH_CACHE_WRITE_PREMIUM;
    uint64_t in = m->input_micros_per_mtok;
    if (!m->cache_write_micros_per_mtok)
        m->cache_write_micros_per_mtok = premium ? in + (in + 3) / 4 : in;
    if (!m->cache_write_1h_micros_per_mtok)
        m->cache_write_1h_micros_per_mtok = premium ? 2 * in : in;
    if (!overhead_set)
        m->input_overhead_tokens = p ? p->input_overhead_tokens : 0;
}

static int load_model(struct eph_model_config *m, json_t *o, char *err, size_t errlen)
{
    static const char *const strs[] = {"id",          "provider",    "base_url",
                                       "api_key_env", "transcripts", "upstream_model"};
    char **fields[] = {&m->id,          &m->provider,    &m->base_url,
                       &m->api_key_env, &m->transcripts, &m->upstream_model};
    static const char *const nums[] = {
        "input_micros_per_mtok",          "output_micros_per_mtok",
        "cached_input_micros_per_mtok",   "cache_write_micros_per_mtok",
        "cache_write_1h_micros_per_mtok", "input_overhead_tokens"};
    uint64_t *nfields[] = {&m->input_micros_per_mtok,          &m->output_micros_per_mtok,
                           &m->cached_input_micros_per_mtok,   &m->cache_write_micros_per_mtok,
                           &m->cache_write_1h_micros_per_mtok, &m->input_overhead_tokens};
    bool overhead_set = false;
    m->max_output_tokens = 1024;
    m->timeout_seconds = 120;
    const char *name;
    json_t *v;
    json_object_foreach(o, name, v)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
            if (strcmp(name, strs[i]) == 0) {
                if (!json_is_string(v)) {
                    snprintf(err, errlen, "config: models[].%s must be a string", name);
                    return -EINVAL;
                }
                if (eph_config_set(fields[i], json_string_value(v)))
                    return -ENOMEM;
                known = true;
            }
        }
        for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
            if (strcmp(name, nums[i]) == 0) {
                if (!json_is_integer(v) || json_integer_value(v) < 0) {
                    snprintf(err, errlen, "config: models[].%s must be a non-negative integer",
                             name);
                    return -EINVAL;
                }
                *nfields[i] = (uint64_t)json_integer_value(v);
                overhead_set |= nfields[i] == &m->input_overhead_tokens;
                known = true;
            }
        }
        if (strcmp(name, "max_output_tokens") == 0 || strcmp(name, "timeout_seconds") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 1000000) {
                snprintf(err, errlen, "config: models[].%s must be an integer from 1 to 1000000",
                         name);
                return -EINVAL;
            }
            if (name[0] == 'm')
                m->max_output_tokens = (uint32_t)json_integer_value(v);
            else
                m->timeout_seconds = (uint32_t)json_integer_value(v);
            known = true;
        }
        if (strcmp(name, "stream") == 0) {
            if (!json_is_boolean(v)) {
                snprintf(err, errlen, "config: models[].stream must be true or false");
                return -EINVAL;
            }
            m->stream = json_is_true(v);
            known = true;
        }
        if (!known) {
            snprintf(err, errlen, "config: unknown key 'models[].%s'", name);
            return -EINVAL;
        }
    }
    if (!m->id || !m->provider) {
        snprintf(err, errlen, "config: every model needs 'id' and 'provider'");
        return -EINVAL;
    }
    if (!eph_model_provider(m->provider)) {
        snprintf(err, errlen, "config: model '%s' has unknown provider '%s'", m->id, m->provider);
        return -EINVAL;
    }
    const struct eph_http_provider *prov = eph_http_provider_find(m->provider);
    if (m->stream && !(prov && (prov->caps & EPH_PROVIDER_STREAM))) {
        snprintf(err, errlen, "config: model '%s': provider '%s' cannot stream", m->id,
                 m->provider);
        return -EINVAL;
    }
    if (!m->cached_input_micros_per_mtok)
        m->cached_input_micros_per_mtok = m->input_micros_per_mtok;
    model_defaults(m, overhead_set);
    return 0;
}

static int load_root(struct eph_config *cfg, json_t *root, const char *path, char *err,
                     size_t errlen);

int eph_config_load_file(struct eph_config *cfg, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "config: %s:%d: %s", path, je.line, je.text);
        return -EINVAL;
    }
    return load_root(cfg, root, path, err, errlen);
}

int eph_config_load_buffer(struct eph_config *cfg, const char *data, size_t len, const char *name,
                           char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "config: %s:%d: %s", name, je.line, je.text);
        return -EINVAL;
    }
    return load_root(cfg, root, name, err, errlen);
}

/* Applies a parsed configuration file (consumes root). */
static int load_root(struct eph_config *cfg, json_t *root, const char *path, char *err,
                     size_t errlen)
{
    int rc = -EINVAL;
    if (!json_is_object(root)) {
        snprintf(err, errlen, "config: %s: the top level must be an object", path);
        goto out;
    }
    static const char *const nested[] = {"sandbox", "prices",  "models",    "broker",   "http",
                                         "images",  "outputs", "sandboxes", "webhooks", NULL};
    if ((rc = load_object(cfg, top_keys, root, "", nested, err, errlen)))
        goto out;
    /* The sections that are plain keys. */
    static const struct {
        const char *name, *where;
        const struct key *keys;
    } sections[] = {
        {"sandbox", "sandbox.", sandbox_keys}, {"prices", "prices.", price_keys},
        {"http", "http.", http_keys},          {"images", "images.", image_keys},
        {"outputs", "outputs.", output_keys},  {"sandboxes", "sandboxes.", sandboxes_keys},
    };
    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++) {
        json_t *o = json_object_get(root, sections[i].name);
        if (o && (!json_is_object(o) || (rc = load_object(cfg, sections[i].keys, o,
                                                          sections[i].where, NULL, err, errlen)))) {
            if (!rc)
                snprintf(err, errlen, "config: '%s' must be an object", sections[i].name);
            rc = -EINVAL;
            goto out;
        }
    }
    json_t *br = json_object_get(root, "broker");
    if (br && (!json_is_object(br) || (rc = load_broker(cfg, br, err, errlen)))) {
        if (!rc)
            snprintf(err, errlen, "config: 'broker' must be an object");
        rc = -EINVAL;
        goto out;
    }
    json_t *wh = json_object_get(root, "webhooks");
    if (wh && (!json_is_object(wh) || (rc = load_webhooks(cfg, wh, err, errlen)))) {
        if (!rc)
            snprintf(err, errlen, "config: 'webhooks' must be an object");
        rc = -EINVAL;
        goto out;
    }
    json_t *models = json_object_get(root, "models");
    if (models) {
        if (!json_is_array(models) || json_array_size(models) == 0) {
            snprintf(err, errlen, "config: 'models' must be a non-empty array");
            rc = -EINVAL;
            goto out;
        }
        size_t n = json_array_size(models);
        struct eph_model_config *ms = calloc(n, sizeof(*ms));
        if (!ms) {
            rc = -ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *o = json_array_get(models, i);
            if (!json_is_object(o)) {
                snprintf(err, errlen, "config: models[%zu] must be an object", i);
                rc = -EINVAL;
            } else {
                rc = load_model(&ms[i], o, err, errlen);
            }
            if (rc) {
                for (size_t j = 0; j <= i; j++)
                    model_release(&ms[j]);
                free(ms);
                goto out;
            }
        }
        for (size_t i = 0; i < cfg->nmodels; i++)
            model_release(&cfg->models[i]);
        free(cfg->models);
        cfg->models = ms;
        cfg->nmodels = n;
        cfg->models_configured = true;
    }
    if (strcmp(cfg->on_unready, "refuse") != 0 && strcmp(cfg->on_unready, "serve") != 0) {
        snprintf(err, errlen, "config: 'on_unready' must be \"refuse\" or \"serve\"");
        rc = -EINVAL;
        goto out;
    }
    if (!eph_config_model(cfg, cfg->default_model)) {
        snprintf(err, errlen, "config: default_model '%s' is not one of the models",
                 cfg->default_model);
        rc = -EINVAL;
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static int env_uint(const char *name, unsigned *out, unsigned max, char *err, size_t errlen)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (errno || *end || n > max) {
        snprintf(err, errlen, "%s must be an integer from 0 to %u", name, max);
        return -EINVAL;
    }
    *out = (unsigned)n;
    return 0;
}

int eph_config_load_env(struct eph_config *cfg, char *err, size_t errlen)
{
    static const struct {
        const char *env;
        size_t off;
    } strs[] = {
        {"EPHEMERALD_LISTEN", offsetof(struct eph_config, listen)},
        {"EPHEMERALD_DB", offsetof(struct eph_config, db)},
        {"EPHEMERALD_SANDBOX", offsetof(struct eph_config, sandbox.backend)},
        {"EPHEMERALD_IMAGE", offsetof(struct eph_config, sandbox.image)},
        {"EPHEMERALD_LOG_FORMAT", offsetof(struct eph_config, log_format)},
        {"EPHEMERALD_LOG_LEVEL", offsetof(struct eph_config, log_level)},
        {"EPHEMERALD_DEFAULT_MODEL", offsetof(struct eph_config, default_model)},
        {"EPHEMERALD_SECRET_KEY_FILE", offsetof(struct eph_config, secret_key_file)},
        {"EPHEMERALD_NODE_ID", offsetof(struct eph_config, node_id)},
        {"EPHEMERALD_NODE_URL", offsetof(struct eph_config, node_url)},
    };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        const char *v = getenv(strs[i].env);
        if (v && *v && eph_config_set((char **)((char *)cfg + strs[i].off), v))
            return -ENOMEM;
    }
    int rc =
        env_uint("EPHEMERALD_MAX_CONCURRENT_RUNS", &cfg->max_concurrent_runs, 4096, err, errlen);
    if (!rc)
        rc = env_uint("EPHEMERALD_RETENTION_DAYS", &cfg->retention_days, 36500, err, errlen);
    return rc;
}
