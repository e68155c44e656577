/*
 * run.c - `ephemeral run`, `watch` and `replay`: create a run, follow its timeline live, show a
 * finished one again.
 *
 * The timeline is read from the event stream (GET /v1/runs/{id}/events, text/event-stream). A
 * stream that drops before the final event (worker.destroyed) is resumed with Last-Event-ID, and
 * events already printed are never printed twice (seq only grows). A server without the stream
 * answers with the JSON list instead, which is then polled with ?after=SEQ.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "cli/request.h"
#include "cli/sse.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/id.h"

/* One SSE line or event is one timeline event: 1 MiB is far above any the server sends (shell
 * output in data is capped at 16 KiB per stream) and far below trouble. */
#define SSE_LINE_MAX ((size_t)1 << 20)
#define SSE_EVENT_MAX ((size_t)1 << 20)
/* Keep-alives come every 15 s: three missed ones mean the connection is gone. */
#define STREAM_IDLE_S 45L
/* Reconnections in a row that bring nothing new before giving up. */
#define STREAM_RETRIES 8
/* A long poll for the final state; the request timeout leaves room above it. */
#define WAIT_S 60
/* Transport failures in a row before the wait for a run's end gives up. */
#define WAIT_RETRIES 3
/* How long to keep waiting for a run to finish: above the longest time limit the API allows. */
#define FINAL_DEADLINE_S (3600 + 600)
/* Replay never sleeps longer than this between two events, whatever their t says. */
#define REPLAY_GAP_MAX_MS 60000L

#define FOLLOW_DONE 1 /* a callback's "stop, the final event is here" (positive: not an error) */

