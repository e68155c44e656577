/*
 * anthropic.c - the "anthropic" provider: the Messages API (POST {base_url}/messages) with
 * tool_use / tool_result content blocks.
 *
 * Mapping from the neutral conversation: system messages become the top-level "system"; an
 * assistant message becomes text and tool_use blocks; tool results become tool_result blocks of a
 * user message, and consecutive user-side messages (tool results, then perhaps a user text) are
 * merged into one, since the API wants user and assistant turns to alternate.
 *
 * tool_use.input must be an object, while the neutral format keeps the raw arguments string. A
 * string that parses as a JSON object is sent as that object; anything else is sent as {}. Only
 * calls the loop executed come back, and for malformed arguments the loop answers with a tool
 * error, so the model sees "your call with {} failed because the arguments were invalid" - the
 * raw text cannot be put in "input" without pretending the model wrote a field it did not.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "agent/model.h"
#include "agent/providers.h"
#include "common/buf.h"
#include "common/log.h"
#include "ledger/budget.h"

#define MAX_BLOCKS 256
#define ANTHROPIC_VERSION "2023-06-01"

struct an_block {
    bool seen;
    bool tool;
    struct eph_buf id;
    struct eph_buf name;
    struct eph_buf json; /* input_json_delta pieces */
    char *start_input;   /* the input of content_block_start, when not {} */
};

struct an_ctx {
    struct eph_parse_head h; /* first; usage_final: the answer's last word on usage
                                (message_delta, or a plain answer) */
    struct eph_buf content;
    struct an_block blocks[MAX_BLOCKS];
    size_t nblocks;
    char stop[64];
    bool have_usage; /* some usage was reported */
    uint64_t input, cache_read, cache_write, cache_write_5m, cache_write_1h, output;
    bool split_writes; /* usage.cache_creation said how the writes split by lifetime */
};

static void an_ctx_init(void *ctx)
{
    struct an_ctx *c = ctx;
    memset(c, 0, sizeof(*c));
    eph_buf_init(&c->content, EPH_MODEL_RESPONSE_MAX);
    for (size_t i = 0; i < MAX_BLOCKS; i++) {
        eph_buf_init(&c->blocks[i].id, 256);
        eph_buf_init(&c->blocks[i].name, 256);
        eph_buf_init(&c->blocks[i].json, EPH_MODEL_RESPONSE_MAX);
    }
}

static void an_ctx_clear_blocks(struct an_ctx *c)
{
    for (size_t i = 0; i < MAX_BLOCKS; i++) {
        struct an_block *b = &c->blocks[i];
        eph_buf_release(&b->id);
        eph_buf_release(&b->name);
        eph_buf_release(&b->json);
        free(b->start_input);
        b->start_input = NULL;
        b->seen = b->tool = false;
    }
    c->nblocks = 0;
}

static void an_ctx_release(void *ctx)
{
    struct an_ctx *c = ctx;
    eph_buf_release(&c->content);
    an_ctx_clear_blocks(c);
}

/* Usage fields present in u replace the ones known: message_start carries the input side,
 * message_delta the cumulative output (and, in newer versions, the input side again).
 * input_tokens excludes cache reads and writes; cache_creation, when present, splits the writes
 * by lifetime (5 minutes, 1 hour), which are billed at different prices. */
static void an_usage(struct an_ctx *c, const json_t *u)
{
    if (!json_is_object(u))
        return;
    c->have_usage = true;
    const json_t *v;
    if ((v = json_object_get(u, "input_tokens")))
        c->input = eph_model_json_tokens(v);
    if ((v = json_object_get(u, "cache_read_input_tokens")))
        c->cache_read = eph_model_json_tokens(v);
    if ((v = json_object_get(u, "cache_creation_input_tokens")))
        c->cache_write = eph_model_json_tokens(v);
    const json_t *cc = json_object_get(u, "cache_creation");
    if (json_is_object(cc)) {
        c->split_writes = true;
        c->cache_write_5m = eph_model_json_tokens(json_object_get(cc, "ephemeral_5m_input_tokens"));
        c->cache_write_1h = eph_model_json_tokens(json_object_get(cc, "ephemeral_1h_input_tokens"));
    }
    if ((v = json_object_get(u, "output_tokens")))
        c->output = eph_model_json_tokens(v);
}

