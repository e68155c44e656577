/*
 * fake_model.h - starts and stops tests/fake_model_server.py for the model providers' unit tests,
 * and reads back the requests it logged. Included by tests/unit/test_model_*.c only.
 *
 * The server is found through $TOP (set by tests/run.sh), else relative to the test binary
 * (BUILD/tests/test_x -> ../../tests), else relative to the working directory. It binds port 0 and
 * prints the port it got on its first line: reading that line on a pipe is the synchronisation
 * (a blocking read, without a deadline a loaded machine could overrun), so a test never sleeps
 * hoping the server is up. The server dies with the test (PDEATHSIG) and
 * exits by itself after 60 s in any case.
 */
#ifndef EPH_TESTS_FAKE_MODEL_H
#define EPH_TESTS_FAKE_MODEL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/clock.h"

#define FAKE_UNUSED __attribute__((unused))

struct fake_server {
    pid_t pid;
    int port;
    char dir[PATH_MAX];
    char script[PATH_MAX + 16];
    char log[PATH_MAX + 16];
    char url[64]; /* http://127.0.0.1:PORT/v1 */
};

static FAKE_UNUSED int fake_find_script(char *out, size_t len)
{
    const char *top = getenv("TOP");
    if (top && top[0]) {
        snprintf(out, len, "%s/tests/fake_model_server.py", top);
        if (access(out, R_OK) == 0)
            return 0;
    }
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash)
                break;
            *slash = '\0';
        }
        snprintf(out, len, "%s/tests/fake_model_server.py", exe);
        if (access(out, R_OK) == 0)
            return 0;
    }
    snprintf(out, len, "tests/fake_model_server.py");
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

/* Writes script (a JSON list of answers) and starts the server. key: what it should expect as
 * the API key (NULL: do not check). 0, or -1 with a message on stderr. */
