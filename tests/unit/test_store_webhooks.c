/* The store's webhooks (docs/WEBHOOKS.md): endpoints by org, one delivery queued per matching
 * endpoint in a run's settlement, claims that hand each delivery to one sender, attempts recorded,
 * each attempt kept in the history, the body dropped once a delivery ends, pending deliveries
 * kept across a reopen, the log in pages. On SQLite, or
 * PostgreSQL with EPH_TEST_PG. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/id.h"
#include "store_fixture.h"

static int setup(void **state)
{
    struct store_fixture *f = calloc(1, sizeof(*f));
    store_fixture_setup(f, "whk");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    store_fixture_teardown(*state);
    free(*state);
    return 0;
}

static void add_webhook(struct eph_store *st, const char *org, const char *id, json_t *events)
{
    struct eph_webhook w = {0};
    snprintf(w.id, sizeof(w.id), "%s", id);
    snprintf(w.org_id, sizeof(w.org_id), "%s", org);
    w.url = strdup("http://127.0.0.1:9/hook");
    w.events = events;
    w.secret_sealed = strdup("00ff");
    w.timeout_seconds = 10;
    w.created_at_ms = eph_clock_real_ms();
    assert_int_equal(st->ops->webhook_insert(st, &w), 0);
    eph_webhook_release(&w);
}

/* A run inserted and settled as status, with ev queued in its settlement. */
static void settle_run(struct eph_store *st, const char *org, enum eph_run_status status,
                       const struct eph_webhook_event *ev)
{
    struct eph_run r;
    eph_run_init(&r);
    assert_int_equal(eph_id_hex("run_", 16, r.id, sizeof(r.id)), 0);
    snprintf(r.org_id, sizeof(r.org_id), "%s", org);
    r.status = EPH_RUN_QUEUED;
    r.model = strdup("m");
    r.prompt = strdup("p");
    r.timeout_seconds = 60;
    r.created_at_ms = eph_clock_real_ms();
    r.cost.reserved_micros = 100;
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    r.status = status;
    r.finished_at_ms = eph_clock_real_ms();
    r.cost.released_micros = 100;
    struct eph_run_final fin = {.run = &r, .webhook = ev};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    eph_run_release(&r);
}

struct seen {
    unsigned n;
    struct eph_webhook_delivery d[8];
};

static int collect(const struct eph_webhook_delivery *d, void *ctx)
{
    struct seen *s = ctx;
    assert_true(s->n < 8);
    struct eph_webhook_delivery *c = &s->d[s->n++];
    *c = *d;
    c->last_error = d->last_error ? strdup(d->last_error) : NULL;
    c->body = d->body ? strdup(d->body) : NULL;
    c->url = d->url ? strdup(d->url) : NULL;
    c->secret_sealed = d->secret_sealed ? strdup(d->secret_sealed) : NULL;
    return 0;
}

static void seen_release(struct seen *s)
{
    for (unsigned i = 0; i < s->n; i++)
        eph_webhook_delivery_release(&s->d[i]);
    s->n = 0;
}

static int count_webhooks(const struct eph_webhook *w, void *ctx)
{
    assert_null(w->secret_sealed); /* a listing never carries the secret */
    (*(unsigned *)ctx)++;
    return 0;
}

