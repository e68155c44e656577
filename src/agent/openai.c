/*
 * openai.c - the "openai" provider: Chat Completions with tools, as spoken by OpenAI and the
 * servers that copy it (OpenRouter, vLLM, llama.cpp server, Ollama, LiteLLM).
 *
 * The token limit: OpenAI's own API wants max_completion_tokens (its newer models reject
 * max_tokens) while most compatible servers know only max_tokens, and some reject unknown fields.
 * So one is sent: max_completion_tokens when the host is api.openai.com, max_tokens elsewhere; a
 * 400 whose message names max_completion_tokens flips the choice for the model (remembered) and the
 * call is made once more.
 *
 * Everything in the answer is checked for type. What the model wrote is passed through as is:
 * arguments that are not valid JSON reach the agent loop raw (it answers the model with a tool
 * error), missing call ids are made up, unknown finish reasons are kept.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "common/buf.h"
#include "common/log.h"
#include "ledger/budget.h"

/* A tool call being assembled from stream deltas. */
struct oa_call {
    bool seen;
    struct eph_buf id;
    struct eph_buf name;
    struct eph_buf args;
    bool have_args;
};

/* The state of one call: what the stream assembled so far and the usage to pay for. */
struct oa_ctx {
    struct eph_parse_head h; /* first */
    struct eph_buf content;
    struct eph_buf refusal;
    struct oa_call calls[EPH_MODEL_MAX_CALLS];
    size_t ncalls; /* highest index seen + 1 */
    size_t last;   /* the call the last delta went to (deltas without an index) */
    char finish[64];
    uint64_t prompt, cached, completion, reasoning;
};

static void oa_ctx_init(void *ctx)
{
    struct oa_ctx *c = ctx;
    memset(c, 0, sizeof(*c));
    eph_buf_init(&c->content, EPH_MODEL_RESPONSE_MAX);
    eph_buf_init(&c->refusal, EPH_MODEL_RESPONSE_MAX);
    for (size_t i = 0; i < EPH_MODEL_MAX_CALLS; i++) {
        eph_buf_init(&c->calls[i].id, 256);
        eph_buf_init(&c->calls[i].name, 256);
        eph_buf_init(&c->calls[i].args, EPH_MODEL_RESPONSE_MAX);
    }
}

static void oa_ctx_clear_calls(struct oa_ctx *c)
{
    for (size_t i = 0; i < EPH_MODEL_MAX_CALLS; i++) {
        eph_buf_release(&c->calls[i].id);
        eph_buf_release(&c->calls[i].name);
        eph_buf_release(&c->calls[i].args);
        c->calls[i].seen = false;
        c->calls[i].have_args = false;
    }
    c->ncalls = 0;
    c->last = 0;
}

static void oa_ctx_release(void *ctx)
{
    struct oa_ctx *c = ctx;
    eph_buf_release(&c->content);
    eph_buf_release(&c->refusal);
    oa_ctx_clear_calls(c);
}

/*
 * prompt_tokens counts every input token, cached_tokens (prompt_tokens_details) the part read
 * from the cache; completion_tokens counts every output token, reasoning_tokens
 * (completion_tokens_details) included. Any field may be missing or hostile: counts are clamped.
 */
