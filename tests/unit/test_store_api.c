/* The store operations behind the API contract: key listing and revocation, connections with
 * sealed headers, the queued-runs cap, idempotency expiry, events kept as served, and sealing with
 * the key file; on PostgreSQL, the lease keeper served first by a busy pool. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>
#include <sqlite3.h>

#include "common/clock.h"
#include "common/id.h"
#include "common/metrics.h"
#include "common/secret.h"
#include "store/run_row.h"
#include "store/store.h"
#include "store_fixture.h"

struct fixture {
    struct store_fixture db;
    char other[48];
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    store_fixture_setup(&f->db, "storeapi");
    bool created;
    assert_int_equal(
        f->db.st->ops->org_ensure(f->db.st, "other", 100000, f->other, sizeof(f->other), &created),
        0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    store_fixture_teardown(&f->db);
    free(f);
    return 0;
}

static int count_key(const struct eph_key_info *k, void *ctx)
{
    (*(int *)ctx)++;
    assert_string_equal(k->prefix, "eph_abcd");
    return 0;
}

static void test_keys(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    char id[48], org[48], role[16];
    assert_int_equal(st->ops->key_insert(st, f->db.org, "h1", "member", "eph_abcd", id, sizeof(id)),
                     0);
    int n = 0;
    assert_int_equal(st->ops->key_list(st, f->db.org, count_key, &n), 0);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(st->ops->key_list(st, f->other, count_key, &n), 0);
    assert_int_equal(n, 0);
    /* Another org cannot revoke it; its own org can, once. */
    assert_int_equal(st->ops->key_revoke(st, f->other, id, 1), -ENOENT);
    assert_int_equal(st->ops->key_lookup(st, "h1", org, sizeof(org), role, sizeof(role)), 0);
    assert_int_equal(st->ops->key_revoke(st, f->db.org, id, 1), 0);
    assert_int_equal(st->ops->key_revoke(st, f->db.org, id, 2), -ENOENT);
    assert_int_equal(st->ops->key_lookup(st, "h1", org, sizeof(org), role, sizeof(role)), -ENOENT);
    n = 0;
    assert_int_equal(st->ops->key_list(st, f->db.org, count_key, &n), 0);
    assert_int_equal(n, 0);
}

/* Where each node is reached: written at start-up, replaced by the next start, unknown nodes
 * -ENOENT, a URL that does not fit refused rather than cut. */
static void test_node_urls(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    char url[64];
    assert_int_equal(st->ops->node_url(st, "node-a", url, sizeof(url)), -ENOENT);
    assert_int_equal(st->ops->node_put(st, "node-a", "http://10.0.0.5:8080", 1), 0);
    assert_int_equal(st->ops->node_put(st, "node-b", "http://10.0.0.6:8080", 1), 0);
    assert_int_equal(st->ops->node_url(st, "node-a", url, sizeof(url)), 0);
    assert_string_equal(url, "http://10.0.0.5:8080");
    assert_int_equal(st->ops->node_put(st, "node-a", "https://node-a.internal:8443", 2), 0);
    assert_int_equal(st->ops->node_url(st, "node-a", url, sizeof(url)), 0);
    assert_string_equal(url, "https://node-a.internal:8443");
    assert_int_equal(st->ops->node_url(st, "node-b", url, sizeof(url)), 0);
    assert_string_equal(url, "http://10.0.0.6:8080");
    char small[12];
    assert_int_equal(st->ops->node_url(st, "node-a", small, sizeof(small)), -ENAMETOOLONG);
}

