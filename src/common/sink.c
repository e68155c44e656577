/*
 * sink.c - formatting for event sinks (sink.h).
 */
#include "common/sink.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

/* The message of an event, cut on a character boundary (and said so) to fit msg. */
__attribute__((format(printf, 3, 0))) static void format_message(char *msg, size_t len,
                                                                 const char *fmt, va_list ap)
{
    int n = vsnprintf(msg, len, fmt, ap);
    if (n < 0) {
        msg[0] = '\0';
    } else if ((size_t)n >= len) {
        /* Cut on a character boundary and say so: a message stays valid UTF-8. */
        size_t end = len - 4;
        while (end > 0 && ((unsigned char)msg[end] & 0xC0) == 0x80)
            end--;
        memcpy(msg + end, "\xE2\x80\xA6", 4); /* "…" and the terminator */
    }
}

int eph_sink_emit(const struct eph_sink *sink, const char *source, const char *type, json_t *data,
                  const char *fmt, ...)
{
    if (!sink || !sink->event) {
        json_decref(data);
        return 0;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sink->event(sink->ctx, source, type, data, msg);
}

static void held_release(struct eph_sink_held *h)
{
    for (size_t i = 0; i < h->n; i++) {
        json_decref(h->ev[i].data);
        free((char *)h->ev[i].message);
    }
    h->n = 0;
}

__attribute__((format(printf, 6, 0))) static int
emit_progress(const struct eph_sink *sink, struct eph_sink_held *h, const char *source,
              const char *type, json_t *data, const char *fmt, va_list ap)
{
    size_t held = h ? h->n : 0;
    if (!sink || !sink->event) {
        json_decref(data);
        if (h)
            held_release(h);
        return eph_sink_progress(sink);
    }
    char msg[512];
    format_message(msg, sizeof msg, fmt, ap);
    struct eph_sink_event ev[EPH_SINK_HELD_MAX + 1];
    for (size_t i = 0; i < held; i++) {
        ev[i] = h->ev[i];
        h->ev[i].data = NULL; /* stolen by the sink */
    }
    ev[held] =
        (struct eph_sink_event){.source = source, .type = type, .data = data, .message = msg};
    int rc = 0;
    if (sink->event_progress) {
        rc = sink->event_progress(sink->ctx, ev, held + 1);
    } else {
        for (size_t i = 0; i <= held; i++) {
            int erc = sink->event(sink->ctx, ev[i].source, ev[i].type, ev[i].data, ev[i].message);
            if (erc && !rc)
                rc = erc;
        }
        int prc = eph_sink_progress(sink);
        if (!rc)
            rc = prc;
    }
    if (h)
        held_release(h);
    return rc;
}

int eph_sink_emit_progress(const struct eph_sink *sink, const char *source, const char *type,
                           json_t *data, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = emit_progress(sink, NULL, source, type, data, fmt, ap);
    va_end(ap);
    return rc;
}

int eph_sink_emit_progress_after(const struct eph_sink *sink, struct eph_sink_held *h,
                                 const char *source, const char *type, json_t *data,
                                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = emit_progress(sink, h, source, type, data, fmt, ap);
    va_end(ap);
    return rc;
}

int eph_sink_hold(const struct eph_sink *sink, struct eph_sink_held *h, const char *source,
                  const char *type, json_t *data, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char *kept = h->n < EPH_SINK_HELD_MAX ? strdup(msg) : NULL;
    if (!kept) {
        /* Full, or no memory for the message: not held, so not lost either, and after what is
         * held (the order is the order of the output). */
        eph_sink_held_flush(sink, h);
        return eph_sink_emit(sink, source, type, data, "%s", msg);
    }
    h->ev[h->n++] =
        (struct eph_sink_event){.source = source, .type = type, .data = data, .message = kept};
    return 0;
}

void eph_sink_held_flush(const struct eph_sink *sink, struct eph_sink_held *h)
{
    for (size_t i = 0; i < h->n; i++) {
        json_t *d = h->ev[i].data;
        h->ev[i].data = NULL;
        (void)eph_sink_emit(sink, h->ev[i].source, h->ev[i].type, d, "%s", h->ev[i].message);
    }
    held_release(h);
}

int eph_sink_progress(const struct eph_sink *sink)
{
    return sink && sink->progress ? sink->progress(sink->ctx) : 0;
}

bool eph_cancel_hold(const struct eph_cancel *c)
{
    /* Rare (a store out of reach past the lease, or a node resumed after a stop): a short poll,
     * until the lease keeper renews the lease or finds it lost (which cancels). */
    while (!eph_cancelled(c) && c && c->fence_ns) {
        uint64_t until = atomic_load(c->fence_ns);
        if (!until || eph_clock_mono_ns() < until)
            return true;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return !eph_cancelled(c);
}