static void test_endpoints_by_org(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    char other[48];
    bool created;
    assert_int_equal(st->ops->org_ensure(st, "other", 0, other, sizeof(other), &created), 0);
    add_webhook(st, f->org, "wh_a", json_pack("[s]", "run.completed"));
    add_webhook(st, other, "wh_b", json_pack("[s]", "run.completed"));
    unsigned n = 0;
    assert_int_equal(st->ops->webhook_list(st, f->org, count_webhooks, &n), 0);
    assert_int_equal(n, 1);
    struct eph_webhook w;
    assert_int_equal(st->ops->webhook_get(st, f->org, "wh_a", &w), 0);
    assert_string_equal(w.url, "http://127.0.0.1:9/hook");
    assert_int_equal(w.timeout_seconds, 10);
    assert_string_equal(json_string_value(json_array_get(w.events, 0)), "run.completed");
    eph_webhook_release(&w);
    /* Another org's endpoint is not there for this one, to read or to delete. */
    assert_int_equal(st->ops->webhook_get(st, f->org, "wh_b", &w), -ENOENT);
    assert_int_equal(st->ops->webhook_delete(st, f->org, "wh_b", 1), -ENOENT);
    assert_int_equal(st->ops->webhook_delete(st, f->org, "wh_a", 1), 0);
    assert_int_equal(st->ops->webhook_get(st, f->org, "wh_a", &w), -ENOENT);
    assert_int_equal(st->ops->webhook_delete(st, f->org, "wh_a", 1), -ENOENT);
    n = 0;
    assert_int_equal(st->ops->webhook_list(st, f->org, count_webhooks, &n), 0);
    assert_int_equal(n, 0);
}

static void test_settlement_queues_one_per_matching_endpoint(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    add_webhook(st, f->org, "wh_all", json_pack("[s, s]", "run.completed", "run.failed"));
    add_webhook(st, f->org, "wh_done", json_pack("[s]", "run.completed"));
    add_webhook(st, f->org, "wh_gone", json_pack("[s]", "run.failed"));
    assert_int_equal(st->ops->webhook_delete(st, f->org, "wh_gone", 1), 0);
    struct eph_webhook_event ev = {.id = "evt_1", .type = "run.failed", .body = "{\"x\":1}"};
    ev.created_at_ms = eph_clock_real_ms();
    settle_run(st, f->org, EPH_RUN_FAILED, &ev);
    struct seen s = {0};
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_all", 10, NULL, collect, &s, NULL),
                     0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].event_id, "evt_1");
    assert_string_equal(s.d[0].type, "run.failed");
    assert_string_equal(s.d[0].state, "pending");
    assert_int_equal(s.d[0].attempts, 0);
    seen_release(&s);
    /* Neither the endpoint that does not take the type nor the deleted one got it. */
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_done", 10, NULL, collect, &s, NULL), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_gone", 10, NULL, collect, &s, NULL), 0);
    assert_int_equal(s.n, 0);
    /* A settlement without an event queues nothing. */
    settle_run(st, f->org, EPH_RUN_COMPLETED, NULL);
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_done", 10, NULL, collect, &s, NULL), 0);
    assert_int_equal(s.n, 0);
}

struct history {
    unsigned n;
    struct eph_webhook_attempt_row a[4];
};

static int collect_attempt(const struct eph_webhook_attempt_row *a, void *ctx)
{
    struct history *h = ctx;
    assert_true(h->n < 4);
    h->a[h->n++] = *a;
    return 0;
}

/* After test_claim_record_retry's two attempts of evt_2 to wh_a (a 500, then a 204; the records
 * refused as stale left no trace): each in the history, in order, and the delivery on its own. */
static void check_history(struct eph_store *st, const char *org)
{
    struct history h = {0};
    assert_int_equal(st->ops->webhook_attempts(st, org, "wh_a", "evt_2", 10, collect_attempt, &h),
                     0);
    assert_int_equal(h.n, 2);
    assert_int_equal(h.a[0].attempt, 1);
    assert_string_equal(h.a[0].outcome, "retried");
    assert_int_equal(h.a[0].status, 500);
    assert_int_equal(h.a[0].duration_ms, 12);
    assert_string_equal(h.a[0].error, "HTTP 500");
    assert_int_equal(h.a[1].attempt, 2);
    assert_string_equal(h.a[1].outcome, "delivered");
    assert_int_equal(h.a[1].status, 204);
    assert_string_equal(h.a[1].error, "");
    /* The last limit of them. */
    h.n = 0;
    assert_int_equal(st->ops->webhook_attempts(st, org, "wh_a", "evt_2", 1, collect_attempt, &h),
                     0);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.a[0].attempt, 2);
    /* Another org sees none of it. */
    h.n = 0;
    assert_int_equal(
        st->ops->webhook_attempts(st, "other", "wh_a", "evt_2", 10, collect_attempt, &h), 0);
    assert_int_equal(h.n, 0);
    struct eph_webhook_delivery d;
    assert_int_equal(st->ops->webhook_delivery_get(st, org, "wh_a", "evt_2", &d), 0);
    assert_string_equal(d.state, "delivered");
    assert_int_equal(d.attempts, 2);
    assert_int_equal(d.last_status, 204);
    eph_webhook_delivery_release(&d);
    assert_int_equal(st->ops->webhook_delivery_get(st, org, "wh_a", "evt_9", &d), -ENOENT);
    assert_int_equal(st->ops->webhook_delivery_get(st, "other", "wh_a", "evt_2", &d), -ENOENT);
}