static void test_secret_and_connections(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    char keypath[128], err[256];
    snprintf(keypath, sizeof(keypath), "%s/sub/secret.key", f->db.dir);
    struct eph_secret k1, k2;
    /* Not there and not to be created: an error. Created: 0600, and read back the same. */
    assert_int_not_equal(eph_secret_load(keypath, false, &k1, err, sizeof(err)), 0);
    assert_int_equal(eph_secret_load(keypath, true, &k1, err, sizeof(err)), 0);
    struct stat sb;
    assert_int_equal(stat(keypath, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(sb.st_size, EPH_SECRET_KEY_BYTES);
    assert_int_equal(eph_secret_load(keypath, false, &k2, err, sizeof(err)), 0);
    assert_memory_equal(k1.key, k2.key, sizeof(k1.key));
    chmod(keypath, 0644);
    assert_int_equal(eph_secret_load(keypath, false, &k2, err, sizeof(err)), -EPERM);
    chmod(keypath, 0600);

    const char *plain = "{\"Authorization\":\"Bearer s3cret\"}";
    struct eph_connection c = {0};
    snprintf(c.name, sizeof(c.name), "github");
    c.base_url = strdup("https://api.github.com");
    c.methods = json_pack("[s]", "GET");
    c.path_prefixes = json_pack("[s]", "/");
    c.header_names = json_pack("[s]", "Authorization");
    c.query_names = json_pack("[s]", "key");
    assert_int_equal(eph_secret_seal(&k1, plain, strlen(plain), &c.sealed, &c.sealed_len), 0);
    assert_null(memmem(c.sealed, c.sealed_len, "s3cret", 6));
    c.created_at_ms = 5;
    assert_int_equal(st->ops->conn_insert(st, f->db.org, &c, c.id, sizeof(c.id)), 0);
    assert_int_equal(st->ops->conn_insert(st, f->db.org, &c, NULL, 0), -EEXIST);
    assert_int_equal(st->ops->conn_insert(st, f->other, &c, NULL, 0), 0); /* names are per org */
    eph_connection_release(&c);

    struct eph_connection got;
    assert_int_equal(st->ops->conn_get(st, f->db.org, "github", &got), 0);
    assert_string_equal(json_string_value(json_array_get(got.query_names, 0)), "key");
    unsigned char *open = NULL;
    size_t olen = 0;
    assert_int_equal(eph_secret_open(&k1, got.sealed, got.sealed_len, &open, &olen), 0);
    assert_string_equal((char *)open, plain);
    free(open);
    /* Tampered, or another key: refused. */
    got.sealed[got.sealed_len - 1] ^= 1;
    assert_int_equal(eph_secret_open(&k1, got.sealed, got.sealed_len, &open, &olen), -EBADMSG);
    got.sealed[got.sealed_len - 1] ^= 1;
    struct eph_secret k3;
    randombytes_buf(k3.key, sizeof(k3.key));
    assert_int_equal(eph_secret_open(&k3, got.sealed, got.sealed_len, &open, &olen), -EBADMSG);
    eph_connection_release(&got);

    assert_int_equal(st->ops->conn_delete(st, f->db.org, "github"), 0);
    assert_int_equal(st->ops->conn_get(st, f->db.org, "github", &got), -ENOENT);
    assert_int_equal(st->ops->conn_delete(st, f->db.org, "github"), -ENOENT);
    assert_int_equal(st->ops->conn_get(st, f->other, "github", &got), 0);
    eph_connection_release(&got);
    eph_secret_clear(&k1);
}

static void make_run(struct eph_run *r, const char *org)
{
    eph_run_init(r);
    assert_int_equal(eph_id_hex("run_", 16, r->id, sizeof(r->id)), 0);
    snprintf(r->org_id, sizeof(r->org_id), "%s", org);
    r->status = EPH_RUN_QUEUED;
    r->model = strdup("m");
    r->prompt = strdup("p");
    r->timeout_seconds = 10;
    r->created_at_ms = eph_clock_real_ms();
    r->cost.reserved_micros = 100;
}

/* A run's web allow-list is stored with it and read back as it was; none reads back as none. */
static void test_run_web_allow(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r, got;
    make_run(&r, f->db.org);
    r.web = true;
    r.web_allow = json_pack("[s, s]", "example.com", "*.example.org");
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    assert_int_equal(st->ops->run_get(st, r.id, f->db.org, &got), 0);
    assert_true(got.web);
    assert_true(json_equal(got.web_allow, r.web_allow));
    eph_run_release(&got);
    eph_run_release(&r);
    make_run(&r, f->db.org);
    r.web = true;
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    assert_int_equal(st->ops->run_get(st, r.id, f->db.org, &got), 0);
    assert_null(got.web_allow);
    eph_run_release(&got);
    eph_run_release(&r);
}

/* A run's outputs: the patterns on the run, the files and symlinks put once, listed by path
 * without content, one got with its bytes (NULs included), a path not there -ENOENT, and all of
 * them gone with the log. */
static void test_run_outputs(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r, got;
    make_run(&r, f->db.org);
    r.outputs = json_pack("[s, s]", "report.md", "out/**");
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    assert_int_equal(st->ops->run_get(st, r.id, f->db.org, &got), 0);
    assert_true(json_equal(got.outputs, r.outputs));
    eph_run_release(&got);

    static const unsigned char bin[] = {0x89, 'P', 'N', 'G', 0, 1, 2, 0xff};
    struct eph_outputs o = {0};
    struct eph_output a = {.path = "out/c.png",
                           .size = sizeof(bin),
                           .content_type = "image/png",
                           .content = (unsigned char *)bin,
                           .len = sizeof(bin)};
    snprintf(a.type, sizeof(a.type), "file");
    memset(a.sha256, 'a', 64);
    struct eph_output l = {.path = "link", .target = "/etc/passwd"};
    snprintf(l.type, sizeof(l.type), "symlink");
    assert_int_equal(eph_outputs_add(&o, &l, true), 0);
    assert_int_equal(eph_outputs_add(&o, &a, true), 0);
    assert_int_equal(st->ops->run_outputs_put(st, r.id, &o), 0);
    /* A second put replaces the first. */
    assert_int_equal(st->ops->run_outputs_put(st, r.id, &o), 0);
    eph_outputs_release(&o);

    struct eph_outputs all = {0};
    assert_int_equal(st->ops->run_outputs_list(st, r.id, &all), 0);
    assert_int_equal(all.n, 2);
    assert_string_equal(all.v[0].path, "link");
    assert_string_equal(all.v[0].type, "symlink");
    assert_string_equal(all.v[0].target, "/etc/passwd");
    assert_string_equal(all.v[0].sha256, "");
    assert_string_equal(all.v[1].path, "out/c.png");
    assert_int_equal(all.v[1].size, sizeof(bin));
    assert_null(all.v[1].content);
    eph_outputs_release(&all);

    struct eph_output one;
    assert_int_equal(st->ops->run_output_get(st, r.id, "out/c.png", &one), 0);
    assert_int_equal(one.len, sizeof(bin));
    assert_memory_equal(one.content, bin, sizeof(bin));
    assert_string_equal(one.content_type, "image/png");
    eph_output_release(&one);
    assert_int_equal(st->ops->run_output_get(st, r.id, "link", &one), 0);
    assert_null(one.content);
    eph_output_release(&one);
    assert_int_equal(st->ops->run_output_get(st, r.id, "nothere", &one), -ENOENT);
    assert_int_equal(
        st->ops->run_output_get(st, "run_00000000000000000000000000000000", "out/c.png", &one),
        -ENOENT);

    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    r.log_expires_at_ms = r.finished_at_ms;
    r.cost.released_micros = r.cost.reserved_micros;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    unsigned purged;
    assert_int_equal(st->ops->purge_logs(st, r.log_expires_at_ms, &purged), 0);
    assert_int_equal(st->ops->run_outputs_list(st, r.id, &all), 0);
    assert_int_equal(all.n, 0);
    assert_int_equal(st->ops->run_output_get(st, r.id, "out/c.png", &one), -ENOENT);
    eph_run_release(&r);
}

/* The events of a run as the store gives them back. */
struct listed {
    size_t n;
    uint64_t seq[8];
    char *wire[8];
    char *message[8];
};

/* Collects each event's data as compact JSON with sorted keys. */
struct datas {
    size_t n;
    char *text[8];
};

static int data_cb(const struct eph_event *e, void *ctx)
{
    struct datas *d = ctx;
    assert_true(d->n < 8);
    assert_non_null(e->data);
    d->text[d->n++] = json_dumps(e->data, JSON_COMPACT | JSON_SORT_KEYS);
    return 0;
}

static int list_cb(const struct eph_event *e, void *ctx)
{
    struct listed *l = ctx;
    assert_true(l->n < 8);
    l->seq[l->n] = e->seq;
    l->wire[l->n] = e->wire ? strdup(e->wire) : NULL;
    l->message[l->n] = strdup(e->message);
    l->n++;
    return 0;
}

static void listed_release(struct listed *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->wire[i]);
        free(l->message[i]);
    }
    memset(l, 0, sizeof(*l));
}