static void an_usage_to_resp(const void *ctx, struct eph_model_response *r)
{
    const struct an_ctx *c = ctx;
    r->input_tokens = c->input;
    r->cached_input_tokens = c->cache_read;
    if (c->split_writes) {
        /* the split is authoritative; writes it does not cover are billed as 5-minute ones */
        uint64_t split = eph_tokens_add(c->cache_write_5m, c->cache_write_1h);
        r->cache_write_1h_tokens = c->cache_write_1h;
        r->cache_write_tokens =
            eph_tokens_add(c->cache_write_5m, c->cache_write > split ? c->cache_write - split : 0);
    } else {
        r->cache_write_tokens = c->cache_write;
    }
    r->output_tokens = c->output;
    r->usage_final = c->h.usage_final;
}

/* ---- the request ---- */

/* Adds block to the last message when it has the same role, else to a new message. Steals
 * block (even on error). */
static int push_block(json_t *msgs, const char *role, json_t *block)
{
    if (!block)
        return -ENOMEM;
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *lrole = eph_json_str(last, "role");
    if (last && lrole && strcmp(lrole, role) == 0)
        return json_array_append_new(json_object_get(last, "content"), block) ? -ENOMEM : 0;
    json_t *msg = json_pack("{s:s,s:[o]}", "role", role, "content", block);
    if (!msg)
        return -ENOMEM; /* json_pack frees what "o" stole on failure */
    return json_array_append_new(msgs, msg) ? -ENOMEM : 0;
}

/* The call's arguments as an object: the model's, or {} when they are not one (the call was
 * refused when it ran). NULL when the parser ran out of memory (a syntax error has a line, a parse
 * that failed without one did not read the text). */
static json_t *an_input(const char *arguments)
{
    if (arguments) {
        json_error_t jerr;
        json_t *v = json_loads(arguments, 0, &jerr);
        if (json_is_object(v))
            return v;
        json_decref(v);
        if (!v && jerr.line < 0)
            return NULL;
    }
    return json_object();
}

static int an_message(json_t *msgs, struct eph_buf *system, const json_t *msg, size_t i, char *err,
                      size_t errlen)
{
    const char *role = eph_json_str(msg, "role");
    const char *content = eph_json_str(msg, "content");
    if (!role) {
        snprintf(err, errlen, "anthropic: conversation message %zu has no role", i);
        return -EINVAL;
    }
    if (strcmp(role, "system") == 0) {
        if (!content || !content[0])
            return 0;
        int rc = 0;
        if (system->len)
            rc = eph_buf_appends(system, "\n\n");
        return rc ? rc : eph_buf_appends(system, content);
    }
    if (strcmp(role, "user") == 0) {
        /* empty text blocks are refused */
        if (!content || !content[0])
            return 0;
        return push_block(msgs, "user", json_pack("{s:s,s:s}", "type", "text", "text", content));
    }
    if (strcmp(role, "assistant") == 0) {
        if (content && content[0]) {
            int rc = push_block(msgs, "assistant",
                                json_pack("{s:s,s:s}", "type", "text", "text", content));
            if (rc)
                return rc;
        }
        size_t j;
        const json_t *call;
        json_array_foreach(json_object_get(msg, "tool_calls"), j, call)
        {
            const char *id = eph_json_str(call, "id"), *name = eph_json_str(call, "name");
            int rc = push_block(msgs, "assistant",
                                json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                          id ? id : "", "name", name ? name : "", "input",
                                          an_input(eph_json_str(call, "arguments"))));
            if (rc)
                return rc;
        }
        return 0;
    }
    if (strcmp(role, "tool") == 0) {
        const char *id = eph_json_str(msg, "tool_call_id");
        json_t *block = json_pack("{s:s,s:s,s:s}", "type", "tool_result", "tool_use_id",
                                  id ? id : "", "content", content ? content : "");
        if (block && json_is_true(json_object_get(msg, "is_error")) &&
            json_object_set_new(block, "is_error", json_true())) {
            json_decref(block);
            return -ENOMEM;
        }
        return push_block(msgs, "user", block);
    }
    snprintf(err, errlen, "anthropic: conversation message %zu has the unknown role '%.32s'", i,
             role);
    return -EINVAL;
}