void eph_cli_sleep_ms(long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* eph_cli_fetch_run, with transient transport errors left unreported when quiet (the caller
 * retries them, and reports once if it gives up). */
static int fetch_run(struct eph_cli_http *h, const char *id, int wait_s, bool quiet, json_t **run)
{
    char path[128], prefer[32];
    snprintf(path, sizeof(path), "%s/%s", eph_cli_collection(id), id);
    snprintf(prefer, sizeof(prefer), "Prefer: wait=%d", wait_s);
    const char *hdrs[] = {prefer, NULL};
    struct eph_cli_request rq = {
        .method = "GET",
        .path = path,
        .headers = wait_s > 0 ? hdrs : NULL,
        .timeout_s = wait_s > 0 ? wait_s + 15 : 0,
    };
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(h, &rq, &resp);
    if (rc == 0 && resp.status != 200)
        rc = (int)resp.status;
    else if (rc == 0 && !json_is_object(resp.json))
        rc = -EPROTO;
    if (rc == -EPROTO)
        eph_cli_http_bad_answer(h, eph_id_is_sandbox(id) ? "a sandbox" : "a run");
    else if (rc && !(quiet && eph_cli_http_transient(rc)))
        eph_cli_http_report(h, &resp, rc);
    else if (!rc)
        *run = json_incref(resp.json);
    eph_cli_response_release(&resp);
    return rc;
}

int eph_cli_fetch_run(struct eph_cli_http *h, const char *id, int wait_s, json_t **run)
{
    return fetch_run(h, id, wait_s, false, run);
}

/* Waits until the run is in a terminal status, trying again after up to retries transport
 * failures in a row. 0 and the run, or an error already reported (once). */
static int wait_final(struct eph_cli_http *h, const char *id, int retries, json_t **out)
{
    uint64_t deadline = eph_clock_mono_ns() + (uint64_t)FINAL_DEADLINE_S * 1000000000u;
    int failures = 0;
    for (;;) {
        uint64_t start = eph_clock_mono_ns();
        json_t *run = NULL;
        int rc = fetch_run(h, id, WAIT_S, true, &run);
        if (rc == 0) {
            failures = 0;
            const char *status = json_string_value(json_object_get(run, "status"));
            if (eph_cli_status_exit(status) >= 0) {
                *out = run;
                return 0;
            }
            json_decref(run);
        } else if (!eph_cli_http_transient(rc)) {
            return rc;
        } else if (++failures > retries) {
            /* One message for the whole wait, not one per attempt. */
            fprintf(stderr, "ephemeral: gave up waiting for %s: %s (ephemeral watch %s resumes)\n",
                    id, h->error, id);
            h->exit_code = EPH_CLI_EXIT_UNREACHABLE;
            return rc;
        }
        if (eph_clock_mono_ns() > deadline) {
            fprintf(stderr, "ephemeral: gave up waiting for %s to finish\n", id);
            h->exit_code = EPH_CLI_EXIT_SERVER;
            return -ETIMEDOUT;
        }
        /* A server that ignores Prefer: wait answers at once: do not spin on it. */
        if (eph_clock_mono_ns() - start < 1000000000u)
            eph_cli_sleep_ms(failures ? 1000L << failures : 1000);
    }
}

struct follow {
    struct eph_cli_http *h;
    struct eph_cli_render *r;
    struct eph_cli_sse sse;
    const char *id;
    bool warned;
    char *zdr_result; /* a zero-data-retention run's result, sent once on the stream */
};

static void warn_malformed(struct follow *f)
{
    if (!f->warned)
        fputs("ephemeral: skipped an event that is not a json object\n", stderr);
    f->warned = true;
}

static int on_sse_event(void *arg, const struct eph_cli_sse_event *ev)
{
    struct follow *f = arg;
    if (strcmp(ev->type, "result") == 0) {
        /* Not a timeline event: the result of a zero-data-retention run, which the server keeps
         * nowhere, delivered once to whoever follows the run. */
        json_t *o = json_loadb(ev->data, ev->data_len, 0, NULL);
        const char *res = json_string_value(json_object_get(o, "result"));
        if (res) {
            free(f->zdr_result);
            f->zdr_result = strdup(res);
        }
        json_decref(o);
        return 0;
    }
    if (eph_cli_render_event_json(f->r, ev->data, ev->data_len))
        warn_malformed(f);
    return f->r->final_seen ? FOLLOW_DONE : 0;
}

static int on_stream_chunk(void *arg, const char *data, size_t n)
{
    struct follow *f = arg;
    return eph_cli_sse_feed(&f->sse, data, n);
}

/* Renders the events of a JSON list answer. -EPROTO when it is not one. */
static int render_list(struct follow *f, const json_t *list, bool *has_more)
{
    json_t *data = json_object_get(list, "data");
    if (!json_is_array(data))
        return -EPROTO;
    size_t i;
    json_t *ev;
    json_array_foreach(data, i, ev)
    {
        if (eph_cli_render_event(f->r, ev))
            warn_malformed(f);
    }
    *has_more = json_is_true(json_object_get(list, "has_more"));
    return 0;
}

/* True when the run is finished: a stream or list that ends without the final event then has
 * nothing more to give. */
static bool run_is_over(struct follow *f)
{
    json_t *run = NULL;
    if (eph_cli_fetch_run(f->h, f->id, 0, &run))
        return false;
    bool over = eph_cli_status_exit(json_string_value(json_object_get(run, "status"))) >= 0;
    json_decref(run);
    return over;
}

/* The fallback for a server without the event stream: poll the JSON list. first is its first
 * answer. */
static int follow_poll(struct follow *f, const json_t *first)
{
    bool more = false;
    if (render_list(f, first, &more)) {
        eph_cli_http_bad_answer(f->h, "a list of events");
        return -EPROTO;
    }
    int idle = 0, failures = 0;
    while (!f->r->final_seen) {
        if (!more)
            eph_cli_sleep_ms(1000);
        char path[160];
        if (f->r->last_seq >= 0)
            snprintf(path, sizeof(path), "%s/%s/events?after=%lld", eph_cli_collection(f->id),
                     f->id, (long long)f->r->last_seq);
        else
            snprintf(path, sizeof(path), "%s/%s/events", eph_cli_collection(f->id), f->id);
        struct eph_cli_request rq = {.method = "GET", .path = path};
        struct eph_cli_response resp;
        eph_cli_response_init(&resp);
        size_t before = f->r->printed;
        int rc = eph_cli_http_do(f->h, &rq, &resp);
        if (rc < 0 && !eph_cli_http_transient(rc))
            eph_cli_http_report(f->h, NULL, rc);
        if (rc == 0 && resp.status == 200) {
            rc = render_list(f, resp.json, &more);
            if (rc)
                eph_cli_http_bad_answer(f->h, "a list of events");
        } else if (rc == 0) {
            eph_cli_http_report(f->h, &resp, rc);
            rc = (int)resp.status;
        }
        eph_cli_response_release(&resp);
        if (eph_cli_http_transient(rc) && ++failures <= STREAM_RETRIES) {
            more = false;
            continue;
        }
        if (rc) {
            if (eph_cli_http_transient(rc))
                eph_cli_http_report(f->h, NULL, rc); /* the others are reported above */
            return rc;
        }
        failures = 0;
        idle = f->r->printed > before ? 0 : idle + 1;
        if (idle >= 3 && !more && run_is_over(f))
            return 0; /* finished without a final event: the timeline is all there is */
    }
    return 0;
}

/* Prints the timeline of run id as it happens, until its final event. 0 or an error already
 * reported on stderr. */
static int follow_events(struct eph_cli_http *h, struct eph_cli_render *r, const char *id,
                         char **zdr_result)
{
    struct follow f = {.h = h, .r = r, .id = id};
    eph_cli_sse_init(&f.sse, SSE_LINE_MAX, SSE_EVENT_MAX, on_sse_event, &f);
    char path[128];
    snprintf(path, sizeof(path), "%s/%s/events", eph_cli_collection(id), id);
    int failures = 0, rc = 0;
    for (;;) {
        char last[48];
        const char *hdrs[4] = {"Accept: text/event-stream", "Cache-Control: no-cache", NULL, NULL};
        if (r->last_seq >= 0) {
            snprintf(last, sizeof(last), "Last-Event-ID: %lld", (long long)r->last_seq);
            hdrs[2] = last;
        }
        struct eph_cli_stream st = {
            .path = path,
            .headers = hdrs,
            .content_type = "text/event-stream",
            .idle_timeout_s = STREAM_IDLE_S,
            .on_chunk = on_stream_chunk,
            .arg = &f,
        };
        struct eph_cli_response resp;
        eph_cli_response_init(&resp);
        eph_cli_sse_reset(&f.sse);
        size_t before = r->printed;
        rc = eph_cli_http_stream(h, &st, &resp);
        if (rc == FOLLOW_DONE || r->final_seen) {
            eph_cli_response_release(&resp);
            rc = 0;
            break;
        }
        if (rc == 0 && !resp.streamed) {
            /* Not a stream: the JSON list of an older server, or an error. */
            if (resp.status == 200 && json_is_object(resp.json))
                rc = follow_poll(&f, resp.json);
            else {
                eph_cli_http_report(h, &resp, 0);
                rc = resp.status ? (int)resp.status : -EPROTO;
            }
            eph_cli_response_release(&resp);
            break;
        }
        bool streamed = resp.streamed;
        eph_cli_response_release(&resp);
        if (rc == -EMSGSIZE && streamed) {
            /* Our SSE cap, not the body cap: the server sent a line or event too long to be
             * one of ours. Reconnecting might skip past it; count it as a failure. */
            fprintf(stderr, "ephemeral: an event on the stream of %s is too large; resuming\n", id);
        } else if (rc < 0 && !eph_cli_http_transient(rc)) {
            eph_cli_http_report(h, NULL, rc);
            break;
        }
        failures = r->printed > before ? 0 : failures + 1;
        if (failures > STREAM_RETRIES) {
            /* A server that is gone is reported once, by the caller, after its own wait for the
             * run's end has failed too; a stream that failed otherwise is reported here. */
            if (!eph_cli_http_transient(rc))
                fprintf(stderr, "ephemeral: lost the event stream of %s%s%s\n", id,
                        h->error[0] ? ": " : "", h->error);
            rc = rc ? rc : -ECONNRESET;
            break;
        }
        /* The stream ended cleanly without the final event, twice with nothing new: if the run
         * is over, its timeline simply has no final event. */
        if (rc == 0 && failures >= 2 && run_is_over(&f))
            break;
        long backoff = f.sse.retry_ms >= 0 ? f.sse.retry_ms : 250L << (failures < 5 ? failures : 5);
        eph_cli_sleep_ms(backoff > 30000 ? 30000 : backoff);
    }
    eph_cli_sse_release(&f.sse);
    if (zdr_result)
        *zdr_result = f.zdr_result;
    else
        free(f.zdr_result);
    return rc;
}

/* Follows a run to its end and prints the timeline, result and cost; the exit status. */
static int show_live(struct eph_cli_http *h, const json_t *run, const char *id)
{
    struct eph_cli_render r;
    eph_cli_render_init(&r, stdout, eph_cli_color_wanted(stdout));
    eph_cli_render_header(&r, run);
    /* A timeline cut short is reported on stderr, but the run's own outcome decides the exit
     * status: it may well have completed. */
    char *zdr_result = NULL;
    int lost = follow_events(h, &r, id, &zdr_result);
    json_t *final = NULL;
    /* The stream has already tried for a while when it lost the server: one more look, then one
     * message for both. */
    if (wait_final(h, id, eph_cli_http_transient(lost) ? 0 : WAIT_RETRIES, &final)) {
        free(zdr_result);
        return eph_cli_http_exit(h);
    }
    if (zdr_result && !json_is_string(json_object_get(final, "result")))
        json_object_set_new(final, "result", json_string(zdr_result));
    free(zdr_result);
    eph_cli_render_result(&r, final);
    const char *status = json_string_value(json_object_get(final, "status"));
    int code = eph_cli_status_exit(status) == 0 ? EPH_CLI_EXIT_OK : EPH_CLI_EXIT_RUN_FAILED;
    json_decref(final);
    return code;
}

/* POSTs body to path ("/v1/runs", "/v1/sandboxes") with an Idempotency-Key (key, or a fresh
 * one) and, wait_s > 0, Prefer: wait=N; retried once after a transport failure with the same key.
 * 0 and *id (in resp->json) when the server created it (or answered the first attempt's);
 * -EAGAIN when nothing could be sent (reported); else the failure, reported. */
static int create(struct eph_cli_http *h, const char *path, const json_t *body, const char *key,
                  int wait_s, struct eph_cli_response *resp, const char **id)
{
    *id = NULL;
    char *text = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    /* A key of our own when none is given, so that the one retry below cannot create a second
     * one: the server answers it with the first. */
    char keybuf[37];
    if (!key && eph_cli_idempotency_key(keybuf) == 0)
        key = keybuf;
    if (!text || !key) {
        fputs(text ? "ephemeral: cannot get random bytes for an idempotency key\n"
                   : "ephemeral: out of memory\n",
              stderr);
        free(text);
        return -EAGAIN;
    }
    char keyhdr[EPH_CLI_IDEMPOTENCY_KEY_MAX + 32], prefer[32];
    snprintf(keyhdr, sizeof(keyhdr), "Idempotency-Key: %s", key);
    snprintf(prefer, sizeof(prefer), "Prefer: wait=%d", wait_s);
    const char *hdrs[] = {keyhdr, wait_s > 0 ? prefer : NULL, NULL};
    struct eph_cli_request rq = {
        .method = "POST",
        .path = path,
        .body = text,
        .body_len = strlen(text),
        .headers = hdrs,
        .timeout_s = wait_s > 0 ? wait_s + 15 : 0,
    };
    int rc = eph_cli_http_do(h, &rq, resp);
    if (eph_cli_http_transient(rc)) {
        fprintf(stderr, "ephemeral: %s; retrying once\n", h->error);
        eph_cli_sleep_ms(1000);
        rc = eph_cli_http_do(h, &rq, resp);
    }
    free(text);
    bool sandbox = strcmp(path, "/v1/sandboxes") == 0;
    if (rc == 0 && (resp->status == 200 || resp->status == 201)) {
        const char *s = json_string_value(json_object_get(resp->json, "id"));
        if (s && (sandbox ? eph_id_is_sandbox(s) : eph_id_is_run(s))) {
            *id = s;
            return 0;
        }
        eph_cli_http_bad_answer(h, sandbox ? "a sandbox with an id" : "a run with an id");
        return -EPROTO;
    }
    eph_cli_http_report(h, resp, rc);
    return rc ? rc : (int)resp->status;
}

/* The arguments of `run` (or, sandbox, `sandbox create`) into o and the request body. 0, or -1
 * with *code the exit status (--help printed, a usage error reported; o released). */
static int parse_request(int argc, char **argv, bool sandbox, struct eph_cli_run_opts *o,
                         json_t **body, int *code)
{
    const char *cmd = sandbox ? "sandbox create" : "run";
    char err[512] = "";
    /* --help anywhere before "--", like every other command. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            eph_cli_usage(stdout, cmd);
            *code = EPH_CLI_EXIT_OK;
            return -1;
        }
    int rc = sandbox ? eph_cli_sandbox_parse(argc, argv, o, err, sizeof(err))
                     : eph_cli_run_parse(argc, argv, o, err, sizeof(err));
    if (!rc)
        rc = eph_cli_run_body(o, stdin, body, err, sizeof(err));
    if (!rc)
        return 0;
    eph_cli_run_opts_release(o);
    if (rc == -EINVAL)
        *code = eph_cli_usage_error(cmd, "%s", err);
    else
        *code = (fprintf(stderr, "ephemeral: %s\n", err), EPH_CLI_EXIT_USAGE);
    return -1;
}

int eph_cli_start(int argc, char **argv, bool sandbox, int wait_s, struct eph_cli_run_opts *o,
                  struct eph_cli_http *h, struct eph_cli_response *resp, const char **id, int *code)
{
    json_t *body = NULL;
    if (parse_request(argc, argv, sandbox, o, &body, code))
        return -1;
    if (eph_cli_http_init(h)) {
        json_decref(body);
        eph_cli_run_opts_release(o);
        *code = EPH_CLI_EXIT_USAGE;
        return -1;
    }
    h->json_errors = o->json;
    eph_cli_response_init(resp);
    int rc = create(h, sandbox ? "/v1/sandboxes" : "/v1/runs", body, o->idempotency_key, wait_s,
                    resp, id);
    json_decref(body);
    if (rc == 0)
        return 0;
    *code = rc == -EAGAIN ? EPH_CLI_EXIT_USAGE : eph_cli_http_exit(h);
    eph_cli_response_release(resp);
    eph_cli_http_release(h);
    eph_cli_run_opts_release(o);
    return -1;
}

int eph_cli_run(int argc, char **argv)
{
    struct eph_cli_run_opts o;
    struct eph_cli_http h;
    struct eph_cli_response resp;
    const char *id = NULL;
    int code = EPH_CLI_EXIT_USAGE;
    if (eph_cli_start(argc, argv, false, 0, &o, &h, &resp, &id, &code))
        return code;
    if (o.detach) {
        if (o.json)
            eph_cli_print_json(resp.json);
        else
            printf("%s\n", id);
        code = EPH_CLI_EXIT_OK;
    } else if (o.json) {
        json_t *final = NULL;
        if (wait_final(&h, id, WAIT_RETRIES, &final) == 0) {
            eph_cli_print_json(final);
            const char *status = json_string_value(json_object_get(final, "status"));
            code = eph_cli_status_exit(status) == 0 ? EPH_CLI_EXIT_OK : EPH_CLI_EXIT_RUN_FAILED;
            json_decref(final);
        } else {
            code = eph_cli_http_exit(&h);
        }
    } else {
        code = show_live(&h, resp.json, id);
    }
    if (o.download && code != EPH_CLI_EXIT_UNREACHABLE) {
        /* Outputs come in every state in which the sandbox still existed. */
        int oc = eph_cli_outputs_fetch(&h, id, o.download);
        if (code == EPH_CLI_EXIT_OK)
            code = oc;
    }
    eph_cli_response_release(&resp);
    eph_cli_http_release(&h);
    eph_cli_run_opts_release(&o);
    return code;
}