static void make_event(struct eph_event *e, uint64_t seq, const char *wire)
{
    memset(e, 0, sizeof(*e));
    e->seq = seq;
    e->at_ms = eph_clock_real_ms();
    snprintf(e->source, sizeof(e->source), "shell");
    snprintf(e->type, sizeof(e->type), "shell.command");
    e->message = strdup("$ cat secret.txt");
    e->data = json_pack("{s:s}", "output", "the output");
    e->wire = wire ? strdup(wire) : NULL;
}

/* An event is kept as the text the API serves, byte for byte, whichever way it is written (with
 * the run, appended, or closing it); a row without one reads back without one. The retention
 * reaper drops the text with the message and data it carried. */
static void test_event_wire(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    /* Not what a serialiser would make of the fields: the store must keep it, not remake it. */
    const char *w1 = "{\"seq\":1, \"t\":0.0,\"note\":\"\u00e9 as sent\"}";
    const char *w2 = "{\"seq\":2,\"message\":\"$ cat secret.txt\"}";
    const char *w4 = "{\"seq\":4,\"closing\":true}";
    struct eph_run r;
    make_run(&r, f->db.org);
    struct eph_event e;
    make_event(&e, 1, w1);
    assert_int_equal(st->ops->run_insert(st, &r, &e), 0);
    eph_event_release(&e);
    make_event(&e, 2, w2);
    assert_int_equal(st->ops->event_append(st, r.id, &e), 0);
    eph_event_release(&e);
    make_event(&e, 3, NULL);
    assert_int_equal(st->ops->event_append(st, r.id, &e), 0);
    eph_event_release(&e);
    make_event(&e, 4, w4);
    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    r.log_expires_at_ms = r.finished_at_ms;
    r.cost.released_micros = r.cost.reserved_micros;
    struct eph_run_final fin = {.run = &r, .events = &e, .nevents = 1};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    eph_event_release(&e);

    struct listed l = {0};
    assert_int_equal(st->ops->events_list(st, r.id, 0, 0, list_cb, &l), 0);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.wire[0], w1);
    assert_string_equal(l.wire[1], w2);
    assert_null(l.wire[2]);
    assert_string_equal(l.wire[3], w4);
    listed_release(&l);

    unsigned purged;
    assert_int_equal(st->ops->purge_logs(st, r.log_expires_at_ms, &purged), 0);
    assert_int_equal(purged, 1);
    assert_int_equal(st->ops->events_list(st, r.id, 0, 0, list_cb, &l), 0);
    assert_int_equal(l.n, 4);
    for (size_t i = 0; i < l.n; i++) {
        assert_null(l.wire[i]); /* the command went with it */
        assert_string_equal(l.message[i], "shell.command");
    }
    listed_release(&l);
    eph_run_release(&r);
}