static char *an_body(const struct eph_http_model *m, const struct eph_model_request *req, int *rc,
                     char *err, size_t errlen)
{
    char *out = NULL;
    struct eph_buf system;
    eph_buf_init(&system, EPH_MODEL_RESPONSE_MAX * 4);
    json_t *body = json_object(), *msgs = json_array();
    *rc = -ENOMEM;
    if (!body || !msgs || json_object_set_new(body, "model", json_string(m->upstream)) ||
        json_object_set_new(body, "max_tokens",
                            json_integer(eph_model_max_tokens(m->base.cfg, req))))
        goto nomem;
    size_t i;
    const json_t *msg;
    json_array_foreach(req->messages, i, msg)
    {
        *rc = an_message(msgs, &system, msg, i, err, errlen);
        if (*rc == -EINVAL)
            goto done;
        if (*rc)
            goto nomem;
    }
    if (system.len && json_object_set_new(body, "system", json_string(system.data)))
        goto nomem;
    if (json_object_set(body, "messages", msgs))
        goto nomem;
    if (json_array_size(req->tools) > 0) {
        json_t *tools = json_array();
        if (json_object_set_new(body, "tools", tools))
            goto nomem;
        const json_t *t;
        json_array_foreach(req->tools, i, t)
        {
            const json_t *params = json_object_get(t, "parameters");
            const char *name = eph_json_str(t, "name"), *desc = eph_json_str(t, "description");
            json_t *tool = json_pack("{s:s,s:o}", "name", name ? name : "", "input_schema",
                                     json_is_object(params)
                                         ? json_deep_copy(params)
                                         : json_pack("{s:s,s:{}}", "type", "object", "properties"));
            if (json_array_append_new(tools, tool))
                goto nomem;
            if (desc && json_object_set_new(tool, "description", json_string(desc)))
                goto nomem;
        }
    }
    if (m->stream && json_object_set_new(body, "stream", json_true()))
        goto nomem;
    out = json_dumps(body, JSON_COMPACT);
    if (!out)
        goto nomem;
    *rc = 0;
    goto done;
nomem:
    *rc = -ENOMEM;
    snprintf(err, errlen, "anthropic: out of memory");
done:
    eph_buf_release(&system);
    json_decref(msgs);
    json_decref(body);
    return out;
}

/* ---- the answer ---- */

static const char *an_finish(const char *stop, size_t ncalls)
{
    if (!stop || !stop[0])
        return ncalls ? "tool_calls" : "stop";
    if (strcmp(stop, "end_turn") == 0 || strcmp(stop, "stop_sequence") == 0)
        return ncalls ? "tool_calls" : "stop";
    if (strcmp(stop, "tool_use") == 0)
        return "tool_calls";
    if (strcmp(stop, "max_tokens") == 0 || strcmp(stop, "model_context_window_exceeded") == 0)
        return "length";
    return stop; /* "refusal" and the ones to come, as they are */
}

/* stop_reason "refusal": the text so far is the refusal (it may be empty). */
static int an_refusal(struct eph_model_response *resp)
{
    if (!resp->finish_reason || strcmp(resp->finish_reason, "refusal") != 0)
        return 0;
    resp->refusal = strdup(resp->content && resp->content[0] ? resp->content : "");
    return resp->refusal ? 0 : -ENOMEM;
}

