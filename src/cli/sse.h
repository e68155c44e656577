/*
 * sse.h - an incremental Server-Sent Events parser (the WHATWG "event stream" format).
 *
 * The client reads the run timeline as an event stream, and the stream comes over the network, so
 * the parser takes bytes in whatever chunks they arrive, keeps only bounded state, and fails with
 * -EMSGSIZE when a line or an event is over its cap instead of growing without bound.
 *
 * Lines end with CRLF, LF or a lone CR (a CRLF split across two chunks counts once). A line that
 * starts with ':' is a comment (the server's keep-alive). "field: value" lines set the event's
 * type (event), append to its data (data, joined with LF), or set the last event id (id; ignored if
 * it holds a NUL or is over EPH_CLI_SSE_ID_MAX); retry sets the reconnection delay; other fields
 * are ignored. An empty line dispatches the event, unless it has no data. A UTF-8 byte order mark
 * at the very start is skipped. An event not ended by an empty line before the stream ends is
 * discarded, as browsers do.
 */
#ifndef EPH_CLI_SSE_H
#define EPH_CLI_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define EPH_CLI_SSE_ID_MAX 255

/* One dispatched event; the strings are owned by the parser and valid during the callback. */
struct eph_cli_sse_event {
    const char *type; /* "message" when the event named none */
    const char *data; /* NUL-terminated; may also hold NULs, data_len is authoritative */
    size_t data_len;
    const char *id; /* the last event id so far, "" when none */
};

/* Called for each event. A non-zero return stops eph_cli_sse_feed(), which returns it. */
typedef int (*eph_cli_sse_event_fn)(void *arg, const struct eph_cli_sse_event *ev);

struct eph_cli_sse {
    struct eph_buf line; /* the line being read, capped at max_line */
    struct eph_buf data; /* the event's data, capped at max_event */
    struct eph_buf type; /* the event's type */
    char id[EPH_CLI_SSE_ID_MAX + 1];
    long retry_ms;   /* -1 until the server sends retry: */
    bool skip_lf;    /* the previous chunk ended with CR: a leading LF ends nothing */
    bool started;    /* past the optional byte order mark */
    int error;       /* sticky: once a cap is hit, the stream is unusable */
    size_t comments; /* keep-alives seen, for tests and diagnostics */
    eph_cli_sse_event_fn on_event;
    void *arg;
};

/* max_line caps one line (field name and value), max_event one event's data. */
void eph_cli_sse_init(struct eph_cli_sse *p, size_t max_line, size_t max_event,
                      eph_cli_sse_event_fn on_event, void *arg);
/* Frees the buffers; the parser can be initialised again. */
void eph_cli_sse_release(struct eph_cli_sse *p);
/* Forgets a partial line and event (after a reconnection) but keeps the last event id and retry. */
void eph_cli_sse_reset(struct eph_cli_sse *p);
/* Parses n bytes. 0; -EMSGSIZE when a line or event is over its cap (sticky until reset); -ENOMEM;
 * or the callback's non-zero return. */
int eph_cli_sse_feed(struct eph_cli_sse *p, const char *bytes, size_t n)
    __attribute__((warn_unused_result));

#endif
