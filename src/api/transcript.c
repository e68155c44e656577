/*
 * transcript.c - GET /v1/runs/{id}/transcript (the run's record as JSON Lines, streamed from its
 * events a page at a time), and the checks of a create's replay_of against the original run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "api/api.h"
#include "common/log.h"
#include "run/transcript.h"

/* Events read from the store per refill, and the bytes of lines held at once. */
#define TRANSCRIPT_PAGE 8
#define TRANSCRIPT_PENDING_MAX (32u << 20)

struct transcript {
    struct eph_service *svc;
    char id[EPH_RUN_ID_LEN + 1];
    uint64_t last_seq; /* last event read */
    bool done;
    struct eph_buf pending; /* lines not yet handed to the server */
    size_t pending_off;
    json_t *lines; /* the lines of the page being read */
};

static int write_line(struct eph_buf *b, json_t *line)
{
    char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(10));
    int rc = text ? eph_buf_appendf(b, "%s\n", text) : -ENOMEM;
    free(text);
    return rc;
}

static int page_cb(const struct eph_event *e, void *ctx)
{
    struct transcript *t = ctx;
    t->last_seq = e->seq;
    return eph_transcript_event_lines(e, t->lines);
}

/* The next page of events as lines; false at the end (or on an error, which ends the stream
 * early: the client sees a transcript cut short, never a broken line). */
static bool refill(struct transcript *t)
{
    struct eph_store *st = t->svc->store;
    eph_buf_reset(&t->pending);
    t->pending_off = 0;
    while (!t->done && t->pending.len == 0) {
        uint64_t before = t->last_seq;
        json_array_clear(t->lines);
        if (st->ops->events_list(st, t->id, t->last_seq, TRANSCRIPT_PAGE, page_cb, t)) {
            EPH_WARN("api", "run %s: transcript cut short: the store failed", t->id);
            return false;
        }
        if (t->last_seq == before)
            t->done = true;
        size_t i;
        json_t *line;
        json_array_foreach(t->lines, i, line)
        {
            /* A line past the cap is left out whole (the buffer stays as it was), and said. */
            if (write_line(&t->pending, line))
                EPH_WARN("api", "run %s: a transcript line near event %llu left out (too large)",
                         t->id, (unsigned long long)t->last_seq);
        }
    }
    return t->pending.len > 0;
}

static ssize_t transcript_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct transcript *t = cls;
    if (t->pending_off >= t->pending.len && !refill(t))
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = t->pending.len - t->pending_off;
    if (n > max)
        n = max;
    memcpy(buf, t->pending.data + t->pending_off, n);
    t->pending_off += n;
    return (ssize_t)n;
}

static void transcript_free(void *cls)
{
    struct transcript *t = cls;
    eph_buf_release(&t->pending);
    json_decref(t->lines);
    free(t);
}

static int no_record(struct eph_api_req *req, const char *id, const char *why)
{
    return eph_api_reply_error(req, 404, "not_found_error", "transcript_not_found", NULL,
                               "run '%.40s' has no transcript: %s", id, why);
}

int eph_api_runs_transcript(struct eph_api_req *req, const char *id)
{
    struct eph_store *st = req->svc->store;
    struct eph_run r;
    int rc = eph_id_is_run(id) ? st->ops->run_get(st, id, req->org_id, &r) : -ENOENT;
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "run_not_found", NULL,
                                   "no such run '%.40s'", id);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    if (r.zdr || r.log_purged) {
        const char *why = r.zdr ? "it has zero data retention" : "its log was purged (retention)";
        eph_run_release(&r);
        return no_record(req, id, why);
    }
    struct transcript *t = calloc(1, sizeof(*t));
    json_t *first = eph_transcript_run_line(&r);
    eph_run_release(&r);
    if (t) {
        t->lines = json_array();
        eph_buf_init(&t->pending, TRANSCRIPT_PENDING_MAX);
    }
    if (!t || !t->lines || !first || write_line(&t->pending, first)) {
        json_decref(first);
        if (t)
            transcript_free(t);
        return MHD_NO;
    }
    json_decref(first);
    t->svc = req->svc;
    snprintf(t->id, sizeof(t->id), "%s", id);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 65536, transcript_read, t, transcript_free);
    if (!resp) {
        transcript_free(t);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "Content-Disposition", "inline; filename=\"transcript.jsonl\"");
    eph_api_add_common_headers(req, resp, 200);
    rc = MHD_queue_response(req->conn, 200, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = 200;
    return rc;
}

