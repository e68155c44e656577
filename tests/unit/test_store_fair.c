/* Fair claims across orgs (docs/STORE.md, "Fair claims"), on SQLite and, under
 * tests/blackbox/store_postgres.sh, on PostgreSQL: one org's backlog does not keep another org's
 * run waiting, the per-org cap holds a run back until a claimed one ends, a node claims a
 * zero-data-retention run only when it holds it (shared stores), concurrent claims from two
 * nodes take each run once, and a claim can start its run in the same statement. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/id.h"
#include "store/store.h"
#include "store_fixture.h"

/* Org A is the fixture's "acme"; org B is made by each test. */
static struct store_fixture db;

static int setup(void **state)
{
    (void)state;
    store_fixture_setup(&db, "fair");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    store_fixture_teardown(&db);
    return 0;
}

/* Org B, with credit for its runs. */
static void org_b(struct eph_store *st, char *id, size_t idlen)
{
    bool created;
    assert_int_equal(st->ops->org_ensure(st, "bravo", 100000, id, idlen, &created), 0);
    assert_true(created);
}

/* Queues a run of org, created at created_ms, into id. */
static void queue_run(struct eph_store *st, const char *org, int64_t created_ms, bool zdr, char *id,
                      size_t idlen)
{
    struct eph_run r;
    eph_run_init(&r);
    assert_int_equal(eph_id_hex("run_", 16, r.id, sizeof(r.id)), 0);
    snprintf(r.org_id, sizeof(r.org_id), "%s", org);
    r.status = EPH_RUN_QUEUED;
    r.model = strdup("m");
    r.zdr = zdr;
    r.prompt = zdr ? NULL : strdup("p");
    r.timeout_seconds = 10;
    r.created_at_ms = created_ms;
    r.cost.reserved_micros = 100;
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    snprintf(id, idlen, "%s", r.id);
    eph_run_release(&r);
}

static int claim(struct eph_store *st, const char *node, unsigned cap, const char *const *waiting,
                 size_t nwaiting, char *id)
{
    struct eph_claim_next q = {.node_id = node,
                               .lease_until_ms = eph_clock_real_ms() + 60000,
                               .max_per_org = cap,
                               .waiting = waiting,
                               .nwaiting = nwaiting};
    return st->ops->run_claim_next(st, &q, id, EPH_RUN_ID_LEN + 1);
}

/* Ends a claimed run as a worker would (completed, nothing charged). */
static void finish(struct eph_store *st, const char *id)
{
    struct eph_run r;
    assert_int_equal(st->ops->run_get(st, id, NULL, &r), 0);
    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    r.cost.released_micros = r.cost.reserved_micros;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    eph_run_release(&r);
}

/* Org A queues six runs, then org B one. With two of A's claimed (two workers busy), the next
 * claim is B's run, not A's third; then A's in their order. A global FIFO gives A's third. */
static void test_backlog_does_not_starve_another_org(void **state)
{
    (void)state;
    struct eph_store *st = db.st;
    char b_org[48];
    org_b(st, b_org, sizeof(b_org));
    int64_t t0 = eph_clock_real_ms() - 10000;
    char a[6][EPH_RUN_ID_LEN + 1], b[EPH_RUN_ID_LEN + 1], got[EPH_RUN_ID_LEN + 1];
    for (int i = 0; i < 6; i++)
        queue_run(st, db.org, t0 + i, false, a[i], sizeof(a[i]));
    /* Two workers (on two nodes) take A's first two, in their order. */
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[0]);
    assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[1]);
    queue_run(st, b_org, t0 + 10, false, b, sizeof(b));
    assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), 0);
    assert_string_equal(got, b);
    /* B has nothing left queued: A's next, oldest first. */
    assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[2]);
    /* With A's runs ended and B's too, the tie goes to the oldest queued run; then the org with
     * fewer claimed runs. */
    finish(st, a[0]);
    finish(st, a[1]);
    finish(st, a[2]);
    finish(st, b);
    char b2[EPH_RUN_ID_LEN + 1];
    queue_run(st, b_org, t0 + 20, false, b2, sizeof(b2));
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[3]);
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
    assert_string_equal(got, b2);
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[4]);
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[5]);
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), -ENOENT);
}

