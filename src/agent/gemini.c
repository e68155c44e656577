/*
 * gemini.c - the "gemini" provider: Google's Gemini API, generateContent
 * (POST {base_url}/models/{model}:generateContent, streamed with :streamGenerateContent?alt=sse),
 * with function calling. docs/MODELS.md, "Gemini", has the mapping.
 *
 * The neutral conversation becomes "contents" of role user or model: system messages go to
 * systemInstruction, an assistant message becomes text and functionCall parts, a tool result a
 * functionResponse part of a user turn; consecutive turns of one role are merged. functionCall.args
 * must be an object: arguments that do not parse as one are sent as {} (the loop already answered
 * them with a tool error). The answer is candidates[0].content.parts; the stream sends whole
 * GenerateContentResponse chunks, text in pieces, with no end marker: a finishReason ends it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "common/buf.h"
#include "ledger/budget.h"

/* The answer as it is assembled (a plain body is one chunk, a stream many). */
struct gm_ctx {
    struct eph_parse_head h; /* first */
    struct eph_buf content;
    struct eph_model_response calls; /* only the calls: the answer's functionCall parts */
    int calls_rc;                    /* -EMSGSIZE/-ENOMEM while adding one */
    char finish[64];
    char blocked[64]; /* promptFeedback.blockReason */
    uint64_t prompt, cached, candidates, thoughts;
};

static void gm_ctx_init(void *ctx)
{
    struct gm_ctx *c = ctx;
    memset(c, 0, sizeof(*c));
    eph_buf_init(&c->content, EPH_MODEL_RESPONSE_MAX);
}

static void gm_ctx_release(void *ctx)
{
    struct gm_ctx *c = ctx;
    eph_buf_release(&c->content);
    eph_model_response_release(&c->calls);
}

/* promptTokenCount counts every input token, cachedContentTokenCount the part read from a cache;
 * candidatesTokenCount the answer, thoughtsTokenCount the thinking billed as output beside it.
 * Each chunk of a stream carries the totals so far: the last one wins. */
static void gm_usage(struct gm_ctx *c, const json_t *u)
{
    if (!json_is_object(u))
        return;
    c->h.usage_final = true;
    c->prompt = eph_model_json_tokens(json_object_get(u, "promptTokenCount"));
    c->cached = eph_model_json_tokens(json_object_get(u, "cachedContentTokenCount"));
    c->candidates = eph_model_json_tokens(json_object_get(u, "candidatesTokenCount"));
    c->thoughts = eph_model_json_tokens(json_object_get(u, "thoughtsTokenCount"));
}

static void gm_usage_to_resp(const void *ctx, struct eph_model_response *r)
{
    const struct gm_ctx *c = ctx;
    uint64_t cached = c->cached < c->prompt ? c->cached : c->prompt;
    r->input_tokens = c->prompt - cached;
    r->cached_input_tokens = cached;
    r->output_tokens = eph_tokens_add(c->candidates, c->thoughts);
    r->reasoning_tokens = c->thoughts;
    r->usage_final = c->h.usage_final;
}

/* ---- the request ---- */

/* Adds part to the last content when it has the same role, else to a new one. Steals part. */
static int push_part(json_t *contents, const char *role, json_t *part)
{
    if (!part)
        return -ENOMEM;
    json_t *last = json_array_get(contents, json_array_size(contents) - 1);
    const char *lrole = eph_json_str(last, "role");
    if (lrole && strcmp(lrole, role) == 0)
        return json_array_append_new(json_object_get(last, "parts"), part) ? -ENOMEM : 0;
    json_t *turn = json_pack("{s:s,s:[o]}", "role", role, "parts", part);
    if (!turn)
        return -ENOMEM;
    return json_array_append_new(contents, turn) ? -ENOMEM : 0;
}

/* A JSON object from text into *out, else NULL there (not JSON, or not an object). -ENOMEM when the
 * parser ran out of memory: a syntax error has a line, a parse that failed without one did not
 * read the text, and must not be taken for text that is not JSON. */
static int as_object(const char *text, json_t **out)
{
    json_error_t jerr;
    json_t *v = text ? json_loads(text, 0, &jerr) : NULL;
    *out = NULL;
    if (json_is_object(v)) {
        *out = v;
        return 0;
    }
    json_decref(v);
    return text && !v && jerr.line < 0 ? -ENOMEM : 0;
}

/* The first functionCall part of a model turn carries a thought signature, which newer models
 * check; the conversation does not keep the one the model sent, so the value Google documents for
 * a history it did not produce is sent instead. */
#define GM_NO_SIGNATURE "skip_thought_signature_validator"