static void oa_usage(struct oa_ctx *c, const json_t *usage)
{
    if (!json_is_object(usage))
        return;
    c->h.usage_final = true;
    c->prompt = eph_model_json_tokens(json_object_get(usage, "prompt_tokens"));
    c->completion = eph_model_json_tokens(json_object_get(usage, "completion_tokens"));
    c->cached = eph_model_json_tokens(
        json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
    c->reasoning = eph_model_json_tokens(
        json_object_get(json_object_get(usage, "completion_tokens_details"), "reasoning_tokens"));
}

/* The attempt's usage, the cached part split out (it is billed at the cached price). */
static void oa_usage_to_resp(const void *ctx, struct eph_model_response *r)
{
    const struct oa_ctx *c = ctx;
    uint64_t cached = c->cached < c->prompt ? c->cached : c->prompt;
    r->input_tokens = c->prompt - cached;
    r->cached_input_tokens = cached;
    r->output_tokens = c->completion;
    r->reasoning_tokens = c->reasoning < c->completion ? c->reasoning : c->completion;
    r->usage_final = c->h.usage_final;
}

/* ---- the request ---- */

static int set_str(json_t *o, const char *key, const char *v)
{
    return json_object_set_new(o, key, json_string(v ? v : "")) ? -ENOMEM : 0;
}

/* One neutral message in the wire format; NULL with *rc and err set. */
static json_t *oa_message(const json_t *msg, size_t i, int *rc, char *err, size_t errlen)
{
    const char *role = eph_json_str(msg, "role");
    json_t *out = json_object();
    *rc = -ENOMEM;
    if (!out)
        goto nomem;
    if (!role) {
        snprintf(err, errlen, "openai: conversation message %zu has no role", i);
        goto invalid;
    }
    if (strcmp(role, "system") == 0 || strcmp(role, "user") == 0) {
        if (set_str(out, "role", role) || set_str(out, "content", eph_json_str(msg, "content")))
            goto nomem;
    } else if (strcmp(role, "assistant") == 0) {
        const char *content = eph_json_str(msg, "content");
        const json_t *calls = json_object_get(msg, "tool_calls");
        size_t ncalls = json_is_array(calls) ? json_array_size(calls) : 0;
        if (set_str(out, "role", "assistant"))
            goto nomem;
        /* null content with tool calls is what OpenAI itself sends back; some servers refuse a
         * null content without them */
        if (json_object_set_new(out, "content",
                                content || !ncalls ? json_string(content ? content : "")
                                                   : json_null()))
            goto nomem;
        if (ncalls) {
            json_t *arr = json_array();
            if (json_object_set_new(out, "tool_calls", arr)) /* steals arr, even on error */
                goto nomem;
            size_t j;
            const json_t *call;
            json_array_foreach(calls, j, call)
            {
                json_t *tc = json_object();
                if (json_array_append_new(arr, tc))
                    goto nomem;
                json_t *fn = json_object();
                if (json_object_set_new(tc, "function", fn) ||
                    set_str(tc, "id", eph_json_str(call, "id")) ||
                    set_str(tc, "type", "function") ||
                    set_str(fn, "name", eph_json_str(call, "name")) ||
                    set_str(fn, "arguments", eph_json_str(call, "arguments")))
                    goto nomem;
            }
        }
    } else if (strcmp(role, "tool") == 0) {
        if (set_str(out, "role", "tool") ||
            set_str(out, "tool_call_id", eph_json_str(msg, "tool_call_id")) ||
            set_str(out, "content", eph_json_str(msg, "content")))
            goto nomem;
    } else {
        snprintf(err, errlen, "openai: conversation message %zu has the unknown role '%.32s'", i,
                 role);
        goto invalid;
    }
    *rc = 0;
    return out;
invalid:
    *rc = -EINVAL;
    json_decref(out);
    return NULL;
nomem:
    snprintf(err, errlen, "openai: out of memory");
    json_decref(out);
    return NULL;
}

static json_t *oa_tools(const json_t *tools)
{
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *tool = json_object();
        if (json_array_append_new(arr, tool))
            goto nomem;
        json_t *fn = json_object();
        const json_t *params = json_object_get(t, "parameters");
        const char *desc = eph_json_str(t, "description");
        if (set_str(tool, "type", "function") || json_object_set_new(tool, "function", fn) ||
            set_str(fn, "name", eph_json_str(t, "name")) ||
            (desc && set_str(fn, "description", desc)) ||
            json_object_set_new(fn, "parameters",
                                json_is_object(params)
                                    ? json_deep_copy(params)
                                    : json_pack("{s:s,s:{}}", "type", "object", "properties")))
            goto nomem;
    }
    return arr;
nomem:
    json_decref(arr);
    return NULL;
}