/* Parses "CMD RUN_ID" (and --help); NULL after printing a usage error. */
static const char *single_id(int argc, char **argv, bool sandbox, int *code)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        eph_cli_usage(stdout, argv[0]);
        *code = EPH_CLI_EXIT_OK;
        return NULL;
    }
    if (argc < 2) {
        *code = eph_cli_usage_error(argv[0],
                                    sandbox ? "a sandbox id is required" : "a run id is required");
        return NULL;
    }
    if (argc > 2) {
        *code = eph_cli_usage_error(argv[0], "unexpected argument '%.200s'", argv[2]);
        return NULL;
    }
    if (sandbox ? eph_cli_check_sandbox_id(argv[1]) : eph_cli_check_run_id(argv[0], argv[1])) {
        *code = EPH_CLI_EXIT_USAGE;
        return NULL;
    }
    return argv[1];
}

int eph_cli_watch_kind(int argc, char **argv, bool sandbox)
{
    int code = EPH_CLI_EXIT_USAGE;
    const char *id = single_id(argc, argv, sandbox, &code);
    if (!id)
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    json_t *run = NULL;
    if (eph_cli_fetch_run(&h, id, 0, &run) == 0) {
        code = show_live(&h, run, id);
        json_decref(run);
    } else {
        code = eph_cli_http_exit(&h);
    }
    eph_cli_http_release(&h);
    return code;
}