static int gm_assistant(json_t *contents, const json_t *msg)
{
    const char *content = eph_json_str(msg, "content");
    if (content && content[0] && push_part(contents, "model", json_pack("{s:s}", "text", content)))
        return -ENOMEM;
    size_t j;
    const json_t *call;
    json_array_foreach(json_object_get(msg, "tool_calls"), j, call)
    {
        json_t *args;
        if (as_object(eph_json_str(call, "arguments"), &args))
            return -ENOMEM;
        const char *name = eph_json_str(call, "name");
        json_t *part = json_pack("{s:{s:s,s:o}}", "functionCall", "name", name ? name : "", "args",
                                 args ? args : json_object());
        if (part && j == 0 &&
            json_object_set_new(part, "thoughtSignature", json_string(GM_NO_SIGNATURE))) {
            json_decref(part);
            return -ENOMEM;
        }
        if (push_part(contents, "model", part))
            return -ENOMEM;
    }
    return 0;
}

/* functionResponse.response must be an object: a result that is one (a tool error is
 * {"error": ...}) is sent as it is, other text as {"result": text}. */
static int gm_tool(json_t *contents, const json_t *msg)
{
    const char *content = eph_json_str(msg, "content");
    const char *name = eph_json_str(msg, "name");
    json_t *response;
    if (as_object(content, &response))
        return -ENOMEM;
    if (!response)
        response = json_pack("{s:s}", "result", content ? content : "");
    return push_part(contents, "user",
                     json_pack("{s:{s:s,s:o}}", "functionResponse", "name", name ? name : "",
                               "response", response));
}

static int gm_message(json_t *contents, struct eph_buf *system, const json_t *msg, size_t i,
                      char *err, size_t errlen)
{
    const char *role = eph_json_str(msg, "role");
    const char *content = eph_json_str(msg, "content");
    if (!role) {
        snprintf(err, errlen, "gemini: conversation message %zu has no role", i);
        return -EINVAL;
    }
    if (strcmp(role, "system") == 0) {
        if (!content || !content[0])
            return 0;
        int rc = system->len ? eph_buf_appends(system, "\n\n") : 0;
        return rc ? rc : eph_buf_appends(system, content);
    }
    if (strcmp(role, "user") == 0)
        return content && content[0]
                   ? push_part(contents, "user", json_pack("{s:s}", "text", content))
                   : 0;
    if (strcmp(role, "assistant") == 0)
        return gm_assistant(contents, msg);
    if (strcmp(role, "tool") == 0)
        return gm_tool(contents, msg);
    snprintf(err, errlen, "gemini: conversation message %zu has the unknown role '%.32s'", i, role);
    return -EINVAL;
}

