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

#include "common/config.h"

struct eph_model;

/* A model as configured (one entry of "models" in the config file): struct eph_model_config,
 * in common/config.h. */

struct eph_model_request {
    json_t *messages;          /* borrowed; the neutral conversation */
    json_t *tools;             /* borrowed; may be an empty array */
    uint32_t max_tokens;       /* 0: the model's max_output_tokens; eph_model_call lowers it to
                                  what the meter authorises */
    uint64_t deadline_ns;      /* CLOCK_MONOTONIC; abandon the call when it passes */
    const atomic_bool *cancel; /* abandon the call at once when it turns true; may be NULL */
    const char *prompt;        /* the run's original prompt (replay matches on it) */
    const char *recording;     /* replay: the recording's name (the run's metadata "transcript"),
                                  or NULL */
    bool zdr; /* zero data retention: log no provider's text (it can quote the request) */
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
    char *finish_reason; /* provider's word, normalised: "stop", "tool_calls", "length",
                            "refusal", "content_filter", or what it said */
    char *refusal;       /* the model's refusal text (finish_reason "refusal"), or NULL */
    /* What the last attempt reported using (each class apart; saturating, never negative). */
    uint64_t input_tokens; /* uncached part */
    uint64_t cached_input_tokens;
    uint64_t cache_write_tokens;    /* 5-minute cache writes */
    uint64_t cache_write_1h_tokens; /* 1-hour cache writes */
    uint64_t output_tokens;         /* reasoning included */
    uint64_t reasoning_tokens;      /* the part of output_tokens spent reasoning, when reported */
    bool usage_final;   /* the provider reported the attempt's whole usage (a stream cut before its
                           last usage event may carry only part of it) */
    bool usage_missing; /* the attempt succeeded but reported no final usage */
    /* How the last attempt went (set by ops->call, read by eph_model_call). */
    bool sent;               /* the whole request went out: the provider may bill it */
    long http_status;        /* 0 when no answer came back */
    bool retryable;          /* another attempt may succeed */
    bool retry_at_once;      /* the request was changed to suit the server: retry without waiting */
    uint64_t retry_after_ms; /* the server's Retry-After, 0 when none */
    unsigned attempts;       /* attempts made, retries included (eph_model_call) */
    bool replayed;
};

void eph_model_response_release(struct eph_model_response *r);

struct eph_model_ops {
    const char *name;
    /* Builds a model from its config; *out owned by the caller (free with ops->free). */
    int (*open)(const struct eph_model_config *cfg, struct eph_model **out, char *err,
                size_t errlen);
    /* One attempt (no retries: eph_model_call retries), with req->max_tokens as given, within
     * req->deadline_ns. 0, or a negative errno and a lowercase message in err: -ETIMEDOUT (the
     * deadline, or no byte for the idle timeout), -ECANCELED, -EPROTO (bad response), -EMSGSIZE
     * (response over the cap), -EIO (transport or HTTP error), -ENOENT (replay: no recording
     * for this prompt). resp is filled either way: usage reported, sent, http_status, retryable,
     * retry_after_ms. */
    int (*call)(struct eph_model *m, const struct eph_model_request *req,
                struct eph_model_response *resp, char *err, size_t errlen);
    /* An upper bound of the input tokens the provider can count for req, never below the truth
     * (docs/MONEY.md says what it assumes): the exact request's bytes plus the model's
     * input_overhead_tokens. 0 or -ENOMEM/-EINVAL. NULL: eph_model_input_bound's default. */
    int (*input_bound)(struct eph_model *m, const struct eph_model_request *req, uint64_t *tokens,
                       char *err, size_t errlen);
    void (*free)(struct eph_model *m);
    /* Whether the model can answer a run of this prompt (recording: the replay recording it names,
     * or NULL), asked at create so that a run that cannot succeed is refused before anything is
     * reserved. 0, or -ENOENT with a lowercase message in err that says what it can answer.
     * NULL: every prompt. */
    int (*answers)(struct eph_model *m, const char *prompt, const char *recording, char *err,
                   size_t errlen);
};

struct eph_model {
    const struct eph_model_ops *ops;
    const struct eph_model_config *cfg; /* borrowed from the configuration */
};

const struct eph_model_ops *eph_model_provider(const char *name);

/* True when m (NULL: a model that could not be opened) cannot take a run: a provider whose key
 * variable is unset. why gets the reason, lowercase, naming the variable, never a value. */
bool eph_model_unavailable(const struct eph_model *m, char *why, size_t whylen);

/* The outcome of one attempt, as model.call events name it. */
enum eph_model_outcome {
    EPH_ATTEMPT_OK,         /* "ok" */
    EPH_ATTEMPT_HTTP_ERROR, /* "http_error": an error status; providers do not bill those */
    EPH_ATTEMPT_CUT,        /* "cut": the answer broke off (connection lost, size cap, an error
                               event or a bad answer after the provider began) */
    EPH_ATTEMPT_TIMEOUT,    /* "timeout": the deadline or the idle timeout */
    EPH_ATTEMPT_CANCELLED,  /* "cancelled" */
    EPH_ATTEMPT_NOT_SENT,   /* "not_sent": the request never reached the provider whole */
};
const char *eph_model_outcome_name(enum eph_model_outcome o);

/* One attempt as the meter sees it after it ended. */
struct eph_model_attempt {
    unsigned number; /* 1 for the first try */
    int rc;          /* what ops->call returned */
    const char *err; /* its message, "" on success */
    enum eph_model_outcome outcome;
    uint32_t max_tokens;  /* as sent */
    uint64_t input_bound; /* as authorised */
    uint64_t latency_ns;
    const struct eph_model_response *resp; /* usage, sent, http_status... */
};

/*
 * The budget's hook into eph_model_call: every attempt is authorised before it is sent and
 * recorded after it ended, whatever happened. authorise may lower *max_tokens (never raise it)
 * and bring *deadline_ns forward; it returns 0 to send, or a negative errno (-EDQUOT: the budget
 * cannot cover the attempt) and the attempt is not sent. With check_only it says whether an
 * attempt of that bound could be authorised at at_ns (after a backoff), changing nothing.
 */
struct eph_model_meter {
    int (*authorise)(void *ctx, unsigned attempt, uint64_t at_ns, uint64_t input_bound,
                     bool check_only, uint32_t *max_tokens, uint64_t *deadline_ns);
    void (*record)(void *ctx, const struct eph_model_attempt *a);
    void *ctx;
};

/* Attempts at most, per call. */
#define EPH_MODEL_MAX_ATTEMPTS 4

/*
 * One model call: attempts of m's ops->call, each authorised by meter (NULL: unmetered), retried
 * when the attempt says it may succeed (never an HTTP 4xx but 408, 409 and 429, never a quota
 * error), after a backoff with jitter or the server's Retry-After, as long as the wait ends before
 * the deadline and the budget can still cover an attempt then; at most EPH_MODEL_MAX_ATTEMPTS.
 * Returns what the last attempt returned, or -EDQUOT when the meter refused one (err says which),
 * or -ECANCELED / -ETIMEDOUT. resp holds the last attempt; release it even on error.
 */
int eph_model_call(struct eph_model *m, const struct eph_model_request *req,
                   const struct eph_model_meter *meter, struct eph_model_response *resp, char *err,
                   size_t errlen) __attribute__((warn_unused_result));

/* The input bound (see ops->input_bound) of req for m. */
int eph_model_input_bound(struct eph_model *m, const struct eph_model_request *req,
                          uint64_t *tokens, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Upper bound of a response body from a provider. */
#define EPH_MODEL_RESPONSE_MAX (8u << 20)

#endif
