/*
 * http.h - the client's HTTP layer: one libcurl handle, the base URL from EPHEMERAL_URL and the
 * bearer key from EPHEMERAL_API_KEY.
 *
 * The key lives only in the Authorization header this module builds; it is never printed, logged
 * or put in an error message, and its memory is wiped on release. Error messages show the base URL
 * without any user:password part.
 *
 * Every answer body is read into a buffer capped at EPH_CLI_BODY_MAX: a bigger one fails with
 * -EMSGSIZE ("too large") rather than filling memory. A streamed answer (the event stream) is
 * handed to a callback chunk by chunk instead, with an idle timeout in place of a total one.
 */
#ifndef EPH_CLI_HTTP_H
#define EPH_CLI_HTTP_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/buf.h"

#define EPH_CLI_DEFAULT_URL "http://127.0.0.1:8080"
#define EPH_CLI_BODY_MAX ((size_t)16 << 20)
#define EPH_CLI_CONNECT_TIMEOUT_S 10L
#define EPH_CLI_REQUEST_TIMEOUT_S 30L

struct eph_cli_http {
    CURL *curl;
    char *base;          /* EPHEMERAL_URL without trailing '/' */
    char *auth;          /* "Authorization: Bearer …": secret, wiped on release */
    char shown_url[256]; /* the base URL as messages show it: no credentials */
    char error[768];     /* the last transport error, lowercase, for the user */
    char curl_error[CURL_ERROR_SIZE];
    bool json_errors; /* --json: a failure is also printed to stdout as the API's error object */
    int exit_code;    /* the exit status of the last failure reported, 0 before any */
};

struct eph_cli_response {
    long status; /* 0 when no answer arrived */
    struct eph_buf body;
    json_t *json;  /* the body parsed, when it is JSON; owned */
    bool replayed; /* Idempotent-Replayed: true */
    bool streamed; /* the body went to the stream callback */
};

/* Reads EPHEMERAL_URL and EPHEMERAL_API_KEY. 0, or -EINVAL with a message already on stderr
 * (the key missing or malformed, the URL not http(s)), or -ENOMEM. */
int eph_cli_http_init(struct eph_cli_http *h) __attribute__((warn_unused_result));
void eph_cli_http_release(struct eph_cli_http *h);

void eph_cli_response_init(struct eph_cli_response *r);
void eph_cli_response_release(struct eph_cli_response *r);

struct eph_cli_request {
    const char *method; /* "GET", "POST", "PUT", "DELETE" */
    const char *path;   /* "/v1/runs", already escaped; sent as is ("." and ".." kept) */
    const char *body;   /* JSON, or NULL */
    size_t body_len;
    /* An upload instead of body: PUT the bytes read from this stream, upload_size of them (-1:
     * unknown, sent chunked), as application/octet-stream, after the server's 100 Continue so
     * that a refusal (413) comes before the bytes. */
    FILE *upload;
    long long upload_size;
    const char *const *headers; /* extra "Name: value" lines, NULL-terminated, or NULL */
    long timeout_s;             /* total; 0 for EPH_CLI_REQUEST_TIMEOUT_S */
};

/* Sends a request and reads the answer into resp (initialised by the caller, released by the
 * caller). 0 when an answer arrived, whatever its status; -ECONNREFUSED, -EHOSTUNREACH,
 * -ECONNRESET, -ETIMEDOUT for transport failures; -EMSGSIZE for a body over the cap; -EINVAL for
 * a URL libcurl refuses; -EIO otherwise. h->error says what happened. */
int eph_cli_http_do(struct eph_cli_http *h, const struct eph_cli_request *rq,
                    struct eph_cli_response *resp) __attribute__((warn_unused_result));

/* Called with each chunk of a streamed body. Non-zero stops the transfer. */
typedef int (*eph_cli_http_chunk_fn)(void *arg, const char *data, size_t n);

struct eph_cli_stream {
    const char *method; /* NULL for GET; "POST" with body */
    const char *path;
    const char *body; /* JSON, or NULL */
    size_t body_len;
    const char *const *headers;
    const char *content_type; /* stream only a 200 answer of this type ("text/event-stream") */
    long idle_timeout_s;      /* give up when nothing arrives for this long */
    eph_cli_http_chunk_fn on_chunk;
    void *arg;
};

/* GETs st->path (or sends st->method with st->body). A 200 answer of st->content_type goes to
 * st->on_chunk (resp->streamed is set); any other answer is read into resp as eph_cli_http_do()
 * does. Returns 0 when the server ended the answer, the callback's non-zero value when it stopped
 * it, or a transport error as above (the stream dropped). */
int eph_cli_http_stream(struct eph_cli_http *h, const struct eph_cli_stream *st,
                        struct eph_cli_response *resp) __attribute__((warn_unused_result));

/* True for the transport errors worth one retry of an idempotent request. */
bool eph_cli_http_transient(int rc);

/* Prints why a request failed to stderr, "ephemeral: …": the API's error.message when the server
 * answered with one, else the transport error, else the HTTP status. With h->json_errors, the
 * error is also printed to stdout as the API's JSON error object (the server's own when it sent
 * one; for a transport failure {"error": {"type": "connection_error", …}}). Records the exit
 * status the failure means in h->exit_code (cli.h): 3 for a transport error, 4 for a 4xx, 5 for
 * a 5xx or an answer that is not JSON; a sandbox's errors have their own (6 to 11: no such
 * sandbox, ended, busy, a path refused, no such file, too large). */
void eph_cli_http_report(struct eph_cli_http *h, const struct eph_cli_response *resp, int rc);

/* Reports an answer that is not what the API sends ("… answered with something that is not
 * WHAT"), as a server failure (exit status 5). */
void eph_cli_http_bad_answer(struct eph_cli_http *h, const char *what);

/* The exit status of the last failure reported on h (5 when none was recorded). */
int eph_cli_http_exit(const struct eph_cli_http *h);

/* Percent-escapes s for a URL path segment or query value into out. -EMSGSIZE when it does not
 * fit. */
int eph_cli_http_escape(const char *s, char *out, size_t outlen);
/* The same, keeping '/': a file path under a URL ("/v1/runs/{id}/outputs/{path}"). */
int eph_cli_http_escape_path(const char *s, char *out, size_t outlen);

#endif
