/*
 * model.c - the table of model providers, and what every provider's response needs to be freed.
 * Adding a provider is adding its file and one line here.
 */
#include "agent/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/providers.h"
#include "common/log.h"

static const struct eph_model_ops *const providers[] = {
    &eph_model_openai_ops,
    &eph_model_anthropic_ops,
    &eph_model_replay_ops,
};

const struct eph_model_ops *eph_model_provider(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof(providers) / sizeof(providers[0]); i++)
        if (strcmp(providers[i]->name, name) == 0)
            return providers[i];
    return NULL;
}

void eph_model_response_release(struct eph_model_response *r)
{
    if (!r)
        return;
    free(r->content);
    for (size_t i = 0; i < r->ncalls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->finish_reason);
    memset(r, 0, sizeof(*r));
}

/* ---- shared by the HTTP providers ---- */

int eph_model_set_stream(struct eph_model *m, bool stream)
{
    if (!m || (m->ops != &eph_model_openai_ops && m->ops != &eph_model_anthropic_ops))
        return -EINVAL;
    ((struct eph_http_model *)m)->stream = stream;
    return 0;
}

int eph_http_model_init(struct eph_http_model *m, const struct eph_model_ops *ops,
                        const struct eph_model_config *cfg, const char *default_base,
                        const char *path, bool strip_prefix, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    m->base.ops = ops;
    m->base.cfg = cfg;
    int rc = eph_http_global_init();
    if (rc) {
        snprintf(err, errlen, "%s: cannot initialise libcurl", ops->name);
        return rc;
    }
    const char *base = cfg->base_url && cfg->base_url[0] ? cfg->base_url : default_base;
    if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
        snprintf(err, errlen, "model '%s': base_url must start with http:// or https://",
                 cfg->id ? cfg->id : "");
        return -EINVAL;
    }
    m->url = eph_http_join_url(base, path);
    const char *name = cfg->upstream_model && cfg->upstream_model[0] ? cfg->upstream_model
                                                                     : (cfg->id ? cfg->id : "");
    if (strip_prefix && !(cfg->upstream_model && cfg->upstream_model[0])) {
        const char *slash = strrchr(name, '/');
        if (slash && slash[1])
            name = slash + 1;
    }
    m->upstream = strdup(name);
    if (cfg->api_key_env && cfg->api_key_env[0]) {
        const char *k = getenv(cfg->api_key_env);
        if (k && k[0]) {
            m->key = strdup(k);
            if (!m->key)
                goto nomem;
        } else {
            /* Not fatal: the server may start with models it cannot reach yet; each call then
             * fails with a message that names the variable (never a value). */
            m->key_missing = true;
            EPH_WARN("model", "model '%s': environment variable '%s' is not set",
                     cfg->id ? cfg->id : "", cfg->api_key_env);
        }
    }
    if (!m->url || !m->upstream)
        goto nomem;
    m->timeout_ms = (cfg->timeout_seconds ? cfg->timeout_seconds : 120) * 1000u;
    return 0;
nomem:
    eph_http_model_release(m);
    snprintf(err, errlen, "%s: out of memory", ops->name);
    return -ENOMEM;
}

void eph_http_model_release(struct eph_http_model *m)
{
    if (m->key) {
        explicit_bzero(m->key, strlen(m->key));
        free(m->key);
    }
    free(m->url);
    free(m->upstream);
    m->key = m->url = m->upstream = NULL;
}

uint32_t eph_model_max_tokens(const struct eph_model_config *cfg,
                              const struct eph_model_request *req)
{
    uint32_t n = req->max_tokens;
    if (cfg->max_output_tokens && (n == 0 || n > cfg->max_output_tokens))
        n = cfg->max_output_tokens;
    return n ? n : 1024;
}

unsigned eph_model_count_calls(const json_t *messages)
{
    unsigned n = 0;
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        json_t *calls = json_object_get(msg, "tool_calls");
        if (json_is_array(calls))
            n += (unsigned)json_array_size(calls);
    }
    return n;
}

uint64_t eph_model_json_tokens(const json_t *v)
{
    if (json_is_integer(v)) {
        json_int_t x = json_integer_value(v);
        return x > 0 ? (uint64_t)x : 0;
    }
    if (json_is_real(v)) {
        double x = json_real_value(v);
        /* Below 2^63, so the conversion is defined; fractions are not counts. */
        if (x >= 0 && x < 9.2e18 && x == (double)(uint64_t)x)
            return (uint64_t)x;
    }
    return 0;
}

int eph_model_add_call(struct eph_model_response *r, const char *id, const char *name,
                       const char *arguments, unsigned n)
{
    if (r->ncalls >= EPH_MODEL_MAX_CALLS)
        return -EMSGSIZE;
    struct eph_tool_call *calls = realloc(r->calls, (r->ncalls + 1) * sizeof(*calls));
    if (!calls)
        return -ENOMEM;
    r->calls = calls;
    struct eph_tool_call *c = &calls[r->ncalls];
    char made[32];
    if (!id || !id[0]) {
        snprintf(made, sizeof(made), "call_%u", n);
        id = made;
    }
    c->id = strdup(id);
    c->name = strdup(name ? name : "");
    c->arguments = strdup(arguments ? arguments : "{}");
    if (!c->id || !c->name || !c->arguments) {
        free(c->id);
        free(c->name);
        free(c->arguments);
        return -ENOMEM;
    }
    r->ncalls++;
    return 0;
}
