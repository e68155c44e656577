/* The HTTP threads stay responsive while a worker's store write is slow: the real API server,
 * in-process on a loopback port, answers the health check, runs, the run list, /metrics, a run's
 * stored events (JSON and SSE) and parks a long poll, all while a worker's event write is stuck in
 * the store's fsync holding SQLite's write lock. Then the write goes through and the parked
 * stream receives the new event.
 *
 * The slowness is inside the store, not a wrapper above it: a SQLite VFS over the default one
 * whose file syncs wait at a gate the test holds closed. Each request is bounded by a client
 * timeout, so that a handler that waits on the write fails the test instead of hanging it. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <sqlite3.h>

#include "api/api.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/id.h"
#include "daemon/config.h"
#include "daemon/readiness.h"
#include "run/live.h"
#include "run/scheduler.h"
#include "run/service.h"
#include "run/worker.h"
#include "store/store.h"
#include "store_fixture.h"

/* How long the test waits for anything (an answer, a blocked sync, a stream's event): generous
 * for a loaded machine. Only a hang reaches it. */
#define BOUND_MS 20000L
#define BOUND_NS ((uint64_t)BOUND_MS * 1000000u)
/* Requests that stay open across the test (a stream, a long poll): the test ends them first. */
#define OPEN_MS (6 * BOUND_MS)

/* A condition whose timed waits take CLOCK_MONOTONIC deadlines (eph_clock_timespec). */
static void cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    assert_int_equal(pthread_cond_init(cond, &a), 0);
    pthread_condattr_destroy(&a);
}

/* ---- a SQLite VFS whose file syncs wait at a gate ---- */

/* While closed, every sync waits; blocked counts the waiting ones, so that the test knows a
 * write is stuck in its fsync (holding SQLite's write lock and the store's writer connection). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool closed;
    unsigned blocked;
} gate = {.lock = PTHREAD_MUTEX_INITIALIZER};

static sqlite3_vfs *base_vfs; /* the default VFS it wraps */
static sqlite3_vfs gated_vfs;

/* A file of the gated VFS: the base VFS's file follows it in the same allocation. */
struct gated_file {
    sqlite3_file base;
    sqlite3_file *real;
};

#define REAL(f) (((struct gated_file *)(f))->real)

static int gated_sync(sqlite3_file *f, int flags)
{
    pthread_mutex_lock(&gate.lock);
    if (gate.closed) {
        gate.blocked++;
        pthread_cond_broadcast(&gate.cond);
        while (gate.closed)
            pthread_cond_wait(&gate.cond, &gate.lock);
        gate.blocked--;
    }
    pthread_mutex_unlock(&gate.lock);
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}

/* Everything else goes straight to the base VFS's file. */
static int gated_close(sqlite3_file *f)
{
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int gated_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}
static int gated_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}
static int gated_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int gated_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int gated_lock(sqlite3_file *f, int level)
{
    return REAL(f)->pMethods->xLock(REAL(f), level);
}
static int gated_unlock(sqlite3_file *f, int level)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), level);
}
static int gated_check_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int gated_file_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int gated_sector_size(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int gated_device_characteristics(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int gated_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), page, size, extend, pp);
}
static int gated_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);
}
static void gated_shm_barrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int gated_shm_unmap(sqlite3_file *f, int delete_flag)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), delete_flag);
}
static int gated_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int gated_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods gated_io = {
    .iVersion = 3,
    .xClose = gated_close,
    .xRead = gated_read,
    .xWrite = gated_write,
    .xTruncate = gated_truncate,
    .xSync = gated_sync,
    .xFileSize = gated_file_size,
    .xLock = gated_lock,
    .xUnlock = gated_unlock,
    .xCheckReservedLock = gated_check_reserved,
    .xFileControl = gated_file_control,
    .xSectorSize = gated_sector_size,
    .xDeviceCharacteristics = gated_device_characteristics,
    .xShmMap = gated_shm_map,
    .xShmLock = gated_shm_lock,
    .xShmBarrier = gated_shm_barrier,
    .xShmUnmap = gated_shm_unmap,
    .xFetch = gated_fetch,
    .xUnfetch = gated_unfetch,
};

static int gated_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                      int *out_flags)
{
    struct gated_file *g = (struct gated_file *)file;
    g->base.pMethods = NULL;
    g->real = (sqlite3_file *)(g + 1);
    int rc = base_vfs->xOpen(base_vfs, name, g->real, flags, out_flags);
    /* SQLite closes a file whose methods are set, even when its open failed. */
    if (g->real->pMethods) {
        if (g->real->pMethods->iVersion < gated_io.iVersion) {
            /* A base VFS without WAL's methods: this wrapper would call what is not there. */
            g->real->pMethods->xClose(g->real);
            return SQLITE_CANTOPEN;
        }
        g->base.pMethods = &gated_io;
    }
    return rc;
}

