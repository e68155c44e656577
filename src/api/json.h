/*
 * json.h - the API's wire form of the run object (docs/API.md), as served. It lives here, not in
 * store/ or run/: the store keeps plain records. An event's wire form is made once, when the run
 * layer emits it (run/event_wire.h), and stored as that text.
 */
#ifndef EPH_API_JSON_H
#define EPH_API_JSON_H

#include <jansson.h>

#include "store/store.h"

/* The run object (new reference). retention_days is the configured log retention. */
json_t *eph_run_to_json(const struct eph_run *r, unsigned retention_days);
/* The sandbox object (docs/SANDBOXES.md) of a row of kind sandbox (new reference). */
json_t *eph_sandbox_to_json(const struct eph_run *r, unsigned retention_days);
/* starting, ready, stopped, timed_out, budget_exhausted or failed. */
const char *eph_sandbox_status_name(enum eph_run_status s);

#endif
