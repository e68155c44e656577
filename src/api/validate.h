/*
 * validate.h - the API's input rules as plain functions: no socket, no server, no store.
 *
 * Each function reads what a client sent (a JSON body, query arguments, a header) and either
 * fills a parsed form or describes the refusal in a struct eph_api_error, which the HTTP layer
 * turns into the error object of docs/API.md ("Errors"). Because they need nothing but their
 * arguments, the unit tests (tests/unit/test_api_validate.c) and the fuzz drivers
 * (tests/fuzz/fuzz_api_*.c) call them directly.
 */
#ifndef EPH_API_VALIDATE_H
#define EPH_API_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/config.h"

/* A refusal: the HTTP status, the error type and code, the field at fault ("" when none) and a
 * lowercase message that never echoes a secret. */
struct eph_api_error {
    unsigned status;
    const char *type;
    const char *code;
    char param[80];
    char message[384];
};

/* Sets e and returns -EINVAL: the one way the functions below refuse. */
int eph_api_error_set(struct eph_api_error *e, unsigned status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Limits of a run's request (docs/API.md). */
#define EPH_API_PROMPT_MAX (64u << 10)
#define EPH_API_FILES_MAX 100
#define EPH_API_FILES_BYTES_MAX (10u << 20)
#define EPH_API_METADATA_PAIRS_MAX 16
#define EPH_API_METADATA_KEY_MAX 64
#define EPH_API_METADATA_VALUE_MAX 512
#define EPH_API_CONNECTIONS_MAX 32
#define EPH_API_WAIT_MAX 600
#define EPH_API_WEB_ALLOW_MAX 64
#define EPH_API_DOMAIN_MAX 253
#define EPH_API_OUTPUTS_MAX 32 /* output patterns (common/glob.h) */

/* POST /v1/runs, validated. Strings and connections/metadata are borrowed from the body (keep it
 * until done); files is a new array of {path, content_base64, size} owned here. */
struct eph_api_create {
    const char *prompt;
    const char *model;
    bool shell, web, zdr;
    json_t *web_allow;   /* borrowed: web's allow-list (array of domains); NULL = every host */
    json_t *connections; /* borrowed; NULL when absent */
    json_t *files;       /* owned; NULL when absent */
    json_t *metadata;    /* borrowed; NULL when absent */
    json_t *outputs;     /* borrowed: array of output patterns; NULL when absent */
    unsigned timeout;
    int64_t max_cost;
    const char *replay_of; /* borrowed; NULL when absent (the caller checks the run: it needs the
                              store, and fills in what the original decides) */
    const char *image;     /* borrowed; NULL when absent (the default image) */
    unsigned idle_timeout; /* a sandbox's (docs/SANDBOXES.md) */
};

/* A sandbox's time limit and idle timeout when the create names none. */
#define EPH_API_SANDBOX_TIMEOUT_DEFAULT 300

/* Validates a create body against the configuration. 0 with c filled (release it), or -EINVAL
 * with e set and nothing to release. Whether each named connection exists is the caller's check:
 * it needs the store. */
int eph_api_validate_create(json_t *body, const struct eph_config *cfg, struct eph_api_create *c,
                            struct eph_api_error *e);
void eph_api_create_release(struct eph_api_create *c);
/* 400 unknown_parameter (-EINVAL, e set) for a field of the object body not in known (a
 * NULL-terminated list); 0 when every field is known. */
int eph_api_check_fields(json_t *body, const char *const *known, struct eph_api_error *e);
/* The same for POST /v1/sandboxes (docs/SANDBOXES.md): image, web, connections, files,
 * timeout_seconds, idle_timeout_seconds, max_cost_micros, zero_data_retention, metadata; prompt
 * and model stay NULL. */
int eph_api_validate_sandbox_create(json_t *body, const struct eph_config *cfg,
                                    struct eph_api_create *c, struct eph_api_error *e);

/* The query arguments of one request, as pairs in the order received. */
/* At most this many metadata[KEY]=VALUE filters on a list (a run has at most 16 pairs). */
#define EPH_API_METADATA_FILTERS_MAX 16

struct eph_api_query {
    unsigned limit;     /* GET /v1/runs: 1..100, 20 when absent */
    const char *after;  /* GET /v1/runs: a run id (borrowed), or NULL */
    const char *status; /* GET /v1/runs: a run status (borrowed), or NULL */
    /* GET /v1/runs: metadata[KEY]=VALUE filters; every one must match exactly. The values are
     * borrowed, the keys copied (they end at the ']' of the parameter's name). */
    char meta_keys[EPH_API_METADATA_FILTERS_MAX][EPH_API_METADATA_KEY_MAX + 1];
    const char *meta_values[EPH_API_METADATA_FILTERS_MAX];
    unsigned nmeta;
    const char *path;   /* GET /v1/sandboxes/{id}/files: the directory listed (borrowed) */
    bool has_after_seq; /* GET /v1/runs/{id}/events */
    uint64_t after_seq;
};

/* Checks the query arguments of a request to route (the route's pattern, as in /metrics) with
 * method: a name the route does not take, a name given twice, or a value out of its rule is
 * refused (400). 0 with q filled, or -EINVAL with e set. */
int eph_api_validate_query(const char *route, const char *method, size_t n,
                           const char *const *names, const char *const *values,
                           struct eph_api_query *q, struct eph_api_error *e);

/* Prefer (RFC 7240): preferences separated by commas; "wait=N" with N an integer from 0 to max
 * sets *wait; other preferences are ignored. A wait that is not such an N, or given twice, is
 * refused (400). header may be NULL (*wait = 0). */
int eph_api_validate_prefer(const char *header, unsigned max, unsigned *wait,
                            struct eph_api_error *e);

/* Whether a Content-Type names JSON: "application/json", any case, optionally followed by
 * parameters (";charset=utf-8"). */
bool eph_api_content_type_is_json(const char *ct);

/* A connection's description (name, base_url, methods, path_prefixes, headers, query; the caller
 * rejects other fields), checked and copied into c without sealing its credentials (c->sealed stays
 * NULL;
 * eph_api_connection_build in api.h seals). 0 (release c with eph_connection_release), or -EINVAL
 * with the field at fault in *param and why in err (never a header's value), or -ENOMEM. */
struct eph_connection;
int eph_api_connection_check(json_t *body, struct eph_connection *c, const char **param, char *err,
                             size_t errlen);

#endif
