/*
 * sink.c - formatting for event sinks (sink.h).
 */
#include "common/sink.h"

#include <stdarg.h>
#include <stdio.h>
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

int eph_sink_emit_progress(const struct eph_sink *sink, const char *source, const char *type,
                           json_t *data, const char *fmt, ...)
{
    if (!sink || !sink->event) {
        json_decref(data);
        return eph_sink_progress(sink);
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    format_message(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sink->event_progress)
        return sink->event_progress(sink->ctx, source, type, data, msg);
    int rc = sink->event(sink->ctx, source, type, data, msg);
    int prc = eph_sink_progress(sink);
    return rc ? rc : prc;
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