/* The body, with the model's current choice of token field (m->alt: max_completion_tokens). */
static char *oa_body(const struct eph_http_model *m, const struct eph_model_request *req, int *rc,
                     char *err, size_t errlen)
{
    bool completion_tokens = atomic_load(&((struct eph_http_model *)m)->alt);
    char *out = NULL;
    json_t *body = json_object(), *msgs = json_array();
    *rc = -ENOMEM;
    if (!body || !msgs || json_object_set_new(body, "model", json_string(m->upstream)) ||
        json_object_set(body, "messages", msgs))
        goto nomem;
    size_t i;
    const json_t *msg;
    json_array_foreach(req->messages, i, msg)
    {
        json_t *o = oa_message(msg, i, rc, err, errlen);
        if (!o)
            goto done;
        if (json_array_append_new(msgs, o))
            goto nomem;
    }
    if (json_array_size(req->tools) > 0) {
        /* an empty "tools" array is refused by some servers: leave it out */
        if (json_object_set_new(body, "tools", oa_tools(req->tools)))
            goto nomem;
    }
    uint32_t max = eph_model_max_tokens(m->base.cfg, req);
    if (json_object_set_new(body, completion_tokens ? "max_completion_tokens" : "max_tokens",
                            json_integer(max)))
        goto nomem;
    /* stream_options is refused by some compatible servers (openai-compatible leaves it out) */
    if (m->stream &&
        (json_object_set_new(body, "stream", json_true()) ||
         ((m->prov->caps & EPH_PROVIDER_STREAM_USAGE) &&
          json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1)))))
        goto nomem;
    out = json_dumps(body, JSON_COMPACT);
    if (!out)
        goto nomem;
    *rc = 0;
    goto done;
nomem:
    *rc = -ENOMEM;
    snprintf(err, errlen, "openai: out of memory");
done:
    json_decref(msgs);
    json_decref(body);
    return out;
}

/* ---- the answer ---- */

static const char *oa_finish(const char *f, size_t ncalls)
{
    if (!f || !f[0])
        return ncalls ? "tool_calls" : "stop";
    if (strcmp(f, "function_call") == 0)
        return "tool_calls";
    /* Ollama and others answer "stop" with tool calls; the loop should see what happened */
    if (ncalls && strcmp(f, "stop") == 0)
        return "tool_calls";
    return f;
}

/* Text content: a string, or an array of parts [{type:"text", text}] (some servers). */
static int oa_content(const json_t *v, char **out)
{
    *out = NULL;
    if (json_is_string(v)) {
        *out = strdup(json_string_value(v));
        return *out ? 0 : -ENOMEM;
    }
    if (!json_is_array(v))
        return 0;
    struct eph_buf b;
    eph_buf_init(&b, EPH_MODEL_RESPONSE_MAX);
    size_t i;
    const json_t *part;
    json_array_foreach(v, i, part)
    {
        const char *t = eph_json_str(part, "text");
        if (t) {
            int rc = eph_buf_appends(&b, t);
            if (rc) {
                eph_buf_release(&b);
                return rc;
            }
        }
    }
    *out = eph_buf_steal(&b);
    return *out ? 0 : -ENOMEM;
}

