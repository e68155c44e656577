/*
 * model.c - the table of model providers, one metered call with its retries, and the helpers
 * every provider's parser shares. Adding a provider is adding its file and one line here.
 */
#include "agent/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/providers.h"
#include "common/clock.h"
#include "common/log.h"
#include "ledger/budget.h"

/* The HTTP providers (providers.h); replay is the one other. */
const struct eph_http_provider *const eph_http_providers[] = {
    &eph_provider_openai,
    &eph_provider_openai_compatible,
    &eph_provider_anthropic,
    &eph_provider_gemini,
    NULL,
};

const struct eph_http_provider *eph_http_provider_find(const char *name)
{
    for (size_t i = 0; name && eph_http_providers[i]; i++)
        if (strcmp(eph_http_providers[i]->ops.name, name) == 0)
            return eph_http_providers[i];
    return NULL;
}

const struct eph_model_ops *eph_model_provider(const char *name)
{
    const struct eph_http_provider *p = eph_http_provider_find(name);
    if (p)
        return &p->ops;
    return name && strcmp(name, eph_model_replay_ops.name) == 0 ? &eph_model_replay_ops : NULL;
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
    free(r->refusal);
    memset(r, 0, sizeof(*r));
}

const char *eph_model_outcome_name(enum eph_model_outcome o)
{
    switch (o) {
    case EPH_ATTEMPT_OK:
        return "ok";
    case EPH_ATTEMPT_HTTP_ERROR:
        return "http_error";
    case EPH_ATTEMPT_CUT:
        return "cut";
    case EPH_ATTEMPT_TIMEOUT:
        return "timeout";
    case EPH_ATTEMPT_CANCELLED:
        return "cancelled";
    case EPH_ATTEMPT_NOT_SENT:
        return "not_sent";
    }
    return "cut";
}

/* ---- one call: metered attempts ---- */

int eph_model_input_bound(struct eph_model *m, const struct eph_model_request *req,
                          uint64_t *tokens, char *err, size_t errlen)
{
    if (m->ops->input_bound)
        return m->ops->input_bound(m, req, tokens, err, errlen);
    /* Every token stands for at least one byte of what it encodes, and the JSON of the
     * conversation holds every byte the model reads, plus quotes and escapes. */
    size_t n = json_dumpb(req->messages, NULL, 0, JSON_COMPACT);
    if (req->tools)
        n += json_dumpb(req->tools, NULL, 0, JSON_COMPACT);
    *tokens = eph_tokens_add((uint64_t)n, m->cfg->input_overhead_tokens);
    return 0;
}

static enum eph_model_outcome classify(int rc, const struct eph_model_response *r)
{
    if (rc == 0)
        return EPH_ATTEMPT_OK;
    if (rc == -ECANCELED)
        return EPH_ATTEMPT_CANCELLED;
    if (rc == -ETIMEDOUT)
        return EPH_ATTEMPT_TIMEOUT;
    if (r->http_status && (r->http_status < 200 || r->http_status > 299))
        return EPH_ATTEMPT_HTTP_ERROR;
    if (!r->sent)
        return EPH_ATTEMPT_NOT_SENT;
    return EPH_ATTEMPT_CUT;
}