static void test_claim_record_retry(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    add_webhook(st, f->org, "wh_a", json_pack("[s]", "run.completed"));
    int64_t now = eph_clock_real_ms();
    struct eph_webhook_event ev = {
        .id = "evt_2", .type = "run.completed", .body = "{\"y\":2}", .created_at_ms = now};
    settle_run(st, f->org, EPH_RUN_COMPLETED, &ev);
    struct seen s = {0};
    assert_int_equal(st->ops->webhook_claim(st, "n1", now, now + 30000, 4, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].body, "{\"y\":2}");
    assert_string_equal(s.d[0].url, "http://127.0.0.1:9/hook");
    assert_string_equal(s.d[0].secret_sealed, "00ff");
    seen_release(&s);
    /* Claimed: no one else gets it until the claim expires. */
    assert_int_equal(st->ops->webhook_claim(st, "n2", now, now + 30000, 4, collect, &s), 0);
    assert_int_equal(s.n, 0);
    /* Only the claimer records. */
    struct eph_webhook_attempt a = {.event_id = "evt_2",
                                    .webhook_id = "wh_a",
                                    .node_id = "n2",
                                    .state = "pending",
                                    .at_ms = now,
                                    .next_attempt_at_ms = now + 1000,
                                    .status = 500,
                                    .duration_ms = 12,
                                    .error = "HTTP 500"};
    assert_int_equal(st->ops->webhook_record(st, &a), -ESTALE);
    a.node_id = "n1";
    assert_int_equal(st->ops->webhook_record(st, &a), 0);
    /* Not due before its next attempt; due after it, to anyone. */
    assert_int_equal(st->ops->webhook_claim(st, "n2", now + 999, now + 30000, 4, collect, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(st->ops->webhook_claim(st, "n2", now + 1000, now + 30000, 4, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].event_id, "evt_2");
    assert_int_equal(s.d[0].attempts, 1);
    assert_int_equal(s.d[0].last_status, 500);
    seen_release(&s);
    a.node_id = "n2";
    a.state = "delivered";
    a.status = 204;
    a.error = NULL;
    assert_int_equal(st->ops->webhook_record(st, &a), 0);
    /* Delivered: recorded once, never claimed again. */
    assert_int_equal(st->ops->webhook_record(st, &a), -ESTALE);
    assert_int_equal(st->ops->webhook_claim(st, "n1", now + 99000, now + 130000, 4, collect, &s),
                     0);
    assert_int_equal(s.n, 0);
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_a", 10, NULL, collect, &s, NULL),
                     0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].state, "delivered");
    assert_int_equal(s.d[0].attempts, 2);
    assert_int_equal(s.d[0].last_status, 204);
    assert_int_equal(s.d[0].last_duration_ms, 12);
    assert_null(s.d[0].last_error);
    seen_release(&s);
    check_history(st, f->org);
}

