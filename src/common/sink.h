/*
 * sink.h - how a lower layer reports what happens and learns that it must stop, without knowing
 * who listens.
 *
 * The agent loop, its tools and the broker's egress report timeline events through a sink and
 * poll a cancel token; the run layer (run/worker.c) supplies both, backed by the live timeline and
 * the store. So agent/ and sandbox/ know nothing of runs, the live registry or the store, and a
 * unit test can hand them a sink that records events in memory.
 */
#ifndef EPH_SINK_H
#define EPH_SINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

/* One event as a sink records it. */
struct eph_sink_event {
    const char *source;
    const char *type;
    json_t *data; /* may be NULL */
    const char *message;
};

struct eph_sink {
    void *ctx;
    /* One timeline event. data (may be NULL) is stolen, also on failure; message is one line for
     * people, never a secret. Returns 0 or -errno (the event could not be recorded). */
    int (*event)(void *ctx, const char *source, const char *type, json_t *data,
                 const char *message);
    /* Optional (may be NULL): the caller's usage and cost changed, so that the owner can persist
     * them and a crash settles what was measured. Returns 0 or -errno. */
    int (*progress)(void *ctx);
    /* Optional (may be NULL): events ev[0..n) in order (n >= 1) and the progress the last one
     * reports, recorded together (one store transaction); without it, each event then progress.
     * Every data is stolen, also on failure; otherwise the contract of event. */
    int (*event_progress)(void *ctx, const struct eph_sink_event *ev, size_t n);
};

/* Events held back to be recorded in front of the next one a caller emits with progress, in its
 * transaction: a command's live output that was still unsent when the command ended goes with
 * its shell.command event (docs/AGENT.md, "Live output"). Zeroed is empty. */
#define EPH_SINK_HELD_MAX 4
struct eph_sink_held {
    struct eph_sink_event ev[EPH_SINK_HELD_MAX]; /* data and message owned */
    size_t n;
};

/* Formats the message and calls sink->event. A NULL sink drops the event (data released). */
int eph_sink_emit(const struct eph_sink *sink, const char *source, const char *type, json_t *data,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* eph_sink_emit for an event that follows new usage or cost (a model call, a command): the
 * event and the progress together when the sink can, else the event then the progress. */
int eph_sink_emit_progress(const struct eph_sink *sink, const char *source, const char *type,
                           json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Like eph_sink_emit_progress, with the events h holds recorded first, in the same transaction
 * where the sink can; h is emptied whatever happens. */
int eph_sink_emit_progress_after(const struct eph_sink *sink, struct eph_sink_held *h,
                                 const char *source, const char *type, json_t *data,
                                 const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Holds an event (data stolen) in h; when h is full or the message cannot be kept, emits what h
 * holds and then it, now (what eph_sink_emit returns for it). */
int eph_sink_hold(const struct eph_sink *sink, struct eph_sink_held *h, const char *source,
                  const char *type, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Emits what h holds, each event alone (the event it was held for will not come); h emptied. */
void eph_sink_held_flush(const struct eph_sink *sink, struct eph_sink_held *h);

/* Calls sink->progress when there is one; 0 otherwise. */
int eph_sink_progress(const struct eph_sink *sink);

/* A cancel token: a flag owned by the caller's caller, set once, read by anyone. */
struct eph_cancel {
    const atomic_bool *flag; /* NULL: never cancelled */
    /* Optional: the monotonic instant (eph_clock_mono_ns) past which the work must wait until it
     * moves on again (the run's lease fence, docs/RUN.md); NULL or 0: never. */
    const _Atomic uint64_t *fence_ns;
};

/* Before a step that reaches out (a model call, a tool call): waits while the fence has passed
 * and the token is not cancelled. true: go on; false: cancelled (while waiting or before). */
bool eph_cancel_hold(const struct eph_cancel *c);

static inline bool eph_cancelled(const struct eph_cancel *c)
{
    return c && c->flag && atomic_load(c->flag);
}

#endif
