#include "run/live.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "common/clock.h"
#include "common/log.h"
#include "run/event_wire.h"
#include "sandbox/sandbox.h"

struct eph_live {
    char id[EPH_RUN_ID_LEN + 1];
    int64_t created_at_ms;
    uint64_t last_seq;
    bool closed;
    atomic_bool cancel;
    atomic_bool lease_lost;
    atomic_bool loss_noticed;  /* the loss was logged (once) */
    _Atomic uint64_t fence_ns; /* eph_live_set_fence; 0: none */
    atomic_bool worked_here;   /* a worker of this process works on it (else: followed) */
    atomic_bool worker_taken;  /* one worker of this process has taken it (eph_live_take_worker) */
    /* Serialises this run's emitters: numbers are assigned and events stored in order, outside
     * the registry's lock, so that a slow store write never holds up another run or a reader. */
    pthread_mutex_t emit_lock;
    _Atomic uint64_t compute_start_ns; /* 0: no compute accruing (lease renewals checkpoint it) */
    /* Stored but never to be worked on (eph_live_refuse): the code and message of its
     * settlement, constant strings; guarded by the registry's lock. */
    const char *refused_code, *refused_message;
    struct eph_sandbox *sb;
    char *zdr_result;
    struct eph_outputs zdr_outputs;
    bool has_zdr_outputs;
    char *zdr_prompt;
    json_t *zdr_files;
    unsigned refs;
    bool registered;
    struct eph_live_registry *reg;
    struct eph_live *next;
};

/* One lock and one condition for all live runs of a registry: waiters re-check their own run when
 * woken. Simple and correct at the scale of one node's concurrent runs. */
struct eph_live_registry {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct eph_live *head;
    unsigned n;
    pthread_mutex_t observer_lock; /* guards the observer pair, never held with lock */
    void (*observer)(void *ctx);
    void *observer_ctx;
};

/* Tells the observer, if any, that something changed. Never called with the registry's lock
 * held. */
static void notify(struct eph_live_registry *reg)
{
    pthread_mutex_lock(&reg->observer_lock);
    void (*fn)(void *) = reg->observer;
    void *ctx = reg->observer_ctx;
    pthread_mutex_unlock(&reg->observer_lock);
    if (fn)
        fn(ctx);
}

void eph_live_set_observer(struct eph_live_registry *reg, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&reg->observer_lock);
    reg->observer = fn;
    reg->observer_ctx = ctx;
    pthread_mutex_unlock(&reg->observer_lock);
}

void eph_live_state(struct eph_live *l, uint64_t *last_seq, bool *closed)
{
    pthread_mutex_lock(&l->reg->lock);
    *last_seq = l->last_seq;
    *closed = l->closed;
    pthread_mutex_unlock(&l->reg->lock);
}

int eph_live_registry_new(struct eph_live_registry **out)
{
    *out = NULL;
    struct eph_live_registry *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return -ENOMEM;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&reg->cond, &a);
    pthread_condattr_destroy(&a);
    if (rc) {
        free(reg);
        return -rc;
    }
    pthread_mutex_init(&reg->lock, NULL);
    pthread_mutex_init(&reg->observer_lock, NULL);
    *out = reg;
    return 0;
}

static void live_free(struct eph_live *l);

void eph_live_registry_free(struct eph_live_registry *reg)
{
    if (!reg)
        return;
    /* Entries still registered lose the registry's reference; references held elsewhere must
     * have been put by now (every thread that could hold one has been joined). */
    while (reg->head) {
        struct eph_live *l = reg->head;
        reg->head = l->next;
        if (--l->refs == 0)
            live_free(l);
        else /* a holder not joined yet: leak the entry rather than free it under it */
            EPH_WARN("timeline", "run %s: still referenced at shutdown", l->id);
    }
    pthread_cond_destroy(&reg->cond);
    pthread_mutex_destroy(&reg->lock);
    pthread_mutex_destroy(&reg->observer_lock);
    free(reg);
}

