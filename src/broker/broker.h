/*
 * broker.h - one run's broker: the host end of every connection a program in the sandbox makes to
 * the proxy (docs/BROKER.md).
 *
 * The worker creates a broker for a run with web or connections and opens the sandbox's tunnel
 * with eph_broker_on_stream / eph_broker_on_bytes as its callbacks. Each stream is served on a
 * thread of its own: the request head is read and parsed, then it is a web request (absolute URI,
 * public or allow-listed hosts only), a CONNECT tunnel, or a connection request
 * (/name/path, rules checked after normalisation, the credential added, the answer redacted);
 * anything else is refused with the JSON of docs/BROKER.md and an event, and no byte goes upstream.
 *
 * Metering runs in the tunnel's callbacks (the fee when a stream opens, each byte as it crosses)
 * and in web_fetch. The run's budget locks itself (ledger/budget.h): each fee and each byte's
 * charge is checked and made as one step against everything else that spends it at the same
 * instant (other streams, the model's calls on the worker's thread, compute), so the callbacks
 * may run on a thread of their own (one that owns the sandbox's channel and relays between
 * commands). A stream whose fee does not fit is answered 402 and never connects; a transfer is cut
 * at the byte where the budget ends, and eph_broker_exhausted() then tells the worker to stop the
 * run budget_exhausted.
 *
 * Threads: eph_broker_new, eph_broker_close, eph_broker_free and eph_broker_web_fetch on the
 * worker's thread; the callbacks on the thread that drives the sandbox's channel (the worker's
 * today, or a relay thread); the events from the stream threads and web_fetch (the sink must be
 * thread-safe).
 */
#ifndef EPH_BROKER_H
#define EPH_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "broker/addr.h"
#include "broker/guard.h"
#include "ledger/budget.h"

#define EPH_BROKER_PORT 3128
#define EPH_BROKER_MAX_ALLOW_CIDRS 64

/* broker.* and the web prices of the server's configuration. */
struct eph_broker_settings {
    struct eph_cidr allow_private[EPH_BROKER_MAX_ALLOW_CIDRS]; /* broker.allow_private_cidrs:
                                                                 connections only */
    size_t nallow_private;
    struct eph_cidr web_private[EPH_BROKER_MAX_ALLOW_CIDRS]; /* broker.web_private_cidrs */
    size_t nweb_private;
    struct eph_guard_own own;  /* the server's own sockets, refused to every request */
    const char *extra_ca_file; /* PEM, added to the system store; may be NULL */
    uint64_t max_request_bytes;
    uint64_t max_response_bytes;
    unsigned request_timeout_seconds;
    unsigned max_tunnels_per_run;
    uint64_t micros_per_request;
    uint64_t micros_per_mib;
    uint64_t record_body_max_bytes; /* of each body kept in an exchange's record */
};

void eph_broker_settings_default(struct eph_broker_settings *s);

/* A connection a run may use, its credential in clear (the broker copies what it needs). */
struct eph_broker_conn {
    const char *name;
    const char *base_url; /* https://host[:port][/base] or http://... */
    const char *const *methods;
    size_t nmethods;
    const char *const *prefixes;
    size_t nprefixes;
    const char *const *header_names; /* added to each request; their values are redacted */
    const char *const *header_values;
    size_t nheaders;
    const char *const *query_names; /* added to each request's query; values redacted too */
    const char *const *query_values;
    size_t nquery;
};

/* One request or tunnel, for the run's timeline (web.request / connection.request). Strings are
 * valid during the call only. */
struct eph_broker_event {
    const char *connection; /* NULL for web */
    const char *method;
    const char *scheme; /* "http", "https", "tunnel" */
    const char *host;
    unsigned port;
    const char *path; /* without the query; may be "" */
    int status;       /* the upstream's, or the broker's own answer (403, 402, 502...) */
    uint64_t bytes_up, bytes_down;
    uint64_t duration_ms;
    int64_t cost_micros;
    const char *denied; /* the reason of a refusal, or NULL */
    /* The exchange for the record (the run's transcript), or NULL when the run keeps none (zero
     * data retention) or the request never parsed: {"request": {"method", "url" (credential-free:
     * a connection's as http://127.0.0.1:3128/<conn>/<path>?<query>), "headers": [[name, value],
     * ...] (no Proxy-*), "body_base64", "body_sha256" (of the whole body)}, "response": {"status",
     * "headers", "body_base64", "truncated"}}, bodies cut at record_body_max_bytes, the response
     * as the sandbox got it (redacted). A CONNECT tunnel keeps its method, target and status only.
     * Borrowed: valid during the call. */
    json_t *exchange;
};