/* An event with its wire text is written once: its data comes back from the wire, and the store
 * holds no second serialisation of it (on SQLite, the data column is '{}'). An event without one
 * (an old row) keeps its own data. */
static void test_event_data_stored_once(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r;
    make_run(&r, f->db.org);
    struct eph_event e;
    make_event(&e, 1, "{\"seq\":1,\"data\":{\"output\":\"from the wire\",\"n\":[1,2]}}");
    assert_int_equal(st->ops->run_insert(st, &r, &e), 0);
    eph_event_release(&e);
    make_event(&e, 2, NULL);
    assert_int_equal(st->ops->event_append(st, r.id, &e), 0);
    eph_event_release(&e);
    make_event(&e, 3, "{\"seq\":3,\"data\":\"not an object\"}");
    assert_int_equal(st->ops->event_append(st, r.id, &e), 0);
    eph_event_release(&e);

    struct datas d = {0};
    assert_int_equal(st->ops->events_list(st, r.id, 0, 0, data_cb, &d), 0);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.text[0], "{\"n\":[1,2],\"output\":\"from the wire\"}");
    assert_string_equal(d.text[1], "{\"output\":\"the output\"}");
    assert_string_equal(d.text[2], "{}"); /* a wire whose data is no object: none */
    for (size_t i = 0; i < d.n; i++)
        free(d.text[i]);

    const char *pg = getenv("EPH_TEST_PG");
    if (!pg || !*pg) {
        sqlite3 *db;
        assert_int_equal(sqlite3_open_v2(f->db.path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "SELECT data FROM events WHERE run_id = ? ORDER BY seq",
                                            -1, &q, NULL),
                         SQLITE_OK);
        sqlite3_bind_text(q, 1, r.id, -1, SQLITE_STATIC);
        const char *want[] = {"{}", "{\"output\":\"the output\"}", "{}"};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(sqlite3_step(q), SQLITE_ROW);
            assert_string_equal((const char *)sqlite3_column_text(q, 0), want[i]);
        }
        sqlite3_finalize(q);
        sqlite3_close(db);
    }
    eph_run_release(&r);
}