static int an_parse_plain(void *ctx, const char *body, size_t len, unsigned prior,
                          struct eph_model_response *resp, char *err, size_t errlen)
{
    struct an_ctx *c = ctx;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    int rc = 0;
    struct eph_buf text;
    eph_buf_init(&text, EPH_MODEL_RESPONSE_MAX);
    if (!json_is_object(root)) {
        snprintf(err, errlen, "anthropic: response is not a json object (%zu bytes)", len);
        rc = -EPROTO;
        goto done;
    }
    an_usage(c, json_object_get(root, "usage"));
    c->h.usage_final = c->have_usage;
    const char *type = eph_json_str(root, "type");
    if ((type && strcmp(type, "error") == 0) || json_is_object(json_object_get(root, "error"))) {
        char msg[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(body, len, c->h.secret, msg, sizeof(msg));
        snprintf(err, errlen, "anthropic: error in the response: %s", msg);
        rc = -EIO;
        goto done;
    }
    const json_t *content = json_object_get(root, "content");
    if (!json_is_array(content)) {
        snprintf(err, errlen, "anthropic: response has no content");
        rc = -EPROTO;
        goto done;
    }
    size_t i;
    const json_t *block;
    json_array_foreach(content, i, block)
    {
        const char *bt = eph_json_str(block, "type");
        if (!bt)
            continue;
        if (strcmp(bt, "text") == 0 && eph_json_str(block, "text")) {
            if (eph_buf_appends(&text, eph_json_str(block, "text")))
                goto nomem;
        } else if (strcmp(bt, "tool_use") == 0) {
            char *args = eph_model_arguments(json_object_get(block, "input"));
            if (!args)
                goto nomem;
            rc = eph_model_add_call(resp, eph_json_str(block, "id"), eph_json_str(block, "name"),
                                    args, prior + (unsigned)resp->ncalls + 1);
            free(args);
            if (rc == -EMSGSIZE) {
                snprintf(err, errlen, "anthropic: more than %d tool calls in one answer",
                         EPH_MODEL_MAX_CALLS);
                goto done;
            }
            if (rc)
                goto nomem;
        }
        /* thinking, redacted_thinking, server tool blocks: not for the loop */
    }
    if (text.len || resp->ncalls == 0) {
        resp->content = eph_buf_steal(&text);
        if (!resp->content)
            goto nomem;
    }
    resp->finish_reason = strdup(an_finish(eph_json_str(root, "stop_reason"), resp->ncalls));
    if (!resp->finish_reason || an_refusal(resp))
        goto nomem;
    goto done;
nomem:
    rc = -ENOMEM;
    snprintf(err, errlen, "anthropic: out of memory");
done:
    eph_buf_release(&text);
    json_decref(root);
    return rc;
}

static struct an_block *an_block_at(struct an_ctx *c, const json_t *chunk)
{
    const json_t *jidx = json_object_get(chunk, "index");
    json_int_t idx = json_is_integer(jidx) ? json_integer_value(jidx) : 0;
    if (idx < 0 || idx >= MAX_BLOCKS) {
        snprintf(c->h.msg, sizeof(c->h.msg), "anthropic: content block index %lld out of range",
                 (long long)idx);
        return NULL;
    }
    if ((size_t)idx + 1 > c->nblocks)
        c->nblocks = (size_t)idx + 1;
    return &c->blocks[idx];
}

static int an_on_event(void *ctx, const char *event, const char *data, size_t len)
{
    struct an_ctx *c = ctx;
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, 0, &jerr);
    int rc = 0;
    if (!json_is_object(chunk)) {
        snprintf(c->h.msg, sizeof(c->h.msg), "anthropic: stream event is not a json object");
        rc = -EPROTO;
        goto done;
    }
    const char *type = eph_json_str(chunk, "type");
    if (!type)
        type = event;
    if (strcmp(type, "message_start") == 0) {
        an_usage(c, json_object_get(json_object_get(chunk, "message"), "usage"));
    } else if (strcmp(type, "content_block_start") == 0) {
        struct an_block *b = an_block_at(c, chunk);
        if (!b) {
            rc = -EPROTO;
            goto done;
        }
        const json_t *cb = json_object_get(chunk, "content_block");
        const char *bt = eph_json_str(cb, "type");
        b->seen = true;
        if (bt && strcmp(bt, "tool_use") == 0) {
            const char *id = eph_json_str(cb, "id"), *name = eph_json_str(cb, "name");
            const json_t *input = json_object_get(cb, "input");
            b->tool = true;
            eph_buf_reset(&b->id);
            eph_buf_reset(&b->name);
            if ((id && eph_buf_appends(&b->id, id)) || (name && eph_buf_appends(&b->name, name)))
                goto too_large;
            if (input && !(json_is_object(input) && json_object_size(input) == 0)) {
                free(b->start_input);
                b->start_input = eph_model_arguments(input);
            }
        } else if (bt && strcmp(bt, "text") == 0 && eph_json_str(cb, "text")) {
            if (eph_buf_appends(&c->content, eph_json_str(cb, "text")))
                goto too_large;
        }
    } else if (strcmp(type, "content_block_delta") == 0) {
        struct an_block *b = an_block_at(c, chunk);
        if (!b) {
            rc = -EPROTO;
            goto done;
        }
        const json_t *d = json_object_get(chunk, "delta");
        const char *dt = eph_json_str(d, "type");
        if (dt && strcmp(dt, "text_delta") == 0 && eph_json_str(d, "text")) {
            if (eph_buf_appends(&c->content, eph_json_str(d, "text")))
                goto too_large;
        } else if (dt && strcmp(dt, "input_json_delta") == 0 && eph_json_str(d, "partial_json")) {
            if (eph_buf_appends(&b->json, eph_json_str(d, "partial_json")))
                goto too_large;
        }
    } else if (strcmp(type, "message_delta") == 0) {
        const char *stop = eph_json_str(json_object_get(chunk, "delta"), "stop_reason");
        if (stop)
            snprintf(c->stop, sizeof(c->stop), "%s", stop);
        const json_t *u = json_object_get(chunk, "usage");
        an_usage(c, u);
        if (json_is_object(u))
            c->h.usage_final = true;
    } else if (strcmp(type, "message_stop") == 0) {
        c->h.done = true;
        rc = EPH_SSE_STOP; /* the end, whether or not the server closes the connection */
    } else if (strcmp(type, "error") == 0) {
        char m[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(data, len, c->h.secret, m, sizeof(m));
        snprintf(c->h.msg, sizeof(c->h.msg), "anthropic: error in the stream: %s", m);
        rc = -EAGAIN; /* overloaded_error and the like, after a 200: worth another attempt */
    }
    /* ping, content_block_stop and unknown events: nothing to do */
    goto done;
too_large:
    snprintf(c->h.msg, sizeof(c->h.msg), "anthropic: response too large");
    rc = -EMSGSIZE;
done:
    json_decref(chunk);
    return rc;
}

static int an_stream_to_resp(void *ctx, unsigned prior, struct eph_model_response *resp, char *err,
                             size_t errlen)
{
    struct an_ctx *c = ctx;
    if (!c->h.done && !c->stop[0]) {
        snprintf(err, errlen, "anthropic: stream ended before the answer was complete");
        return -EPROTO;
    }
    for (size_t i = 0; i < c->nblocks; i++) {
        struct an_block *b = &c->blocks[i];
        if (!b->seen || !b->tool)
            continue;
        /* the concatenated partial_json is kept raw, even when it does not parse (an answer cut
         * by max_tokens): the loop validates it */
        const char *args = b->json.len ? b->json.data : b->start_input ? b->start_input : "{}";
        int rc = eph_model_add_call(resp, b->id.data, b->name.data, args,
                                    prior + (unsigned)resp->ncalls + 1);
        if (rc == -EMSGSIZE) {
            snprintf(err, errlen, "anthropic: more than %d tool calls in one answer",
                     EPH_MODEL_MAX_CALLS);
            return rc;
        }
        if (rc)
            goto nomem;
    }
    if (c->content.len || resp->ncalls == 0) {
        resp->content = eph_buf_steal(&c->content);
        if (!resp->content)
            goto nomem;
    }
    resp->finish_reason = strdup(an_finish(c->stop, resp->ncalls));
    if (!resp->finish_reason || an_refusal(resp))
        goto nomem;
    return 0;
nomem:
    snprintf(err, errlen, "anthropic: out of memory");
    return -ENOMEM;
}

/* ---- the entry ---- */

static bool an_retryable(long status, const char *body, size_t len, uint64_t *retry_after_ms)
{
    (void)retry_after_ms; /* Anthropic says it in the Retry-After header */
    return eph_model_retry_class(status, body, len);
}

/* Prices as Anthropic lists them. */
static const struct eph_provider_model an_key_models[] = {
    {"anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", 3000000, 300000, 3750000, 15000000, 4096},
    {"anthropic/claude-haiku-4-5", "claude-haiku-4-5", 1000000, 100000, 1250000, 5000000, 4096},
};

/* Anthropic bills a 5-minute cache write at 1.25 times the input price and a 1-hour one at twice
 * it, and adds a tool-use system prompt of a few hundred tokens (at most 530 in its published
 * table). */
const struct eph_http_provider eph_provider_anthropic = {
    .ops = EPH_HTTP_OPS("anthropic"),
    .default_base = "https://api.anthropic.com/v1",
    .path = "messages",
    .auth_header = "x-api-key: ",
    .headers = {"anthropic-version: " ANTHROPIC_VERSION},
    .caps = EPH_PROVIDER_STREAM | EPH_PROVIDER_TOOLS | EPH_PROVIDER_STREAM_USAGE,
    .cache_write = EPH_CACHE_WRITE_PREMIUM,
    .input_overhead_tokens = 1024,
    .stream_by_default = true,
    .key_env = "ANTHROPIC_API_KEY",
    .key_models = an_key_models,
    .nkey_models = sizeof(an_key_models) / sizeof(an_key_models[0]),
    .ctx_size = sizeof(struct an_ctx),
    .ctx_init = an_ctx_init,
    .ctx_release = an_ctx_release,
    .build = an_body,
    .parse = an_parse_plain,
    .on_event = an_on_event,
    .stream_end = an_stream_to_resp,
    .usage = an_usage_to_resp,
    .retryable = an_retryable,
};
