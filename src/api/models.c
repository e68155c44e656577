/*
 * models.c - GET /v1/models: the models this server offers, with their provider, prices and
 * limits, and whether each can take a run now. Never a key, a key's variable name or an endpoint's
 * credentials: what a caller needs to choose a model and its budget, nothing of the operator's.
 */
#include <microhttpd.h>
#include <string.h>

#include "api/api.h"
#include "run/service.h"

static json_t *model_json(struct eph_service *svc, const struct eph_model_config *m)
{
    /* A model this server could not set up (an unset key variable, an unreadable recording
     * folder) is listed, unavailable: runs on it are refused at create. */
    char why[256];
    bool available = !eph_model_unavailable(eph_service_model(svc, m->id), why, sizeof(why));
    const char *dflt = svc->cfg->default_model;
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:b, s:b, s:{s:I, s:I, s:I, s:I}, s:I}", "id", m->id, "object", "model",
        "provider", m->provider, "default", dflt && strcmp(dflt, m->id) == 0, "available",
        available, "prices", "input_micros_per_mtok", (json_int_t)m->input_micros_per_mtok,
        "output_micros_per_mtok", (json_int_t)m->output_micros_per_mtok,
        "cached_input_micros_per_mtok", (json_int_t)m->cached_input_micros_per_mtok,
        "cache_write_micros_per_mtok", (json_int_t)m->cache_write_micros_per_mtok,
        "max_output_tokens", (json_int_t)m->max_output_tokens);
    /* Only when it is unavailable; a reason that cannot be made fails the object, never drops
     * the key unseen (json_pack's "s*" would). */
    if (o && !available && json_object_set_new(o, "unavailable_reason", json_string(why))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

int eph_api_models_list(struct eph_api_req *req)
{
    struct eph_service *svc = req->svc;
    json_t *data = json_array();
    for (size_t i = 0; data && i < svc->cfg->nmodels; i++)
        if (json_array_append_new(data, model_json(svc, &svc->cfg->models[i]))) {
            json_decref(data);
            data = NULL;
        }
    if (!data)
        return eph_api_reply_error(req, 503, "api_error", "out_of_memory", NULL,
                                   "out of memory listing the models");
    return eph_api_reply_list(req, data, false);
}