static void test_queued_cap(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r;
    for (int i = 0; i < 2; i++) {
        make_run(&r, f->db.org);
        assert_int_equal(st->ops->run_insert_capped(st, &r, NULL, 2), 0);
        eph_run_release(&r);
    }
    make_run(&r, f->db.org);
    assert_int_equal(st->ops->run_insert_capped(st, &r, NULL, 2), -EAGAIN);
    /* Refused: nothing written, not even the reservation. */
    struct eph_balance b;
    assert_int_equal(st->ops->balance(st, f->db.org, &b), 0);
    assert_int_equal(b.reserved_micros, 200);
    assert_int_equal(st->ops->run_insert_capped(st, &r, NULL, 0), 0); /* 0: no cap */
    eph_run_release(&r);
    unsigned n;
    assert_int_equal(st->ops->runs_count_queued(st, f->db.org, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(st->ops->runs_count_queued(st, f->other, &n), 0);
    assert_int_equal(n, 0);
}

/* ---- PostgreSQL: the lease keeper goes first for a pooled connection ---- */

struct pool_call {
    struct eph_store *st;
    const char *org;
    char run_id[EPH_RUN_ID_LEN + 1];
    int kind; /* 0: a run insert (takes the org's row lock), 1: run_get, 2: run_renew */
    int rc;
    int64_t lease; /* 2: the lease it sets; 1: the lease the read saw */
    pthread_t t;
};

static void *pool_call_main(void *arg)
{
    struct pool_call *pc = arg;
    struct eph_run r;
    if (pc->kind == 0) {
        make_run(&r, pc->org);
        pc->rc = pc->st->ops->run_insert(pc->st, &r, NULL);
        eph_run_release(&r);
    } else if (pc->kind == 1) {
        pc->rc = pc->st->ops->run_get(pc->st, pc->run_id, NULL, &r);
        if (!pc->rc) {
            pc->lease = r.lease_expires_at_ms;
            eph_run_release(&r);
        }
    } else {
        pc->rc = pc->st->ops->run_renew(pc->st, pc->run_id, "node-a", pc->lease, 0);
    }
    return NULL;
}

/* Waits (bounded) until cond(arg) holds, looking every millisecond. */
static bool wait_until(bool (*cond)(void *), void *arg)
{
    for (int i = 0; i < 20000; i++) {
        if (cond(arg))
            return true;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return cond(arg);
}

static bool backend_waits_on_a_lock(void *arg)
{
    PGresult *r = PQexec(arg, "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = "
                              "'Lock' AND datname = current_database()");
    bool yes = PQresultStatus(r) == PGRES_TUPLES_OK && atoi(PQgetvalue(r, 0, 0)) == 1;
    PQclear(r);
    return yes;
}

struct waiters_want {
    struct eph_store *st;
    unsigned ordinary, urgent;
};

static bool waiters_are(void *arg)
{
    struct waiters_want *w = arg;
    unsigned o, u;
    eph_store_postgres_waiters(w->st, &o, &u);
    return o == w->ordinary && u == w->urgent;
}

/* A step is one transaction: the run's state or progress and its events together, or nothing
 * (an event number already taken, or a run already ended, and then nothing of the step is kept). */
static void test_run_step(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r;
    make_run(&r, f->db.org);
    struct eph_event e[2];
    make_event(&e[0], 1, NULL);
    assert_int_equal(st->ops->run_insert(st, &r, &e[0]), 0);
    eph_event_release(&e[0]);
    r.status = EPH_RUN_RUNNING;
    r.started_at_ms = eph_clock_real_ms();
    make_event(&e[0], 2, NULL);
    make_event(&e[1], 3, NULL);
    assert_int_equal(st->ops->run_step(st, &r, EPH_STEP_STATE, e, 2), 0);
    eph_event_release(&e[0]);
    eph_event_release(&e[1]);
    r.usage.model_calls = 2;
    r.cost.model_micros = 40;
    make_event(&e[0], 4, NULL);
    assert_int_equal(st->ops->run_step(st, &r, EPH_STEP_PROGRESS, e, 1), 0);
    eph_event_release(&e[0]);
    struct eph_run got;
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.status, EPH_RUN_RUNNING);
    assert_int_equal(got.usage.model_calls, 2);
    assert_int_equal(got.cost.model_micros, 40);
    eph_run_release(&got);
    struct listed l = {0};
    assert_int_equal(st->ops->events_list(st, r.id, 0, 0, list_cb, &l), 0);
    assert_int_equal(l.n, 4);
    listed_release(&l);
    /* An event number already taken fails the step: its progress is not kept. */
    r.usage.model_calls = 3;
    make_event(&e[0], 4, NULL);
    assert_int_not_equal(st->ops->run_step(st, &r, EPH_STEP_PROGRESS, e, 1), 0);
    eph_event_release(&e[0]);
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.usage.model_calls, 2);
    eph_run_release(&got);
    /* Ended: the state is refused (-EALREADY) and the step's events are not stored. */
    r.usage.model_calls = 2;
    r.status = EPH_RUN_COMPLETED;
    r.finished_at_ms = eph_clock_real_ms();
    r.log_expires_at_ms = r.finished_at_ms;
    r.cost.charged_micros = r.cost.model_micros;
    r.cost.released_micros = r.cost.reserved_micros - r.cost.model_micros;
    struct eph_run_final fin = {.run = &r};
    assert_int_equal(st->ops->run_finish(st, &fin), 0);
    r.status = EPH_RUN_RUNNING;
    make_event(&e[0], 5, NULL);
    assert_int_equal(st->ops->run_step(st, &r, EPH_STEP_STATE, e, 1), -EALREADY);
    eph_event_release(&e[0]);
    /* On a shared store, a progress step with its event after the end is fenced off (another
     * node settled the run): nothing of it kept (docs/STORE.md, "Fencing"). */
    if (st->ops->shared) {
        r.usage.model_calls = 9;
        make_event(&e[0], 5, NULL);
        assert_int_equal(st->ops->run_step(st, &r, EPH_STEP_PROGRESS, e, 1), -ESTALE);
        eph_event_release(&e[0]);
        assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
        assert_int_equal(got.usage.model_calls, 2);
        eph_run_release(&got);
    }
    l = (struct listed){0};
    assert_int_equal(st->ops->events_list(st, r.id, 0, 0, list_cb, &l), 0);
    assert_int_equal(l.n, 4);
    listed_release(&l);
    eph_run_release(&r);
}

/* The worker's claim is the run's start too: one statement that takes a queued run and marks it
 * starting with its start time, refused (nothing written) once another node holds it or it is
 * no longer queued. */
static void test_claim_start(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_run r;
    make_run(&r, f->db.org);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    int64_t now = eph_clock_real_ms();
    assert_int_equal(st->ops->run_claim_start(st, r.id, "node-b", now + 60000, now), 0);
    struct eph_run got;
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.status, EPH_RUN_STARTING);
    assert_int_equal(got.started_at_ms, now);
    assert_string_equal(got.node_id, "node-b");
    assert_int_equal(got.lease_expires_at_ms, now + 60000);
    eph_run_release(&got);
    /* Not queued any more: neither this node nor another takes it again, and nothing moves. */
    assert_int_equal(st->ops->run_claim_start(st, r.id, "node-b", now + 90000, now + 5), -EALREADY);
    assert_int_equal(st->ops->run_claim_start(st, r.id, "node-c", now + 90000, now + 5), -EALREADY);
    assert_int_equal(st->ops->run_get(st, r.id, NULL, &got), 0);
    assert_int_equal(got.started_at_ms, now);
    assert_int_equal(got.lease_expires_at_ms, now + 60000);
    eph_run_release(&got);
    /* A queued run another node holds is refused too; the plain claim still leaves it queued. */
    struct eph_run q;
    make_run(&q, f->db.org);
    assert_int_equal(st->ops->run_insert(st, &q, NULL), 0);
    assert_int_equal(st->ops->run_claim(st, q.id, "node-a", now + 60000), 0);
    assert_int_equal(st->ops->run_claim_start(st, q.id, "node-b", now + 60000, now), -EALREADY);
    assert_int_equal(st->ops->run_get(st, q.id, NULL, &got), 0);
    assert_int_equal(got.status, EPH_RUN_QUEUED);
    assert_int_equal(got.started_at_ms, 0);
    eph_run_release(&got);
    eph_run_release(&q);
    eph_run_release(&r);
}

