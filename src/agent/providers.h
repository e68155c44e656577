/*
 * providers.h - the model providers eph_model_provider() knows (model.c holds the table), and the
 * pieces the two HTTP providers (openai.c, anthropic.c) share.
 */
#ifndef EPH_PROVIDERS_H
#define EPH_PROVIDERS_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/http_client.h"
#include "agent/model.h"

extern const struct eph_model_ops eph_model_openai_ops;    /* openai.c */
extern const struct eph_model_ops eph_model_anthropic_ops; /* anthropic.c */
extern const struct eph_model_ops eph_model_replay_ops;    /* replay.c */

/*
 * Streaming (SSE) instead of one JSON answer, for an openai or anthropic model; off by default,
 * since it is what every OpenAI-compatible server handles (older llama.cpp and Ollama refuse or
 * mangle tools with "stream": true). Call it before the model is shared between threads. 0, or
 * -EINVAL for a model of another provider.
 */
int eph_model_set_stream(struct eph_model *m, bool stream);

/* What an HTTP provider's model holds. base comes first: ops get &base and cast back. */
struct eph_http_model {
    struct eph_model base;
    char *url;                /* base_url + the provider's path */
    char *key;                /* the API key, or NULL (no api_key_env, or the variable is unset) */
    bool key_missing;         /* api_key_env names a variable that is unset or empty */
    char *upstream;           /* the model name sent on the wire */
    uint32_t idle_timeout_ms; /* the longest silence of the server within an attempt */
    bool stream;
    struct eph_http_pool *pool; /* the open connections to the provider, reused across calls */
};
/* The most idle connections a model keeps open to its provider (one per run calling it at once,
 * up to this). */
#define EPH_HTTP_MODEL_MAX_IDLE 32

/* Fills m from cfg: url = (cfg->base_url or default_base) + path; the key read from the
 * environment once (never logged); upstream = cfg->upstream_model, else the id, after its last
 * '/' when strip_prefix. 0, -EINVAL (bad base_url), -ENOMEM; a message in err. */
int eph_http_model_init(struct eph_http_model *m, const struct eph_model_ops *ops,
                        const struct eph_model_config *cfg, const char *default_base,
                        const char *path, bool strip_prefix, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Frees what init allocated; the key is wiped first. */
void eph_http_model_release(struct eph_http_model *m);

/* The max_tokens to send: the request's, never above the model's max_output_tokens; the model's
 * when the request says 0; 1024 when neither says. */
uint32_t eph_model_max_tokens(const struct eph_model_config *cfg,
                              const struct eph_model_request *req);

/* How many tool calls the assistant messages of the conversation hold: made-up ids continue from
 * there ("call_<n>"), so they stay unique within a conversation. */
unsigned eph_model_count_calls(const json_t *messages);

/* A token count from a usage field: a non-negative integer (or an integral real), else 0. */
uint64_t eph_model_json_tokens(const json_t *v);

/* A 2xx body that is an event stream under another content type, through the SSE parser with
 * on_event: 0 when it ended well ([DONE] / message_stop included), else the parser's or
 * on_event's error with the handler's message (msg, or "<what>: bad event stream") in err; an
 * error event inside (-EAGAIN) becomes -EIO and sets *retryable. */
int eph_model_parse_sniffed(const char *data, size_t len, eph_sse_event_fn on_event, void *ctx,
                            const char *msg, const char *what, bool *retryable, char *err,
                            size_t errlen) __attribute__((warn_unused_result));

/* After a failed attempt: drops the half-built answer (content, calls, finish reason, refusal),
 * keeps the usage and how the attempt went. */
void eph_model_response_drop_answer(struct eph_model_response *r);

/* Whether an answer with this HTTP status and error body is worth another attempt: 1 for 408,
 * 409, 429 and 5xx, except a 429 that says the quota or the billing is the problem
 * (insufficient_quota); 0 otherwise. */
int eph_model_retry_class(long status, const char *body, size_t len);

/* The input bound of an HTTP provider's request body: its bytes (every token stands for at least
 * one byte of the text it encodes, and the body holds every byte the model reads) plus the
 * model's input_overhead_tokens. */
uint64_t eph_http_model_input_bound(const struct eph_http_model *m, size_t body_len);

/* Appends a tool call to r (copies). id NULL or "" gets "call_<n>"; name NULL becomes "";
 * arguments NULL becomes "{}". 0, -EMSGSIZE past EPH_MODEL_MAX_CALLS, -ENOMEM. */
#define EPH_MODEL_MAX_CALLS 128
int eph_model_add_call(struct eph_model_response *r, const char *id, const char *name,
                       const char *arguments, unsigned n) __attribute__((warn_unused_result));

/*
 * One answer body parsed as the provider parses what comes back from a 2xx: a JSON body, or with
 * stream an event stream (SSE), with the same caps and checks as a real call. For the fuzz
 * drivers (tests/fuzz/) and tests; the calls use the same code. prior is the number of tool calls
 * already in the conversation (made-up ids continue from it). resp is filled as by ops->call,
 * usage and usage_missing included; release it even on error. 0, -EPROTO, -EMSGSIZE, -EIO (an
 * error object or event in the answer), -ENOMEM; a message in err.
 */
int eph_openai_parse_answer(const char *body, size_t len, bool stream, unsigned prior,
                            struct eph_model_response *resp, char *err, size_t errlen)
    __attribute__((warn_unused_result));
int eph_anthropic_parse_answer(const char *body, size_t len, bool stream, unsigned prior,
                               struct eph_model_response *resp, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
