/*
 * http_model.c - what every HTTP provider shares (providers.h): opening a model from its entry,
 * one attempt over http_client.c (the key, the headers, streaming or not, the idle timeout, the
 * connection pool), and the outcome of that attempt for eph_model_call's metering and retries.
 * The entry only builds the body, parses the answer and classifies the errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "common/log.h"
#include "ledger/budget.h"

#define SSE_LINE_MAX (1u << 20)

const struct eph_http_provider *eph_http_provider_of(const struct eph_model *m)
{
    if (!m || m->ops->open != eph_http_open)
        return NULL;
    return ((const struct eph_http_model *)m)->prov;
}

bool eph_model_unavailable(const struct eph_model *m, char *why, size_t whylen)
{
    if (!m) {
        snprintf(why, whylen, "it could not be set up (the server's log says why)");
        return true;
    }
    if (eph_http_provider_of(m) && ((const struct eph_http_model *)m)->key_missing) {
        snprintf(why, whylen, "its key variable %s is not set on the server", m->cfg->api_key_env);
        return true;
    }
    return false;
}

int eph_model_set_stream(struct eph_model *m, bool stream)
{
    const struct eph_http_provider *p = eph_http_provider_of(m);
    if (!p || (stream && !(p->caps & EPH_PROVIDER_STREAM)))
        return -EINVAL;
    ((struct eph_http_model *)m)->stream = stream;
    return 0;
}

/* base + path, "{model}" in path replaced by the upstream name; NULL on -ENOMEM. */
static char *model_url(const char *base, const char *path, const char *upstream)
{
    const char *at = strstr(path, "{model}");
    if (!at)
        return eph_http_join_url(base, path);
    char *p = NULL;
    if (asprintf(&p, "%.*s%s%s", (int)(at - path), path, upstream, at + 7) < 0)
        return NULL;
    char *url = eph_http_join_url(base, p);
    free(p);
    return url;
}

static void http_model_release(struct eph_http_model *m)
{
    if (m->key) {
        explicit_bzero(m->key, strlen(m->key));
        free(m->key);
    }
    free(m->url);
    free(m->stream_url);
    free(m->upstream);
    eph_http_pool_free(m->pool);
    free(m);
}

/* The upstream name: cfg->upstream_model, else the id, after its last '/' when strip. */
static const char *upstream_name(const struct eph_model_config *cfg, bool strip)
{
    if (cfg->upstream_model && cfg->upstream_model[0])
        return cfg->upstream_model;
    const char *name = cfg->id ? cfg->id : "";
    const char *slash = strrchr(name, '/');
    return strip && slash && slash[1] ? slash + 1 : name;
}

static int read_key(struct eph_http_model *m, const struct eph_model_config *cfg)
{
    if (!cfg->api_key_env || !cfg->api_key_env[0])
        return 0;
    const char *k = getenv(cfg->api_key_env);
    if (k && k[0]) {
        m->key = strdup(k);
        return m->key ? 0 : -ENOMEM;
    }
    /* Not fatal: the server may start with models it cannot reach yet; each call then fails with
     * a message that names the variable (never a value). */
    m->key_missing = true;
    EPH_WARN("model", "model '%s': environment variable '%s' is not set", cfg->id ? cfg->id : "",
             cfg->api_key_env);
    return 0;
}

int eph_http_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                  size_t errlen)
{
    const struct eph_http_provider *p = eph_http_provider_find(cfg->provider);
    if (!p) {
        snprintf(err, errlen, "model '%s': not an http provider", cfg->id ? cfg->id : "");
        return -EINVAL;
    }
    if (eph_http_global_init()) {
        snprintf(err, errlen, "%s: cannot initialise libcurl", p->ops.name);
        return -EIO;
    }
    const char *base = cfg->base_url && cfg->base_url[0] ? cfg->base_url : p->default_base;
    if (!base) {
        snprintf(err, errlen, "model '%s': provider %s needs a base_url", cfg->id ? cfg->id : "",
                 p->ops.name);
        return -EINVAL;
    }
    if (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) {
        snprintf(err, errlen, "model '%s': base_url must start with http:// or https://",
                 cfg->id ? cfg->id : "");
        return -EINVAL;
    }
    struct eph_http_model *m = calloc(1, sizeof(*m));
    if (!m)
        goto nomem;
    m->base.ops = &p->ops;
    m->base.cfg = cfg;
    m->prov = p;
    m->upstream = strdup(upstream_name(cfg, p->strip_prefix));
    if (!m->upstream || read_key(m, cfg))
        goto nomem;
    m->url = model_url(base, p->path, m->upstream);
    m->stream_url = model_url(base, p->stream_path ? p->stream_path : p->path, m->upstream);
    m->pool = eph_http_pool_new(EPH_HTTP_MODEL_MAX_IDLE);
    if (!m->url || !m->stream_url || !m->pool)
        goto nomem;
    m->idle_timeout_ms = (cfg->timeout_seconds ? cfg->timeout_seconds : 120) * 1000u;
    atomic_init(&m->alt, false);
    if (p->opened)
        p->opened(m);
    *out = &m->base;
    return 0;
nomem:
    if (m)
        http_model_release(m);
    snprintf(err, errlen, "%s: out of memory", p->ops.name);
    return -ENOMEM;
}