/* With every connection taken and ordinary calls queued for one, a lease renewal is served
 * before them: queued behind the workers, a node's renewals could wait past its lease (as they
 * did when idle workers polled the store). One connection, held by an insert blocked on the
 * org's row lock; four reads queue, then a renewal; the lock goes: the renewal is served before
 * every read, which all read its lease. (Without the priority, the reads queued first would read
 * the claim's lease, but for the chance of the wake-up order.) */
static void test_pg_lease_keeper_goes_first(void **state)
{
    struct fixture *f = *state;
    if (!test_store_pg_target[0])
        skip(); /* SQLite has no pool */
    struct eph_store *st = f->db.st;
    struct eph_run r;
    make_run(&r, f->db.org);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    int64_t claimed = eph_clock_real_ms() + 60000, renewed = claimed + 12345;
    assert_int_equal(st->ops->run_claim(st, r.id, "node-a", claimed), 0);

    char err[256];
    struct eph_store *one = NULL;
    assert_int_equal(eph_store_open_pool(test_store_pg_target, 1, &one, err, sizeof(err)), 0);
    PGconn *lk = PQconnectdb(test_store_pg_target);
    assert_int_equal(PQstatus(lk), CONNECTION_OK);
    PQclear(PQexec(lk, "BEGIN"));
    const char *params[1] = {f->db.org};
    PGresult *res = PQexecParams(lk, "SELECT id FROM orgs WHERE id = $1 FOR UPDATE", 1, NULL,
                                 params, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);

    enum { READS = 4, N = READS + 2 };
    struct pool_call calls[N];
    for (int i = 0; i < N; i++) {
        calls[i] = (struct pool_call){.st = one,
                                      .org = f->db.org,
                                      .kind = i == 0       ? 0
                                              : i == N - 1 ? 2
                                                           : 1,
                                      .lease = renewed};
        snprintf(calls[i].run_id, sizeof(calls[i].run_id), "%s", r.id);
    }
    /* The insert takes the one connection and waits for the org's row. */
    assert_int_equal(pthread_create(&calls[0].t, NULL, pool_call_main, &calls[0]), 0);
    assert_true(wait_until(backend_waits_on_a_lock, lk));
    /* The reads queue for the connection, then the renewal. */
    for (int i = 1; i <= READS; i++)
        assert_int_equal(pthread_create(&calls[i].t, NULL, pool_call_main, &calls[i]), 0);
    struct waiters_want w = {one, READS, 0};
    assert_true(wait_until(waiters_are, &w));
    assert_int_equal(pthread_create(&calls[N - 1].t, NULL, pool_call_main, &calls[N - 1]), 0);
    w.urgent = 1;
    assert_true(wait_until(waiters_are, &w));

    PQclear(PQexec(lk, "ROLLBACK"));
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_join(calls[i].t, NULL), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(calls[i].rc, 0);
    /* The order as the database saw it (the threads' own finishing order would depend on
     * which of them the scheduler runs first once each has given the connection back): every
     * read queued before the renewal read the lease the renewal wrote. */
    for (int i = 1; i <= READS; i++)
        assert_int_equal(calls[i].lease, renewed);
    PQfinish(lk);
    one->ops->close(one);
    eph_run_release(&r);
}

