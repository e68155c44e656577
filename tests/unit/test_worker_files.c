/* The worker's steps (src/run/worker.c) against a fake sandbox backend: a run that completes
 * goes through every step in order (its commands run by the fake backend); a store that refuses the
 * settlement leaves the timeline open; and the file step, with a file write that blocks until the
 * sandbox is interrupted: a cancel that arrives while the request's files are being placed ends the
 * run `cancelled` (not `failed`), settled, with nothing left reserved. The black-box test
 * (api_cancel.sh) cannot make its cancel land in that window every time; here the fake backend
 * holds the window open until the cancel has been sent. A file that cannot be placed fails the run
 * files_error quoting its path, except with zero data retention, whose stored message is a fixed
 * sentence (and the codes that keep their messages then, eph_worker_zdr_message). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "agent/model.h"
#include "api/api.h"
#include "common/buf.h"
#include "common/clock.h"
#include "daemon/config.h"
#include "fake_sandbox.h"
#include "run/admit.h"
#include "run/live.h"
#include "run/service.h"
#include "run/worker.h"
#include "sandbox/backend.h"
#include "store/store.h"
#include "store_fixture.h"

/* ---- the fake backend, its first file write held open until interrupted ---- */

/* The test's fake (tests/fake_sandbox.h), counted: creates, destroys and file writes. Each new
 * sandbox gets a FIFO where the request's first file goes, so the real guest's write of it blocks
 * (no reader) until the cancel interrupts the sandbox, as a large file over a slow channel
 * would. */
static struct eph_sandbox_ops fake_ops;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;
static unsigned fake_writes;    /* write_file calls entered */
static unsigned fake_created;   /* sandboxes created */
static unsigned fake_destroyed; /* destroy calls */

static int fake_create(const struct eph_sandbox_config *cfg, struct eph_sandbox **out)
{
    struct eph_sandbox *sb = NULL;
    int rc = eph_guest_sandbox_create(&fake_ops, cfg, NULL, &sb);
    if (rc)
        return rc;
    struct eph_exec_request req = {.command = "mkdir data && mkfifo data/a.txt",
                                   .timeout_ms = 10000,
                                   .stdout_cap = 256,
                                   .stderr_cap = 256};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    rc = eph_sandbox_exec(sb, &req, &res);
    if (!rc && res.exit_code != 0)
        rc = -EIO;
    eph_exec_result_release(&res);
    if (rc) {
        eph_sandbox_destroy(sb);
        return rc;
    }
    pthread_mutex_lock(&fake_lock);
    fake_created++;
    pthread_mutex_unlock(&fake_lock);
    *out = sb;
    return 0;
}

static int fake_write_file(struct eph_sandbox *sb, const char *path, const void *data, size_t len,
                           unsigned mode)
{
    pthread_mutex_lock(&fake_lock);
    fake_writes++;
    pthread_cond_broadcast(&fake_cond);
    pthread_mutex_unlock(&fake_lock);
    return eph_fake_sandbox_ops.write_file(sb, path, data, len, mode);
}

static int fake_destroy(struct eph_sandbox *sb)
{
    pthread_mutex_lock(&fake_lock);
    fake_destroyed++;
    pthread_mutex_unlock(&fake_lock);
    return eph_fake_sandbox_ops.destroy(sb);
}

/* ---- the service around one worker ---- */

struct fixture {
    struct store_fixture db;
    struct eph_config cfg;
    struct eph_service svc;
    struct eph_model *model;
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    assert_int_equal(eph_config_defaults(&f->cfg), 0);
    /* The replay model of the embedded defaults, from the repository's examples. */
    const char *top = getenv("TOP");
    char transcripts[512];
    snprintf(transcripts, sizeof(transcripts), "%s/examples", top && *top ? top : ".");
    free(f->cfg.models[0].transcripts);
    f->cfg.models[0].transcripts = strdup(transcripts);
    char err[256];
    const struct eph_model_ops *mops = eph_model_provider(f->cfg.models[0].provider);
    assert_non_null(mops);
    assert_int_equal(mops->open(&f->cfg.models[0], &f->model, err, sizeof(err)), 0);