void eph_http_free(struct eph_model *base)
{
    if (base)
        http_model_release((struct eph_http_model *)base);
}

/* The exact body, with the model's current wire choices: its bytes (every token stands for at
 * least one byte of the text it encodes, and the body holds every byte the model reads) plus the
 * model's input_overhead_tokens. */
int eph_http_input_bound(struct eph_model *base, const struct eph_model_request *req,
                         uint64_t *tokens, char *err, size_t errlen)
{
    struct eph_http_model *m = (struct eph_http_model *)base;
    int rc;
    char *body = m->prov->build(m, req, &rc, err, errlen);
    if (!body)
        return rc;
    *tokens = eph_tokens_add((uint64_t)strlen(body), base->cfg->input_overhead_tokens);
    free(body);
    return 0;
}

/* An event stream through the provider's handler; -EAGAIN (an error event) becomes -EIO and
 * marks the attempt retryable. */
static int parse_stream(const struct eph_http_provider *p, void *ctx, const char *data, size_t len,
                        bool *retryable, char *err, size_t errlen)
{
    const struct eph_parse_head *h = ctx;
    int rc = eph_sse_parse(data, len, SSE_LINE_MAX, p->on_event, ctx);
    if (rc == EPH_SSE_STOP)
        rc = 0;
    if (rc && h->msg[0])
        snprintf(err, errlen, "%s", h->msg);
    else if (rc)
        snprintf(err, errlen, "%s: bad event stream", p->ops.name);
    if (rc == -EAGAIN) {
        rc = -EIO;
        *retryable = true;
    }
    return rc;
}

static void *ctx_new(const struct eph_http_provider *p, const char *secret)
{
    struct eph_parse_head *h = malloc(p->ctx_size);
    if (!h)
        return NULL;
    p->ctx_init(h);
    h->secret = secret;
    return h;
}

static void ctx_free(const struct eph_http_provider *p, void *ctx)
{
    p->ctx_release(ctx);
    free(ctx);
}

int eph_provider_parse_answer(const struct eph_http_provider *p, const char *body, size_t len,
                              bool stream, unsigned prior, struct eph_model_response *resp,
                              char *err, size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    void *c = ctx_new(p, NULL);
    if (!c) {
        snprintf(err, errlen, "%s: out of memory", p->ops.name);
        return -ENOMEM;
    }
    bool retry = false;
    int rc = stream ? parse_stream(p, c, body, len, &retry, err, errlen)
                    : p->parse(c, body, len, prior, resp, err, errlen);
    if (stream && !rc)
        rc = p->stream_end(c, prior, resp, err, errlen);
    p->usage(c, resp);
    resp->usage_missing = rc == 0 && !resp->usage_final;
    ctx_free(p, c);
    return rc;
}

/* A 2xx answer: streamed already, an event stream under another content type, or JSON. */
static int answer_2xx(struct eph_http_model *m, void *c, const struct eph_http_response *h,
                      unsigned prior, struct eph_model_response *resp, char *err, size_t errlen)
{
    const struct eph_http_provider *p = m->prov;
    const char *data = h->body.data ? h->body.data : "";
    bool sniffed = !h->streamed && m->stream && eph_sse_sniff(data, h->body.len);
    if (sniffed) {
        int rc = parse_stream(p, c, data, h->body.len, &resp->retryable, err, errlen);
        if (rc)
            return rc;
    }
    if (h->streamed || sniffed)
        return p->stream_end(c, prior, resp, err, errlen);
    return p->parse(c, data, h->body.len, prior, resp, err, errlen);
}