static void test_idempotency_expiry(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_idem prev = {0};
    int64_t day = 24 * 3600 * 1000;
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "k", "h", NULL, 1000, 1000 - day, &prev),
                     0);
    /* In flight: a second begin sees it without an answer. */
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "k", "h", NULL, 2000, 2000 - day, &prev),
                     -EEXIST);
    assert_int_equal(prev.status_code, 0);
    assert_int_equal(st->ops->idem_complete(st, f->db.org, "k", 201, "{}"), 0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "k", "h", NULL, 3000, 3000 - day, &prev),
                     -EEXIST);
    assert_int_equal(prev.status_code, 201);
    free(prev.response_body);
    /* Scoped to the org. */
    assert_int_equal(st->ops->idem_begin(st, f->other, "k", "h2", NULL, 3000, 3000 - day, &prev),
                     0);
    /* 24 hours and 1 ms later the key is new again, with whatever request it now carries. */
    int64_t later = 1000 + day + 1;
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "k", "h3", NULL, later, later - day, &prev),
                     0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "k", "h3", NULL, later, later - day, &prev),
                     -EEXIST);
    assert_string_equal(prev.request_hash, "h3");
    assert_int_equal(prev.status_code, 0);
}

/* A record whose answer was never written: completed from the run it names when the run was
 * stored, dropped when it was not and is stale, left alone otherwise. */
static void test_idempotency_recovery(void **state)
{
    struct fixture *f = *state;
    struct eph_store *st = f->db.st;
    struct eph_idem prev = {0};
    struct eph_run r;
    make_run(&r, f->db.org);
    assert_int_equal(st->ops->run_insert(st, &r, NULL), 0);
    char stored[128], never[128];
    snprintf(stored, sizeof(stored), "{\"object\":\"run\",\"id\":\"%s\"}", r.id);
    snprintf(never, sizeof(never), "{\"object\":\"run\",\"id\":\"run_%032d\"}", 7);
    int64_t far = 1000 + 86400000;
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "made", "h", stored, 1000, 0, &prev), 0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "old", "h", never, 1000, 0, &prev), 0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "new", "h", never, 5000, 0, &prev), 0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "credit", "h", NULL, 1000, 0, &prev), 0);
    /* The run of another org is not this record's. */
    assert_int_equal(st->ops->idem_begin(st, f->other, "made", "h", stored, 1000, 0, &prev), 0);
    /* In flight, the pending body is what a second begin sees. */
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "made", "h", NULL, 2000, 0, &prev),
                     -EEXIST);
    assert_int_equal(prev.status_code, 0);
    assert_string_equal(prev.response_body, stored);
    free(prev.response_body);
    unsigned completed = 9, dropped = 9;
    assert_int_equal(st->ops->idem_recover(st, 3000, &completed, &dropped), 0);
    assert_int_equal(completed, 1);
    assert_int_equal(dropped, 2); /* "old", and the other org's "made" */
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "made", "h", NULL, 4000, 0, &prev),
                     -EEXIST);
    assert_int_equal(prev.status_code, 201);
    assert_string_equal(prev.response_body, stored);
    free(prev.response_body);
    /* "old" is free again; "new" (younger than the bound) and "credit" (no run) stay. */
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "old", "h", NULL, 4000, 0, &prev), 0);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "new", "h", NULL, 6000, 0, &prev), -EEXIST);
    free(prev.response_body);
    assert_int_equal(st->ops->idem_begin(st, f->db.org, "credit", "h", NULL, 6000, 0, &prev),
                     -EEXIST);
    assert_int_equal(prev.status_code, 0);
    free(prev.response_body);
    assert_int_equal(st->ops->idem_recover(st, far, &completed, &dropped), 0);
    assert_int_equal(completed, 0);
    assert_int_equal(dropped, 1); /* "new"; "old" begun again without a run, "credit", stay */
    eph_run_release(&r);
}