int eph_live_register(struct eph_live_registry *reg, const char *run_id, int64_t created_at_ms,
                      uint64_t last_seq)
{
    struct eph_live *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    snprintf(l->id, sizeof(l->id), "%s", run_id);
    l->created_at_ms = created_at_ms;
    l->last_seq = last_seq;
    l->refs = 1; /* the registry's */
    l->registered = true;
    atomic_init(&l->cancel, false);
    atomic_init(&l->lease_lost, false);
    atomic_init(&l->loss_noticed, false);
    atomic_init(&l->fence_ns, 0);
    atomic_init(&l->worked_here, false);
    atomic_init(&l->worker_taken, false);
    pthread_mutex_init(&l->emit_lock, NULL);
    atomic_init(&l->compute_start_ns, 0);
    l->reg = reg;
    pthread_mutex_lock(&reg->lock);
    /* One entry per run: a second registration (a run followed by two requests at once, or
     * re-queued while followed) finds the first. */
    for (struct eph_live *o = reg->head; o; o = o->next)
        if (strcmp(o->id, run_id) == 0) {
            pthread_mutex_unlock(&reg->lock);
            pthread_mutex_destroy(&l->emit_lock);
            free(l);
            return -EEXIST;
        }
    l->next = reg->head;
    reg->head = l;
    reg->n++;
    pthread_mutex_unlock(&reg->lock);
    return 0;
}

struct eph_live *eph_live_get(struct eph_live_registry *reg, const char *run_id)
{
    pthread_mutex_lock(&reg->lock);
    struct eph_live *l;
    for (l = reg->head; l; l = l->next)
        if (strcmp(l->id, run_id) == 0)
            break;
    if (l)
        l->refs++;
    pthread_mutex_unlock(&reg->lock);
    return l;
}

static void live_free(struct eph_live *l)
{
    pthread_mutex_destroy(&l->emit_lock);
    if (l->zdr_prompt)
        sodium_memzero(l->zdr_prompt, strlen(l->zdr_prompt));
    free(l->zdr_prompt);
    json_decref(l->zdr_files);
    free(l->zdr_result);
    eph_outputs_release(&l->zdr_outputs);
    free(l);
}

void eph_live_put(struct eph_live *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->reg->lock);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->reg->lock);
    if (last)
        live_free(l);
}

const char *eph_live_id(const struct eph_live *l)
{
    return l->id;
}

__attribute__((format(printf, 6, 0))) static void
fill_event(struct eph_live *l, struct eph_event *e, const char *source, const char *type,
           json_t *data, const char *fmt, va_list ap)
{
    memset(e, 0, sizeof(*e));
    e->at_ms = eph_clock_real_ms();
    e->t_ms = e->at_ms - l->created_at_ms;
    if (e->t_ms < 0)
        e->t_ms = 0;
    snprintf(e->source, sizeof(e->source), "%s", source);
    snprintf(e->type, sizeof(e->type), "%s", type);
    if (vasprintf(&e->message, fmt, ap) < 0)
        e->message = NULL;
    e->data = data ? data : json_object();
}

void eph_live_prepare(struct eph_live *l, struct eph_event *e, const char *source, const char *type,
                      json_t *data, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fill_event(l, e, source, type, data, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&l->emit_lock);
    pthread_mutex_lock(&l->reg->lock);
    e->seq = ++l->last_seq;
    pthread_mutex_unlock(&l->reg->lock);
    pthread_mutex_unlock(&l->emit_lock);
    /* Serialised once, now its number is known; without the text it is stored all the same and
     * made on read. */
    eph_event_serialise(e);
}

__attribute__((format(printf, 6, 7))) static void fill_eventf(struct eph_live *l,
                                                              struct eph_event *e,
                                                              const char *source, const char *type,
                                                              json_t *data, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fill_event(l, e, source, type, data, fmt, ap);
    va_end(ap);
}

/* Numbers ev[0..n), stores them (with r's state or progress when what says so: one transaction)
 * and wakes the waiters; releases the events. */
