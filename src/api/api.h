/*
 * api.h - the HTTP API (SPEC section 3) on libmicrohttpd.
 *
 * The server owns a thread per connection: a handler may block (long polls, event streams) without
 * holding up other clients; the connection limit bounds the threads. Request bodies are capped
 * (413 past max_body_bytes) and every answer is JSON in the error shape of SPEC 3.4 when it fails.
 */
#ifndef EPH_API_H
#define EPH_API_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/buf.h"
#include "run/service.h"

struct eph_api;
struct MHD_Connection;

/* Starts listening on cfg->listen ("ADDR:PORT", loopback by default). */
int eph_api_start(struct eph_service *svc, struct eph_api **out, char *err, size_t errlen);
void eph_api_stop(struct eph_api *api);

/* ---- for the resource files ---- */

struct eph_api_req {
    struct eph_service *svc;
    struct MHD_Connection *conn;
    const char *method;
    const char *path;         /* without the query string */
    struct eph_buf body;
    bool body_too_large;
    bool answered;
    char org_id[48];
    char role[16];
};

/* Answers with a JSON body (steals body). extra_header/value may be NULL. */
int eph_api_reply_json(struct eph_api_req *req, unsigned status, json_t *body,
                       const char *extra_header, const char *extra_value);
/* Answers with the error shape; param may be NULL. */
int eph_api_reply_error(struct eph_api_req *req, unsigned status, const char *type,
                        const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Checks the bearer key; answers 401 and returns false when it is missing or unknown. */
bool eph_api_authenticate(struct eph_api_req *req);
/* A request header or query argument, or NULL. */
const char *eph_api_header(struct eph_api_req *req, const char *name);
const char *eph_api_query(struct eph_api_req *req, const char *name);
/* Prefer: wait=N, capped at max; 0 when absent or malformed. */
unsigned eph_api_prefer_wait(struct eph_api_req *req, unsigned max);

/* Resource handlers (runs.c, account.c). Each answers the request. */
int eph_api_runs_create(struct eph_api_req *req);
int eph_api_runs_get(struct eph_api_req *req, const char *id);
int eph_api_runs_list(struct eph_api_req *req);
int eph_api_runs_events(struct eph_api_req *req, const char *id);
int eph_api_runs_cancel(struct eph_api_req *req, const char *id);
int eph_api_balance(struct eph_api_req *req);
int eph_api_credits(struct eph_api_req *req);
int eph_api_healthz(struct eph_api_req *req);

#endif