static FAKE_UNUSED int fake_start(struct fake_server *s, const char *script, const char *key)
{
    char path[PATH_MAX];
    memset(s, 0, sizeof(*s));
    s->pid = -1;
    if (fake_find_script(path, sizeof(path))) {
        fprintf(stderr, "fake_model_server.py not found (set TOP)\n");
        return -1;
    }
    snprintf(s->dir, sizeof(s->dir), "/tmp/eph-fake-model.XXXXXX");
    if (!mkdtemp(s->dir)) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(s->script, sizeof(s->script), "%s/script.json", s->dir);
    snprintf(s->log, sizeof(s->log), "%s/requests.jsonl", s->dir);
    FILE *f = fopen(s->script, "w");
    if (!f || fputs(script, f) < 0 || fclose(f) != 0) {
        perror("write script");
        return -1;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        perror("pipe2");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        const char *argv[12];
        int i = 0;
        argv[i++] = "python3";
        argv[i++] = path;
        argv[i++] = "--script";
        argv[i++] = s->script;
        argv[i++] = "--log";
        argv[i++] = s->log;
        argv[i++] = "--max-seconds";
        argv[i++] = "60";
        if (key) {
            argv[i++] = "--key";
            argv[i++] = key;
        }
        argv[i] = NULL;
        execvp("python3", (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    /* No deadline: the line comes when the server listens, however loaded the machine, and a
     * server that fails (or an interpreter that cannot start) exits, which ends the read. */
    char line[32];
    size_t got = 0;
    while (got < sizeof(line) - 1 && (got == 0 || line[got - 1] != '\n')) {
        ssize_t r = read(fds[0], line + got, sizeof(line) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    line[got] = '\0';
    s->port = atoi(line);
    if (s->port <= 0) {
        fprintf(stderr, "the fake model server did not print its port\n");
        return -1;
    }
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d/v1", s->port);
    return 0;
}

static FAKE_UNUSED void fake_stop(struct fake_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status;
        uint64_t end = eph_clock_mono_ns() + 5ull * 1000000000u;
        while (waitpid(s->pid, &status, WNOHANG) == 0) {
            if (eph_clock_mono_ns() > end) {
                kill(s->pid, SIGKILL);
                waitpid(s->pid, &status, 0);
                break;
            }
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        s->pid = -1;
    }
    if (s->dir[0]) {
        char progress[PATH_MAX + 32];
        snprintf(progress, sizeof(progress), "%s.progress", s->log);
        unlink(progress);
        unlink(s->script);
        unlink(s->log);
        rmdir(s->dir);
        s->dir[0] = '\0';
    }
}

/* The requests logged so far, as a JSON array (decref it). */
static FAKE_UNUSED json_t *fake_requests(const struct fake_server *s)
{
    json_t *arr = json_array();
    FILE *f = fopen(s->log, "r");
    if (!f)
        return arr;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t e;
        json_t *v = json_loads(line, 0, &e);
        if (v)
            json_array_append_new(arr, v);
    }
    free(line);
    fclose(f);
    return arr;
}

static FAKE_UNUSED size_t fake_request_count(const struct fake_server *s)
{
    json_t *r = fake_requests(s);
    size_t n = json_array_size(r);
    json_decref(r);
    return n;
}

/* Waits (bounded) until the server has logged n requests - it logs before it answers. */
static FAKE_UNUSED int fake_wait_requests(const struct fake_server *s, size_t n, int timeout_ms)
{
    uint64_t end = eph_clock_mono_ns() + (uint64_t)timeout_ms * 1000000u;
    while (fake_request_count(s) < n) {
        if (eph_clock_mono_ns() > end)
            return -1;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Waits (bounded) until the server has sent the first event of a stalling stream. */
static FAKE_UNUSED int fake_wait_first_event(const struct fake_server *s, int timeout_ms)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s.progress", s->log);
    uint64_t end = eph_clock_mono_ns() + (uint64_t)timeout_ms * 1000000u;
    while (access(path, F_OK) != 0) {
        if (eph_clock_mono_ns() > end)
            return -1;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The body of request i (borrowed from reqs). */
static FAKE_UNUSED json_t *fake_body(json_t *reqs, size_t i)
{
    return json_object_get(json_array_get(reqs, i), "body");
}

static FAKE_UNUSED double fake_seconds_since(uint64_t t0)
{
    return (double)(eph_clock_mono_ns() - t0) / 1e9;
}

/* A meter for eph_model_call that authorises every attempt (max_tokens lowered to cap when cap is
 * not 0) and keeps a copy of what each attempt reported. */
#include "agent/model.h"

struct attempt_log {
    unsigned n;
    uint32_t cap;
    struct {
        enum eph_model_outcome outcome;
        uint32_t max_tokens;
        uint64_t input_bound, input, cached, cache_write, cache_write_1h, output, reasoning;
        bool usage_final, sent, retryable;
        long status;
    } a[8];
};

static FAKE_UNUSED int attempt_log_authorise(void *ctx, unsigned attempt, uint64_t at_ns,
                                             uint64_t input_bound, bool check_only,
                                             uint32_t *max_tokens, uint64_t *deadline_ns)
{
    struct attempt_log *l = ctx;
    if (l->cap && *max_tokens > l->cap)
        *max_tokens = l->cap;
    return 0;
}

static FAKE_UNUSED void attempt_log_record(void *ctx, const struct eph_model_attempt *at)
{
    struct attempt_log *l = ctx;
    if (l->n >= sizeof(l->a) / sizeof(l->a[0]))
        return;
    const struct eph_model_response *r = at->resp;
    l->a[l->n].outcome = at->outcome;
    l->a[l->n].max_tokens = at->max_tokens;
    l->a[l->n].input_bound = at->input_bound;
    l->a[l->n].input = r->input_tokens;
    l->a[l->n].cached = r->cached_input_tokens;
    l->a[l->n].cache_write = r->cache_write_tokens;
    l->a[l->n].cache_write_1h = r->cache_write_1h_tokens;
    l->a[l->n].output = r->output_tokens;
    l->a[l->n].reasoning = r->reasoning_tokens;
    l->a[l->n].usage_final = r->usage_final;
    l->a[l->n].sent = r->sent;
    l->a[l->n].retryable = r->retryable;
    l->a[l->n].status = r->http_status;
    l->n++;
}

/* ---- connections ---- */

/* How many TCP connections the server had accepted by the last request it logged. */
static FAKE_UNUSED long fake_accepted(const struct fake_server *s)
{
    json_t *reqs = fake_requests(s);
    long most = 0;
    size_t i;
    json_t *r;
    json_array_foreach(reqs, i, r)
    {
        long a = (long)json_integer_value(json_object_get(r, "accepted"));
        if (a > most)
            most = a;
    }
    json_decref(reqs);
    return most;
}

/* Four answers and a 500 that is retried, all keeping the connection open: five requests for four
 * calls, on one connection when the client reuses it. */
#define FAKE_REUSE_SCRIPT                                                                          \
    "[{\"text\":\"one\",\"keep_alive\":true},{\"text\":\"two\",\"keep_alive\":true},"              \
    "{\"status\":500,\"error\":\"busy\",\"keep_alive\":true},"                                     \
    "{\"text\":\"three\",\"keep_alive\":true},{\"text\":\"four\",\"keep_alive\":true}]"
static const char *const fake_reuse_answers[] FAKE_UNUSED = {"one", "two", "three", "four"};

/* The connection (1 for the first accepted) each logged request came on, in order, into conn:
 * how many requests were logged (at most max are stored). */
static FAKE_UNUSED size_t fake_conns(const struct fake_server *s, long *conn, size_t max)
{
    json_t *reqs = fake_requests(s);
    size_t i;
    json_t *r;
    json_array_foreach(reqs, i, r)
    {
        if (i < max)
            conn[i] = (long)json_integer_value(json_object_get(r, "conn"));
    }
    size_t n = json_array_size(reqs);
    json_decref(reqs);
    return n;
}

/* A script of n answers that echo the caller's marker and keep the connection open; with gather,
 * the server answers them gather at a time, once all of a group have arrived. Free it. */
static FAKE_UNUSED char *fake_echo_script(unsigned n, unsigned gather)
{
    json_t *arr = json_array();
    for (unsigned i = 0; i < n; i++) {
        json_t *e = json_pack("{s:b,s:b}", "echo", 1, "keep_alive", 1);
        if (gather)
            json_object_set_new(e, "gather", json_integer(gather));
        json_array_append_new(arr, e);
    }
    char *s = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return s;
}

/* One call of m with marker as the user's message (no tools): 0, or the call's error. The
 * answer's text goes to resp. */
static FAKE_UNUSED int fake_call_marked(struct eph_model *m, const char *marker,
                                        struct eph_model_response *resp, char *err, size_t errlen)
{
    json_t *messages = json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content",
                                 "you are in a sandbox", "role", "user", "content", marker);
    struct eph_model_request req = {.messages = messages,
                                    .max_tokens = 64,
                                    .deadline_ns = eph_clock_mono_ns() + 60ull * 1000000000u,
                                    .prompt = marker};
    struct attempt_log log;
    memset(&log, 0, sizeof(log));
    struct eph_model_meter meter = {attempt_log_authorise, attempt_log_record, &log};
    int rc = eph_model_call(m, &req, &meter, resp, err, errlen);
    json_decref(messages);
    return rc;
}

/* Several callers at once, as several workers would: each thread makes `rounds` calls through
 * call (which puts marker in its request and copies the answer's text to answer) and checks that
 * each answer is the echo of its own marker. Threads do not assert (cmocka's asserts belong to the
 * main thread): they count what went wrong and keep the first reason. */
typedef int (*fake_marked_fn)(void *ctx, const char *marker, char *answer, size_t len);

struct fake_crowd {
    fake_marked_fn call;
    void *ctx;
    unsigned rounds;
    atomic_uint next_id;
    atomic_uint wrong;
    pthread_mutex_t lock;
    char why[256];
};

static FAKE_UNUSED void *fake_crowd_thread(void *arg)
{
    struct fake_crowd *c = arg;
    unsigned id = atomic_fetch_add(&c->next_id, 1);
    for (unsigned r = 0; r < c->rounds; r++) {
        char marker[64], want[80], answer[256] = "";
        snprintf(marker, sizeof(marker), "caller %u call %u", id, r);
        snprintf(want, sizeof(want), "echo: %s", marker);
        int rc = c->call(c->ctx, marker, answer, sizeof(answer));
        if (rc == 0 && strcmp(answer, want) == 0)
            continue;
        atomic_fetch_add(&c->wrong, 1);
        pthread_mutex_lock(&c->lock);
        if (!c->why[0])
            snprintf(c->why, sizeof(c->why), "%s: rc %d, answer '%.80s'", marker, rc, answer);
        pthread_mutex_unlock(&c->lock);
    }
    return NULL;
}

/* Runs threads callers (at most 16) of `rounds` calls each and joins them: the number of calls
 * that failed or got another caller's answer, the first of them described in why. */
static FAKE_UNUSED unsigned fake_crowd_run(fake_marked_fn call, void *ctx, unsigned threads,
                                           unsigned rounds, char *why, size_t whylen)
{
    struct fake_crowd c = {.call = call, .ctx = ctx, .rounds = rounds};
    pthread_t t[16];
    unsigned started = 0;
    pthread_mutex_init(&c.lock, NULL);
    while (started < threads && started < 16 &&
           pthread_create(&t[started], NULL, fake_crowd_thread, &c) == 0)
        started++;
    for (unsigned i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_destroy(&c.lock);
    unsigned wrong = atomic_load(&c.wrong) + (threads - started) * rounds;
    snprintf(why, whylen, "%s%s", c.why, started < threads ? " (a thread did not start)" : "");
    return wrong;
}

/* Runs callers x rounds calls of m at once (the server must gather callers requests at a time,
 * fake_echo_script): 0 when every caller got its own answers, else -1 with the first wrong one on
 * stderr. */
static FAKE_UNUSED int fake_crowd_check(fake_marked_fn call, void *ctx, unsigned callers,
                                        unsigned rounds)
{
    char why[320];
    unsigned wrong = fake_crowd_run(call, ctx, callers, rounds, why, sizeof(why));
    if (wrong)
        fprintf(stderr, "%u of %u calls went wrong, first: %s\n", wrong, callers * rounds, why);
    return wrong ? -1 : 0;
}

/* fake_marked_fn for a model: ctx is the struct eph_model. */
static FAKE_UNUSED int fake_model_marked(void *ctx, const char *marker, char *answer, size_t len)
{
    struct eph_model_response resp;
    char err[256];
    memset(&resp, 0, sizeof(resp));
    int rc = fake_call_marked(ctx, marker, &resp, err, sizeof(err));
    snprintf(answer, len, "%s", rc ? err : resp.content ? resp.content : "");
    eph_model_response_release(&resp);
    return rc;
}

/* FAKE_REUSE_SCRIPT through m, four calls in a row: 0 when each got its answer and every request
 * came on connection 1, else -1 with the reason on stderr. */
static FAKE_UNUSED int fake_check_one_connection(struct eph_model *m, const struct fake_server *s)
{
    for (size_t i = 0; i < 4; i++) {
        char answer[256];
        if (fake_model_marked(m, "again", answer, sizeof(answer)) != 0 ||
            strcmp(answer, fake_reuse_answers[i]) != 0) {
            fprintf(stderr, "call %zu: '%s', not '%s'\n", i, answer, fake_reuse_answers[i]);
            return -1;
        }
    }
    long conn[5];
    size_t n = fake_conns(s, conn, 5);
    for (size_t i = 0; i < n && i < 5; i++) {
        if (conn[i] != 1) {
            fprintf(stderr, "request %zu came on connection %ld\n", i, conn[i]);
            return -1;
        }
    }
    if (n != 5)
        fprintf(stderr, "%zu requests, not 5\n", n);
    return n == 5 ? 0 : -1;
}

/* callers threads making rounds calls each through m at once (the server gathering callers
 * requests, fake_echo_script): 0 when every caller got its own answers, every call made one
 * request, and the server accepted exactly callers connections; else -1, the reason on stderr. */
static FAKE_UNUSED int fake_check_concurrent(struct eph_model *m, const struct fake_server *s,
                                             unsigned callers, unsigned rounds)
{
    if (fake_crowd_check(fake_model_marked, m, callers, rounds) != 0)
        return -1;
    size_t n = fake_request_count(s);
    long accepted = fake_accepted(s);
    if (n != (size_t)callers * rounds || accepted != (long)callers) {
        fprintf(stderr, "%zu requests on %ld connections\n", n, accepted);
        return -1;
    }
    return 0;
}

#endif