static int store_events(struct eph_live *l, struct eph_store *st, const struct eph_run *r,
                        unsigned what, struct eph_event *ev, size_t n)
{
    /* The run's emit lock keeps the stored order the numbered order; the registry's lock is held
     * only to read and publish the number, never across the store's write. */
    pthread_mutex_lock(&l->emit_lock);
    pthread_mutex_lock(&l->reg->lock);
    uint64_t base = l->last_seq;
    pthread_mutex_unlock(&l->reg->lock);
    for (size_t i = 0; i < n; i++) {
        ev[i].seq = base + 1 + i;
        /* Serialised once, here, as the API serves it (without the text, it is made on read). */
        eph_event_serialise(&ev[i]);
    }
    int rc = r || n != 1 ? st->ops->run_step(st, r, what, ev, n)
                         : st->ops->event_append(st, l->id, &ev[0]);
    if (!rc && n) {
        pthread_mutex_lock(&l->reg->lock);
        if (base + n > l->last_seq)
            l->last_seq = base + n;
        pthread_cond_broadcast(&l->reg->cond);
        pthread_mutex_unlock(&l->reg->lock);
    }
    pthread_mutex_unlock(&l->emit_lock);
    if (!rc && n)
        notify(l->reg);
    if (rc == -ESTALE) {
        /* Fenced off: another node settled the run as lost while this one could not renew its
         * lease. Said once; the run stops here and stores nothing more. */
        if (eph_live_first_loss_notice(l))
            EPH_WARN("timeline",
                     "run %s: lease lost (settled by another node); stopping it, its events "
                     "are no longer stored",
                     l->id);
        eph_live_lease_lost(l);
    } else if (rc && rc != -EALREADY && !atomic_load(&l->lease_lost)) {
        EPH_ERROR("timeline", "run %s: cannot store event %s%s: %s", l->id,
                  n ? ev[0].type : "(a step)", n > 1 ? " and those after it" : "", strerror(-rc));
    }
    for (size_t i = 0; i < n; i++)
        eph_event_release(&ev[i]);
    return rc;
}

int eph_live_emit(struct eph_live *l, struct eph_store *st, const char *source, const char *type,
                  json_t *data, const char *fmt, ...)
{
    struct eph_event e;
    va_list ap;
    va_start(ap, fmt);
    fill_event(l, &e, source, type, data, fmt, ap);
    va_end(ap);
    return store_events(l, st, NULL, 0, &e, 1);
}

int eph_live_emit_step(struct eph_live *l, struct eph_store *st, const struct eph_run *r,
                       unsigned what, struct eph_live_new *evs, size_t n)
{
    struct eph_event ev[EPH_LIVE_STEP_MAX];
    if (n > EPH_LIVE_STEP_MAX) {
        for (size_t i = 0; i < n; i++)
            json_decref(evs[i].data);
        return -E2BIG;
    }
    for (size_t i = 0; i < n; i++)
        fill_eventf(l, &ev[i], evs[i].source, evs[i].type, evs[i].data, "%s",
                    evs[i].message ? evs[i].message : "");
    return store_events(l, st, r, what, ev, n);
}

void eph_live_close(struct eph_live *l, uint64_t last_seq, char *zdr_result)
{
    pthread_mutex_lock(&l->reg->lock);
    l->last_seq = last_seq;
    l->closed = true;
    free(l->zdr_result);
    l->zdr_result = zdr_result;
    bool drop = false;
    if (l->registered) {
        for (struct eph_live **pp = &l->reg->head; *pp; pp = &(*pp)->next) {
            if (*pp == l) {
                *pp = l->next;
                l->reg->n--;
                break;
            }
        }
        l->registered = false;
        drop = --l->refs == 0;
    }
    pthread_cond_broadcast(&l->reg->cond);
    pthread_mutex_unlock(&l->reg->lock);
    notify(l->reg);
    if (drop)
        live_free(l);
}

void eph_live_abandon(struct eph_live *l, uint64_t last_stored_seq)
{
    pthread_mutex_lock(&l->reg->lock);
    if (!l->closed && last_stored_seq < l->last_seq)
        l->last_seq = last_stored_seq;
    pthread_mutex_unlock(&l->reg->lock);
    atomic_store(&l->worked_here, false);
}

uint64_t eph_live_wait(struct eph_live *l, uint64_t after_seq, uint64_t deadline_ns, bool *closed)
{
    struct timespec ts;
    eph_clock_timespec(deadline_ns, &ts);
    pthread_mutex_lock(&l->reg->lock);
    while (l->last_seq <= after_seq && !l->closed && eph_clock_mono_ns() < deadline_ns)
        if (pthread_cond_timedwait(&l->reg->cond, &l->reg->lock, &ts) == ETIMEDOUT)
            break;
    uint64_t seq = l->last_seq;
    *closed = l->closed;
    pthread_mutex_unlock(&l->reg->lock);
    return seq;
}