int eph_cli_watch(int argc, char **argv)
{
    return eph_cli_watch_kind(argc, argv, false);
}

/* Every event of a run, following has_more pages. 0 and a new array, or an error reported. */
static int fetch_all_events(struct eph_cli_http *h, const char *id, json_t **out)
{
    json_t *all = json_array();
    if (!all)
        return -ENOMEM;
    long long after = -1;
    for (int page = 0; page < 10000; page++) {
        char path[160];
        if (after >= 0)
            snprintf(path, sizeof(path), "/v1/runs/%s/events?after=%lld", id, after);
        else
            snprintf(path, sizeof(path), "/v1/runs/%s/events", id);
        struct eph_cli_request rq = {.method = "GET", .path = path};
        struct eph_cli_response resp;
        eph_cli_response_init(&resp);
        int rc = eph_cli_http_do(h, &rq, &resp);
        json_t *data = json_object_get(resp.json, "data");
        if (rc || resp.status != 200 || !json_is_array(data)) {
            if (rc == 0 && resp.status == 200)
                eph_cli_http_bad_answer(h, "a list of events");
            else
                eph_cli_http_report(h, &resp, rc);
            eph_cli_response_release(&resp);
            json_decref(all);
            return rc ? rc : -EPROTO;
        }
        json_array_extend(all, data);
        bool more = json_is_true(json_object_get(resp.json, "has_more"));
        json_t *lastev = json_array_get(data, json_array_size(data) - 1);
        json_t *seq = json_object_get(lastev, "seq");
        eph_cli_response_release(&resp);
        /* Only go on while the pages move forward: a server repeating itself cannot loop us. */
        if (!more || !json_is_integer(seq) || json_integer_value(seq) <= after)
            break;
        after = json_integer_value(seq);
    }
    *out = all;
    return 0;
}