int eph_model_call(struct eph_model *m, const struct eph_model_request *req,
                   const struct eph_model_meter *meter, struct eph_model_response *resp, char *err,
                   size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    struct eph_model_request at = *req;
    uint32_t wanted = eph_model_max_tokens(m->cfg, req);
    int rc = 0;
    for (unsigned n = 1;; n++) {
        if (req->cancel && atomic_load(req->cancel)) {
            snprintf(err, errlen, "%s: call cancelled", m->ops->name);
            return -ECANCELED;
        }
        uint64_t now = eph_clock_mono_ns();
        if (req->deadline_ns && now >= req->deadline_ns) {
            snprintf(err, errlen, "%s: deadline passed before the call", m->ops->name);
            return -ETIMEDOUT;
        }
        at.max_tokens = wanted;
        at.deadline_ns = req->deadline_ns;
        uint64_t bound = 0;
        rc = eph_model_input_bound(m, &at, &bound, err, errlen);
        if (rc)
            return rc; /* err says why: the request cannot be built */
        if (meter) {
            rc =
                meter->authorise(meter->ctx, n, now, bound, false, &at.max_tokens, &at.deadline_ns);
            if (rc) {
                snprintf(err, errlen, "the budget left cannot cover model attempt %u", n);
                return rc;
            }
        }
        unsigned done = n;
        eph_model_response_release(resp);
        uint64_t t0 = eph_clock_mono_ns();
        rc = m->ops->call(m, &at, resp, err, errlen);
        resp->attempts = done;
        resp->usage_missing = rc == 0 && !resp->usage_final;
        struct eph_model_attempt a = {.number = n,
                                      .rc = rc,
                                      .err = err,
                                      .outcome = classify(rc, resp),
                                      .max_tokens = at.max_tokens,
                                      .input_bound = bound,
                                      .latency_ns = eph_clock_mono_ns() - t0,
                                      .resp = resp};
        if (meter)
            meter->record(meter->ctx, &a);
        if (rc == 0 || !resp->retryable || n >= EPH_MODEL_MAX_ATTEMPTS)
            break;
        uint64_t wait = resp->retry_at_once ? 0 : eph_http_backoff_ms(n, resp->retry_after_ms);
        uint64_t wake = eph_clock_mono_ns() + wait * 1000000u;
        if (req->deadline_ns && wake >= req->deadline_ns) {
            EPH_INFO("model", "%s: no time left to retry after attempt %u (wait %llu ms)",
                     m->ops->name, n, (unsigned long long)wait);
            break;
        }
        uint32_t probe = wanted;
        uint64_t dl = req->deadline_ns;
        if (meter && meter->authorise(meter->ctx, n + 1, wake, bound, true, &probe, &dl)) {
            EPH_INFO("model", "%s: the budget cannot cover a retry after attempt %u", m->ops->name,
                     n);
            break;
        }
        EPH_INFO("model", "%s; attempt %u of %u, retrying in %llu ms",
                 err[0] && !req->zdr ? err : m->ops->name, n, EPH_MODEL_MAX_ATTEMPTS,
                 (unsigned long long)wait);
        int src = eph_http_sleep(wait, req->cancel);
        if (src) {
            snprintf(err, errlen, "%s: call cancelled", m->ops->name);
            return src;
        }
    }
    if (rc && resp->attempts > 1) {
        size_t len = strlen(err);
        snprintf(err + len, errlen - len, " (after %u attempts)", resp->attempts);
    }
    return rc;
}

/* ---- shared by the HTTP providers ---- */

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

int eph_model_retry_class(long status, const char *body, size_t len)
{
    if (!eph_http_status_retryable(status))
        return 0;
    if (status != 429 || !body || !len)
        return 1;
    /* A quota or billing error will not clear by waiting: OpenAI's insufficient_quota (as type
     * or code), and the like from compatible servers. */
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    json_t *e = json_object_get(root, "error");
    const char *words[] = {json_string_value(json_object_get(e, "type")),
                           json_string_value(json_object_get(e, "code")),
                           json_string_value(json_object_get(root, "code"))};
    int retry = 1;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (words[i] &&
            (strcmp(words[i], "insufficient_quota") == 0 ||
             strcmp(words[i], "billing_error") == 0 || strcmp(words[i], "quota_exceeded") == 0))
            retry = 0;
    json_decref(root);
    return retry;
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

void eph_model_response_drop_answer(struct eph_model_response *r)
{
    struct eph_model_response keep = *r;
    keep.content = keep.finish_reason = keep.refusal = NULL;
    keep.calls = NULL;
    keep.ncalls = 0;
    eph_model_response_release(r);
    *r = keep;
}

char *eph_model_arguments(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (!v || json_is_null(v))
        return strdup("{}");
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

const char *eph_json_str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}