static void test_expired_claim_and_reopen(void **state)
{
    struct store_fixture *f = *state;
    add_webhook(f->st, f->org, "wh_a", json_pack("[s]", "run.cancelled"));
    int64_t now = eph_clock_real_ms();
    struct eph_webhook_event ev = {
        .id = "evt_3", .type = "run.cancelled", .body = "{}", .created_at_ms = now};
    settle_run(f->st, f->org, EPH_RUN_CANCELLED, &ev);
    struct seen s = {0};
    /* A sender that claimed it and died: after the claim expires, it is due again. */
    assert_int_equal(f->st->ops->webhook_claim(f->st, "n1", now, now + 100, 4, collect, &s), 0);
    assert_int_equal(s.n, 1);
    seen_release(&s);
    /* The store closed and opened again (a restart) keeps it. */
    f->st->ops->close(f->st);
    char err[256];
    assert_int_equal(eph_store_open(test_store_pg_target[0] ? test_store_pg_target : f->path,
                                    &f->st, err, sizeof(err)),
                     0);
    assert_int_equal(f->st->ops->webhook_claim(f->st, "n2", now + 50, now + 1000, 4, collect, &s),
                     0);
    assert_int_equal(s.n, 0);
    assert_int_equal(f->st->ops->webhook_claim(f->st, "n2", now + 101, now + 1000, 4, collect, &s),
                     0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].event_id, "evt_3");
    seen_release(&s);
    struct eph_webhook_attempt a = {.event_id = "evt_3",
                                    .webhook_id = "wh_a",
                                    .node_id = "n1",
                                    .state = "failed",
                                    .at_ms = now};
    assert_int_equal(f->st->ops->webhook_record(f->st, &a), -ESTALE);
    /* Deleting the endpoint fails what it had pending. */
    assert_int_equal(f->st->ops->webhook_delete(f->st, f->org, "wh_a", now), 0);
    assert_int_equal(
        f->st->ops->webhook_deliveries(f->st, f->org, "wh_a", 10, NULL, collect, &s, NULL), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].state, "failed");
    assert_string_equal(s.d[0].last_error, "endpoint deleted");
    seen_release(&s);
}

/* The deliveries of an endpoint in pages, newest first, each after the last of the one before. */
static void test_deliveries_paged(void **state)
{
    struct store_fixture *f = *state;
    struct eph_store *st = f->st;
    add_webhook(st, f->org, "wh_a", json_pack("[s]", "run.completed"));
    int64_t now = eph_clock_real_ms();
    static const char *const ids[] = {"evt_p0", "evt_p1", "evt_p2", "evt_p3", "evt_p4"};
    for (int i = 0; i < 5; i++) {
        struct eph_webhook_event ev = {
            .type = "run.completed", .body = "{}", .created_at_ms = now + i};
        snprintf(ev.id, sizeof(ev.id), "%s", ids[i]);
        settle_run(st, f->org, EPH_RUN_COMPLETED, &ev);
    }
    struct seen s = {0};
    bool more = false;
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_a", 2, NULL, collect, &s, &more),
                     0);
    assert_int_equal(s.n, 2);
    assert_true(more);
    assert_string_equal(s.d[0].event_id, "evt_p4");
    assert_string_equal(s.d[1].event_id, "evt_p3");
    seen_release(&s);
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_a", 2, "evt_p3", collect, &s, &more), 0);
    assert_int_equal(s.n, 2);
    assert_true(more);
    assert_string_equal(s.d[0].event_id, "evt_p2");
    assert_string_equal(s.d[1].event_id, "evt_p1");
    seen_release(&s);
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_a", 2, "evt_p1", collect, &s, &more), 0);
    assert_int_equal(s.n, 1);
    assert_false(more);
    assert_string_equal(s.d[0].event_id, "evt_p0");
    seen_release(&s);
    /* A page of exactly what is left has no more after it. */
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_a", 5, NULL, collect, &s, &more),
                     0);
    assert_int_equal(s.n, 5);
    assert_false(more);
    seen_release(&s);
    /* After an event the endpoint does not have, or another org's: nothing. */
    more = true;
    assert_int_equal(
        st->ops->webhook_deliveries(st, f->org, "wh_a", 2, "evt_none", collect, &s, &more), 0);
    assert_int_equal(s.n, 0);
    assert_false(more);
    assert_int_equal(st->ops->webhook_deliveries(st, "other", "wh_a", 2, NULL, collect, &s, &more),
                     0);
    assert_int_equal(s.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints_by_org, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settlement_queues_one_per_matching_endpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_record_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_claim_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deliveries_paged, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
