/*
 * postgres_notify.c - notifications between nodes: the listening thread (LISTEN on its own
 * connection, outside the pool) and the cancel notice.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "common/log.h"
#include "store/postgres_store.h"
#include "store/store.h"

/* ---- notifications between nodes ---- */

static PGconn *listen_connect(struct pg_store *s)
{
    PGconn *c = PQconnectdb(s->conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        PQfinish(c);
        return NULL;
    }
    PQsetNoticeProcessor(c, NULL, NULL);
    PGresult *r = PQexec(c, "LISTEN eph_events; LISTEN eph_queued; LISTEN eph_cancel");
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void deliver(struct pg_store *s, PGnotify *n)
{
    const struct eph_store_listener *l = &s->lis;
    if (strcmp(n->relname, "eph_events") == 0 && l->event) {
        /* "run_id seq type": written by event_insert, never by a client. */
        char id[64], type[40];
        unsigned long long seq;
        if (sscanf(n->extra, "%63s %llu %39s", id, &seq, type) == 3)
            l->event(id, seq, type, l->ctx);
    } else if (strcmp(n->relname, "eph_queued") == 0 && l->queued) {
        l->queued(n->extra, l->ctx);
    } else if (strcmp(n->relname, "eph_cancel") == 0 && l->cancel) {
        l->cancel(n->extra, l->ctx);
    }
}

static void *listen_main(void *arg)
{
    struct pg_store *s = arg;
    PGconn *c = NULL;
    unsigned backoff_ms = 100;
    while (!atomic_load(&s->stop_listening)) {
        if (!c) {
            c = listen_connect(s);
            if (!c) {
                struct timespec ts = {0, (long)backoff_ms * 1000000L};
                nanosleep(&ts, NULL);
                if (backoff_ms < 1000)
                    backoff_ms *= 2;
                continue;
            }
            backoff_ms = 100;
            /* Anything committed while nobody listened is found by looking again. */
            if (s->lis.resync)
                s->lis.resync(s->lis.ctx);
        }
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int pr = poll(&pfd, 1, 200);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr > 0 && !PQconsumeInput(c)) {
            EPH_WARN("store", "PostgreSQL notifications lost their connection; reconnecting");
            PQfinish(c);
            c = NULL;
            continue;
        }
        PGnotify *n;
        while ((n = PQnotifies(c))) {
            deliver(s, n);
            PQfreemem(n);
        }
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = NULL;
        }
    }
    if (c)
        PQfinish(c);
    return NULL;
}

int pg_listen(struct eph_store *base, const struct eph_store_listener *l)
{
    struct pg_store *s = P(base);
    if (s->listening)
        return -EALREADY;
    s->lis = *l;
    atomic_store(&s->stop_listening, false);
    int rc = pthread_create(&s->listener, NULL, listen_main, s);
    if (rc)
        return -rc;
    s->listening = true;
    return 0;
}

int pg_notify_cancel(struct eph_store *base, const char *run_id)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, run_id);
    return WITH_CONN(
        s, pg_exec(s, c, "SELECT pg_notify('eph_cancel', $1)", &p, NULL, NULL, "notify cancel"));
}

int pg_node_put(struct eph_store *base, const char *node_id, const char *url, int64_t now_ms)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, node_id);
    p_text(&p, url);
    p_i64(&p, now_ms);
    return WITH_CONN(s, pg_exec(s, c,
                                "INSERT INTO nodes (id, url, updated_at) VALUES ($1, $2, $3) ON "
                                "CONFLICT (id) DO UPDATE SET url = excluded.url, updated_at = "
                                "excluded.updated_at",
                                &p, NULL, NULL, "node put"));
}

int pg_node_url(struct eph_store *base, const char *node_id, char *url, size_t len)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, node_id);
    PGresult *r = NULL;
    int rc = WITH_CONN(
        s, pg_select_once(s, c, "SELECT url FROM nodes WHERE id = $1", &p, &r, "node url"));
    if (rc)
        return rc;
    if (!PQntuples(r))
        rc = -ENOENT;
    else if (snprintf(url, len, "%s", PQgetvalue(r, 0, 0)) >= (int)len)
        rc = -ENAMETOOLONG;
    PQclear(r);
    return rc;
}

unsigned long eph_store_postgres_round_trips(struct eph_store *base)
{
    struct pg_store *s = P(base);
    pthread_mutex_lock(&s->lock);
    unsigned long n = s->round_trips;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void eph_store_postgres_waiters(struct eph_store *base, unsigned *ordinary, unsigned *urgent)
{
    struct pg_store *s = P(base);
    pthread_mutex_lock(&s->lock);
    *ordinary = s->ordinary_waiting;
    *urgent = s->urgent_waiting;
    pthread_mutex_unlock(&s->lock);
}