    store_fixture_setup(&f->db, "worker");
    f->svc.cfg = &f->cfg;
    f->svc.store = f->db.st;
    char init[4096], why[256];
    struct eph_sandbox_config sc;
    if (eph_fake_sandbox_config(&sc, init, sizeof(init), why, sizeof(why)) != 0) {
        print_message("skipped: %s\n", why);
        skip();
    }
    free(f->cfg.sandbox.init_path);
    f->cfg.sandbox.init_path = strdup(init);
    fake_ops = eph_fake_sandbox_ops;
    fake_ops.create = fake_create;
    fake_ops.write_file = fake_write_file;
    fake_ops.destroy = fake_destroy;
    f->svc.sandbox_ops = &fake_ops;
    f->svc.sandbox_cfg = sc;
    f->svc.sandbox_cfg.init_path = f->cfg.sandbox.init_path;
    f->svc.models = &f->model;
    snprintf(f->svc.node_id, sizeof(f->svc.node_id), "test-node");
    assert_int_equal(eph_live_registry_new(&f->svc.live), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    eph_live_registry_free(f->svc.live);
    store_fixture_teardown(&f->db);
    f->model->ops->free(f->model);
    eph_config_release(&f->cfg);
    free(f);
    return 0;
}

static int submit_nothing(struct eph_service *svc, const char *run_id)
{
    return 0; /* the test runs the worker itself */
}

/* A queued run of the fixture's org and model: no prompt, no files, no shell, 60 s, the budget
 * given; the caller adds the rest and admits it (admit_run). */
static void queued_run(struct fixture *f, struct eph_run *r, const char *id, int64_t budget)
{
    eph_run_init(r);
    snprintf(r->id, sizeof(r->id), "%s", id);
    snprintf(r->org_id, sizeof(r->org_id), "%s", f->db.org);
    r->status = EPH_RUN_QUEUED;
    r->model = strdup(f->cfg.default_model);
    r->connections = json_array();
    r->metadata = json_object();
    r->timeout_seconds = 60;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = budget;
}

/* Stores and admits r (its first event run.queued; a zero-data-retention run's prompt and files
 * handed to the live entry), without queueing it: the test runs the worker. Releases r. */
static void admit_run(struct fixture *f, struct eph_run *r, const char *zdr_prompt,
                      json_t *zdr_files)
{
    struct eph_event first;
    memset(&first, 0, sizeof(first));
    first.seq = 1;
    first.at_ms = r->created_at_ms;
    snprintf(first.source, sizeof(first.source), "queue");
    snprintf(first.type, sizeof(first.type), "run.queued");
    first.message = strdup("budget reserved");
    bool queue_failed = false;
    assert_int_equal(
        eph_run_admit(&f->svc, r, &first, zdr_prompt, zdr_files, submit_nothing, &queue_failed), 0);
    eph_event_release(&first);
    eph_run_release(r);
}

struct worker_arg {
    struct eph_service *svc;
    const char *id;
};

static void *worker_thread(void *p)
{
    struct worker_arg *a = p;
    eph_worker_run(a->svc, a->id);
    return NULL;
}

static void test_cancel_while_files_are_placed(void **state)
{
    struct fixture *f = *state;
    const char *id = "run_0000000000000000000000000000f11e";
    struct eph_run r;
    queued_run(f, &r, id, 30000);
    r.prompt = strdup("the prompt");
    r.shell = true;
    r.files = json_pack("[{s:s, s:s}, {s:s, s:s}]", "path", "data/a.txt", "content_base64",
                        "aGVsbG8K", "path", "data/b.txt", "content_base64", "d29ybGQK");
    admit_run(f, &r, NULL, NULL);

    pthread_t t;
    struct worker_arg arg = {&f->svc, id};
    assert_int_equal(pthread_create(&t, NULL, worker_thread, &arg), 0);

    /* The worker is inside the first file write: the window is open. */
    pthread_mutex_lock(&fake_lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    int rc = 0;
    while (fake_writes == 0 && rc == 0)
        rc = pthread_cond_timedwait(&fake_cond, &fake_lock, &until);
    unsigned writes = fake_writes;
    pthread_mutex_unlock(&fake_lock);
    assert_int_equal(writes, 1);

    /* The cancel, as the API's cancel handler sends it. */
    struct eph_live *l = eph_live_get(f->svc.live, id);
    assert_non_null(l);
    eph_live_cancel(l);
    eph_live_put(l);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    assert_int_equal(pthread_timedjoin_np(t, NULL, &until), 0);

    struct eph_run got;
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_CANCELLED);
    assert_string_equal(got.error_code, "cancelled");
    assert_non_null(strstr(got.error_message, "while its files were being placed"));
    assert_int_equal(got.cost.charged_micros + got.cost.released_micros, 30000);
    eph_run_release(&got);

    struct eph_balance b;
    assert_int_equal(f->db.st->ops->balance(f->db.st, f->db.org, &b), 0);
    assert_int_equal(b.reserved_micros, 0);
    /* One sandbox, destroyed; the second file was never written. */
    /* Read under the lock, asserted after it: a failed assertion must not leave it held. */
    pthread_mutex_lock(&fake_lock);
    unsigned created = fake_created, destroyed = fake_destroyed;
    writes = fake_writes;
    pthread_mutex_unlock(&fake_lock);
    assert_int_equal(created, 1);
    assert_int_equal(destroyed, 1);
    assert_int_equal(writes, 1);
}

/* ---- a store whose settlement fails ---- */

static const struct eph_store_ops *real_ops;
static struct eph_store_ops failing_ops;
static unsigned finish_calls;

static int finish_fails(struct eph_store *s, const struct eph_run_final *fin)
{
    finish_calls++;
    return -EINVAL; /* refused for good: no retry */
}

static int count_cb(const struct eph_event *e, void *ctx)
{
    (*(unsigned *)ctx)++;
    return 0;
}

static void admit(struct fixture *f, const char *id)
{
    struct eph_run r;
    queued_run(f, &r, id, 30000);
    r.prompt = strdup("the prompt");
    admit_run(f, &r, NULL, NULL);
}

/* When the store refuses the settlement, the live timeline is not closed as settled while the
 * store still says the run is not finished: a waiting client would be told it ended. The entry
 * stays open at what is stored, and the settlement of a lost run closes it later. */
static void test_settle_failure_leaves_the_timeline_open(void **state)
{
    struct fixture *f = *state;
    const char *id = "run_00000000000000000000000000005e77";
    admit(f, id);
    /* Cancelled before a worker took it: the worker settles it at once, without a sandbox. */
    struct eph_live *l = eph_live_get(f->svc.live, id);
    assert_non_null(l);
    eph_live_cancel(l);

    real_ops = f->db.st->ops;
    failing_ops = *real_ops;
    failing_ops.run_finish = finish_fails;
    f->db.st->ops = &failing_ops;
    eph_worker_run(&f->svc, id);
    f->db.st->ops = real_ops;
    assert_int_equal(finish_calls, 1);

    uint64_t last;
    bool closed;
    eph_live_state(l, &last, &closed);
    assert_false(closed);
    assert_int_equal(last, 1); /* the closing events were never stored */
    assert_false(eph_live_worked_here(l));
    struct eph_live *again = eph_live_get(f->svc.live, id);
    assert_ptr_equal(again, l); /* still registered, for the clients waiting on it */
    eph_live_put(again);
    struct eph_run got;
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_false(eph_run_status_terminal(got.status));
    eph_run_release(&got);
    unsigned n = 0;
    assert_int_equal(f->db.st->ops->events_list(f->db.st, id, 0, 0, count_cb, &n), 0);
    assert_int_equal(n, 1);

    /* The store takes writes again: settled as lost, and now the timeline closes. */
    assert_int_equal(eph_worker_settle_lost(&f->svc, id, 0), 0);
    eph_live_state(l, &last, &closed);
    assert_true(closed);
    n = 0;
    assert_int_equal(f->db.st->ops->events_list(f->db.st, id, 0, 0, count_cb, &n), 0);
    assert_int_equal(last, n);
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_FAILED);
    assert_string_equal(got.error_code, "worker_lost");
    assert_int_equal(got.cost.charged_micros, 0);
    assert_int_equal(got.cost.released_micros, 30000);
    eph_run_release(&got);
    assert_null(eph_live_get(f->svc.live, id));
    eph_live_put(l);
}

