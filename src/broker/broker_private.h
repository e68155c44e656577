/*
 * broker_private.h - what the files of one run's broker share (broker.c, broker_answer.c,
 * broker_resolve.c, broker_conn.c, broker_record.c, broker_fetch.c): the broker's state and the
 * steps one file's code calls in another. Private to src/broker/.
 */
#ifndef EPH_BROKER_PRIVATE_H
#define EPH_BROKER_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "broker/broker.h"
#include "broker/event.h"
#include "broker/http.h"
#include "broker/guard.h"
#include "broker/meter.h"
#include "broker/policy.h"
#include "common/buf.h"

#define COMPONENT "broker"
#define IO_CHUNK 65536

struct conn_copy {
    char *name, *base_url;
    char **methods, **prefixes, **hnames, **hvalues, **qnames, **qvalues;
    size_t nmethods, nprefixes, nheaders, nquery;
};

/* One recorded exchange a replay may answer with. */
struct replay_entry {
    char *method, *url;
    char sha[65];
    json_t *response; /* {"status", "headers", "body_base64", ...} */
    bool used;
};

struct bstream {
    struct eph_broker *b;
    uint32_t id;
    int fd;                 /* the program's connection; closed by the thread */
    int up;                 /* the upstream socket of web requests, or -1 */
    struct eph_meter meter; /* under b->lock */
    bool no_budget;         /* the fee did not fit */
    bool fd_shut;           /* the thread shut fd for writing (the upstream's answer ended) */
    bool done;              /* the thread has finished */
    bool joined;            /* and was joined (by the tunnel's thread): its slot is free */
    pthread_t thread;
    struct bstream *next;
};

struct eph_broker {
    struct eph_broker_settings s;
    bool web;
    char **web_allow;
    size_t nweb_allow;
    struct conn_copy *conns;
    size_t nconns;
    struct eph_budget *budget;
    eph_broker_event_fn on_event;
    void *event_arg;
    pthread_mutex_t lock;      /* streams, meters, counters */
    pthread_mutex_t reap_lock; /* joining stream threads: the tunnel's thread or close */
    struct bstream *streams;
    atomic_bool closing;
    atomic_bool exhausted;
    uint64_t web_count, conn_count;
    bool record;
    bool zdr;                    /* events keep nothing the sandbox chose (broker/event.h) */
    struct replay_entry *replay; /* replay mode when not NULL; used flags under lock */
    size_t nreplay;
};

/* One request a stream serves: what it asked, its event, and its record. */
struct req_ctx {
    struct bstream *s;
    uint64_t start_ns, deadline_ns;
    struct eph_broker_event ev;
    char host[EPH_HOST_NAME_MAX];
    char method[32];
    char path[EPH_BROKER_PATH_MAX];
    /* The record of the exchange (when the broker keeps one): the request as the broker saw it,
     * what the program got back (capped: head and record_body_max_bytes of body). */
    bool recording, tunnel;
    struct eph_buf url;
    json_t *req_headers;
    struct eph_buf req_body; /* the first record_body_max_bytes */
    char req_sha[65];        /* of the whole body */
    struct eph_buf down;
    bool down_cut;
    /* A part of the record could not be made (out of memory): the event carries none rather than
     * one with a part missing, and the log says so. */
    bool record_lost;
};

/* I/O with deadlines and the broker's own answers (broker_answer.c). */
void bk_answer_error(struct req_ctx *rc, int status, const char *type, const char *code,
                     const char *message);
json_t *bk_b64_json(const char *data, size_t n);
void bk_emit(struct req_ctx *rc);
/* A header as [name, value] in *out: 0; 1 when it is not valid UTF-8 (*out NULL: it is not
 * recorded); -ENOMEM. bk_header_pair reads it from a line "Name: value" (1 too without a colon). */
int bk_header_json(const char *name, size_t name_len, const char *value, size_t value_len,
                   json_t **out);
int bk_header_pair(const char *line, size_t n, json_t **out);
ssize_t bk_read_some(const struct bstream *s, int fd, void *buf, size_t n, uint64_t deadline_ns);
const char *bk_reason_phrase(int status);
void bk_record_request_body(struct req_ctx *rc, const char *data, size_t n);
void bk_sha256_hex(const void *data, size_t n, char out[65]);
bool bk_stream_gone(const struct bstream *s);
int bk_to_program(struct req_ctx *rc, const void *data, size_t n);
int bk_wait_fd(const struct bstream *s, int fd, short ev, uint64_t deadline_ns);
bool bk_watch_program(const struct bstream *s);
int bk_write_all(const struct bstream *s, int fd, const void *data, size_t n, uint64_t deadline_ns);

/* The SSRF guard around a resolver (broker_resolve.c). */
struct eph_guard bk_guard_of(const struct eph_broker *b, bool web);
bool bk_hop_by_hop(const struct eph_http_header *h);
bool bk_is_framing(const struct eph_http_header *h);
void bk_relay(struct req_ctx *rc, char *buf, const char *pending, size_t npending,
              bool parse_status, bool upward);
void bk_serve_connect(struct req_ctx *rc, const struct eph_http_request *req,
                      const char *after_head, size_t nafter);
void bk_serve_web_http(struct req_ctx *rc, const struct eph_http_request *req,
                       const char *after_head, size_t nafter);

/* Connections (broker_conn.c). */
const struct conn_copy *bk_find_conn(struct eph_broker *b, const char *name);
int bk_read_body(struct req_ctx *rc, const struct eph_http_request *req, const char *after,
                 size_t nafter, struct eph_buf *body);
void bk_serve_connection(struct req_ctx *rc, const struct eph_http_request *req,
                         const char *after_head, size_t nafter);

/* The record and the replay (broker_record.c). */
void bk_record_request(struct req_ctx *rc, const struct eph_http_request *req, bool origin);
json_t *bk_replay_claim(struct eph_broker *b, const char *method, const char *url, const char *sha);
/* 0, or -ENOMEM when the target could not be read (the event cannot name its connection). */
int bk_replay_describe(struct req_ctx *rc, const struct eph_http_request *req, bool is_connect,
                       bool absolute);
void bk_serve_replay(struct req_ctx *rc, const struct eph_http_request *req, const char *after_head,
                     size_t nafter);

#endif