static int oa_parse_plain(void *ctx, const char *body, size_t len, unsigned prior,
                          struct eph_model_response *resp, char *err, size_t errlen)
{
    struct oa_ctx *c = ctx;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(root)) {
        /* never jerr.text: it quotes the body, which may quote the prompt */
        snprintf(err, errlen, "openai: response is not a json object (%zu bytes)", len);
        rc = -EPROTO;
        goto done;
    }
    oa_usage(c, json_object_get(root, "usage"));
    const json_t *choices = json_object_get(root, "choices");
    if (!json_is_array(choices) || json_array_size(choices) == 0) {
        const json_t *e = json_object_get(root, "error");
        if (e) {
            char msg[EPH_HTTP_ERROR_MAX];
            eph_http_error_message(body, len, c->h.secret, msg, sizeof(msg));
            snprintf(err, errlen, "openai: error in the response: %s", msg);
            rc = -EIO;
        } else {
            snprintf(err, errlen, "openai: response has no choices");
            rc = -EPROTO;
        }
        goto done;
    }
    const json_t *choice = json_array_get(choices, 0);
    const json_t *message = json_object_get(choice, "message");
    if (!json_is_object(message)) {
        snprintf(err, errlen, "openai: response choice has no message");
        rc = -EPROTO;
        goto done;
    }
    rc = oa_content(json_object_get(message, "content"), &resp->content);
    if (rc)
        goto nomem;
    const char *refusal = eph_json_str(message, "refusal");
    if (refusal && refusal[0] && !(resp->refusal = strdup(refusal)))
        goto nomem;
    const json_t *calls = json_object_get(message, "tool_calls");
    size_t i;
    const json_t *tc;
    json_array_foreach(calls, i, tc)
    {
        const json_t *fn = json_object_get(tc, "function");
        char *args = eph_model_arguments(json_object_get(fn, "arguments"));
        if (!args)
            goto nomem;
        rc = eph_model_add_call(resp, eph_json_str(tc, "id"), eph_json_str(fn, "name"), args,
                                prior + (unsigned)resp->ncalls + 1);
        free(args);
        if (rc == -EMSGSIZE) {
            snprintf(err, errlen, "openai: more than %d tool calls in one answer",
                     EPH_MODEL_MAX_CALLS);
            goto done;
        }
        if (rc)
            goto nomem;
    }
    const json_t *legacy = json_object_get(message, "function_call");
    if (json_is_object(legacy) && resp->ncalls == 0) {
        char *args = eph_model_arguments(json_object_get(legacy, "arguments"));
        if (!args)
            goto nomem;
        rc = eph_model_add_call(resp, NULL, eph_json_str(legacy, "name"), args, prior + 1);
        free(args);
        if (rc)
            goto nomem;
    }
    if (resp->ncalls && resp->content && !resp->content[0]) {
        free(resp->content);
        resp->content = NULL;
    }
    resp->finish_reason = strdup(
        resp->refusal ? "refusal" : oa_finish(eph_json_str(choice, "finish_reason"), resp->ncalls));
    if (!resp->finish_reason)
        goto nomem;
    goto done;
nomem:
    rc = -ENOMEM;
    snprintf(err, errlen, "openai: out of memory");
done:
    json_decref(root);
    return rc;
}

static int oa_delta_call(struct oa_ctx *c, const json_t *tc)
{
    const json_t *jidx = json_object_get(tc, "index");
    const char *id = eph_json_str(tc, "id");
    size_t idx;
    if (json_is_integer(jidx)) {
        json_int_t v = json_integer_value(jidx);
        if (v < 0 || v >= EPH_MODEL_MAX_CALLS) {
            snprintf(c->h.msg, sizeof(c->h.msg), "openai: tool call index %lld out of range",
                     (long long)v);
            return -EPROTO;
        }
        idx = (size_t)v;
    } else if (c->ncalls == 0) {
        idx = 0;
    } else if ((id && id[0] && c->calls[c->last].id.len &&
                strcmp(id, c->calls[c->last].id.data) != 0) ||
               (eph_json_str(json_object_get(tc, "function"), "name") &&
                c->calls[c->last].name.len && c->calls[c->last].have_args)) {
        /* no index: a new id, or a name after the current call's arguments, starts a new call */
        if (c->ncalls >= EPH_MODEL_MAX_CALLS) {
            snprintf(c->h.msg, sizeof(c->h.msg), "openai: more than %d tool calls in one answer",
                     EPH_MODEL_MAX_CALLS);
            return -EMSGSIZE;
        }
        idx = c->ncalls;
    } else {
        idx = c->last;
    }
    struct oa_call *call = &c->calls[idx];
    call->seen = true;
    c->last = idx;
    if (idx + 1 > c->ncalls)
        c->ncalls = idx + 1;
    const json_t *fn = json_object_get(tc, "function");
    const char *name = eph_json_str(fn, "name");
    int rc = 0;
    /* Ids and names come whole in one delta; some servers repeat them in every delta, so only the
     * first one counts. Arguments come in pieces and are concatenated. */
    if (id && id[0] && call->id.len == 0)
        rc = eph_buf_appends(&call->id, id);
    if (!rc && name && name[0] && call->name.len == 0)
        rc = eph_buf_appends(&call->name, name);
    const json_t *args = json_object_get(fn, "arguments");
    if (!rc && json_is_string(args)) {
        call->have_args = true;
        rc = eph_buf_appends(&call->args, json_string_value(args));
    } else if (!rc && args && !json_is_null(args)) {
        char *s = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
        call->have_args = true;
        rc = s ? eph_buf_appends(&call->args, s) : -ENOMEM;
        free(s);
    }
    if (rc)
        snprintf(c->h.msg, sizeof(c->h.msg), "openai: tool call too large");
    return rc;
}