/* Makes the gated VFS SQLite's default, before the store opens its connections. */
static void gate_install(void)
{
    cond_init_monotonic(&gate.cond);
    base_vfs = sqlite3_vfs_find(NULL);
    assert_non_null(base_vfs);
    gated_vfs = *base_vfs; /* the same functions (and their pAppData) for all but files */
    gated_vfs.pNext = NULL;
    gated_vfs.zName = "eph-gated";
    gated_vfs.szOsFile = (int)sizeof(struct gated_file) + base_vfs->szOsFile;
    gated_vfs.xOpen = gated_open;
    assert_int_equal(sqlite3_vfs_register(&gated_vfs, 1), SQLITE_OK);
}

static void gate_set(bool closed)
{
    pthread_mutex_lock(&gate.lock);
    gate.closed = closed;
    pthread_cond_broadcast(&gate.cond);
    pthread_mutex_unlock(&gate.lock);
}

/* True once a sync waits at the closed gate (within the bound). */
static bool gate_wait_blocked(void)
{
    struct timespec ts;
    eph_clock_timespec(eph_clock_mono_ns() + BOUND_NS, &ts);
    pthread_mutex_lock(&gate.lock);
    int rc = 0;
    while (!gate.blocked && rc == 0)
        rc = pthread_cond_timedwait(&gate.cond, &gate.lock, &ts);
    bool blocked = gate.blocked > 0;
    pthread_mutex_unlock(&gate.lock);
    return blocked;
}

static unsigned gate_blocked(void)
{
    pthread_mutex_lock(&gate.lock);
    unsigned n = gate.blocked;
    pthread_mutex_unlock(&gate.lock);
    return n;
}

/* ---- HTTP requests over loopback, each bounded ---- */

struct call {
    char url[256];
    const char *key;
    const char *accept; /* NULL: none */
    const char *prefer; /* NULL: none */
    long timeout_ms;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    struct eph_buf body;
    bool done;
    CURLcode rc;
    long status;
    pthread_t thread;
    bool started;
};

static void call_init(struct call *c, uint16_t port, const char *path, const char *key,
                      long timeout_ms)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->url, sizeof(c->url), "http://127.0.0.1:%u%s", (unsigned)port, path);
    c->key = key;
    c->timeout_ms = timeout_ms;
    pthread_mutex_init(&c->lock, NULL);
    cond_init_monotonic(&c->cond);
    eph_buf_init(&c->body, 1u << 20);
}

