/*
 * live_output.c - coalescing a running command's output into shell.output texts. See
 * live_output.h.
 */
#include "agent/live_output.h"

#include "common/clock.h"
#include "sandbox/sandbox.h"

#include <stdlib.h>
#include <string.h>

#include "common/text.h"

void eph_live_output_init(struct eph_live_output *lo, size_t cap, eph_live_output_emit_fn emit,
                          void *arg)
{
    memset(lo, 0, sizeof(*lo));
    lo->cap = cap;
    lo->closed = cap == 0 || !emit;
    lo->emit = emit;
    lo->arg = arg;
}

/* How many bytes at the end of p[0..n) are the start of a character that is not complete yet
 * (0 to 3): they wait for the next piece. An invalid sequence is not waited for. */
static size_t incomplete_tail(const unsigned char *p, size_t n)
{
    for (size_t i = 1; i <= 3 && i <= n; i++) {
        unsigned char b = p[n - i];
        if ((b & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        if (b < 0xC0)
            return 0; /* ASCII */
        size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
        return need > i ? i : 0;
    }
    return 0;
}

/* Emits what stream s holds (all of it when final, else up to its last whole character). */
static void flush(struct eph_live_output *lo, int idx, uint64_t now_ns, bool final)
{
    struct eph_live_output_stream *s = &lo->s[idx];
    if (lo->closed || s->len == 0)
        return;
    size_t whole = final ? s->len : s->len - incomplete_tail(s->pending, s->len);
    if (whole == 0)
        return;
    char *text = eph_text_utf8_sanitize((const char *)s->pending, whole);
    if (!text) {
        lo->closed = true;
        return;
    }
    size_t tlen = strlen(text);
    if (tlen >= lo->cap) {
        /* The last text this command gets: cut on a character boundary. */
        tlen = lo->cap;
        while (tlen > 0 && ((unsigned char)text[tlen] & 0xC0) == 0x80)
            tlen--;
        text[tlen] = '\0';
        lo->closed = true;
    }
    if (tlen > 0 && lo->emit(lo->arg, idx + 1, text, tlen, s->offset) != 0)
        lo->closed = true;
    free(text);
    lo->cap -= tlen;
    s->offset += whole;
    memmove(s->pending, s->pending + whole, s->len - whole);
    s->len -= whole;
    s->last_ns = now_ns;
    s->emitted = true;
}

static bool due(const struct eph_live_output_stream *s, uint64_t now_ns)
{
    if (!s->emitted)
        return now_ns - s->first_ns >= EPH_LIVE_OUTPUT_FIRST_NS;
    return now_ns - s->last_ns >= EPH_LIVE_OUTPUT_INTERVAL_NS;
}

void eph_live_output_feed(struct eph_live_output *lo, int stream, const void *data, size_t len,
                          uint64_t now_ns)
{
    if (stream != 1 && stream != 2)
        return;
    struct eph_live_output_stream *s = &lo->s[stream - 1];
    const unsigned char *p = data;
    if (!s->emitted && s->len == 0 && len > 0)
        s->first_ns = now_ns;
    while (len > 0 && !lo->closed) {
        size_t room = EPH_LIVE_OUTPUT_CHUNK - s->len;
        size_t n = len < room ? len : room;
        memcpy(s->pending + s->len, p, n);
        s->len += n;
        p += n;
        len -= n;
        if (s->len >= EPH_LIVE_OUTPUT_CHUNK)
            flush(lo, stream - 1, now_ns, false); /* a full chunk goes at once */
    }
    if (due(s, now_ns))
        flush(lo, stream - 1, now_ns, false);
}

void eph_live_output_tick(struct eph_live_output *lo, uint64_t now_ns)
{
    for (int i = 0; i < 2; i++)
        if (lo->s[i].len && due(&lo->s[i], now_ns))
            flush(lo, i, now_ns, false);
}

void eph_live_output_finish(struct eph_live_output *lo)
{
    for (int i = 0; i < 2; i++)
        flush(lo, i, lo->s[i].last_ns, true);
}

/* ---- wired to an exec request ---- */

static void exec_on_output(void *arg, int stream, const void *data, size_t len)
{
    struct eph_live_exec *le = arg;
    if (stream != 1 && stream != 2)
        return;
    uint64_t *seen = &le->seen[stream - 1];
    size_t n = *seen >= le->head ? 0 : le->head - *seen < len ? (size_t)(le->head - *seen) : len;
    *seen += len;
    uint64_t now = eph_clock_mono_ns();
    if (n)
        eph_live_output_feed(&le->lo, stream, data, n, now);
    eph_live_output_tick(&le->lo, now);
}

/* The bytes past a stream's head, as the command writes them: they follow the head in the
 * stream, so the coalescer's offsets go on from it. */
static void exec_on_live(void *arg, int stream, const void *data, size_t len)
{
    struct eph_live_exec *le = arg;
    uint64_t now = eph_clock_mono_ns();
    eph_live_output_feed(&le->lo, stream, data, len, now);
    eph_live_output_tick(&le->lo, now);
}

static void exec_on_tick(void *arg)
{
    struct eph_live_exec *le = arg;
    eph_live_output_tick(&le->lo, eph_clock_mono_ns());
}

void eph_live_exec_attach(struct eph_live_exec *le, struct eph_exec_request *req, uint64_t head,
                          size_t cap, uint32_t tick_ms, eph_live_output_emit_fn emit, void *arg)
{
    le->head = head;
    le->seen[0] = le->seen[1] = 0;
    eph_live_output_init(&le->lo, cap, emit, arg);
    req->on_output = exec_on_output;
    req->on_live = exec_on_live;
    req->on_tick = exec_on_tick;
    req->on_output_arg = le;
    req->tick_ms = tick_ms;
    req->live_cap = (uint32_t)cap;
}
