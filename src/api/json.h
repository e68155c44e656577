/*
 * json.h - the API's wire forms of the store's records: the run object (SPEC 3.2) and the event
 * object (SPEC 5), as served. They live here, not in store/ or run/: the store keeps plain
 * records, and only the API decides how they look on the wire.
 */
#ifndef EPH_API_JSON_H
#define EPH_API_JSON_H

#include <jansson.h>

#include "store/store.h"

/* The run object (new reference). retention_days is the configured log retention. */
json_t *eph_run_to_json(const struct eph_run *r, unsigned retention_days);
/* The event object (new reference): seq, t (seconds, two decimals), at, source, type, message,
 * data. */
json_t *eph_event_to_json(const struct eph_event *e);

#endif