/* tools: [{functionDeclarations: [{name, description, parametersJsonSchema}]}] */
static json_t *gm_tools(const json_t *tools)
{
    json_t *decls = json_array();
    json_t *out = json_pack("[{s:o}]", "functionDeclarations", decls);
    if (!out)
        return NULL;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *params = json_object_get(t, "parameters");
        const char *name = eph_json_str(t, "name"), *desc = eph_json_str(t, "description");
        json_t *d = json_pack("{s:s,s:o}", "name", name ? name : "", "parametersJsonSchema",
                              json_is_object(params)
                                  ? json_deep_copy(params)
                                  : json_pack("{s:s,s:{}}", "type", "object", "properties"));
        if (json_array_append_new(decls, d) ||
            (desc && json_object_set_new(d, "description", json_string(desc)))) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static char *gm_body(const struct eph_http_model *m, const struct eph_model_request *req, int *rc,
                     char *err, size_t errlen)
{
    char *out = NULL;
    struct eph_buf system;
    eph_buf_init(&system, EPH_MODEL_RESPONSE_MAX * 4);
    json_t *body = json_object(), *contents = json_array();
    *rc = -ENOMEM;
    if (!body || !contents || json_object_set(body, "contents", contents) ||
        json_object_set_new(body, "generationConfig",
                            json_pack("{s:I}", "maxOutputTokens",
                                      (json_int_t)eph_model_max_tokens(m->base.cfg, req))))
        goto nomem;
    size_t i;
    const json_t *msg;
    json_array_foreach(req->messages, i, msg)
    {
        *rc = gm_message(contents, &system, msg, i, err, errlen);
        if (*rc == -EINVAL)
            goto done;
        if (*rc)
            goto nomem;
    }
    if (system.len && json_object_set_new(body, "systemInstruction",
                                          json_pack("{s:[{s:s}]}", "parts", "text", system.data)))
        goto nomem;
    if (json_array_size(req->tools) > 0 && json_object_set_new(body, "tools", gm_tools(req->tools)))
        goto nomem;
    out = json_dumps(body, JSON_COMPACT);
    if (!out)
        goto nomem;
    *rc = 0;
    goto done;
nomem:
    *rc = -ENOMEM;
    snprintf(err, errlen, "gemini: out of memory");
done:
    eph_buf_release(&system);
    json_decref(contents);
    json_decref(body);
    return out;
}

/* ---- the answer ---- */

/* Gemini's finishReason in the neutral words: STOP is stop (tool_calls with calls), MAX_TOKENS
 * length; SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII and IMAGE_SAFETY are the
 * content filter; others are kept, lowercase. */
static void gm_finish(const char *f, size_t ncalls, char *out, size_t outlen)
{
    static const char *const filtered[] = {
        "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"};
    const char *word = NULL;
    if (!f || !f[0] || strcmp(f, "STOP") == 0 || strcmp(f, "FINISH_REASON_UNSPECIFIED") == 0)
        word = ncalls ? "tool_calls" : "stop";
    else if (strcmp(f, "MAX_TOKENS") == 0)
        word = "length";
    for (size_t i = 0; !word && i < sizeof(filtered) / sizeof(filtered[0]); i++)
        if (strcmp(f, filtered[i]) == 0)
            word = "content_filter";
    if (word) {
        snprintf(out, outlen, "%s", word);
        return;
    }
    size_t n = 0;
    for (; f[n] && n + 1 < outlen; n++)
        out[n] = (char)(f[n] >= 'A' && f[n] <= 'Z' ? f[n] - 'A' + 'a' : f[n]);
    out[n] = '\0';
}

/* One GenerateContentResponse (a plain answer, or one chunk of a stream). */
static int gm_chunk(struct gm_ctx *c, const json_t *root, unsigned prior)
{
    gm_usage(c, json_object_get(root, "usageMetadata"));
    const char *blocked = eph_json_str(json_object_get(root, "promptFeedback"), "blockReason");
    if (blocked)
        snprintf(c->blocked, sizeof(c->blocked), "%s", blocked);
    const json_t *cand = json_array_get(json_object_get(root, "candidates"), 0);
    const json_t *parts = json_object_get(json_object_get(cand, "content"), "parts");
    size_t i;
    const json_t *part;
    json_array_foreach(parts, i, part)
    {
        const json_t *fc = json_object_get(part, "functionCall");
        const char *text = eph_json_str(part, "text");
        if (json_is_true(json_object_get(part, "thought")))
            continue; /* a thought summary: not the answer */
        if (json_is_object(fc)) {
            char *args = eph_model_arguments(json_object_get(fc, "args"));
            int rc = args ? eph_model_add_call(&c->calls, eph_json_str(fc, "id"),
                                               eph_json_str(fc, "name"), args,
                                               prior + (unsigned)c->calls.ncalls + 1)
                          : -ENOMEM;
            free(args);
            if (rc) {
                snprintf(c->h.msg, sizeof(c->h.msg),
                         rc == -EMSGSIZE ? "gemini: more than 128 tool calls in one answer"
                                         : "gemini: out of memory");
                return rc;
            }
        } else if (text && eph_buf_appends(&c->content, text)) {
            snprintf(c->h.msg, sizeof(c->h.msg), "gemini: response too large");
            return -EMSGSIZE;
        }
    }
    const char *finish = eph_json_str(cand, "finishReason");
    if (finish && finish[0])
        snprintf(c->finish, sizeof(c->finish), "%s", finish);
    return 0;
}

/* The answer assembled into resp. */
static int gm_end(void *ctx, unsigned prior, struct eph_model_response *resp, char *err,
                  size_t errlen)
{
    struct gm_ctx *c = ctx;
    (void)prior;
    if (!c->finish[0] && !c->blocked[0]) {
        snprintf(err, errlen, "gemini: answer ended before its finishReason");
        return -EPROTO;
    }
    resp->calls = c->calls.calls;
    resp->ncalls = c->calls.ncalls;
    c->calls.calls = NULL;
    c->calls.ncalls = 0;
    if (c->content.len || resp->ncalls == 0) {
        resp->content = eph_buf_steal(&c->content);
        if (!resp->content)
            goto nomem;
    }
    char word[64];
    if (c->blocked[0]) /* the prompt itself was refused: no candidate */
        snprintf(word, sizeof(word), "content_filter");
    else
        gm_finish(c->finish, resp->ncalls, word, sizeof(word));
    resp->finish_reason = strdup(word);
    if (!resp->finish_reason)
        goto nomem;
    return 0;
nomem:
    snprintf(err, errlen, "gemini: out of memory");
    return -ENOMEM;
}

static int gm_parse(void *ctx, const char *body, size_t len, unsigned prior,
                    struct eph_model_response *resp, char *err, size_t errlen)
{
    struct gm_ctx *c = ctx;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(root)) {
        /* never jerr.text: it quotes the body, which may quote the prompt */
        snprintf(err, errlen, "gemini: response is not a json object (%zu bytes)", len);
        rc = -EPROTO;
    } else if (json_object_get(root, "error")) {
        char msg[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(body, len, c->h.secret, msg, sizeof(msg));
        snprintf(err, errlen, "gemini: error in the response: %s", msg);
        rc = -EIO;
    } else if (!json_is_array(json_object_get(root, "candidates")) &&
               !json_object_get(root, "promptFeedback")) {
        snprintf(err, errlen, "gemini: response has no candidates");
        rc = -EPROTO;
    } else if ((rc = gm_chunk(c, root, prior))) {
        snprintf(err, errlen, "%s", c->h.msg);
    } else {
        rc = gm_end(c, prior, resp, err, errlen);
    }
    json_decref(root);
    return rc;
}

static int gm_on_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct gm_ctx *c = ctx;
    (void)event;
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(chunk)) {
        snprintf(c->h.msg, sizeof(c->h.msg), "gemini: stream event is not a json object");
        rc = -EPROTO;
    } else if (json_object_get(chunk, "error")) {
        char m[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(data, len, c->h.secret, m, sizeof(m));
        snprintf(c->h.msg, sizeof(c->h.msg), "gemini: error in the stream: %s", m);
        rc = -EAGAIN; /* an error after a 200 is the server's trouble: try again */
    } else {
        rc = gm_chunk(c, chunk, 0);
    }
    json_decref(chunk);
    return rc;
}

