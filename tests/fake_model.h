/*
 * fake_model.h - starts and stops tests/fake_model_server.py for the model providers' unit tests,
 * and reads back the requests it logged. Included by tests/unit/test_model_*.c only.
 *
 * The server is found through $TOP (set by tests/run.sh), else relative to the test binary
 * (BUILD/tests/test_x -> ../../tests), else relative to the working directory. It binds port 0 and
 * prints the port it got on its first line: reading that line on a pipe is the synchronisation,
 * so a test never sleeps hoping the server is up. The server dies with the test (PDEATHSIG) and
 * exits by itself after 60 s in any case.
 */
#ifndef EPH_TESTS_FAKE_MODEL_H
#define EPH_TESTS_FAKE_MODEL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
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
    char line[32];
    size_t got = 0;
    uint64_t end = eph_clock_mono_ns() + 15ull * 1000000000u;
    while (got < sizeof(line) - 1 && (got == 0 || line[got - 1] != '\n')) {
        uint64_t now = eph_clock_mono_ns();
        if (now >= end)
            break;
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        if (poll(&p, 1, (int)((end - now) / 1000000u) + 1) <= 0)
            continue;
        ssize_t r = read(fds[0], line + got, sizeof(line) - 1 - got);
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

#endif