/* Collects the types of a run's stored events in order. */
struct types {
    char t[64][40];
    unsigned n;
};

static int types_cb(const struct eph_event *e, void *ctx)
{
    struct types *ty = ctx;
    if (ty->n < 64)
        snprintf(ty->t[ty->n++], sizeof(ty->t[0]), "%s", e->type);
    return 0;
}

static int find_type(const struct types *ty, const char *type)
{
    for (unsigned i = 0; i < ty->n; i++)
        if (strcmp(ty->t[i], type) == 0)
            return (int)i;
    return -1;
}

/* Every step of a run that completes, in order: the seed example's replay model asks for its
 * commands, which the fake backend runs; the run ends completed, its sandbox created and
 * destroyed once, its timeline in step order and closed, its money split adding up. */
static void test_steps_of_a_completed_run(void **state)
{
    struct fixture *f = *state;
    const char *id = "run_000000000000000000000000000057e9";
    FILE *in = fopen("examples/sandbox-proof/request.json", "re");
    if (!in) {
        char path[512];
        const char *top = getenv("TOP");
        snprintf(path, sizeof(path), "%s/examples/sandbox-proof/request.json",
                 top && *top ? top : ".");
        in = fopen(path, "re");
    }
    assert_non_null(in);
    json_error_t je;
    json_t *req = json_loadf(in, 0, &je);
    fclose(in);
    assert_non_null(req);
    struct eph_run r;
    queued_run(f, &r, id, 100000);
    r.prompt = strdup(json_string_value(json_object_get(req, "prompt")));
    json_decref(req);
    r.shell = true;
    admit_run(f, &r, NULL, NULL);

    unsigned created0 = fake_created, destroyed0 = fake_destroyed;
    struct eph_live *l = eph_live_get(f->svc.live, id);
    assert_non_null(l);
    eph_worker_run(&f->svc, id);

    struct eph_run got;
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_COMPLETED);
    assert_non_null(got.result);
    assert_string_equal(got.sandbox_backend, "fake");
    assert_true(got.usage.model_calls >= 1);
    assert_int_equal(got.cost.charged_micros,
                     got.cost.model_micros + got.cost.web_micros + got.cost.compute_micros);
    assert_int_equal(got.cost.charged_micros + got.cost.released_micros, 100000);
    eph_run_release(&got);
    assert_int_equal(fake_created - created0, 1);
    assert_int_equal(fake_destroyed - destroyed0, 1);

    struct types ty = {0};
    assert_int_equal(f->db.st->ops->events_list(f->db.st, id, 0, 0, types_cb, &ty), 0);
    int queued = find_type(&ty, "run.queued"), ready = find_type(&ty, "sandbox.ready"),
        started = find_type(&ty, "worker.started"), cmd = find_type(&ty, "shell.command"),
        destroyed = find_type(&ty, "sandbox.destroyed"), done = find_type(&ty, "run.completed"),
        closed_ev = find_type(&ty, "worker.destroyed");
    assert_true(queued == 0 && ready > queued && started > ready && cmd > started &&
                destroyed > cmd && done > destroyed && closed_ev == (int)ty.n - 1);
    uint64_t last;
    bool closed;
    eph_live_state(l, &last, &closed);
    assert_true(closed);
    assert_int_equal(last, ty.n);
    eph_live_put(l);
    struct eph_balance b;
    assert_int_equal(f->db.st->ops->balance(f->db.st, f->db.org, &b), 0);
    assert_int_equal(b.reserved_micros, 0);
}