static void test_metrics_render(void **state)
{
    (void)state;
    eph_metrics_reset();
    eph_metrics_observe_exec(3000000);       /* 3 ms */
    eph_metrics_observe_exec(2000000000ull); /* 2 s */
    eph_metrics_observe_http("GET", "/v1/runs", 200, 1000);
    eph_metrics_observe_http("BREW", "/v1/runs", 200, 1000);
    struct eph_buf b;
    eph_buf_init(&b, 1u << 20);
    assert_int_equal(eph_metrics_render(&b), 0);
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_bucket{le=\"0.0025\"} 0\n"));
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_bucket{le=\"0.005\"} 1\n"));
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_bucket{le=\"2.5\"} 2\n"));
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_count 2\n"));
    assert_non_null(strstr(b.data, "ephemeral_exec_seconds_sum 2.003000000\n"));
    assert_non_null(strstr(
        b.data,
        "ephemeral_http_requests_total{method=\"GET\",route=\"/v1/runs\",code=\"200\"} 1\n"));
    assert_non_null(strstr(
        b.data,
        "ephemeral_http_requests_total{method=\"OTHER\",route=\"/v1/runs\",code=\"200\"} 1\n"));
    assert_non_null(
        strstr(b.data, "ephemeral_http_request_duration_seconds_count{route=\"/v1/runs\"} 2\n"));
    eph_buf_release(&b);
}

/* A SQLite file the store cannot open, at each step of the open: no directory to create it in, a
 * file that is not a database, a database whose migration table is not the store's. Each is an
 * error with the reason; what was opened before the failing step is closed again (the sanitizer
 * build finds a leak). */
static void expect_open_error(const char *target, const char *needle)
{
    struct eph_store *st = NULL;
    char err[512] = "";
    assert_int_not_equal(eph_store_open(target, &st, err, sizeof(err)), 0);
    assert_null(st);
    if (!strstr(err, needle))
        fail_msg("expected '%s', got '%s'", needle, err);
}

static void test_sqlite_open_errors(void **state)
{
    struct store_fixture *sf = &((struct fixture *)*state)->db;
    char path[256];
    snprintf(path, sizeof(path), "%s/no-such-dir/x.db", sf->dir);
    expect_open_error(path, "cannot open database");

    snprintf(path, sizeof(path), "%s/not-a-db", sf->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 256; i++)
        fputs("this is not a database file, ", f);
    assert_int_equal(fclose(f), 0);
    expect_open_error(path, "cannot prepare database");

    snprintf(path, sizeof(path), "%s/other.db", sf->dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "CREATE TABLE schema_migrations (something_else TEXT)", NULL, NULL, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    expect_open_error(path, "cannot prepare database");
}

/* The column list the stores select and the mapping that reads it name the same columns. */
static void test_run_columns_agree(void **state)
{
    (void)state;
    size_t commas = 0;
    for (const char *c = EPH_RUN_COLUMNS; *c; c++)
        commas += *c == ',';
    assert_int_equal(commas + 1, eph_run_column_count());
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_columns_agree),
        cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_urls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_claim_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_and_connections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_web_allow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_outputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_wire, setup, teardown),
        cmocka_unit_test_setup_teardown(test_event_data_stored_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queued_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotency_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotency_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pg_lease_keeper_goes_first, setup, teardown),
        cmocka_unit_test(test_metrics_render),
        cmocka_unit_test_setup_teardown(test_sqlite_open_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
