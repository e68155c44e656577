/*
 * http_client.h - the small libcurl wrapper the model providers call: POST a JSON body, get the
 * answer back, within a deadline, abandoning the call at once when a cancel flag turns true, with
 * retries and backoff on 429, 5xx and network errors.
 *
 * Everything that comes back is capped: the body at max_body bytes (-EMSGSIZE, "response too
 * large"), each Server-Sent Events line at sse_line_max bytes. A 2xx answer with the content type
 * text/event-stream is fed to an SSE parser when the caller asked for streaming; any other answer
 * (errors included) is collected whole into the result's body, so the provider can read the
 * provider's error message or fall back to a plain JSON answer from a server that ignored
 * "stream": true.
 *
 * Connections: a call given a pool (struct eph_http_pool, one per model) borrows an idle curl
 * handle pair from it for each attempt and gives it back afterwards, so the next call reuses the
 * open TCP connection and TLS session instead of connecting again; without a pool every attempt
 * makes, and closes, its own handles.
 *
 * Threads: a handle is used by one attempt on one thread at a time (the pool hands each one out to
 * a single borrower), so calls on any number of threads are independent. libcurl's global state
 * must be set up once: eph_http_global_init() does it (idempotent, thread-safe through
 * pthread_once); main() should call it before starting threads, and the providers' open() calls
 * it again to be safe.
 */
#ifndef EPH_HTTP_CLIENT_H
#define EPH_HTTP_CLIENT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* curl_global_init(CURL_GLOBAL_DEFAULT), once. 0 or -EIO. */
int eph_http_global_init(void) __attribute__((warn_unused_result));

/* Idle connections kept for reuse, thread-safe: at most max_idle are kept (the rest are closed
 * when their attempt ends), so with one pool per model the open connections are at most the
 * calls that ran at once. NULL on -ENOMEM. eph_http_pool_free closes them all; no call may be
 * using the pool then. */
struct eph_http_pool;
struct eph_http_pool *eph_http_pool_new(unsigned max_idle);
void eph_http_pool_free(struct eph_http_pool *p);

/*
 * Server-Sent Events parser (the WHATWG event-stream format): lines end with LF, CRLF or CR; a
 * blank line dispatches the event; "data:" lines are joined with LF; comments (":...") and unknown
 * fields are ignored. A line longer than line_max fails with -EMSGSIZE, and so does an event whose
 * data grows past line_max. An event without data is not dispatched.
 */
typedef int (*eph_sse_event_fn)(void *ctx, const char *event, const char *data, size_t len);
/* What on_event returns when the answer is complete ([DONE], message_stop): the transfer ends
 * there, a success, even if the server keeps the connection open. */
#define EPH_SSE_STOP 1

struct eph_sse {
    struct eph_buf line;
    struct eph_buf data;
    char event[64]; /* the event's name, truncated (names are short words) */
    bool have_data;
    bool last_cr; /* the previous chunk ended with CR: a leading LF belongs to that line end */
    eph_sse_event_fn on_event;
    void *ctx;
};

void eph_sse_init(struct eph_sse *s, size_t line_max, eph_sse_event_fn on_event, void *ctx);
/* 0, -EMSGSIZE, -ENOMEM, or the first non-zero value on_event returned (parsing stops there). */
int eph_sse_feed(struct eph_sse *s, const char *p, size_t n) __attribute__((warn_unused_result));
/* At the end of the stream: a last line without its line end and a last event without its blank
 * line are still delivered (servers that drop the final blank line are common). */
int eph_sse_finish(struct eph_sse *s) __attribute__((warn_unused_result));
void eph_sse_release(struct eph_sse *s);
/* A whole body through the parser, for a server that streamed without saying text/event-stream:
 * feed, finish, release. Same returns as eph_sse_feed. */
int eph_sse_parse(const char *p, size_t n, size_t line_max, eph_sse_event_fn on_event, void *ctx)
    __attribute__((warn_unused_result));
/* Whether a body looks like an event stream (its first line is a data:, event: or : line). */
bool eph_sse_sniff(const char *p, size_t n);