/* ---- replay_of ---- */

#define REPLAY_BAD(code, param, ...)                                                               \
    eph_api_reply_error(req, 400, "invalid_request_error", code, param, __VA_ARGS__)

/* Whether every name of want is in have (arrays of strings). */
static bool names_within(json_t *want, json_t *have)
{
    size_t i, j;
    json_t *w, *h;
    json_array_foreach(want, i, w)
    {
        bool found = false;
        json_array_foreach(have, j, h) found |= json_equal(w, h);
        if (!found)
            return false;
    }
    return true;
}

int eph_api_replay_prepare(struct eph_api_req *req, json_t *body, struct eph_api_create *c,
                           struct eph_run *orig)
{
    struct eph_store *st = req->svc->store;
    int rc = st->ops->run_get(st, c->replay_of, req->org_id, orig);
    if (rc == -ENOENT) {
        eph_api_reply_error(req, 404, "not_found_error", "run_not_found", "replay_of",
                            "no such run '%.40s' to replay", c->replay_of);
        return -ENOENT;
    }
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return rc;
    }
    const char *id = orig->id;
    if (orig->zdr || orig->log_purged) {
        rc = REPLAY_BAD("replay_not_possible", "replay_of", "run '%s' cannot be replayed: %s", id,
                        orig->zdr ? "it has zero data retention, so there is no record"
                                  : "its log was purged (retention)");
    } else if (!eph_run_status_terminal(orig->status)) {
        rc = REPLAY_BAD("replay_not_possible", "replay_of",
                        "run '%s' cannot be replayed until it has finished", id);
    } else if (c->zdr) {
        rc = REPLAY_BAD("invalid_parameter", "zero_data_retention",
                        "a replay cannot have zero data retention: its divergences are its record");
    } else if (json_object_get(body, "model") && strcmp(c->model, orig->model) != 0) {
        rc = REPLAY_BAD("invalid_parameter", "model",
                        "a replay answers from the original's model turns: 'model' must be "
                        "absent or '%s'",
                        orig->model);
    } else if (json_object_get(body, "shell") && c->shell && !orig->shell) {
        rc = REPLAY_BAD("permission_widened", "shell",
                        "a replay cannot widen the original's permissions: run '%s' had no shell",
                        id);
    } else if (json_object_get(body, "web") && c->web && !orig->web) {
        rc =
            REPLAY_BAD("permission_widened", "web",
                       "a replay cannot widen the original's permissions: run '%s' had no web", id);
    } else if (json_object_get(body, "web") && c->web && orig->web_allow &&
               (!c->web_allow || !names_within(c->web_allow, orig->web_allow))) {
        rc = REPLAY_BAD("permission_widened", "web",
                        "a replay cannot widen the original's permissions: run '%s' could reach "
                        "only the domains of its allow-list",
                        id);
    } else if (c->connections && !names_within(c->connections, orig->connections)) {
        rc = REPLAY_BAD("permission_widened", "connections",
                        "a replay cannot widen the original's permissions: a connection run "
                        "'%s' did not have",
                        id);
    }
    if (rc)
        return -EINVAL;
    /* What is not given is the original's: its prompt, permissions, files and time limit. */
    c->model = orig->model;
    if (!c->prompt)
        c->prompt = orig->prompt;
    if (!json_object_get(body, "shell"))
        c->shell = orig->shell;
    if (!json_object_get(body, "web")) {
        c->web = orig->web;
        c->web_allow = orig->web_allow;
    }
    if (!c->connections)
        c->connections = orig->connections;
    if (!json_object_get(body, "timeout_seconds"))
        c->timeout = orig->timeout_seconds;
    if (!c->files && orig->files)
        c->files = json_incref(orig->files);
    if (!c->outputs)
        c->outputs = orig->outputs;
    if (!c->prompt) {
        REPLAY_BAD("replay_not_possible", "replay_of", "run '%s' has no prompt to replay", id);
        return -EINVAL;
    }
    return 0;
}