/* A run that is itself a replay: what it replayed, and each divergence from the original. */
static void show_divergences(const json_t *run, const json_t *events)
{
    json_t *rp = json_object_get(run, "replay");
    const char *of = json_string_value(json_object_get(rp, "of"));
    if (!of)
        return;
    json_int_t n = json_integer_value(json_object_get(rp, "divergences"));
    fputs("\nReplay of ", stdout);
    eph_cli_render_text(stdout, of, false, 64);
    printf(": %lld %s\n", (long long)n, n == 1 ? "divergence" : "divergences");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev)
    {
        if (strcmp(json_string_value(json_object_get(ev, "type")) ?: "", "replay.divergence"))
            continue;
        json_t *d = json_object_get(ev, "data");
        const char *orig = json_string_value(json_object_get(d, "original"));
        const char *now = json_string_value(json_object_get(d, "replayed"));
        fputs("  ", stdout);
        eph_cli_render_text(stdout, json_string_value(json_object_get(ev, "message")) ?: "", false,
                            200);
        fputs(" · call ", stdout);
        eph_cli_render_text(stdout, json_string_value(json_object_get(d, "call_id")) ?: "?", false,
                            64);
        fputs("\n    was: ", stdout);
        eph_cli_render_text(stdout, orig ? orig : "", false, 300);
        fputs("\n    now: ", stdout);
        eph_cli_render_text(stdout, now ? now : "", false, 300);
        fputc('\n', stdout);
    }
}

