/*
 * providers.h - the model providers as a table (docs/MODELS.md, "Adding a provider").
 *
 * An HTTP provider is one entry, struct eph_http_provider, in its own file: where it listens, how
 * it authenticates, how a request is built and an answer (plain or streamed) parsed, how its
 * errors are classified, what it can do, how it bills, and the models a server offers when its
 * key is set. Everything else is shared (http_model.c): the attempt over http_client.c, the
 * metering and retries (model.c), streaming, idle timeouts, the key, the connection pool.
 * model.c's table lists the entries; adding a provider is one file and one line there.
 */
#ifndef EPH_PROVIDERS_H
#define EPH_PROVIDERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/http_client.h"
#include "agent/model.h"

struct eph_http_model;

/* What every provider's parse state starts with: the shared flow reads it. */
struct eph_parse_head {
    char msg[320];      /* why an event handler failed */
    const char *secret; /* never in a message */
    bool usage_final;   /* the provider gave the attempt's whole usage */
    bool done;          /* the stream said its answer is complete */
};

/* A model a server offers when the provider's key variable is set and the configuration names
 * no models (daemon/key_models.c). Prices in micro-dollars per million tokens. */
struct eph_provider_model {
    const char *id, *upstream;
    uint64_t in, cached, write, out;
    uint32_t max_output;
};

/* Capability flags. */
#define EPH_PROVIDER_STREAM 1u       /* can answer as an event stream ("stream": true) */
#define EPH_PROVIDER_TOOLS 2u        /* tool calls */
#define EPH_PROVIDER_STREAM_USAGE 4u /* asks for, and gets, usage at the end of a stream */

/* How cache writes are billed by default. */
enum eph_cache_write_rule {
    EPH_CACHE_WRITE_AS_INPUT, /* at the input price */
    EPH_CACHE_WRITE_PREMIUM,  /* 5 minutes at 1.25 times the input price, 1 hour at twice it */
};

struct eph_http_provider {
    struct eph_model_ops ops; /* first: eph_model_provider() hands out &entry->ops */
    const char *default_base; /* NULL: the model's base_url is required */
    const char *path;         /* after the base; "{model}" becomes the upstream model name */
    const char *stream_path;  /* the path when streaming; NULL: path */
    bool strip_prefix;        /* the upstream name is the id after its last '/' */
    const char *auth_header;  /* "Authorization: Bearer " and the key after it */
    const char *headers[3];   /* fixed extra headers (NULL-terminated) */
    unsigned caps;
    /* billing defaults (daemon/config.c, daemon/key_models.c) */
    enum eph_cache_write_rule cache_write;
    uint32_t input_overhead_tokens;
    bool stream_by_default; /* for the key models */
    const char *key_env;
    const struct eph_provider_model *key_models;
    size_t nkey_models;
    /* the parse state of one attempt: ctx_size bytes starting with struct eph_parse_head */
    size_t ctx_size;
    void (*ctx_init)(void *ctx);
    void (*ctx_release)(void *ctx);
    /* The request body (json_dumps'ed, free() it); NULL with *rc: -EINVAL (a message in err) or
     * -ENOMEM. */
    char *(*build)(const struct eph_http_model *m, const struct eph_model_request *req, int *rc,
                   char *err, size_t errlen);
    /* A whole 2xx JSON body into resp. 0, -EPROTO, -EMSGSIZE, -EIO (an error object), -ENOMEM. */
    int (*parse)(void *ctx, const char *body, size_t len, unsigned prior,
                 struct eph_model_response *resp, char *err, size_t errlen);
    /* One event of a stream; -EAGAIN for an error event (worth another attempt), EPH_SSE_STOP at
     * the end; a message in the head's msg on error. */
    eph_sse_event_fn on_event;
    /* After the stream: the answer it assembled into resp. */
    int (*stream_end)(void *ctx, unsigned prior, struct eph_model_response *resp, char *err,
                      size_t errlen);
    /* The usage known so far into resp (usage_final from the head). */
    void (*usage)(const void *ctx, struct eph_model_response *resp);
    /* An error answer: whether another attempt may succeed, and the wait the body asks for
     * (*retry_after_ms, left alone when it says none). */
    bool (*retryable)(long status, const char *body, size_t len, uint64_t *retry_after_ms);
    /* Optional: after open, and after an HTTP error (true: the model changed its request to suit
     * the server, retry at once). */
    void (*opened)(struct eph_http_model *m);
    bool (*refused)(struct eph_http_model *m, long status, const char *msg);
};

/* The entries (one file each) and the replay model. */
extern const struct eph_http_provider eph_provider_openai;            /* openai.c */
extern const struct eph_http_provider eph_provider_openai_compatible; /* openai.c */
extern const struct eph_http_provider eph_provider_anthropic;         /* anthropic.c */
extern const struct eph_http_provider eph_provider_gemini;            /* gemini.c */
extern const struct eph_model_ops eph_model_replay_ops;               /* replay.c */
#define eph_model_openai_ops (eph_provider_openai.ops)
#define eph_model_anthropic_ops (eph_provider_anthropic.ops)
#define eph_model_gemini_ops (eph_provider_gemini.ops)

