/*
 * event_wire.h - an event's wire form (docs/API.md, the events), made once: the run layer
 * serialises each event when it is emitted, the store keeps that text, and the API's list, long
 * poll and SSE write it out as stored, never re-serialising per client or per read.
 */
#ifndef EPH_RUN_EVENT_WIRE_H
#define EPH_RUN_EVENT_WIRE_H

#include <jansson.h>

#include "store/store.h"

/* The event object (new reference): seq, t (seconds, two decimals), at, source, type, message,
 * data, in that order. */
json_t *eph_event_to_json(const struct eph_event *e);

/* Sets e->wire to the compact text of eph_event_to_json(e), as the API serves it. Call once the
 * seq is final. 0 or -ENOMEM. */
int eph_event_serialise(struct eph_event *e);

/* The text to serve: e->wire when the store has it; else (a row written before the text was
 * stored, or one the retention reaper blanked) it is made now, into *made, which the caller frees.
 * NULL on -ENOMEM. */
const char *eph_event_wire(const struct eph_event *e, char **made);

#endif