typedef void (*eph_broker_event_fn)(void *arg, const struct eph_broker_event *ev);

struct eph_broker_run {
    bool web;
    const char *const *web_allow; /* NULL with nweb_allow 0: every public host */
    size_t nweb_allow;
    const struct eph_broker_conn *conns;
    size_t nconns;
    bool record; /* build each event's exchange (off for zero data retention) */
    bool zdr;    /* zero data retention: events keep nothing the sandbox chose (broker/event.h) */
    struct eph_budget *budget; /* the run's, shared with the worker (it locks itself) */
    eph_broker_event_fn on_event;
    void *event_arg;
};

struct eph_broker;

/* Copies what it needs of settings and run (credentials included, wiped on free). */
int eph_broker_new(const struct eph_broker_settings *settings, const struct eph_broker_run *run,
                   struct eph_broker **out) __attribute__((warn_unused_result));
/* Replay mode (docs/AGENT.md): from now on no connection is ever made. A request whose method, URL
 * and body (sha256) match a recorded exchange not used yet (the first in order) gets its recorded
 * status, headers and body; anything else, and every CONNECT, gets 403 with the JSON reason
 * "not_recorded" and a denied event. exchanges is an array of the objects the events carried in
 * data.exchange (entries that are not such objects are skipped); the broker copies what it needs.
 * Call before the first stream; 0, -EINVAL when exchanges is not an array, -ENOMEM. */
int eph_broker_set_replay(struct eph_broker *b, json_t *exchanges)
    __attribute__((warn_unused_result));

/* The tunnel's callbacks (struct eph_sandbox_tunnel); arg is the broker. on_stream takes fd in
 * every case. A stream holds one of the run's max_tunnels_per_run places until its thread has
 * ended, which it does as soon as the tunnel closes its end of the pair (a reset): one that finds
 * every place taken is answered 503 too_many_tunnels at once, with an event (docs/BROKER.md). */
int eph_broker_on_stream(void *arg, uint32_t stream, int fd);
size_t eph_broker_on_bytes(void *arg, uint32_t stream, size_t n);
/* Whether some transfer was cut because the budget ended (the run must stop). */
bool eph_broker_exhausted(struct eph_broker *b);
/* Requests and tunnels served so far (web, connection). */
void eph_broker_counts(struct eph_broker *b, uint64_t *web, uint64_t *connection);
/* A connection's rules as the system prompt states them (no credential): name, methods, path
 * prefixes; pointers valid while the broker lives. */
struct eph_broker_conn_rules {
    const char *name;
    const char *const *methods;
    size_t nmethods;
    const char *const *prefixes; /* none: every path */
    size_t nprefixes;
};
size_t eph_broker_conn_count(const struct eph_broker *b);
/* false when i is past the last connection. */
bool eph_broker_conn_rules(const struct eph_broker *b, size_t i, struct eph_broker_conn_rules *out);
/* The web allow-list, for the system prompt: the i-th domain ("example.com", "*.example.com"),
 * or NULL past the last (at once when web goes to every public host). Valid while the broker
 * lives. */
const char *eph_broker_web_allowed(const struct eph_broker *b, size_t i);
/* Ends every stream at once (cancel, deadline, end of run) and waits for their threads. */
void eph_broker_close(struct eph_broker *b);
void eph_broker_free(struct eph_broker *b);

/* The result of web_fetch. */
struct eph_web_fetch {
    int status;
    char content_type[128];
    char *text;     /* HTML reduced to text, or the body as text; capped; free() */
    bool truncated; /* cut at the cap */
    unsigned redirects;
};

/* web_fetch, executed by the broker for the model (docs/BROKER.md), on the worker's thread (it
 * meters on the run's budget itself): http(s) only, the SSRF guard and the allow-list on every hop,
 * at most 5 redirects, the body capped (the text at text_cap bytes), each hop an event. 0 with *out
 * filled (free out->text); -EDQUOT when the budget cannot pay (the run must stop); another negative
 * error with a message for the model in err. */
int eph_broker_web_fetch(struct eph_broker *b, const char *url, size_t text_cap,
                         struct eph_web_fetch *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