/* max_concurrent_runs_per_org 1: with one of A's claimed, A's next is held back while B's is
 * claimed; once A's claimed run ends, A's next is claimed. */
static void test_per_org_cap(void **state)
{
    (void)state;
    struct eph_store *st = db.st;
    char b_org[48];
    org_b(st, b_org, sizeof(b_org));
    int64_t t0 = eph_clock_real_ms() - 10000;
    char a1[EPH_RUN_ID_LEN + 1], a2[EPH_RUN_ID_LEN + 1], b[EPH_RUN_ID_LEN + 1];
    char got[EPH_RUN_ID_LEN + 1];
    queue_run(st, db.org, t0, false, a1, sizeof(a1));
    queue_run(st, db.org, t0 + 1, false, a2, sizeof(a2));
    assert_int_equal(claim(st, "node-a", 1, NULL, 0, got), 0);
    assert_string_equal(got, a1);
    /* A is at its cap and B has nothing queued: nothing to claim. */
    assert_int_equal(claim(st, "node-a", 1, NULL, 0, got), -ENOENT);
    queue_run(st, b_org, t0 + 2, false, b, sizeof(b));
    assert_int_equal(claim(st, "node-a", 1, NULL, 0, got), 0);
    assert_string_equal(got, b);
    assert_int_equal(claim(st, "node-a", 1, NULL, 0, got), -ENOENT);
    /* A claimed run counts whatever its state, until it ends. */
    struct eph_run r;
    assert_int_equal(st->ops->run_get(st, a1, NULL, &r), 0);
    r.status = EPH_RUN_RUNNING;
    r.started_at_ms = eph_clock_real_ms();
    assert_int_equal(st->ops->run_update(st, &r), 0);
    eph_run_release(&r);
    assert_int_equal(claim(st, "node-b", 1, NULL, 0, got), -ENOENT);
    finish(st, a1);
    assert_int_equal(claim(st, "node-b", 1, NULL, 0, got), 0);
    assert_string_equal(got, a2);
    /* 0 is no cap. */
    char a3[EPH_RUN_ID_LEN + 1];
    queue_run(st, db.org, t0 + 3, false, a3, sizeof(a3));
    assert_int_equal(claim(st, "node-b", 1, NULL, 0, got), -ENOENT);
    assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), 0);
    assert_string_equal(got, a3);
}

/* A zero-data-retention run's prompt lives on the node that took it: on a shared store only a
 * node that lists it as waiting claims it (on one node, every prompt is here). Another node's
 * claim never takes a run a node already holds. */
static void test_zdr_is_claimed_by_its_node(void **state)
{
    (void)state;
    struct eph_store *st = db.st;
    char b_org[48];
    org_b(st, b_org, sizeof(b_org));
    int64_t t0 = eph_clock_real_ms() - 10000;
    char z[EPH_RUN_ID_LEN + 1], got[EPH_RUN_ID_LEN + 1];
    queue_run(st, b_org, t0, true, z, sizeof(z));
    if (st->ops->shared) {
        assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), -ENOENT);
        const char *waiting[] = {z};
        assert_int_equal(claim(st, "node-a", 0, waiting, 1, got), 0);
        assert_string_equal(got, z);
        assert_int_equal(claim(st, "node-b", 0, waiting, 1, got), -ENOENT);
    } else {
        assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), 0);
        assert_string_equal(got, z);
    }
    assert_int_equal(claim(st, "node-a", 0, NULL, 0, got), -ENOENT);
}

/* Six nodes (two store handles on one database, three claiming threads on each), at once: every
 * queued run is claimed exactly once, and none is left queued. (One node's own claims are one at
 * a time: its scheduler serialises them.) */
#define RACE_RUNS 24

struct claimer {
    struct eph_store *st;
    char node[24];
    char got[RACE_RUNS][EPH_RUN_ID_LEN + 1];
    unsigned n;
    int rc;
    pthread_t t;
};

static void *claimer_main(void *arg)
{
    struct claimer *c = arg;
    char id[EPH_RUN_ID_LEN + 1];
    while ((c->rc = claim(c->st, c->node, 0, NULL, 0, id)) == 0 && c->n < RACE_RUNS)
        memcpy(c->got[c->n++], id, sizeof(id));
    return NULL;
}

