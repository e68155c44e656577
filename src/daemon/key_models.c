/*
 * key_models.c - the real models a server offers when their provider's key is in its environment
 * and its configuration names no models (docs/MODELS.md, "Models from a key").
 *
 * A newcomer with OPENAI_API_KEY or ANTHROPIC_API_KEY set runs their own prompts without writing
 * a configuration: serve adds these providers' models beside the replay model, with the prices
 * the providers list (the same entries as ephemerald.example.json), and says so at start-up. A
 * configuration that has "models" is the operator's choice, and nothing is added to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "daemon/config.h"

struct key_model {
    const char *key_env;
    const char *id, *provider, *upstream;
    uint64_t in, cached, write, out; /* micros per million tokens */
    uint32_t max_output;
};

/* Prices as the providers list them (micro-dollars per million tokens). */
static const struct key_model key_models[] = {
    {"OPENAI_API_KEY", "openai/gpt-4.1", "openai", "gpt-4.1", 2000000, 500000, 0, 8000000, 4096},
    {"OPENAI_API_KEY", "openai/gpt-4.1-mini", "openai", "gpt-4.1-mini", 400000, 100000, 0, 1600000,
     4096},
    {"ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", 3000000,
     300000, 3750000, 15000000, 4096},
    {"ANTHROPIC_API_KEY", "anthropic/claude-haiku-4-5", "anthropic", "claude-haiku-4-5", 1000000,
     100000, 1250000, 5000000, 4096},
};

static bool key_set(const char *name)
{
    const char *v = getenv(name);
    return v && v[0];
}

static int fill(struct eph_model_config *m, const struct key_model *k)
{
    memset(m, 0, sizeof(*m));
    m->id = strdup(k->id);
    m->provider = strdup(k->provider);
    m->api_key_env = strdup(k->key_env);
    m->upstream_model = strdup(k->upstream);
    if (!m->id || !m->provider || !m->api_key_env || !m->upstream_model)
        return -ENOMEM;
    m->input_micros_per_mtok = k->in;
    m->cached_input_micros_per_mtok = k->cached;
    m->output_micros_per_mtok = k->out;
    m->max_output_tokens = k->max_output;
    bool anthropic = strcmp(k->provider, "anthropic") == 0;
    /* What a model entry of the configuration file would get by default (config.c). */
    m->cache_write_micros_per_mtok = k->write ? k->write : k->in;
    m->cache_write_1h_micros_per_mtok = anthropic ? 2 * k->in : k->in;
    m->input_overhead_tokens = anthropic ? 1024 : 256;
    m->stream = anthropic;
    return 0;
}

int eph_config_add_key_models(struct eph_config *cfg)
{
    if (cfg->models_configured)
        return 0;
    size_t want = 0, n = sizeof(key_models) / sizeof(key_models[0]);
    for (size_t i = 0; i < n; i++)
        want += key_set(key_models[i].key_env) && !eph_config_model(cfg, key_models[i].id);
    if (!want)
        return 0;
    struct eph_model_config *ms = realloc(cfg->models, (cfg->nmodels + want) * sizeof(*ms));
    if (!ms)
        return -ENOMEM;
    cfg->models = ms;
    for (size_t i = 0; i < n; i++) {
        const struct key_model *k = &key_models[i];
        if (!key_set(k->key_env) || eph_config_model(cfg, k->id))
            continue;
        int rc = fill(&cfg->models[cfg->nmodels], k);
        cfg->nmodels++; /* released with the configuration, whole or not */
        if (rc)
            return rc;
        EPH_INFO("config", "%s is set: offering the model '%s' beside the replay model", k->key_env,
                 k->id);
    }
    return 0;
}