/* Every stored event's message and data, serialised, for a search. */
static int text_cb(const struct eph_event *e, void *ctx)
{
    char *d = e->data ? json_dumps(e->data, JSON_COMPACT) : NULL;
    int rc = eph_buf_appendf(ctx, "%s %s %s\n", e->type, e->message ? e->message : "", d ? d : "");
    free(d);
    return rc;
}

/* A file that cannot be placed fails the run files_error, its message naming the file; with zero
 * data retention the path is the client's content, so the stored message and the timeline keep a
 * fixed sentence instead (the path is nowhere in the store). Without it, the path is quoted. */
static void zdr_files_error(struct fixture *f, const char *id, bool zdr)
{
    struct eph_run r;
    queued_run(f, &r, id, 30000);
    r.zdr = zdr;
    r.shell = true;
    /* data/a.txt is a FIFO (fake_create): no file can be placed below it. */
    json_t *files = json_pack("[{s:s, s:s}]", "path", "data/a.txt/c4n4ry-file.txt",
                              "content_base64", "aGVsbG8K");
    r.files = zdr ? NULL : json_incref(files);
    r.prompt = zdr ? NULL : strdup("the prompt");
    if (zdr) {
        snprintf(r.node_id, sizeof(r.node_id), "%s", f->svc.node_id);
        r.lease_expires_at_ms = r.created_at_ms + 60000;
    }
    admit_run(f, &r, zdr ? "the prompt" : NULL, zdr ? files : NULL);
    json_decref(files);
    eph_worker_run(&f->svc, id);

    struct eph_run got;
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_FAILED);
    assert_string_equal(got.error_code, "files_error");
    struct eph_buf text;
    eph_buf_init(&text, 1 << 20);
    assert_int_equal(f->db.st->ops->events_list(f->db.st, id, 0, 0, text_cb, &text), 0);
    assert_non_null(text.data);
    if (zdr) {
        assert_string_equal(got.error_message,
                            "the details are not kept: the run has zero data retention");
        assert_null(strstr(text.data, "c4n4ry"));
    } else {
        assert_non_null(strstr(got.error_message, "c4n4ry-file.txt"));
        assert_non_null(strstr(text.data, "c4n4ry-file.txt"));
    }
    eph_buf_release(&text);
    eph_run_release(&got);
}