static int oa_on_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct oa_ctx *c = ctx;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        c->h.done = true;
        return EPH_SSE_STOP; /* the end, whether or not the server closes the connection */
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(chunk)) {
        snprintf(c->h.msg, sizeof(c->h.msg), "openai: stream event is not a json object");
        rc = -EPROTO;
        goto done;
    }
    if (json_object_get(chunk, "error")) {
        char m[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(data, len, c->h.secret, m, sizeof(m));
        snprintf(c->h.msg, sizeof(c->h.msg), "openai: error in the stream: %s", m);
        rc = -EAGAIN; /* an error after a 200 is the server's trouble: try again */
        goto done;
    }
    oa_usage(c, json_object_get(chunk, "usage"));
    const json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    if (!choice)
        goto done; /* the usage chunk has "choices": [] */
    const json_t *delta = json_object_get(choice, "delta");
    const json_t *content = json_object_get(delta, "content");
    if (json_is_string(content)) {
        rc = eph_buf_appends(&c->content, json_string_value(content));
    } else if (json_is_array(content)) {
        char *s = NULL;
        rc = oa_content(content, &s);
        if (!rc)
            rc = eph_buf_appends(&c->content, s);
        free(s);
    }
    const json_t *refusal = json_object_get(delta, "refusal");
    if (!rc && json_is_string(refusal))
        rc = eph_buf_appends(&c->refusal, json_string_value(refusal));
    if (rc) {
        snprintf(c->h.msg, sizeof(c->h.msg), "openai: response too large");
        goto done;
    }
    size_t i;
    const json_t *tc;
    json_array_foreach(json_object_get(delta, "tool_calls"), i, tc)
    {
        rc = oa_delta_call(c, tc);
        if (rc)
            goto done;
    }
    const json_t *legacy = json_object_get(delta, "function_call");
    if (json_is_object(legacy)) {
        json_t *wrapped = json_pack("{s:i,s:O}", "index", 0, "function", legacy);
        rc = wrapped ? oa_delta_call(c, wrapped) : -ENOMEM;
        json_decref(wrapped);
        if (rc)
            goto done;
    }
    const char *finish = eph_json_str(choice, "finish_reason");
    if (finish && finish[0])
        snprintf(c->finish, sizeof(c->finish), "%s", finish);
done:
    json_decref(chunk);
    return rc;
}

/* The response from what the stream assembled. */
static int oa_stream_to_resp(void *ctx, unsigned prior, struct eph_model_response *resp, char *err,
                             size_t errlen)
{
    struct oa_ctx *c = ctx;
    if (!c->h.done && !c->finish[0]) {
        snprintf(err, errlen, "openai: stream ended before the answer was complete");
        return -EPROTO;
    }
    for (size_t i = 0; i < c->ncalls; i++) {
        struct oa_call *call = &c->calls[i];
        if (!call->seen)
            continue;
        int rc =
            eph_model_add_call(resp, call->id.data, call->name.data,
                               call->have_args ? (call->args.data ? call->args.data : "") : "{}",
                               prior + (unsigned)resp->ncalls + 1);
        if (rc) {
            snprintf(err, errlen, "openai: out of memory");
            return rc;
        }
    }
    if (c->content.len || resp->ncalls == 0) {
        resp->content = eph_buf_steal(&c->content);
        if (!resp->content)
            goto nomem;
    }
    if (c->refusal.len && !(resp->refusal = eph_buf_steal(&c->refusal)))
        goto nomem;
    resp->finish_reason = strdup(resp->refusal ? "refusal" : oa_finish(c->finish, resp->ncalls));
    if (!resp->finish_reason)
        goto nomem;
    return 0;
nomem:
    snprintf(err, errlen, "openai: out of memory");
    return -ENOMEM;
}