bool eph_live_wait_closed(struct eph_live *l, uint64_t deadline_ns)
{
    struct timespec ts;
    eph_clock_timespec(deadline_ns, &ts);
    pthread_mutex_lock(&l->reg->lock);
    while (!l->closed && eph_clock_mono_ns() < deadline_ns)
        if (pthread_cond_timedwait(&l->reg->cond, &l->reg->lock, &ts) == ETIMEDOUT)
            break;
    bool closed = l->closed;
    pthread_mutex_unlock(&l->reg->lock);
    return closed;
}

void eph_live_poke(struct eph_live *l)
{
    if (l)
        notify(l->reg);
}

void eph_live_cancel(struct eph_live *l)
{
    atomic_store(&l->cancel, true);
    pthread_mutex_lock(&l->reg->lock);
    if (l->sb)
        l->sb->ops->interrupt(l->sb);
    pthread_cond_broadcast(&l->reg->cond);
    pthread_mutex_unlock(&l->reg->lock);
    notify(l->reg);
}

void eph_live_refuse(struct eph_live *l, const char *code, const char *message)
{
    pthread_mutex_lock(&l->reg->lock);
    l->refused_code = code;
    l->refused_message = message;
    pthread_mutex_unlock(&l->reg->lock);
}

bool eph_live_refusal(struct eph_live *l, const char **code, const char **message)
{
    pthread_mutex_lock(&l->reg->lock);
    *code = l->refused_code;
    *message = l->refused_message;
    pthread_mutex_unlock(&l->reg->lock);
    return *code != NULL;
}

const atomic_bool *eph_live_cancel_flag(struct eph_live *l)
{
    return &l->cancel;
}

bool eph_live_cancelled(struct eph_live *l)
{
    return atomic_load(&l->cancel);
}

void eph_live_attach_sandbox(struct eph_live *l, struct eph_sandbox *sb)
{
    pthread_mutex_lock(&l->reg->lock);
    l->sb = sb;
    bool cancelled = atomic_load(&l->cancel);
    if (sb && cancelled)
        sb->ops->interrupt(sb);
    pthread_mutex_unlock(&l->reg->lock);
}

char *eph_live_zdr_result(struct eph_live *l)
{
    pthread_mutex_lock(&l->reg->lock);
    char *r = l->zdr_result ? strdup(l->zdr_result) : NULL;
    pthread_mutex_unlock(&l->reg->lock);
    return r;
}

void eph_live_cancel_all(struct eph_live_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    for (struct eph_live *l = reg->head; l; l = l->next) {
        atomic_store(&l->cancel, true);
        if (l->sb)
            l->sb->ops->interrupt(l->sb);
    }
    pthread_cond_broadcast(&reg->cond);
    pthread_mutex_unlock(&reg->lock);
    notify(reg);
}

unsigned eph_live_count(struct eph_live_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    unsigned n = reg->n;
    pthread_mutex_unlock(&reg->lock);
    return n;
}

int eph_live_set_prompt(struct eph_live_registry *reg, const char *run_id, const char *prompt,
                        json_t *files)
{
    struct eph_live *l = eph_live_get(reg, run_id);
    if (!l)
        return -ENOENT;
    char *p = strdup(prompt);
    if (!p) {
        eph_live_put(l);
        return -ENOMEM;
    }
    pthread_mutex_lock(&l->reg->lock);
    free(l->zdr_prompt);
    l->zdr_prompt = p;
    json_decref(l->zdr_files);
    l->zdr_files = files ? json_incref(files) : NULL;
    pthread_mutex_unlock(&l->reg->lock);
    eph_live_put(l);
    return 0;
}

char *eph_live_take_prompt(struct eph_live *l, json_t **files)
{
    pthread_mutex_lock(&l->reg->lock);
    char *p = l->zdr_prompt;
    *files = l->zdr_files;
    l->zdr_prompt = NULL;
    l->zdr_files = NULL;
    pthread_mutex_unlock(&l->reg->lock);
    return p;
}

int eph_live_set_zdr_result(struct eph_live *l, const char *result)
{
    char *copy = result ? strdup(result) : NULL;
    if (result && !copy)
        return -ENOMEM;
    pthread_mutex_lock(&l->reg->lock);
    free(l->zdr_result);
    l->zdr_result = copy;
    pthread_mutex_unlock(&l->reg->lock);
    return 0;
}