static void test_zdr_error_quotes_no_file(void **state)
{
    struct fixture *f = *state;
    zdr_files_error(f, "run_000000000000000000000000000002d1", false);
    zdr_files_error(f, "run_000000000000000000000000000002d2", true);
}

/* The codes whose messages are the server's own keep them; every other gets the fixed sentence. */
static void test_zdr_message(void **state)
{
    (void)state;
    const char *fixed = "the details are not kept: the run has zero data retention";
    assert_string_equal(eph_worker_zdr_message("timeout", "the run reached its time limit"),
                        "the run reached its time limit");
    assert_string_equal(eph_worker_zdr_message("sandbox_error", "no backend"), "no backend");
    assert_string_equal(eph_worker_zdr_message("model_refused", "the model refused: x"), fixed);
    assert_string_equal(eph_worker_zdr_message("model_error", "model call 1 failed: x"), fixed);
    assert_string_equal(eph_worker_zdr_message("files_error", "cannot place file 'x'"), fixed);
    assert_string_equal(eph_worker_zdr_message("a_code_to_come", "x"), fixed);
    assert_string_equal(eph_worker_zdr_message(NULL, "x"), fixed);
}

/* A run this node's fair claim started (the choice, the claim and queued -> starting in one
 * statement: run/cluster.c) is worked by whichever worker of this node takes it, also one that
 * did not make that claim (a cancel hands a run to the settler thread while the claiming worker
 * is on its way): here, cancelled before it started, it is settled at once, everything released.
 * A run another node started is left alone. */
static void test_a_run_started_by_the_claim(void **state)
{
    struct fixture *f = *state;
    const char *id = "run_000000000000000000000000000c1a11";
    struct eph_run r;
    queued_run(f, &r, id, 30000);
    r.prompt = strdup("the prompt");
    admit_run(f, &r, NULL, NULL);
    int64_t now = eph_clock_real_ms();
    struct eph_claim_next q = {
        .node_id = f->svc.node_id, .lease_until_ms = now + 60000, .started_at_ms = now};
    char got_id[EPH_RUN_ID_LEN + 1];
    assert_int_equal(f->db.st->ops->run_claim_next(f->db.st, &q, got_id, sizeof(got_id)), 0);
    assert_string_equal(got_id, id);
    struct eph_live *l = eph_live_get(f->svc.live, id);
    assert_non_null(l);
    eph_live_cancel(l);
    eph_live_put(l);
    eph_worker_run(&f->svc, id);
    struct eph_run got;
    assert_int_equal(f->db.st->ops->run_get(f->db.st, id, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_CANCELLED);
    assert_int_equal(got.cost.charged_micros, 0);
    assert_int_equal(got.cost.released_micros, 30000);
    eph_run_release(&got);

    /* Started by another node: not this node's to work on. */
    const char *other = "run_000000000000000000000000000c1a12";
    queued_run(f, &r, other, 30000);
    r.prompt = strdup("the prompt");
    admit_run(f, &r, NULL, NULL);
    q.node_id = "another-node";
    assert_int_equal(f->db.st->ops->run_claim_next(f->db.st, &q, got_id, sizeof(got_id)), 0);
    assert_string_equal(got_id, other);
    eph_worker_run(&f->svc, other);
    assert_int_equal(f->db.st->ops->run_get(f->db.st, other, f->db.org, &got), 0);
    assert_int_equal(got.status, EPH_RUN_STARTING);
    assert_string_equal(got.node_id, "another-node");
    eph_run_release(&got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cancel_while_files_are_placed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_run_started_by_the_claim, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settle_failure_leaves_the_timeline_open, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_steps_of_a_completed_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zdr_error_quotes_no_file, setup, teardown),
        cmocka_unit_test(test_zdr_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
