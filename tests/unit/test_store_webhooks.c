/* The store's webhooks (docs/WEBHOOKS.md): endpoints by org, one delivery queued per matching
 * endpoint in a run's settlement, claims that hand each delivery to one sender, attempts recorded,
 * the body dropped once a delivery ends, pending deliveries kept across a reopen. On SQLite, or
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
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_all", 10, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].event_id, "evt_1");
    assert_string_equal(s.d[0].type, "run.failed");
    assert_string_equal(s.d[0].state, "pending");
    assert_int_equal(s.d[0].attempts, 0);
    seen_release(&s);
    /* Neither the endpoint that does not take the type nor the deleted one got it. */
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_done", 10, collect, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_gone", 10, collect, &s), 0);
    assert_int_equal(s.n, 0);
    /* A settlement without an event queues nothing. */
    settle_run(st, f->org, EPH_RUN_COMPLETED, NULL);
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_done", 10, collect, &s), 0);
    assert_int_equal(s.n, 0);
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
    assert_int_equal(st->ops->webhook_deliveries(st, f->org, "wh_a", 10, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].state, "delivered");
    assert_int_equal(s.d[0].attempts, 2);
    assert_int_equal(s.d[0].last_status, 204);
    assert_int_equal(s.d[0].last_duration_ms, 12);
    assert_null(s.d[0].last_error);
    seen_release(&s);
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
    assert_int_equal(f->st->ops->webhook_deliveries(f->st, f->org, "wh_a", 10, collect, &s), 0);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.d[0].state, "failed");
    assert_string_equal(s.d[0].last_error, "endpoint deleted");
    seen_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_endpoints_by_org, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settlement_queues_one_per_matching_endpoint, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_record_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_claim_and_reopen, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
