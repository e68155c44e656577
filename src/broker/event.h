/*
 * event.h - what the timeline keeps of one broker event (web.request, connection.request): its
 * data object and its message (docs/BROKER.md "Events", docs/API.md).
 *
 * A run that keeps its record gets everything: method, scheme, host, port, path, status, byte
 * counts, duration, cost, connection, denial and the exchange. A run with zero data retention
 * gets only what the broker or the org decided, never what the sandbox or the model chose: the
 * method (one of the standard methods, else "OTHER"), the connection's name when the org defined
 * it ("?" for any other name), the status, the byte counts, the duration, the cost and the
 * denial's code (one of the broker's fixed words). No host, port, path, query, header or body,
 * and a message made of those fields only ("GET web → 200", "POST github → 403 ·
 * path_not_allowed").
 *
 * The broker scrubs the event itself before its callback sees it (eph_broker_event_scrub, in
 * emit()), and the builder reads only the fields above: each alone keeps the promise.
 */
#ifndef EPH_BROKER_EVENT_H
#define EPH_BROKER_EVENT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "broker/broker.h"

/* The connection name a zero-data-retention event shows for a name the run does not have. */
#define EPH_BROKER_UNKNOWN_CONNECTION "?"
/* A message buffer that holds any event's message (a longer one is cut). */
#define EPH_BROKER_EVENT_MSG_MAX 1024

/* The method as a zero-data-retention event shows it: a standard method (GET, HEAD, POST, PUT,
 * DELETE, PATCH, OPTIONS, CONNECT, TRACE, compared exactly), else "OTHER". Never NULL. */
const char *eph_broker_event_method(const char *method);

/* Whether a denial code is one a zero-data-retention event may keep: 1 to 40 of [a-z_]. */
bool eph_broker_event_code_ok(const char *code);

/* Whether name is a connection the org defined and the run uses (arg: the caller's). */
typedef bool (*eph_broker_known_fn)(void *arg, const char *name);

/* Clears from ev what the sandbox chose, for a run with zero data retention: host, path and
 * scheme become "", port 0, the method eph_broker_event_method(), the exchange NULL (release
 * it first), a denial that is not a fixed code "denied", and a connection
 * name that known() does not accept (known may be NULL: none is) EPH_BROKER_UNKNOWN_CONNECTION. */
void eph_broker_event_scrub(struct eph_broker_event *ev, eph_broker_known_fn known, void *arg);

/* The event's data (a new object, NULL when out of memory) and its message in msg, for a run
 * with zero data retention (zdr: a connection name known() does not accept, or any name when
 * known is NULL, shows as EPH_BROKER_UNKNOWN_CONNECTION) or one that keeps its record (known is
 * not called). The data borrows nothing. */
json_t *eph_broker_event_data(const struct eph_broker_event *ev, bool zdr,
                              eph_broker_known_fn known, void *arg, char *msg, size_t msglen)
    __attribute__((warn_unused_result));

#endif
