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

#define SSE_LINE_MAX (1u << 20)

struct openai_model {
    struct eph_http_model http; /* first */
    atomic_bool completion_tokens;
};

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
    struct eph_buf content;
    struct eph_buf refusal;
    struct oa_call calls[EPH_MODEL_MAX_CALLS];
    size_t ncalls; /* highest index seen + 1 */
    size_t last;   /* the call the last delta went to (deltas without an index) */
    char finish[64];
    bool done; /* data: [DONE] */
    bool have_usage;
    uint64_t prompt, cached, completion, reasoning;
    char msg[320]; /* why an event handler failed */
    const char *secret;
};

static void oa_ctx_init(struct oa_ctx *c, const char *secret)
{
    memset(c, 0, sizeof(*c));
    c->secret = secret;
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

static void oa_ctx_release(struct oa_ctx *c)
{
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
    c->have_usage = true;
    c->prompt = eph_model_json_tokens(json_object_get(usage, "prompt_tokens"));
    c->completion = eph_model_json_tokens(json_object_get(usage, "completion_tokens"));
    c->cached = eph_model_json_tokens(
        json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens"));
    c->reasoning = eph_model_json_tokens(
        json_object_get(json_object_get(usage, "completion_tokens_details"), "reasoning_tokens"));
}

/* The attempt's usage, the cached part split out (it is billed at the cached price). */
static void oa_usage_to_resp(const struct oa_ctx *c, struct eph_model_response *r)
{
    uint64_t cached = c->cached < c->prompt ? c->cached : c->prompt;
    r->input_tokens = c->prompt - cached;
    r->cached_input_tokens = cached;
    r->output_tokens = c->completion;
    r->reasoning_tokens = c->reasoning < c->completion ? c->reasoning : c->completion;
    r->usage_final = c->have_usage;
}

/* ---- the request ---- */

static int set_str(json_t *o, const char *key, const char *v)
{
    return json_object_set_new(o, key, json_string(v ? v : "")) ? -ENOMEM : 0;
}

static const char *str_field(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* One neutral message in the wire format; NULL with *rc and err set. */
static json_t *oa_message(const json_t *msg, size_t i, int *rc, char *err, size_t errlen)
{
    const char *role = str_field(msg, "role");
    json_t *out = json_object();
    *rc = -ENOMEM;
    if (!out)
        goto nomem;
    if (!role) {
        snprintf(err, errlen, "openai: conversation message %zu has no role", i);
        goto invalid;
    }
    if (strcmp(role, "system") == 0 || strcmp(role, "user") == 0) {
        if (set_str(out, "role", role) || set_str(out, "content", str_field(msg, "content")))
            goto nomem;
    } else if (strcmp(role, "assistant") == 0) {
        const char *content = str_field(msg, "content");
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
                    set_str(tc, "id", str_field(call, "id")) || set_str(tc, "type", "function") ||
                    set_str(fn, "name", str_field(call, "name")) ||
                    set_str(fn, "arguments", str_field(call, "arguments")))
                    goto nomem;
            }
        }
    } else if (strcmp(role, "tool") == 0) {
        if (set_str(out, "role", "tool") ||
            set_str(out, "tool_call_id", str_field(msg, "tool_call_id")) ||
            set_str(out, "content", str_field(msg, "content")))
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
        const char *desc = str_field(t, "description");
        if (set_str(tool, "type", "function") || json_object_set_new(tool, "function", fn) ||
            set_str(fn, "name", str_field(t, "name")) ||
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

static char *oa_body(const struct openai_model *m, const struct eph_model_request *req,
                     bool completion_tokens, int *rc, char *err, size_t errlen)
{
    char *out = NULL;
    json_t *body = json_object(), *msgs = json_array();
    *rc = -ENOMEM;
    if (!body || !msgs || json_object_set_new(body, "model", json_string(m->http.upstream)) ||
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
    uint32_t max = eph_model_max_tokens(m->http.base.cfg, req);
    if (json_object_set_new(body, completion_tokens ? "max_completion_tokens" : "max_tokens",
                            json_integer(max)))
        goto nomem;
    if (m->http.stream &&
        (json_object_set_new(body, "stream", json_true()) ||
         json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1))))
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

/* "arguments" as received: a string is kept raw; a server that sends an object (some do) gets it
 * serialised; missing means no arguments. */
static char *oa_arguments(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (!v || json_is_null(v))
        return strdup("{}");
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

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
        const char *t = str_field(part, "text");
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

static int oa_parse_plain(const char *body, size_t len, unsigned prior, struct oa_ctx *c,
                          struct eph_model_response *resp, char *err, size_t errlen)
{
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
            eph_http_error_message(body, len, c->secret, msg, sizeof(msg));
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
    const char *refusal = str_field(message, "refusal");
    if (refusal && refusal[0] && !(resp->refusal = strdup(refusal)))
        goto nomem;
    const json_t *calls = json_object_get(message, "tool_calls");
    size_t i;
    const json_t *tc;
    json_array_foreach(calls, i, tc)
    {
        const json_t *fn = json_object_get(tc, "function");
        char *args = oa_arguments(json_object_get(fn, "arguments"));
        if (!args)
            goto nomem;
        rc = eph_model_add_call(resp, str_field(tc, "id"), str_field(fn, "name"), args,
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
        char *args = oa_arguments(json_object_get(legacy, "arguments"));
        if (!args)
            goto nomem;
        rc = eph_model_add_call(resp, NULL, str_field(legacy, "name"), args, prior + 1);
        free(args);
        if (rc)
            goto nomem;
    }
    if (resp->ncalls && resp->content && !resp->content[0]) {
        free(resp->content);
        resp->content = NULL;
    }
    resp->finish_reason = strdup(
        resp->refusal ? "refusal" : oa_finish(str_field(choice, "finish_reason"), resp->ncalls));
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
    const char *id = str_field(tc, "id");
    size_t idx;
    if (json_is_integer(jidx)) {
        json_int_t v = json_integer_value(jidx);
        if (v < 0 || v >= EPH_MODEL_MAX_CALLS) {
            snprintf(c->msg, sizeof(c->msg), "openai: tool call index %lld out of range",
                     (long long)v);
            return -EPROTO;
        }
        idx = (size_t)v;
    } else if (c->ncalls == 0) {
        idx = 0;
    } else if ((id && id[0] && c->calls[c->last].id.len &&
                strcmp(id, c->calls[c->last].id.data) != 0) ||
               (str_field(json_object_get(tc, "function"), "name") && c->calls[c->last].name.len &&
                c->calls[c->last].have_args)) {
        /* no index: a new id, or a name after the current call's arguments, starts a new call */
        if (c->ncalls >= EPH_MODEL_MAX_CALLS) {
            snprintf(c->msg, sizeof(c->msg), "openai: more than %d tool calls in one answer",
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
    const char *name = str_field(fn, "name");
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
        snprintf(c->msg, sizeof(c->msg), "openai: tool call too large");
    return rc;
}

static int oa_on_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct oa_ctx *c = ctx;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        c->done = true;
        return EPH_SSE_STOP; /* the end, whether or not the server closes the connection */
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(chunk)) {
        snprintf(c->msg, sizeof(c->msg), "openai: stream event is not a json object");
        rc = -EPROTO;
        goto done;
    }
    if (json_object_get(chunk, "error")) {
        char m[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(data, len, c->secret, m, sizeof(m));
        snprintf(c->msg, sizeof(c->msg), "openai: error in the stream: %s", m);
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
        snprintf(c->msg, sizeof(c->msg), "openai: response too large");
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
    const char *finish = str_field(choice, "finish_reason");
    if (finish && finish[0])
        snprintf(c->finish, sizeof(c->finish), "%s", finish);
done:
    json_decref(chunk);
    return rc;
}

/* The response from what the stream assembled. */
static int oa_stream_to_resp(struct oa_ctx *c, unsigned prior, struct eph_model_response *resp,
                             char *err, size_t errlen)
{
    if (!c->done && !c->finish[0]) {
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

/* ---- the answer, alone (fuzz drivers) ---- */

int eph_openai_parse_answer(const char *body, size_t len, bool stream, unsigned prior,
                            struct eph_model_response *resp, char *err, size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    struct oa_ctx *c = malloc(sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "openai: out of memory");
        return -ENOMEM;
    }
    oa_ctx_init(c, NULL);
    int rc;
    if (stream) {
        rc = eph_sse_parse(body, len, SSE_LINE_MAX, oa_on_event, c);
        if (rc == EPH_SSE_STOP)
            rc = 0;
        if (rc)
            snprintf(err, errlen, "%s", c->msg[0] ? c->msg : "openai: bad event stream");
        if (rc == -EAGAIN)
            rc = -EIO;
        if (!rc)
            rc = oa_stream_to_resp(c, prior, resp, err, errlen);
    } else {
        rc = oa_parse_plain(body, len, prior, c, resp, err, errlen);
    }
    oa_usage_to_resp(c, resp);
    resp->usage_missing = rc == 0 && !c->have_usage;
    oa_ctx_release(c);
    free(c);
    return rc;
}

/* The exact body, with the model's current choice of token field. */
static int openai_input_bound(struct eph_model *base, const struct eph_model_request *req,
                              uint64_t *tokens, char *err, size_t errlen)
{
    struct openai_model *m = (struct openai_model *)base;
    int rc;
    char *body = oa_body(m, req, atomic_load(&m->completion_tokens), &rc, err, errlen);
    if (!body)
        return rc;
    *tokens = eph_http_model_input_bound(&m->http, strlen(body));
    free(body);
    return 0;
}

/* ---- ops ---- */

static bool host_is_openai(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    return strncmp(p, "api.openai.com", 14) == 0 && (p[14] == '/' || p[14] == ':' || !p[14]);
}

static int openai_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                       size_t errlen)
{
    struct openai_model *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "openai: out of memory");
        return -ENOMEM;
    }
    int rc = eph_http_model_init(&m->http, &eph_model_openai_ops, cfg, "https://api.openai.com/v1",
                                 "chat/completions", true, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    atomic_init(&m->completion_tokens, host_is_openai(m->http.url));
    *out = &m->http.base;
    return 0;
}

static void openai_free(struct eph_model *base)
{
    if (!base)
        return;
    struct openai_model *m = (struct openai_model *)base;
    eph_http_model_release(&m->http);
    free(m);
}

/* One attempt (eph_model_call retries). A 400 that names max_completion_tokens flips the model's
 * token field and asks for an immediate retry: the server refused the request, it billed
 * nothing. */
static int openai_call(struct eph_model *base, const struct eph_model_request *req,
                       struct eph_model_response *resp, char *err, size_t errlen)
{
    struct openai_model *m = (struct openai_model *)base;
    const struct eph_model_config *cfg = m->http.base.cfg;
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    if (m->http.key_missing) {
        snprintf(err, errlen, "openai: environment variable '%s' is not set", cfg->api_key_env);
        return -EIO;
    }
    struct oa_ctx *c = malloc(sizeof(*c));
    char *auth = NULL;
    if (!c || (m->http.key && asprintf(&auth, "Authorization: Bearer %s", m->http.key) < 0)) {
        auth = NULL;
        free(c);
        snprintf(err, errlen, "openai: out of memory");
        return -ENOMEM;
    }
    oa_ctx_init(c, m->http.key);
    unsigned prior = eph_model_count_calls(req->messages);
    const char *headers[] = {
        "Content-Type: application/json",
        m->http.stream ? "Accept: text/event-stream" : "Accept: application/json",
        "Expect:", /* no 100-continue round trip for big conversations */
        auth,
        NULL,
    };
    int rc = 0;
    bool ct = atomic_load(&m->completion_tokens);
    char *body = oa_body(m, req, ct, &rc, err, errlen);
    struct eph_http_response hresp;
    memset(&hresp, 0, sizeof(hresp));
    if (!body)
        goto out;
    struct eph_http_request hr = {
        .what = "openai",
        .url = m->http.url,
        .headers = headers,
        .body = body,
        .body_len = strlen(body),
        .deadline_ns = req->deadline_ns,
        .idle_timeout_ms = m->http.idle_timeout_ms,
        .cancel = req->cancel,
        .max_body = EPH_MODEL_RESPONSE_MAX,
        .max_attempts = 1,
        .on_event = m->http.stream ? oa_on_event : NULL,
        .sse_line_max = SSE_LINE_MAX,
        .event_error = c->msg,
        .ctx = c,
        .secret = m->http.key,
        .pool = m->http.pool,
    };
    rc = eph_http_post(&hr, &hresp, err, errlen);
    free(body);
    resp->sent = hresp.sent;
    resp->http_status = hresp.status;
    resp->retry_after_ms = hresp.retry_after_ms;
    if (rc) {
        /* err says why; a stream that broke off or carried an error event, a lost connection
         * and an idle server may do better next time */
        resp->retryable = hresp.transient;
    } else if (hresp.status >= 200 && hresp.status < 300) {
        const char *data = hresp.body.data ? hresp.body.data : "";
        bool sniffed = !hresp.streamed && m->http.stream && eph_sse_sniff(data, hresp.body.len);
        if (sniffed) /* an event stream under another content type */
            rc = eph_model_parse_sniffed(data, hresp.body.len, oa_on_event, c, c->msg, "openai",
                                         &resp->retryable, err, errlen);
        if (rc)
            ; /* err says why */
        else if (hresp.streamed || sniffed)
            rc = oa_stream_to_resp(c, prior, resp, err, errlen);
        else
            rc = oa_parse_plain(data, hresp.body.len, prior, c, resp, err, errlen);
    } else {
        char msg[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(hresp.body.data, hresp.body.len, m->http.key, msg, sizeof(msg));
        rc = -EIO;
        snprintf(err, errlen, "openai: http %ld%s%s", hresp.status, msg[0] ? ": " : "", msg);
        resp->retryable = eph_model_retry_class(hresp.status, hresp.body.data, hresp.body.len);
        if (hresp.status == 400 && strstr(msg, "max_completion_tokens")) {
            atomic_store(&m->completion_tokens, !ct);
            EPH_INFO("model", "openai: model '%s' now sends %s", cfg->id ? cfg->id : "",
                     ct ? "max_tokens" : "max_completion_tokens");
            resp->retryable = resp->retry_at_once = true;
        }
    }
out:
    eph_http_response_release(&hresp);
    oa_usage_to_resp(c, resp);
    if (rc == 0 && !c->have_usage)
        EPH_WARN("model", "openai: model '%s' reported no usage: the worst case is charged",
                 cfg->id ? cfg->id : "");
    oa_ctx_release(c);
    free(c);
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    if (rc)
        eph_model_response_drop_answer(resp);
    return rc;
}

const struct eph_model_ops eph_model_openai_ops = {
    .name = "openai",
    .open = openai_open,
    .call = openai_call,
    .input_bound = openai_input_bound,
    .free = openai_free,
};
