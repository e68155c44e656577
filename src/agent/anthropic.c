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

#define SSE_LINE_MAX (1u << 20)
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
    struct eph_buf content;
    struct an_block blocks[MAX_BLOCKS];
    size_t nblocks;
    char stop[64];
    bool done;        /* message_stop */
    bool have_usage;  /* some usage was reported */
    bool final_usage; /* the answer's last word on usage (message_delta, or a plain answer) */
    uint64_t input, cache_read, cache_write, cache_write_5m, cache_write_1h, output;
    bool split_writes; /* usage.cache_creation said how the writes split by lifetime */
    char msg[320];     /* why an event handler failed */
    const char *secret;
};

static void an_ctx_init(struct an_ctx *c, const char *secret)
{
    memset(c, 0, sizeof(*c));
    c->secret = secret;
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

static void an_ctx_release(struct an_ctx *c)
{
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

static void an_usage_to_resp(const struct an_ctx *c, struct eph_model_response *r)
{
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
    r->usage_final = c->final_usage;
}

/* ---- the request ---- */

static const char *str_field(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Adds block to the last message when it has the same role, else to a new message. Steals
 * block (even on error). */
static int push_block(json_t *msgs, const char *role, json_t *block)
{
    if (!block)
        return -ENOMEM;
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *lrole = str_field(last, "role");
    if (last && lrole && strcmp(lrole, role) == 0)
        return json_array_append_new(json_object_get(last, "content"), block) ? -ENOMEM : 0;
    json_t *msg = json_pack("{s:s,s:[o]}", "role", role, "content", block);
    if (!msg)
        return -ENOMEM; /* json_pack frees what "o" stole on failure */
    return json_array_append_new(msgs, msg) ? -ENOMEM : 0;
}

static json_t *an_input(const char *arguments)
{
    if (arguments) {
        json_error_t jerr;
        json_t *v = json_loads(arguments, 0, &jerr);
        if (json_is_object(v))
            return v;
        json_decref(v);
    }
    return json_object();
}

static int an_message(json_t *msgs, struct eph_buf *system, const json_t *msg, size_t i, char *err,
                      size_t errlen)
{
    const char *role = str_field(msg, "role");
    const char *content = str_field(msg, "content");
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
            const char *id = str_field(call, "id"), *name = str_field(call, "name");
            int rc = push_block(msgs, "assistant",
                                json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                          id ? id : "", "name", name ? name : "", "input",
                                          an_input(str_field(call, "arguments"))));
            if (rc)
                return rc;
        }
        return 0;
    }
    if (strcmp(role, "tool") == 0) {
        const char *id = str_field(msg, "tool_call_id");
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
            const char *name = str_field(t, "name"), *desc = str_field(t, "description");
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

/* A tool_use input as the raw arguments string: objects serialised, a string (not what the API
 * sends, but a proxy might) kept as is. */
static char *an_arguments(const json_t *input)
{
    if (json_is_string(input))
        return strdup(json_string_value(input));
    if (!input || json_is_null(input))
        return strdup("{}");
    return json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY);
}

static int an_parse_plain(const char *body, size_t len, unsigned prior, struct an_ctx *c,
                          struct eph_model_response *resp, char *err, size_t errlen)
{
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
    c->final_usage = c->have_usage;
    const char *type = str_field(root, "type");
    if ((type && strcmp(type, "error") == 0) || json_is_object(json_object_get(root, "error"))) {
        char msg[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(body, len, c->secret, msg, sizeof(msg));
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
        const char *bt = str_field(block, "type");
        if (!bt)
            continue;
        if (strcmp(bt, "text") == 0 && str_field(block, "text")) {
            if (eph_buf_appends(&text, str_field(block, "text")))
                goto nomem;
        } else if (strcmp(bt, "tool_use") == 0) {
            char *args = an_arguments(json_object_get(block, "input"));
            if (!args)
                goto nomem;
            rc = eph_model_add_call(resp, str_field(block, "id"), str_field(block, "name"), args,
                                    prior + (unsigned)resp->ncalls + 1);
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
    resp->finish_reason = strdup(an_finish(str_field(root, "stop_reason"), resp->ncalls));
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
        snprintf(c->msg, sizeof(c->msg), "anthropic: content block index %lld out of range",
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
        snprintf(c->msg, sizeof(c->msg), "anthropic: stream event is not a json object");
        rc = -EPROTO;
        goto done;
    }
    const char *type = str_field(chunk, "type");
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
        const char *bt = str_field(cb, "type");
        b->seen = true;
        if (bt && strcmp(bt, "tool_use") == 0) {
            const char *id = str_field(cb, "id"), *name = str_field(cb, "name");
            const json_t *input = json_object_get(cb, "input");
            b->tool = true;
            eph_buf_reset(&b->id);
            eph_buf_reset(&b->name);
            if ((id && eph_buf_appends(&b->id, id)) || (name && eph_buf_appends(&b->name, name)))
                goto too_large;
            if (input && !(json_is_object(input) && json_object_size(input) == 0)) {
                free(b->start_input);
                b->start_input = an_arguments(input);
            }
        } else if (bt && strcmp(bt, "text") == 0 && str_field(cb, "text")) {
            if (eph_buf_appends(&c->content, str_field(cb, "text")))
                goto too_large;
        }
    } else if (strcmp(type, "content_block_delta") == 0) {
        struct an_block *b = an_block_at(c, chunk);
        if (!b) {
            rc = -EPROTO;
            goto done;
        }
        const json_t *d = json_object_get(chunk, "delta");
        const char *dt = str_field(d, "type");
        if (dt && strcmp(dt, "text_delta") == 0 && str_field(d, "text")) {
            if (eph_buf_appends(&c->content, str_field(d, "text")))
                goto too_large;
        } else if (dt && strcmp(dt, "input_json_delta") == 0 && str_field(d, "partial_json")) {
            if (eph_buf_appends(&b->json, str_field(d, "partial_json")))
                goto too_large;
        }
    } else if (strcmp(type, "message_delta") == 0) {
        const char *stop = str_field(json_object_get(chunk, "delta"), "stop_reason");
        if (stop)
            snprintf(c->stop, sizeof(c->stop), "%s", stop);
        const json_t *u = json_object_get(chunk, "usage");
        an_usage(c, u);
        if (json_is_object(u))
            c->final_usage = true;
    } else if (strcmp(type, "message_stop") == 0) {
        c->done = true;
        rc = EPH_SSE_STOP; /* the end, whether or not the server closes the connection */
    } else if (strcmp(type, "error") == 0) {
        char m[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(data, len, c->secret, m, sizeof(m));
        snprintf(c->msg, sizeof(c->msg), "anthropic: error in the stream: %s", m);
        rc = -EAGAIN; /* overloaded_error and the like, after a 200: worth another attempt */
    }
    /* ping, content_block_stop and unknown events: nothing to do */
    goto done;
too_large:
    snprintf(c->msg, sizeof(c->msg), "anthropic: response too large");
    rc = -EMSGSIZE;
done:
    json_decref(chunk);
    return rc;
}

static int an_stream_to_resp(struct an_ctx *c, unsigned prior, struct eph_model_response *resp,
                             char *err, size_t errlen)
{
    if (!c->done && !c->stop[0]) {
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

/* ---- the answer, alone (fuzz drivers) ---- */

int eph_anthropic_parse_answer(const char *body, size_t len, bool stream, unsigned prior,
                               struct eph_model_response *resp, char *err, size_t errlen)
{
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    struct an_ctx *c = malloc(sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "anthropic: out of memory");
        return -ENOMEM;
    }
    an_ctx_init(c, NULL);
    int rc;
    if (stream) {
        rc = eph_sse_parse(body, len, SSE_LINE_MAX, an_on_event, c);
        if (rc == EPH_SSE_STOP)
            rc = 0;
        if (rc)
            snprintf(err, errlen, "%s", c->msg[0] ? c->msg : "anthropic: bad event stream");
        if (rc == -EAGAIN)
            rc = -EIO;
        if (!rc)
            rc = an_stream_to_resp(c, prior, resp, err, errlen);
    } else {
        rc = an_parse_plain(body, len, prior, c, resp, err, errlen);
    }
    an_usage_to_resp(c, resp);
    resp->usage_missing = rc == 0 && !c->final_usage;
    an_ctx_release(c);
    free(c);
    return rc;
}

/* ---- ops ---- */

static int anthropic_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                          size_t errlen)
{
    struct eph_http_model *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "anthropic: out of memory");
        return -ENOMEM;
    }
    int rc = eph_http_model_init(m, &eph_model_anthropic_ops, cfg, "https://api.anthropic.com/v1",
                                 "messages", false, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    *out = &m->base;
    return 0;
}

static void anthropic_free(struct eph_model *base)
{
    if (!base)
        return;
    struct eph_http_model *m = (struct eph_http_model *)base;
    eph_http_model_release(m);
    free(m);
}

static int anthropic_input_bound(struct eph_model *base, const struct eph_model_request *req,
                                 uint64_t *tokens, char *err, size_t errlen)
{
    struct eph_http_model *m = (struct eph_http_model *)base;
    int rc;
    char *body = an_body(m, req, &rc, err, errlen);
    if (!body)
        return rc;
    *tokens = eph_http_model_input_bound(m, strlen(body));
    free(body);
    return 0;
}

/* One attempt (eph_model_call retries). */
static int anthropic_call(struct eph_model *base, const struct eph_model_request *req,
                          struct eph_model_response *resp, char *err, size_t errlen)
{
    struct eph_http_model *m = (struct eph_http_model *)base;
    const struct eph_model_config *cfg = m->base.cfg;
    memset(resp, 0, sizeof(*resp));
    err[0] = '\0';
    if (m->key_missing) {
        snprintf(err, errlen, "anthropic: environment variable '%s' is not set", cfg->api_key_env);
        return -EIO;
    }
    int rc;
    char *body = an_body(m, req, &rc, err, errlen);
    if (!body)
        return rc;
    struct an_ctx *c = malloc(sizeof(*c));
    char *auth = NULL;
    if (!c || (m->key && asprintf(&auth, "x-api-key: %s", m->key) < 0)) {
        auth = NULL;
        free(c);
        free(body);
        snprintf(err, errlen, "anthropic: out of memory");
        return -ENOMEM;
    }
    an_ctx_init(c, m->key);
    unsigned prior = eph_model_count_calls(req->messages);
    const char *headers[] = {
        "Content-Type: application/json",
        m->stream ? "Accept: text/event-stream" : "Accept: application/json",
        "anthropic-version: " ANTHROPIC_VERSION,
        "Expect:",
        auth,
        NULL,
    };
    struct eph_http_request hr = {
        .what = "anthropic",
        .url = m->url,
        .headers = headers,
        .body = body,
        .body_len = strlen(body),
        .deadline_ns = req->deadline_ns,
        .idle_timeout_ms = m->idle_timeout_ms,
        .cancel = req->cancel,
        .max_body = EPH_MODEL_RESPONSE_MAX,
        .max_attempts = 1,
        .on_event = m->stream ? an_on_event : NULL,
        .sse_line_max = SSE_LINE_MAX,
        .event_error = c->msg,
        .ctx = c,
        .secret = m->key,
        .pool = m->pool,
    };
    struct eph_http_response hresp;
    rc = eph_http_post(&hr, &hresp, err, errlen);
    resp->sent = hresp.sent;
    resp->http_status = hresp.status;
    resp->retry_after_ms = hresp.retry_after_ms;
    if (rc) {
        /* err says why; an overloaded_error event after message_start, a lost connection and
         * an idle server may do better next time */
        resp->retryable = hresp.transient;
    } else if (hresp.status >= 200 && hresp.status < 300) {
        const char *data = hresp.body.data ? hresp.body.data : "";
        bool sniffed = !hresp.streamed && m->stream && eph_sse_sniff(data, hresp.body.len);
        if (sniffed) /* an event stream under another content type */
            rc = eph_model_parse_sniffed(data, hresp.body.len, an_on_event, c, c->msg, "anthropic",
                                         &resp->retryable, err, errlen);
        if (rc)
            ; /* err says why */
        else if (hresp.streamed || sniffed)
            rc = an_stream_to_resp(c, prior, resp, err, errlen);
        else
            rc = an_parse_plain(data, hresp.body.len, prior, c, resp, err, errlen);
    } else {
        char msg[EPH_HTTP_ERROR_MAX];
        eph_http_error_message(hresp.body.data, hresp.body.len, m->key, msg, sizeof(msg));
        rc = -EIO;
        snprintf(err, errlen, "anthropic: http %ld%s%s", hresp.status, msg[0] ? ": " : "", msg);
        resp->retryable = eph_model_retry_class(hresp.status, hresp.body.data, hresp.body.len);
    }
    eph_http_response_release(&hresp);
    free(body);
    an_usage_to_resp(c, resp);
    if (rc == 0 && !c->final_usage)
        EPH_WARN("model", "anthropic: model '%s' reported no usage: the worst case is charged",
                 cfg->id ? cfg->id : "");
    an_ctx_release(c);
    free(c);
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    if (rc)
        eph_model_response_drop_answer(resp);
    return rc;
}

const struct eph_model_ops eph_model_anthropic_ops = {
    .name = "anthropic",
    .open = anthropic_open,
    .call = anthropic_call,
    .input_bound = anthropic_input_bound,
    .free = anthropic_free,
};