int eph_cli_replay(int argc, char **argv)
{
    int code = EPH_CLI_EXIT_USAGE;
    const char *id = single_id(argc, argv, false, &code);
    if (!id)
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    code = EPH_CLI_EXIT_SERVER;
    json_t *run = NULL, *events = NULL;
    if (eph_cli_fetch_run(&h, id, 0, &run) == 0 && fetch_all_events(&h, id, &events) == 0) {
        struct eph_cli_render r;
        eph_cli_render_init(&r, stdout, eph_cli_color_wanted(stdout));
        eph_cli_render_header(&r, run);
        double prev = 0;
        bool warned = false;
        size_t i;
        json_t *ev;
        json_array_foreach(events, i, ev)
        {
            /* The original timing: wait for each event as long as it came after the one before. */
            double t = json_number_value(json_object_get(ev, "t"));
            if (isfinite(t) && t > prev) {
                double gap = (t - prev) * 1000.0;
                eph_cli_sleep_ms(gap > REPLAY_GAP_MAX_MS ? REPLAY_GAP_MAX_MS : (long)gap);
                prev = t;
            }
            if (eph_cli_render_event(&r, ev) && !warned) {
                fputs("ephemeral: skipped an event that is not a json object\n", stderr);
                warned = true;
            }
        }
        eph_cli_render_result(&r, run);
        show_divergences(run, events);
        code = EPH_CLI_EXIT_OK;
    } else {
        code = eph_cli_http_exit(&h);
    }
    json_decref(run);
    json_decref(events);
    eph_cli_http_release(&h);
    return code;
}

