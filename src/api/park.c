/*
 * park.c - requests that wait on a run without holding a thread.
 *
 * A waiting request suspends its connection and joins a list. One thread, the parker, resumes
 * the connections whose condition holds (an event after the one they saw, or their run settled)
 * or whose deadline passed. live.c tells the parker that something changed through its observer
 * hook; the parker then scans the list. A scan is O(parked), which is fine at the scale of one
 * node (thousands), and it keeps live.c free of per-connection bookkeeping.
 *
 * The parker is an object of the API server (struct eph_api), reached by each request through
 * req->parker.
 *
 * Locks: park_lock guards the list and is taken before live.c's lock (eph_live_state), never
 * after. kick_lock guards only the "something changed" flag; the observer takes it from any
 * thread, with no other lock of ours held, so there is no cycle. A connection is suspended under
 * park_lock before the parker can see it, so a resume always follows its suspend (MHD forbids
 * resuming a connection that is not suspended).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/log.h"
#include "run/live.h"

struct eph_api_parker {
    struct eph_live_registry *live;
    pthread_mutex_t park_lock;
    struct eph_api_waiter *parked_head;
    unsigned parked_n;
    bool park_stopping;

    pthread_mutex_t kick_lock;
    pthread_cond_t kick_cond;
    bool kicked, parker_exit;
    uint64_t next_deadline_ns; /* guarded by kick_lock */
    pthread_t parker;
    bool parker_running;
};

static void kick(void *ctx)
{
    struct eph_api_parker *p = ctx;
    pthread_mutex_lock(&p->kick_lock);
    p->kicked = true;
    pthread_cond_signal(&p->kick_cond);
    pthread_mutex_unlock(&p->kick_lock);
}

static bool ready(const struct eph_api_waiter *w, uint64_t now)
{
    uint64_t seq;
    bool closed;
    eph_live_state(w->live, &seq, &closed);
    return closed || (w->after_seq != UINT64_MAX && seq > w->after_seq) || now >= w->deadline_ns ||
           (w->done && w->done(w->done_arg));
}

/* Resumes what is ready (or everything when stopping); returns the earliest remaining deadline. */
static uint64_t scan(struct eph_api_parker *p)
{
    uint64_t now = eph_clock_mono_ns(), next = UINT64_MAX;
    pthread_mutex_lock(&p->park_lock);
    for (struct eph_api_waiter **pp = &p->parked_head; *pp;) {
        struct eph_api_waiter *w = *pp;
        if (p->park_stopping || ready(w, now)) {
            *pp = w->next;
            w->next = NULL;
            p->parked_n--;
            MHD_resume_connection(w->conn);
            continue;
        }
        if (w->deadline_ns < next)
            next = w->deadline_ns;
        pp = &w->next;
    }
    pthread_mutex_unlock(&p->park_lock);
    return next;
}

static void *parker_main(void *arg)
{
    struct eph_api_parker *p = arg;
    for (;;) {
        uint64_t next = scan(p);
        pthread_mutex_lock(&p->kick_lock);
        if (next < p->next_deadline_ns)
            p->next_deadline_ns = next;
        while (!p->kicked && !p->parker_exit && eph_clock_mono_ns() < p->next_deadline_ns) {
            struct timespec ts;
            /* Without a deadline, still wake now and then: cheap insurance against a lost kick. */
            uint64_t until = p->next_deadline_ns;
            uint64_t cap = eph_clock_mono_ns() + 1000000000ull;
            eph_clock_timespec(until < cap ? until : cap, &ts);
            if (pthread_cond_timedwait(&p->kick_cond, &p->kick_lock, &ts) == ETIMEDOUT &&
                eph_clock_mono_ns() >= cap)
                break;
        }
        p->kicked = false;
        p->next_deadline_ns = UINT64_MAX;
        bool stop = p->parker_exit;
        pthread_mutex_unlock(&p->kick_lock);
        if (stop) {
            scan(p);
            return NULL;
        }
    }
}

int eph_api_park_start(struct eph_live_registry *live, struct eph_api_parker **out)
{
    *out = NULL;
    struct eph_api_parker *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&p->kick_cond, &a);
    pthread_condattr_destroy(&a);
    if (rc) {
        free(p);
        return -rc;
    }
    pthread_mutex_init(&p->park_lock, NULL);
    pthread_mutex_init(&p->kick_lock, NULL);
    p->live = live;
    p->next_deadline_ns = UINT64_MAX;
    if ((rc = pthread_create(&p->parker, NULL, parker_main, p))) {
        eph_api_park_free(p);
        return -rc;
    }
    p->parker_running = true;
    eph_live_set_observer(live, kick, p);
    *out = p;
    return 0;
}

void eph_api_park_stop(struct eph_api_parker *p)
{
    if (!p || !p->parker_running)
        return;
    pthread_mutex_lock(&p->park_lock);
    p->park_stopping = true;
    pthread_mutex_unlock(&p->park_lock);
    eph_live_set_observer(p->live, NULL, NULL);
    pthread_mutex_lock(&p->kick_lock);
    p->parker_exit = true;
    pthread_cond_signal(&p->kick_cond);
    pthread_mutex_unlock(&p->kick_lock);
    pthread_join(p->parker, NULL);
    p->parker_running = false;
    /* The parker's last scan resumed everyone; nothing parks once park_stopping is set. */
    scan(p);
}

void eph_api_park_free(struct eph_api_parker *p)
{
    if (!p)
        return;
    eph_api_park_stop(p);
    pthread_cond_destroy(&p->kick_cond);
    pthread_mutex_destroy(&p->park_lock);
    pthread_mutex_destroy(&p->kick_lock);
    free(p);
}

enum eph_api_park_result eph_api_park(struct eph_api_parker *p, struct eph_api_waiter *w)
{
    enum eph_api_park_result res = EPH_API_PARKED;
    pthread_mutex_lock(&p->park_lock);
    if (p->park_stopping) {
        res = EPH_API_STOPPING;
    } else if (!w->live || ready(w, eph_clock_mono_ns())) {
        res = EPH_API_READY;
    } else {
        MHD_suspend_connection(w->conn);
        w->next = p->parked_head;
        p->parked_head = w;
        p->parked_n++;
    }
    pthread_mutex_unlock(&p->park_lock);
    if (res == EPH_API_PARKED) {
        /* The parker may be sleeping until a later deadline than ours. */
        pthread_mutex_lock(&p->kick_lock);
        if (w->deadline_ns < p->next_deadline_ns)
            p->next_deadline_ns = w->deadline_ns;
        p->kicked = true;
        pthread_cond_signal(&p->kick_cond);
        pthread_mutex_unlock(&p->kick_lock);
    }
    return res;
}

unsigned eph_api_parked_count(struct eph_api_parker *p)
{
    pthread_mutex_lock(&p->park_lock);
    unsigned n = p->parked_n;
    pthread_mutex_unlock(&p->park_lock);
    return n;
}