/* ---- errors ---- */

/* "23s" or "1.5s" (google.rpc.RetryInfo.retryDelay, a Duration) in milliseconds; 0 when not. */
static uint64_t gm_duration_ms(const char *s)
{
    if (!s)
        return 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || strcmp(end, "s") != 0 || !(v > 0) || v > 3600)
        return 0;
    return (uint64_t)(v * 1000);
}

/*
 * 408, 409, 429 and 5xx may succeed later, except a 429 whose message says the quota itself is
 * used up ("check your plan and billing details"). A RetryInfo in error.details gives the wait.
 */
static bool gm_retryable(long status, const char *body, size_t len, uint64_t *retry_after_ms)
{
    if (!eph_http_status_retryable(status))
        return false;
    json_error_t jerr;
    json_t *root = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
    const json_t *e = json_object_get(root, "error");
    const char *msg = eph_json_str(e, "message");
    bool retry = !(status == 429 && msg && strstr(msg, "billing"));
    size_t i;
    const json_t *d;
    json_array_foreach(json_object_get(e, "details"), i, d)
    {
        const char *type = eph_json_str(d, "@type");
        uint64_t ms = gm_duration_ms(eph_json_str(d, "retryDelay"));
        if (type && strstr(type, "RetryInfo") && ms)
            *retry_after_ms = ms;
    }
    json_decref(root);
    return retry;
}

/* ---- the entry ---- */

/* Prices as Google lists them (paid tier, prompts up to 200k tokens). */
static const struct eph_provider_model gm_key_models[] = {
    {"gemini/gemini-2.5-pro", "gemini-2.5-pro", 1250000, 125000, 0, 10000000, 4096},
    {"gemini/gemini-2.5-flash", "gemini-2.5-flash", 300000, 30000, 0, 2500000, 4096},
};

/* Gemini bills its implicit cache's writes as plain input; its framing of tools and turns is
 * small. */
const struct eph_http_provider eph_provider_gemini = {
    .ops = EPH_HTTP_OPS("gemini"),
    .default_base = "https://generativelanguage.googleapis.com/v1beta",
    .path = "models/{model}:generateContent",
    .stream_path = "models/{model}:streamGenerateContent?alt=sse",
    .strip_prefix = true,
    .auth_header = "x-goog-api-key: ",
    .caps = EPH_PROVIDER_STREAM | EPH_PROVIDER_TOOLS | EPH_PROVIDER_STREAM_USAGE,
    .cache_write = EPH_CACHE_WRITE_AS_INPUT,
    .input_overhead_tokens = 256,
    .key_env = "GEMINI_API_KEY",
    .key_models = gm_key_models,
    .nkey_models = sizeof(gm_key_models) / sizeof(gm_key_models[0]),
    .ctx_size = sizeof(struct gm_ctx),
    .ctx_init = gm_ctx_init,
    .ctx_release = gm_ctx_release,
    .build = gm_body,
    .parse = gm_parse,
    .on_event = gm_on_event,
    .stream_end = gm_end,
    .usage = gm_usage_to_resp,
    .retryable = gm_retryable,
};