static int write_chunk(void *arg, const char *data, size_t n)
{
    (void)arg;
    return fwrite(data, 1, n, stdout) == n ? 0 : -EIO;
}

int eph_cli_transcript(int argc, char **argv)
{
    int code = EPH_CLI_EXIT_USAGE;
    const char *id = single_id(argc, argv, false, &code);
    if (!id)
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    char path[96];
    snprintf(path, sizeof(path), "/v1/runs/%s/transcript", id);
    /* The record as the server gives it, line by line: JSON, so nothing in it can drive the
     * terminal; written as it comes, so a long run needs no memory. */
    struct eph_cli_stream st = {.path = path,
                                .content_type = "application/x-ndjson",
                                .idle_timeout_s = EPH_CLI_REQUEST_TIMEOUT_S,
                                .on_chunk = write_chunk};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_stream(&h, &st, &resp);
    if (rc == 0 && resp.status == 200 && resp.streamed) {
        code = EPH_CLI_EXIT_OK;
    } else if (rc == -EIO && resp.streamed) {
        /* Our side failed (a full disk, a closed pipe), not the server. */
        fputs("ephemeral: cannot write the transcript\n", stderr);
        code = EPH_CLI_EXIT_USAGE;
    } else {
        eph_cli_http_report(&h, &resp, rc ? rc : (resp.status == 200 ? -EPROTO : 0));
        code = eph_cli_http_exit(&h);
    }
    eph_cli_response_release(&resp);
    eph_cli_http_release(&h);
    return code;
}