/* An error answer: the provider's message (never the key), whether to try again. */
static void answer_error(struct eph_http_model *m, const struct eph_http_response *h,
                         struct eph_model_response *resp, char *err, size_t errlen)
{
    const struct eph_http_provider *p = m->prov;
    char msg[EPH_HTTP_ERROR_MAX];
    eph_http_error_message(h->body.data, h->body.len, m->key, msg, sizeof(msg));
    snprintf(err, errlen, "%s: http %ld%s%s", p->ops.name, h->status, msg[0] ? ": " : "", msg);
    resp->retryable = p->retryable(h->status, h->body.data, h->body.len, &resp->retry_after_ms);
    if (p->refused && p->refused(m, h->status, msg))
        resp->retryable = resp->retry_at_once = true;
}

/* The headers of an attempt; auth is the key's header line or NULL. */
static void attempt_headers(const struct eph_http_model *m, const char *auth, const char **out)
{
    size_t n = 0;
    out[n++] = "Content-Type: application/json";
    out[n++] = m->stream ? "Accept: text/event-stream" : "Accept: application/json";
    out[n++] = "Expect:"; /* no 100-continue round trip for big conversations */
    for (size_t i = 0; i < 3 && m->prov->headers[i]; i++)
        out[n++] = m->prov->headers[i];
    out[n++] = auth;
    out[n] = NULL;
}

/* One attempt (eph_model_call retries and meters). */
int eph_http_call(struct eph_model *base, const struct eph_model_request *req,
                  struct eph_model_response *resp, char *err, size_t errlen)
{
    struct eph_http_model *m = (struct eph_http_model *)base;
    const struct eph_http_provider *p = m->prov;
    const char *id = base->cfg->id ? base->cfg->id : "";
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    if (m->key_missing) {
        snprintf(err, errlen, "%s: environment variable '%s' is not set", p->ops.name,
                 base->cfg->api_key_env);
        return -EIO;
    }
    int rc;
    char *body = p->build(m, req, &rc, err, errlen);
    if (!body)
        return rc;
    void *c = ctx_new(p, m->key);
    char *auth = NULL;
    if (!c || (m->key && asprintf(&auth, "%s%s", p->auth_header, m->key) < 0)) {
        auth = NULL;
        rc = -ENOMEM;
        snprintf(err, errlen, "%s: out of memory", p->ops.name);
        goto out;
    }
    const char *headers[8];
    attempt_headers(m, auth, headers);
    struct eph_http_request hr = {
        .what = p->ops.name,
        .url = m->stream ? m->stream_url : m->url,
        .headers = headers,
        .body = body,
        .body_len = strlen(body),
        .deadline_ns = req->deadline_ns,
        .idle_timeout_ms = m->idle_timeout_ms,
        .cancel = req->cancel,
        .max_body = EPH_MODEL_RESPONSE_MAX,
        .max_attempts = 1,
        .on_event = m->stream ? p->on_event : NULL,
        .sse_line_max = SSE_LINE_MAX,
        .event_error = ((struct eph_parse_head *)c)->msg,
        .ctx = c,
        .secret = m->key,
        .pool = m->pool,
    };
    struct eph_http_response h;
    rc = eph_http_post(&hr, &h, err, errlen);
    resp->sent = h.sent;
    resp->http_status = h.status;
    resp->retry_after_ms = h.retry_after_ms;
    if (rc) {
        /* err says why; a stream that broke off or carried an error event, a lost connection and
         * an idle server may do better next time */
        resp->retryable = h.transient;
    } else if (h.status >= 200 && h.status < 300) {
        rc = answer_2xx(m, c, &h, eph_model_count_calls(req->messages), resp, err, errlen);
    } else {
        rc = -EIO;
        answer_error(m, &h, resp, err, errlen);
    }
    eph_http_response_release(&h);
    p->usage(c, resp);
    if (rc == 0 && !resp->usage_final)
        EPH_WARN("model", "%s: model '%s' reported no usage: the worst case is charged",
                 p->ops.name, id);
out:
    if (c)
        ctx_free(p, c);
    free(body);
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    if (rc)
        eph_model_response_drop_answer(resp);
    return rc;
}
