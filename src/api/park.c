/*
 * park.c - requests that wait on a run without holding a thread.
 *
 * A waiting request suspends its connection and joins a list. One thread, the parker, resumes
 * the connections whose condition holds (an event after the one they saw, or their run settled)
 * or whose deadline passed. live.c tells the parker that something changed through its observer
 * hook; the parker then scans the list. A scan is O(parked), which is fine at the scale of one
 * node (thousands), and it keeps live.c free of per-connection bookkeeping.
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
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "api/api.h"
#include "common/clock.h"
#include "common/log.h"
#include "run/live.h"

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static struct eph_api_waiter *parked_head;
static unsigned parked_n;
static bool park_stopping;

static pthread_mutex_t kick_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kick_cond;
static bool kicked, parker_exit;
static uint64_t next_deadline_ns; /* guarded by kick_lock */
static pthread_t parker;
static bool parker_running;

static void kick(void)
{
    pthread_mutex_lock(&kick_lock);
    kicked = true;
    pthread_cond_signal(&kick_cond);
    pthread_mutex_unlock(&kick_lock);
}

static bool ready(const struct eph_api_waiter *w, uint64_t now)
{
    uint64_t seq;
    bool closed;
    eph_live_state(w->live, &seq, &closed);
    return closed || (w->after_seq != UINT64_MAX && seq > w->after_seq) || now >= w->deadline_ns;
}

/* Resumes what is ready (or everything when stopping); returns the earliest remaining deadline. */
static uint64_t scan(void)
{
    uint64_t now = eph_clock_mono_ns(), next = UINT64_MAX;
    pthread_mutex_lock(&park_lock);
    for (struct eph_api_waiter **pp = &parked_head; *pp;) {
        struct eph_api_waiter *w = *pp;
        if (park_stopping || ready(w, now)) {
            *pp = w->next;
            w->next = NULL;
            parked_n--;
            MHD_resume_connection(w->conn);
            continue;
        }
        if (w->deadline_ns < next)
            next = w->deadline_ns;
        pp = &w->next;
    }
    pthread_mutex_unlock(&park_lock);
    return next;
}

static void *parker_main(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t next = scan();
        pthread_mutex_lock(&kick_lock);
        if (next < next_deadline_ns)
            next_deadline_ns = next;
        while (!kicked && !parker_exit && eph_clock_mono_ns() < next_deadline_ns) {
            struct timespec ts;
            /* Without a deadline, still wake now and then: cheap insurance against a lost kick. */
            uint64_t until = next_deadline_ns;
            uint64_t cap = eph_clock_mono_ns() + 1000000000ull;
            eph_clock_timespec(until < cap ? until : cap, &ts);
            if (pthread_cond_timedwait(&kick_cond, &kick_lock, &ts) == ETIMEDOUT &&
                eph_clock_mono_ns() >= cap)
                break;
        }
        kicked = false;
        next_deadline_ns = UINT64_MAX;
        bool stop = parker_exit;
        pthread_mutex_unlock(&kick_lock);
        if (stop) {
            scan();
            return NULL;
        }
    }
}

int eph_api_park_start(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&kick_cond, &a);
    pthread_condattr_destroy(&a);
    if (rc)
        return -rc;
    pthread_mutex_lock(&park_lock);
    park_stopping = false;
    pthread_mutex_unlock(&park_lock);
    kicked = parker_exit = false;
    next_deadline_ns = UINT64_MAX;
    if ((rc = pthread_create(&parker, NULL, parker_main, NULL)))
        return -rc;
    parker_running = true;
    eph_live_set_observer(kick);
    return 0;
}

void eph_api_park_stop(void)
{
    if (!parker_running)
        return;
    pthread_mutex_lock(&park_lock);
    park_stopping = true;
    pthread_mutex_unlock(&park_lock);
    eph_live_set_observer(NULL);
    pthread_mutex_lock(&kick_lock);
    parker_exit = true;
    pthread_cond_signal(&kick_cond);
    pthread_mutex_unlock(&kick_lock);
    pthread_join(parker, NULL);
    parker_running = false;
    /* The parker's last scan resumed everyone; nothing parks once park_stopping is set. */
    scan();
}

enum eph_api_park_result eph_api_park(struct eph_api_waiter *w)
{
    enum eph_api_park_result res = EPH_API_PARKED;
    pthread_mutex_lock(&park_lock);
    if (park_stopping) {
        res = EPH_API_STOPPING;
    } else if (!w->live || ready(w, eph_clock_mono_ns())) {
        res = EPH_API_READY;
    } else {
        MHD_suspend_connection(w->conn);
        w->next = parked_head;
        parked_head = w;
        parked_n++;
    }
    pthread_mutex_unlock(&park_lock);
    if (res == EPH_API_PARKED) {
        /* The parker may be sleeping until a later deadline than ours. */
        pthread_mutex_lock(&kick_lock);
        if (w->deadline_ns < next_deadline_ns)
            next_deadline_ns = w->deadline_ns;
        kicked = true;
        pthread_cond_signal(&kick_cond);
        pthread_mutex_unlock(&kick_lock);
    }
    return res;
}

unsigned eph_api_parked_count(void)
{
    pthread_mutex_lock(&park_lock);
    unsigned n = parked_n;
    pthread_mutex_unlock(&park_lock);
    return n;
}
