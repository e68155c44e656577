/*
 * model.h - a language model behind one interface (struct eph_model_ops): openai, anthropic,
 * replay. Adding a provider is adding a file and one line in model.c.
 *
 * The conversation is kept provider-neutral as a jansson array of messages:
 *   {"role":"system","content":"..."}
 *   {"role":"user","content":"..."}
 *   {"role":"assistant","content":"..." or null,
 *    "tool_calls":[{"id":"call_1","name":"shell","arguments":"{\"command\":\"ls\"}"}]}
 *   {"role":"tool","tool_call_id":"call_1","name":"shell","content":"...", "is_error":true}
 *   ("is_error" only on a tool error, whose content is {"error": "..."})
 * "arguments" is the raw string the model produced: it may not be valid JSON, and the agent loop,
 * not the provider, validates it. Tools are declared as
 *   [{"name":"shell","description":"...","parameters":{JSON Schema}}]
 * and each provider translates both into its wire format.
 *
 * Everything a provider receives from the network is hostile: responses are size-capped, every
 * field is checked for type, and a malformed response is an error with a message, never a crash.
 */
#ifndef EPH_MODEL_H
#define EPH_MODEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct eph_model;

/* A model as configured (one entry of "models" in the config file). */
struct eph_model_config {
    char *id;          /* "openai/gpt-6-luna" */
    char *provider;    /* "openai", "anthropic", "replay" */
    char *base_url;    /* e.g. "https://api.openai.com/v1"; NULL for replay */
    char *api_key_env; /* name of the environment variable holding the key */
    char *transcripts; /* replay: folder of recorded examples */
    uint64_t input_micros_per_mtok;
    uint64_t output_micros_per_mtok;
    uint64_t cached_input_micros_per_mtok;
    uint32_t max_output_tokens;
    uint32_t timeout_seconds; /* per HTTP attempt (default 120) */
    char *upstream_model;     /* model name sent on the wire (default: id after the last '/'
                                 for openai, id for anthropic) */
    bool stream;              /* "stream": ask for Server-Sent Events (openai, anthropic) */
};

struct eph_model_request {
    json_t *messages;          /* borrowed; the neutral conversation */
    json_t *tools;             /* borrowed; may be an empty array */
    uint32_t max_tokens;       /* already lowered to what the budget allows */
    uint64_t deadline_ns;      /* CLOCK_MONOTONIC; abandon the call when it passes */
    const atomic_bool *cancel; /* abandon the call at once when it turns true; may be NULL */
    const char *prompt;        /* the run's original prompt (replay matches on it) */
};

struct eph_tool_call {
    char *id; /* never NULL: providers make one up when the model sent none */
    char *name;
    char *arguments; /* raw string, as received */
};

struct eph_model_response {
    char *content; /* final text, may be NULL when there are tool calls */
    struct eph_tool_call *calls;
    size_t ncalls;
    char *finish_reason;   /* provider's word, normalised: "stop", "tool_calls", "length",
                              or what it said */
    uint64_t input_tokens; /* as reported by the provider (uncached part) */
    uint64_t cached_input_tokens;
    uint64_t output_tokens;
    unsigned attempts; /* HTTP attempts made, retries included */
    bool replayed;
    bool usage_missing; /* the call succeeded but its answer reported no usage: the
                           token counts are 0 (or only what failed attempts reported)
                           and the worker charges the worst case it earmarked */
};

void eph_model_response_release(struct eph_model_response *r);

struct eph_model_ops {
    const char *name;
    /* Builds a model from its config; *out owned by the caller (free with ops->free). */
    int (*open)(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                size_t errlen);
    /* One model call with retries on 429/5xx/network errors, within the deadline. 0, or a negative
     * errno and a lowercase message in err: -ETIMEDOUT, -ECANCELED, -EPROTO (bad response),
     * -EMSGSIZE (response over the cap), -EIO (transport or HTTP error after retries), -ENOENT
     * (replay: no recording for this prompt). On error resp may still carry usage that was
     * reported and must be paid for. */
    int (*call)(struct eph_model *m, const struct eph_model_request *req,
                struct eph_model_response *resp, char *err, size_t errlen);
    void (*free)(struct eph_model *m);
};

struct eph_model {
    const struct eph_model_ops *ops;
    const struct eph_model_config *cfg; /* borrowed from the configuration */
};

const struct eph_model_ops *eph_model_provider(const char *name);

/* Upper bound of a response body from a provider. */
#define EPH_MODEL_RESPONSE_MAX (8u << 20)

#endif