/* ---- the entries ---- */

static bool host_is_openai(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    return strncmp(p, "api.openai.com", 14) == 0 && (p[14] == '/' || p[14] == ':' || !p[14]);
}

/* OpenAI's own API gets max_completion_tokens, every other host max_tokens. */
static void oa_opened(struct eph_http_model *m)
{
    atomic_store(&m->alt, m->prov == &eph_provider_openai && host_is_openai(m->url));
}

/* A 400 that names max_completion_tokens flips the model's token field and asks for an
 * immediate retry: the server refused the request, it billed nothing. */
static bool oa_refused(struct eph_http_model *m, long status, const char *msg)
{
    if (status != 400 || !strstr(msg, "max_completion_tokens"))
        return false;
    bool ct = atomic_load(&m->alt);
    atomic_store(&m->alt, !ct);
    EPH_INFO("model", "%s: model '%s' now sends %s", m->prov->ops.name,
             m->base.cfg->id ? m->base.cfg->id : "", ct ? "max_tokens" : "max_completion_tokens");
    return true;
}

static bool oa_retryable(long status, const char *body, size_t len, uint64_t *retry_after_ms)
{
    (void)retry_after_ms; /* OpenAI says it in the Retry-After header */
    return eph_model_retry_class(status, body, len);
}

/* Prices as OpenAI lists them. */
static const struct eph_provider_model oa_key_models[] = {
    {"openai/gpt-4.1", "gpt-4.1", 2000000, 500000, 0, 8000000, 4096},
    {"openai/gpt-4.1-mini", "gpt-4.1-mini", 400000, 100000, 0, 1600000, 4096},
};

#define OPENAI_WIRE                                                                                \
    .path = "chat/completions", .strip_prefix = true, .auth_header = "Authorization: Bearer ",     \
    .cache_write = EPH_CACHE_WRITE_AS_INPUT, .input_overhead_tokens = 256,                         \
    .ctx_size = sizeof(struct oa_ctx), .ctx_init = oa_ctx_init, .ctx_release = oa_ctx_release,     \
    .build = oa_body, .parse = oa_parse_plain, .on_event = oa_on_event,                            \
    .stream_end = oa_stream_to_resp, .usage = oa_usage_to_resp, .retryable = oa_retryable,         \
    .opened = oa_opened, .refused = oa_refused

const struct eph_http_provider eph_provider_openai = {
    .ops = EPH_HTTP_OPS("openai"),
    .default_base = "https://api.openai.com/v1",
    .caps = EPH_PROVIDER_STREAM | EPH_PROVIDER_TOOLS | EPH_PROVIDER_STREAM_USAGE,
    .key_env = "OPENAI_API_KEY",
    .key_models = oa_key_models,
    .nkey_models = sizeof(oa_key_models) / sizeof(oa_key_models[0]),
    OPENAI_WIRE,
};

/* vLLM, llama.cpp's server, Ollama: OpenAI's wire format at a base_url of their own, without
 * stream_options (some refuse it), with max_tokens; a missing usage is charged at the worst case
 * (docs/MONEY.md). */
const struct eph_http_provider eph_provider_openai_compatible = {
    .ops = EPH_HTTP_OPS("openai-compatible"),
    .default_base = NULL,
    .caps = EPH_PROVIDER_STREAM | EPH_PROVIDER_TOOLS,
    OPENAI_WIRE,
};
