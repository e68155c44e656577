/*
 * key_models.c - the real models a server offers when their provider's key is in its environment
 * and its configuration names no models (docs/MODELS.md, "Models from a key").
 *
 * A newcomer with OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY set runs their own prompts
 * without writing a configuration: serve adds these providers' models beside the replay model, with
 * the prices the providers list (each provider's table entry, agent/providers.h), and says so at
 * start-up. A configuration that has "models" is the operator's choice, and nothing is added to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent/providers.h"
#include "common/log.h"
#include "daemon/config.h"

static bool key_set(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    return v && v[0];
}

/* A model entry as the configuration file would give it by default (config.c), from its
 * provider's table entry (agent/providers.h: prices, limits, billing rules). */
static int fill(struct eph_model_config *m, const struct eph_http_provider *p,
                const struct eph_provider_model *k)
{
    memset(m, 0, sizeof(*m));
    m->id = strdup(k->id);
    m->provider = strdup(p->ops.name);
    m->api_key_env = strdup(p->key_env);
    m->upstream_model = strdup(k->upstream);
    if (!m->id || !m->provider || !m->api_key_env || !m->upstream_model)
        return -ENOMEM;
    m->input_micros_per_mtok = k->in;
    m->cached_input_micros_per_mtok = k->cached;
    m->output_micros_per_mtok = k->out;
    m->max_output_tokens = k->max_output;
    bool premium = p->cache_write == EPH_CACHE_WRITE_PREMIUM;
    m->cache_write_micros_per_mtok = k->write ? k->write : k->in;
    m->cache_write_1h_micros_per_mtok = premium ? 2 * k->in : k->in;
    m->input_overhead_tokens = p->input_overhead_tokens;
    m->stream = p->stream_by_default;
    return 0;
}

int eph_config_add_key_models(struct eph_config *cfg)
{
    if (cfg->models_configured)
        return 0;
    size_t want = 0;
    for (size_t i = 0; eph_http_providers[i]; i++) {
        const struct eph_http_provider *p = eph_http_providers[i];
        for (size_t j = 0; key_set(p->key_env) && j < p->nkey_models; j++)
            want += !eph_config_model(cfg, p->key_models[j].id);
    }
    if (!want)
        return 0;
    struct eph_model_config *ms = realloc(cfg->models, (cfg->nmodels + want) * sizeof(*ms));
    if (!ms)
        return -ENOMEM;
    cfg->models = ms;
    for (size_t i = 0; eph_http_providers[i]; i++) {
        const struct eph_http_provider *p = eph_http_providers[i];
        for (size_t j = 0; key_set(p->key_env) && j < p->nkey_models; j++) {
            const struct eph_provider_model *k = &p->key_models[j];
            if (eph_config_model(cfg, k->id))
                continue;
            int rc = fill(&cfg->models[cfg->nmodels], p, k);
            cfg->nmodels++; /* released with the configuration, whole or not */
            if (rc)
                return rc;
            EPH_INFO("config", "%s is set: offering the model '%s' beside the replay model",
                     p->key_env, k->id);
        }
    }
    return 0;
}