/* The ops every HTTP provider's entry has (http_model.c). */
int eph_http_open(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                  size_t errlen);
int eph_http_call(struct eph_model *m, const struct eph_model_request *req,
                  struct eph_model_response *resp, char *err, size_t errlen);
int eph_http_input_bound(struct eph_model *m, const struct eph_model_request *req, uint64_t *tokens,
                         char *err, size_t errlen);
void eph_http_free(struct eph_model *m);
#define EPH_HTTP_OPS(provider_name)                                                                \
    {                                                                                              \
        .name = provider_name, .open = eph_http_open, .call = eph_http_call,                       \
        .input_bound = eph_http_input_bound, .free = eph_http_free                                 \
    }

/* The table (model.c): the HTTP entries in order, NULL after the last. */
extern const struct eph_http_provider *const eph_http_providers[];
/* The entry of a provider name, NULL for replay or an unknown name. */
const struct eph_http_provider *eph_http_provider_find(const char *name);
/* The entry of an opened model, NULL when it is not an HTTP provider's. */
const struct eph_http_provider *eph_http_provider_of(const struct eph_model *m);

/*
 * Streaming (SSE) instead of one JSON answer, for a model of a provider that can stream; off by
 * default, since it is what every OpenAI-compatible server handles (older llama.cpp and Ollama
 * refuse or mangle tools with "stream": true). Call it before the model is shared between
 * threads. 0, or -EINVAL for a model of a provider that cannot.
 */
int eph_model_set_stream(struct eph_model *m, bool stream);

/* What an HTTP provider's model holds. base comes first: ops get &base and cast back. */
struct eph_http_model {
    struct eph_model base;
    const struct eph_http_provider *prov;
    char *url;                /* base_url + the provider's path */
    char *stream_url;         /* base_url + its stream path */
    char *key;                /* the API key, or NULL (no api_key_env, or the variable is unset) */
    bool key_missing;         /* api_key_env names a variable that is unset or empty */
    char *upstream;           /* the model name sent on the wire */
    uint32_t idle_timeout_ms; /* the longest silence of the server within an attempt */
    bool stream;
    atomic_bool alt;            /* a wire choice the provider learns from the server (openai: send
                                   max_completion_tokens) */
    struct eph_http_pool *pool; /* the open connections to the provider, reused across calls */
};
/* The most idle connections a model keeps open to its provider (one per run calling it at once,
 * up to this). */
#define EPH_HTTP_MODEL_MAX_IDLE 32

/* The max_tokens to send: the request's, never above the model's max_output_tokens; the model's
 * when the request says 0; 1024 when neither says. */
uint32_t eph_model_max_tokens(const struct eph_model_config *cfg,
                              const struct eph_model_request *req);

/* How many tool calls the assistant messages of the conversation hold: made-up ids continue from
 * there ("call_<n>"), so they stay unique within a conversation. */
unsigned eph_model_count_calls(const json_t *messages);

/* A token count from a usage field: a non-negative integer (or an integral real), else 0. */
uint64_t eph_model_json_tokens(const json_t *v);

/* After a failed attempt: drops the half-built answer (content, calls, finish reason, refusal),
 * keeps the usage and how the attempt went. */
void eph_model_response_drop_answer(struct eph_model_response *r);

/* Whether an answer with this HTTP status and error body is worth another attempt: 1 for 408,
 * 409, 429 and 5xx, except a 429 that says the quota or the billing is the problem
 * (insufficient_quota); 0 otherwise. */
int eph_model_retry_class(long status, const char *body, size_t len);

/* Appends a tool call to r (copies). id NULL or "" gets "call_<n>"; name NULL becomes "";
 * arguments NULL becomes "{}". 0, -EMSGSIZE past EPH_MODEL_MAX_CALLS, -ENOMEM. */
#define EPH_MODEL_MAX_CALLS 128
int eph_model_add_call(struct eph_model_response *r, const char *id, const char *name,
                       const char *arguments, unsigned n) __attribute__((warn_unused_result));

/* A tool call's arguments as the raw string the loop gets: a string kept as is, an object (or
 * other JSON) serialised, nothing as "{}". NULL on -ENOMEM. */
char *eph_model_arguments(const json_t *v);

/* An object field as a string, NULL when absent or not a string. */
const char *eph_json_str(const json_t *o, const char *key);

/*
 * One answer body parsed as provider p parses what comes back from a 2xx: a JSON body, or with
 * stream an event stream (SSE), with the same caps and checks as a real call. For the fuzz
 * drivers (tests/fuzz/) and tests; the calls use the same code. prior is the number of tool calls
 * already in the conversation (made-up ids continue from it). resp is filled as by ops->call,
 * usage and usage_missing included; release it even on error. 0, -EPROTO, -EMSGSIZE, -EIO (an
 * error object or event in the answer), -ENOMEM; a message in err.
 */
int eph_provider_parse_answer(const struct eph_http_provider *p, const char *body, size_t len,
                              bool stream, unsigned prior, struct eph_model_response *resp,
                              char *err, size_t errlen) __attribute__((warn_unused_result));

#endif