void eph_live_set_zdr_outputs(struct eph_live *l, struct eph_outputs *o)
{
    pthread_mutex_lock(&l->reg->lock);
    eph_outputs_release(&l->zdr_outputs);
    l->zdr_outputs = *o;
    l->has_zdr_outputs = true;
    pthread_mutex_unlock(&l->reg->lock);
    o->v = NULL;
    o->n = 0;
}

int eph_live_zdr_outputs_list(struct eph_live *l, struct eph_outputs *out)
{
    out->v = NULL;
    out->n = 0;
    pthread_mutex_lock(&l->reg->lock);
    int rc = l->has_zdr_outputs ? 0 : -ENOENT;
    for (size_t i = 0; !rc && i < l->zdr_outputs.n; i++)
        rc = eph_outputs_add(out, &l->zdr_outputs.v[i], false);
    pthread_mutex_unlock(&l->reg->lock);
    if (rc)
        eph_outputs_release(out);
    return rc;
}

int eph_live_zdr_output_get(struct eph_live *l, const char *path, struct eph_output *out)
{
    struct eph_outputs one = {0};
    pthread_mutex_lock(&l->reg->lock);
    int rc = -ENOENT;
    for (size_t i = 0; l->has_zdr_outputs && i < l->zdr_outputs.n; i++)
        if (strcmp(l->zdr_outputs.v[i].path, path) == 0) {
            rc = eph_outputs_add(&one, &l->zdr_outputs.v[i], true);
            break;
        }
    pthread_mutex_unlock(&l->reg->lock);
    if (!rc) {
        *out = one.v[0];
        free(one.v);
    } else {
        memset(out, 0, sizeof(*out));
    }
    return rc;
}

void eph_live_set_compute_start(struct eph_live *l, uint64_t start_ns)
{
    atomic_store(&l->compute_start_ns, start_ns);
}

uint64_t eph_live_compute_start(struct eph_live *l)
{
    return atomic_load(&l->compute_start_ns);
}

void eph_live_lease_lost(struct eph_live *l)
{
    atomic_store(&l->lease_lost, true);
    eph_live_cancel(l);
}

bool eph_live_is_lease_lost(struct eph_live *l)
{
    return atomic_load(&l->lease_lost);
}

bool eph_live_first_loss_notice(struct eph_live *l)
{
    return !atomic_exchange(&l->loss_noticed, true);
}

void eph_live_set_fence(struct eph_live *l, uint64_t until_ns)
{
    atomic_store(&l->fence_ns, until_ns);
}

uint64_t eph_live_fence(struct eph_live *l)
{
    return atomic_load(&l->fence_ns);
}

const _Atomic uint64_t *eph_live_fence_ptr(struct eph_live *l)
{
    return &l->fence_ns;
}

int eph_live_foreach(struct eph_live_registry *reg, void (*fn)(struct eph_live *l, void *ctx),
                     void *ctx)
{
    pthread_mutex_lock(&reg->lock);
    struct eph_live **all = calloc(reg->n ? reg->n : 1, sizeof(*all));
    size_t n = 0;
    if (all)
        for (struct eph_live *l = reg->head; l && n < reg->n; l = l->next) {
            l->refs++;
            all[n++] = l;
        }
    pthread_mutex_unlock(&reg->lock);
    if (!all)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        fn(all[i], ctx);
        eph_live_put(all[i]);
    }
    free(all);
    return 0;
}

void eph_live_set_worked_here(struct eph_live *l)
{
    atomic_store(&l->worked_here, true);
}

bool eph_live_take_worker(struct eph_live *l)
{
    return !atomic_exchange(&l->worker_taken, true);
}

void eph_live_drop_worker(struct eph_live *l)
{
    atomic_store(&l->worker_taken, false);
}

bool eph_live_worked_here(struct eph_live *l)
{
    return atomic_load(&l->worked_here);
}

void eph_live_observe(struct eph_live *l, uint64_t seq, bool final)
{
    pthread_mutex_lock(&l->reg->lock);
    bool changed = seq > l->last_seq && !l->closed;
    if (changed)
        l->last_seq = seq;
    pthread_cond_broadcast(&l->reg->cond);
    pthread_mutex_unlock(&l->reg->lock);
    if (final && !atomic_load(&l->worked_here)) {
        uint64_t last;
        bool closed;
        eph_live_state(l, &last, &closed);
        if (!closed)
            eph_live_close(l, last > seq ? last : seq, NULL);
        return;
    }
    if (changed)
        notify(l->reg);
}