static void call_release(struct call *c)
{
    eph_buf_release(&c->body);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

static size_t call_write(char *data, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    pthread_mutex_lock(&c->lock);
    int rc = eph_buf_append(&c->body, data, size * n);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return rc ? 0 : size * n;
}

static void *call_main(void *arg)
{
    struct call *c = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char line[128];
    if (c->key) {
        snprintf(line, sizeof(line), "Authorization: Bearer %s", c->key);
        hdrs = curl_slist_append(hdrs, line);
    }
    if (c->accept) {
        snprintf(line, sizeof(line), "Accept: %s", c->accept);
        hdrs = curl_slist_append(hdrs, line);
    }
    if (c->prefer) {
        snprintf(line, sizeof(line), "Prefer: %s", c->prefer);
        hdrs = curl_slist_append(hdrs, line);
    }
    CURLcode rc = CURLE_FAILED_INIT;
    long status = 0;
    if (h) {
        curl_easy_setopt(h, CURLOPT_URL, c->url);
        curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, call_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
        rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
    }
    curl_slist_free_all(hdrs);
    pthread_mutex_lock(&c->lock);
    c->rc = rc;
    c->status = status;
    c->done = true;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Starts the request on a thread of its own (a stream, a long poll). */
static void call_start(struct call *c)
{
    assert_int_equal(pthread_create(&c->thread, NULL, call_main, c), 0);
    c->started = true;
}

/* What has come so far (under c->lock, or once the request ended). */
static const char *call_body(const struct call *c)
{
    return c->body.data ? c->body.data : "";
}

/* Waits until the body holds needle (true) or the request ends or the bound passes (false). */
static bool call_wait_for(struct call *c, const char *needle)
{
    struct timespec ts;
    eph_clock_timespec(eph_clock_mono_ns() + BOUND_NS, &ts);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    while (!strstr(call_body(c), needle) && !c->done && rc == 0)
        rc = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    bool found = strstr(call_body(c), needle) != NULL;
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Whether the body holds needle now. */
static bool call_has(struct call *c, const char *needle)
{
    pthread_mutex_lock(&c->lock);
    bool found = strstr(call_body(c), needle) != NULL;
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Whether the request has ended (its thread is about to return). */
static bool call_done(struct call *c)
{
    pthread_mutex_lock(&c->lock);
    bool done = c->done;
    pthread_mutex_unlock(&c->lock);
    return done;
}

/* Waits for the request's end within the bound, then joins its thread; true when it ended. */
static bool call_finish(struct call *c)
{
    struct timespec ts;
    eph_clock_timespec(eph_clock_mono_ns() + BOUND_NS, &ts);
    pthread_mutex_lock(&c->lock);
    int rc = 0;
    while (!c->done && rc == 0)
        rc = pthread_cond_timedwait(&c->cond, &c->lock, &ts);
    bool done = c->done;
    pthread_mutex_unlock(&c->lock);
    if (done && c->started) {
        pthread_join(c->thread, NULL);
        c->started = false;
    }
    return done;
}

/* ---- the server under test ---- */

struct fixture {
    struct store_fixture sf; /* SQLite, opened on the gated VFS */
    char image[96];
    struct eph_config cfg;
    struct eph_service svc;
    struct eph_api *api;
    uint16_t port;
    char key[EPH_API_KEY_LEN + 1];
    char a[EPH_RUN_ID_LEN + 1], b[EPH_RUN_ID_LEN + 1];
    struct eph_live *la, *lb;
    /* the worker's write held at the gate */
    pthread_t emitter;
    bool emitter_started;
    int emit_rc;
    atomic_bool emit_done;
    /* requests that stay open */
    struct call stream, poll;
};

static struct fixture fx;

/* A queued run of the org, stored with its first event (seq 1) and registered live. */
static void new_run(struct fixture *f, char id[EPH_RUN_ID_LEN + 1])
{
    struct eph_store *st = f->svc.store;
    struct eph_run r;
    eph_run_init(&r);
    assert_int_equal(eph_id_hex("run_", 16, r.id, sizeof(r.id)), 0);
    snprintf(r.org_id, sizeof(r.org_id), "%s", f->sf.org);
    r.status = EPH_RUN_QUEUED;
    r.model = strdup("m");
    r.prompt = strdup("p");
    r.timeout_seconds = 10;
    r.created_at_ms = eph_clock_real_ms();
    r.cost.reserved_micros = 100;
    struct eph_event first = {.seq = 1, .at_ms = r.created_at_ms};
    snprintf(first.source, sizeof(first.source), "queue");
    snprintf(first.type, sizeof(first.type), "run.queued");
    first.message = strdup("budget reserved");
    first.data = json_object();
    assert_int_equal(st->ops->run_insert_capped(st, &r, &first, 0), 0);
    eph_event_release(&first);
    memcpy(id, r.id, EPH_RUN_ID_LEN + 1);
    assert_int_equal(eph_live_register(f->svc.live, id, r.created_at_ms, 1), 0);
    eph_run_release(&r);
}

/* The worker pool runs the real worker, but without the lease keeper nor claims of queued runs
 * (both would write to the store on their own): nothing is submitted to it, the test is A's
 * worker until it refuses A, which the settler then settles. */
static void work(void *ctx, const char *run_id)
{
    eph_worker_run(ctx, run_id);
}

/* The service as daemon/serve.c fills it, with what the API needs: the configuration, the
 * SQLite store (opened on the gated VFS), the live registry, readiness without a backend, and a
 * worker pool that takes no run of its own. */
static int setup(void **state)
{
    struct fixture *f = &fx;
    memset(f, 0, sizeof(*f));
    store_fixture_setup(&f->sf, "slowstore");
    assert_int_equal(eph_config_defaults(&f->cfg), 0);
    free(f->cfg.listen);
    f->cfg.listen = strdup("127.0.0.1:0");
    /* An idle stream's keep-alive far beyond the bound: a parked stream can only see the new
     * event in time by being resumed for it. */
    f->cfg.sse_keepalive_seconds = 3600;
    struct eph_service *svc = &f->svc;
    svc->cfg = &f->cfg;
    atomic_init(&svc->shutting_down, false);
    atomic_init(&f->emit_done, false);
    snprintf(svc->node_id, sizeof(svc->node_id), "test");
    /* No image (nor backend): /healthz answers 503 whatever the host has, with its parts. */
    assert_true(snprintf(f->image, sizeof(f->image), "%s/no-image", f->sf.dir) <
                (int)sizeof(f->image));
    svc->sandbox_cfg.image = f->image;
    svc->sandbox_cfg.init_path = f->cfg.sandbox.init_path;

    svc->store = f->sf.st;
    char err[256];
    assert_int_equal(eph_live_registry_new(&svc->live), 0);
    assert_int_equal(eph_readiness_new(&svc->readiness), 0);
    svc->readiness_ops = &eph_readiness_ops;
    eph_readiness_no_backend(svc->readiness, "no backend in this test");
    const struct eph_scheduler_ops ops = {.ctx = svc, .work = work};
    assert_int_equal(eph_scheduler_start(&ops, 1, 60, &svc->sched), 0);

    struct eph_store *st = svc->store;
    char hash[65];
    assert_int_equal(eph_id_base62("eph_", 40, f->key, sizeof(f->key)), 0);
    eph_sha256_hex(f->key, strlen(f->key), hash);
    assert_int_equal(st->ops->key_insert(st, f->sf.org, hash, "member", "eph_test", NULL, 0), 0);

    new_run(f, f->a);
    new_run(f, f->b);
    f->la = eph_live_get(svc->live, f->a);
    f->lb = eph_live_get(svc->live, f->b);
    assert_non_null(f->la);
    assert_non_null(f->lb);
    /* A's worker has told something already: A's stored events are 1 and 2. */
    assert_int_equal(eph_live_emit(f->la, st, "sandbox", "sandbox.ready", NULL, "sandbox ready"),
                     0);

    assert_int_equal(eph_api_start(svc, &f->api, err, sizeof(err)), 0);
    f->port = eph_api_port(f->api);
    assert_int_not_equal(f->port, 0);
    *state = f;
    return 0;
}

/* Also after a failure: the gate opens first, so that the write and everything behind it end. */
static int teardown(void **state)
{
    struct fixture *f = &fx;
    gate_set(false);
    if (f->emitter_started)
        pthread_join(f->emitter, NULL);
    eph_api_stop(f->api); /* answers the parked requests: the open ones end */
    if (f->stream.started)
        pthread_join(f->stream.thread, NULL);
    if (f->poll.started)
        pthread_join(f->poll.thread, NULL);
    if (f->stream.url[0])
        call_release(&f->stream);
    if (f->poll.url[0])
        call_release(&f->poll);
    eph_live_put(f->la);
    eph_live_put(f->lb);
    eph_scheduler_free(f->svc.sched);
    eph_live_registry_free(f->svc.live);
    eph_readiness_free(f->svc.readiness);
    eph_config_release(&f->cfg);
    store_fixture_teardown(&f->sf);
    return 0;
}

/* GET path (with the key unless public) and its answer as JSON; fails the test when no answer
 * comes within the bound. */
static json_t *get_json(struct fixture *f, const char *path, bool public, long *status)
{
    struct call c;
    call_init(&c, f->port, path, public ? NULL : f->key, BOUND_MS);
    call_main(&c);
    if (c.rc != CURLE_OK)
        fail_msg("GET %s: no answer within %ld ms (%s): the HTTP thread waited on the store", path,
                 BOUND_MS, curl_easy_strerror(c.rc));
    *status = c.status;
    json_t *o = json_loads(call_body(&c), 0, NULL);
    call_release(&c);
    assert_non_null(o);
    return o;
}

/* /metrics' count of parked requests; fails the test when it does not answer in time. */
static unsigned parked_now(struct fixture *f)
{
    struct call c;
    call_init(&c, f->port, "/metrics", NULL, BOUND_MS);
    call_main(&c);
    if (c.rc != CURLE_OK)
        fail_msg("GET /metrics: no answer within %ld ms (%s)", BOUND_MS, curl_easy_strerror(c.rc));
    assert_int_equal(c.status, 200);
    const char *line = strstr(call_body(&c), "\nephemeral_http_parked_requests ");
    assert_non_null(line);
    unsigned n = (unsigned)strtoul(line + strlen("\nephemeral_http_parked_requests "), NULL, 10);
    call_release(&c);
    return n;
}

/* Waits until n requests are parked, asking /metrics (itself a request that must answer). */
static void wait_parked(struct fixture *f, unsigned n)
{
    uint64_t until = eph_clock_mono_ns() + BOUND_NS;
    while (parked_now(f) != n) {
        if (eph_clock_mono_ns() >= until)
            fail_msg("%u requests were not parked within the bound", n);
        sched_yield();
    }
}

static void *emitter_main(void *arg)
{
    struct fixture *f = arg;
    f->emit_rc = eph_live_emit(f->la, f->svc.store, "shell", "shell.command", NULL, "$ make test");
    atomic_store(&f->emit_done, true);
    return NULL;
}

static void assert_run(json_t *o, const char *id, const char *status)
{
    assert_string_equal(json_string_value(json_object_get(o, "id")), id);
    assert_string_equal(json_string_value(json_object_get(o, "status")), status);
}

static void test_http_answers_while_a_store_write_is_blocked(void **state)
{
    struct fixture *f = *state;
    long status;
    char path[128];

    /* A's worker emits its next event; the store's commit waits in fsync. */
    gate_set(true);
    assert_int_equal(pthread_create(&f->emitter, NULL, emitter_main, f), 0);
    f->emitter_started = true;
    assert_true(gate_wait_blocked());

    json_t *o = get_json(f, "/healthz", true, &status);
    assert_int_equal(status, 503); /* no image nor backend here */
    assert_true(json_is_true(json_object_get(json_object_get(o, "store"), "ok")));
    assert_true(json_is_false(json_object_get(json_object_get(o, "backend"), "ok")));
    json_decref(o);

    snprintf(path, sizeof(path), "/v1/runs/%s", f->a);
    o = get_json(f, path, false, &status);
    assert_int_equal(status, 200);
    assert_run(o, f->a, "queued");
    json_decref(o);
    snprintf(path, sizeof(path), "/v1/runs/%s", f->b);
    o = get_json(f, path, false, &status);
    assert_int_equal(status, 200);
    assert_run(o, f->b, "queued");
    json_decref(o);

    o = get_json(f, "/v1/runs", false, &status);
    assert_int_equal(status, 200);
    assert_int_equal(json_array_size(json_object_get(o, "data")), 2);
    json_decref(o);

    /* A's events as stored: the blocked one is not among them. */
    snprintf(path, sizeof(path), "/v1/runs/%s/events", f->a);
    o = get_json(f, path, false, &status);
    assert_int_equal(status, 200);
    json_t *data = json_object_get(o, "data");
    assert_int_equal(json_array_size(data), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(data, 0), "seq")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(data, 1), "seq")), 2);
    json_decref(o);

    /* A's event stream delivers what is stored, then parks waiting after event 2. */
    call_init(&f->stream, f->port, path, f->key, OPEN_MS);
    f->stream.accept = "text/event-stream";
    call_start(&f->stream);
    assert_true(call_wait_for(&f->stream, "id: 2\nevent: sandbox.ready\n"));
    assert_true(call_has(&f->stream, "id: 1\nevent: run.queued\n"));
    /* A long poll on A parks until A is settled. */
    snprintf(path, sizeof(path), "/v1/runs/%s", f->a);
    call_init(&f->poll, f->port, path, f->key, OPEN_MS);
    f->poll.prefer = "wait=600";
    call_start(&f->poll);
    wait_parked(f, 2);

    /* All of it answered while the write was still blocked, not after it. */
    assert_int_equal(gate_blocked(), 1);
    assert_false(atomic_load(&f->emit_done));
    assert_false(call_has(&f->stream, "id: 3\n"));

    /* The write goes through: the parked stream is resumed with the new event. */
    gate_set(false);
    pthread_join(f->emitter, NULL);
    f->emitter_started = false;
    assert_int_equal(f->emit_rc, 0);
    assert_true(call_wait_for(&f->stream, "id: 3\nevent: shell.command\n"));
    assert_false(call_done(&f->poll)); /* A is not settled yet */

    /* A is settled (refused, by the settler running the worker): the long poll answers with it,
     * and the stream ends with its last event. */
    assert_int_equal(eph_worker_refuse(&f->svc, f->a, "test_settled", "settled by the test"), 0);
    assert_true(call_finish(&f->poll));
    assert_int_equal(f->poll.rc, CURLE_OK);
    assert_int_equal(f->poll.status, 200);
    o = json_loads(call_body(&f->poll), 0, NULL);
    assert_non_null(o);
    assert_run(o, f->a, "failed");
    json_decref(o);
    assert_true(call_finish(&f->stream));
    assert_int_equal(f->stream.rc, CURLE_OK);
    assert_non_null(strstr(call_body(&f->stream), "event: worker.destroyed\n"));
}

int main(void)
{
    /* The slowness is SQLite's own fsync: this test is about the SQLite store, never another. */
    unsetenv("EPH_TEST_PG");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    gate_install();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_http_answers_while_a_store_write_is_blocked, setup,
                                        teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    sqlite3_vfs_unregister(&gated_vfs);
    curl_global_cleanup();
    return failed;
}