struct eph_http_request {
    const char *what; /* "openai": the prefix of error messages */
    const char *url;
    const char *const *headers; /* NULL-terminated "Name: value" lines; may be NULL */
    const char *body;
    size_t body_len;
    uint64_t deadline_ns;      /* CLOCK_MONOTONIC; 0 for none */
    uint32_t idle_timeout_ms;  /* the longest wait for a byte (answer or upload progress), from
                                  the start of an attempt; 0 for none (the deadline applies) */
    const atomic_bool *cancel; /* may be NULL */
    size_t max_body;           /* cap on the bytes received per attempt */
    unsigned max_attempts;     /* 0 means the default, 4 */
    /* Streaming: when on_event is set, a 2xx text/event-stream answer goes through an SSE parser
     * with lines capped at sse_line_max, and on_event sees each event. */
    eph_sse_event_fn on_event;
    size_t sse_line_max;
    /* Where on_event leaves a message when it fails (NULL or "" for none): used in err. */
    const char *event_error;
    /* Called before every attempt, so a provider can drop what a failed attempt had assembled. */
    void (*on_attempt)(void *ctx, unsigned attempt);
    void *ctx;
    /* A secret (the API key) that must never appear in an error message; may be NULL. */
    const char *secret;
    /* Where to borrow a connection from and give it back to; NULL for a new one per attempt. */
    struct eph_http_pool *pool;
};

struct eph_http_response {
    long status;         /* HTTP status of the last attempt, 0 when none came back */
    bool streamed;       /* the body went to on_event, not to body */
    struct eph_buf body; /* the body when not streamed; release with eph_http_response_release */
    unsigned attempts;   /* attempts made */
    uint64_t retry_after_ms; /* the last Retry-After (or retry-after-ms) seen, 0 when none */
    /* Of the last attempt: */
    bool sent;      /* the whole request body went out */
    bool idle;      /* it ended because no byte came for idle_timeout_ms (-ETIMEDOUT) */
    bool stopped;   /* on_event said EPH_SSE_STOP: the answer is complete */
    bool transient; /* when it failed: another attempt may succeed */
};

/*
 * POSTs the request, retrying on 408, 409, 429, 5xx and transient network errors with exponential
 * backoff and jitter (eph_http_backoff_ms), never sleeping past the deadline, at most
 * max_attempts attempts (the model providers ask for one: eph_model_call retries, metered).
 *
 * Returns 0 when an answer came back, whatever its status (the caller reads resp->status; after
 * the last retry the answer is the last 429 or 5xx). Otherwise a negative errno with a message in
 * err: -ETIMEDOUT (deadline), -ECANCELED, -EMSGSIZE (over max_body or an SSE line over its cap),
 * -EIO (network error after the retries, or a non-retryable one such as a bad URL), -ENOMEM, or
 * what on_event returned. resp is initialised here; release it even on error.
 */
int eph_http_post(const struct eph_http_request *req, struct eph_http_response *resp, char *err,
                  size_t errlen) __attribute__((warn_unused_result));

void eph_http_response_release(struct eph_http_response *resp);

/* Whether an HTTP status is worth another attempt: 408, 409, 429 and 5xx. */
bool eph_http_status_retryable(long status);
/* The wait before attempt + 1: exponential backoff with "equal jitter" (between half and all of
 * 0.5 s x 2^(attempt-1), at most 8 s), or the server's Retry-After when longer. */
uint64_t eph_http_backoff_ms(unsigned attempt, uint64_t retry_after_ms);
/* Sleeps ms in short slices; -ECANCELED as soon as the flag (may be NULL) turns true, else 0. */
int eph_http_sleep(uint64_t ms, const atomic_bool *cancel);

/*
 * The provider's error message from an error body, for people: error.message (OpenAI, Anthropic,
 * most compatible servers), error (a string), message, detail or detail[0].msg; the body's text
 * when it is not JSON; nothing for other JSON (its fields may quote the request). Control
 * characters become spaces, the secret (when not NULL and at least 4 bytes) becomes "[redacted]",
 * and the result is cut at 200 bytes on a UTF-8 boundary. out is always NUL-terminated.
 */
#define EPH_HTTP_ERROR_MAX 201 /* a buffer for eph_http_error_message, terminator included */
void eph_http_error_message(const char *body, size_t len, const char *secret, char *out,
                            size_t outlen);

/* base + "/" + path, without doubling the slash; NULL on -ENOMEM. free() it. */
char *eph_http_join_url(const char *base, const char *path);

#endif