static void test_concurrent_claims_take_each_run_once(void **state)
{
    (void)state;
    struct eph_store *st = db.st, *other = NULL;
    char b_org[48];
    org_b(st, b_org, sizeof(b_org));
    if (test_store_pg_target[0]) {
        char err[256];
        assert_int_equal(eph_store_open(test_store_pg_target, &other, err, sizeof(err)), 0);
    } else {
        assert_int_equal(test_store_open(db.path, &other), 0);
    }
    int64_t t0 = eph_clock_real_ms() - 10000;
    char ids[RACE_RUNS][EPH_RUN_ID_LEN + 1];
    for (int i = 0; i < RACE_RUNS; i++)
        queue_run(st, i % 3 ? db.org : b_org, t0 + i, false, ids[i], sizeof(ids[i]));
    struct claimer c[6] = {0};
    for (int i = 0; i < 6; i++) {
        c[i].st = i % 2 ? other : st;
        snprintf(c[i].node, sizeof(c[i].node), "node-%d", i);
        assert_int_equal(pthread_create(&c[i].t, NULL, claimer_main, &c[i]), 0);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(c[i].t, NULL);
    unsigned total = 0;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(c[i].rc, -ENOENT);
        total += c[i].n;
    }
    assert_int_equal(total, RACE_RUNS);
    for (int r = 0; r < RACE_RUNS; r++) {
        unsigned seen = 0;
        for (int i = 0; i < 6; i++)
            for (unsigned k = 0; k < c[i].n; k++)
                seen += strcmp(c[i].got[k], ids[r]) == 0;
        assert_int_equal(seen, 1);
    }
    other->ops->close(other);
}

/* A claim that starts the run too (started_at_ms): the run it chose is starting, with that start
 * and this node's lease, in the one statement; a plain claim leaves its run queued; the started
 * run is counted as claimed (the per-org cap sees it) and no other claim takes it again. */
static void test_claim_can_start_the_run(void **state)
{
    (void)state;
    struct eph_store *st = db.st;
    int64_t t0 = eph_clock_real_ms() - 10000;
    char a[3][EPH_RUN_ID_LEN + 1], got[EPH_RUN_ID_LEN + 1];
    for (int i = 0; i < 3; i++)
        queue_run(st, db.org, t0 + i, false, a[i], sizeof(a[i]));
    int64_t start = eph_clock_real_ms();
    struct eph_claim_next q = {
        .node_id = "node-a", .lease_until_ms = start + 60000, .started_at_ms = start};
    assert_int_equal(st->ops->run_claim_next(st, &q, got, sizeof(got)), 0);
    assert_string_equal(got, a[0]);
    struct eph_run r;
    assert_int_equal(st->ops->run_get(st, a[0], NULL, &r), 0);
    assert_int_equal(r.status, EPH_RUN_STARTING);
    assert_int_equal(r.started_at_ms, start);
    assert_string_equal(r.node_id, "node-a");
    eph_run_release(&r);
    /* A plain claim: queued still, not started. */
    assert_int_equal(claim(st, "node-b", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[1]);
    assert_int_equal(st->ops->run_get(st, a[1], NULL, &r), 0);
    assert_int_equal(r.status, EPH_RUN_QUEUED);
    assert_int_equal(r.started_at_ms, 0);
    eph_run_release(&r);
    /* Two claimed (one starting, one queued with a node): a cap of 2 holds the third back. */
    assert_int_equal(claim(st, "node-b", 2, NULL, 0, got), -ENOENT);
    /* The started one is not claimed again, by its node or another. */
    assert_int_equal(st->ops->run_claim_start(st, a[0], "node-a", start + 60000, start), -EALREADY);
    assert_int_equal(claim(st, "node-c", 0, NULL, 0, got), 0);
    assert_string_equal(got, a[2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_backlog_does_not_starve_another_org, setup, teardown),
        cmocka_unit_test_setup_teardown(test_per_org_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zdr_is_claimed_by_its_node, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_claims_take_each_run_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_can_start_the_run, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
