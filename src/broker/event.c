/*
 * event.c - what the timeline keeps of one broker event. See event.h.
 */
#include "broker/event.h"

#include <stdio.h>
#include <string.h>

#include "common/money.h"

const char *eph_broker_event_method(const char *method)
{
    static const char *const known[] = {"GET",   "HEAD",    "POST",    "PUT",  "DELETE",
                                        "PATCH", "OPTIONS", "CONNECT", "TRACE"};
    for (size_t i = 0; method && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "OTHER";
}

bool eph_broker_event_code_ok(const char *code)
{
    size_t n = code ? strlen(code) : 0;
    if (n == 0 || n > 40)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((code[i] >= 'a' && code[i] <= 'z') || code[i] == '_'))
            return false;
    return true;
}

void eph_broker_event_scrub(struct eph_broker_event *ev, eph_broker_known_fn known, void *arg)
{
    ev->method = eph_broker_event_method(ev->method);
    ev->scheme = "";
    ev->host = "";
    ev->port = 0;
    ev->path = "";
    ev->exchange = NULL;
    if (ev->denied && !eph_broker_event_code_ok(ev->denied))
        ev->denied = "denied";
    if (ev->connection && !(known && known(arg, ev->connection)))
        ev->connection = EPH_BROKER_UNKNOWN_CONNECTION;
}

/* data with key set to the string s; NULL (data released) when it cannot be set: the data is
 * whole or there is none. */
static json_t *with_string(json_t *data, const char *key, const char *s)
{
    if (data && json_object_set_new(data, key, json_string(s))) {
        json_decref(data);
        return NULL;
    }
    return data;
}

/* Zero data retention: the fields of event.h's list, read from ev and nothing else. */
static json_t *zdr_data(const struct eph_broker_event *ev, eph_broker_known_fn known, void *arg,
                        char *msg, size_t msglen)
{
    const char *method = eph_broker_event_method(ev->method);
    const char *conn = !ev->connection                       ? NULL
                       : known && known(arg, ev->connection) ? ev->connection
                                                             : EPH_BROKER_UNKNOWN_CONNECTION;
    const char *denied = ev->denied && eph_broker_event_code_ok(ev->denied) ? ev->denied
                         : ev->denied                                       ? "denied"
                                                                            : NULL;
    json_t *data = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I}", "method", method, "status",
                             ev->status, "bytes_up", (json_int_t)ev->bytes_up, "bytes_down",
                             (json_int_t)ev->bytes_down, "duration_ms", (json_int_t)ev->duration_ms,
                             "cost_micros", (json_int_t)ev->cost_micros);
    if (conn)
        data = with_string(data, "connection", conn);
    if (denied)
        data = with_string(data, "denied", denied);
    snprintf(msg, msglen, "%s %s → %d%s%s", method, conn ? conn : "web", ev->status,
             denied ? " · " : "", denied ? denied : "");
    return data;
}

json_t *eph_broker_event_data(const struct eph_broker_event *ev, bool zdr,
                              eph_broker_known_fn known, void *arg, char *msg, size_t msglen)
{
    if (zdr)
        return zdr_data(ev, known, arg, msg, msglen);
    const char *method = ev->method ? ev->method : "";
    const char *scheme = ev->scheme ? ev->scheme : "";
    const char *host = ev->host ? ev->host : "";
    const char *path = ev->path ? ev->path : "";
    json_t *data = json_pack(
        "{s:s, s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:I, s:I}", "method", method, "scheme", scheme,
        "host", host, "port", (int)ev->port, "path", path, "status", ev->status, "bytes_up",
        (json_int_t)ev->bytes_up, "bytes_down", (json_int_t)ev->bytes_down, "duration_ms",
        (json_int_t)ev->duration_ms, "cost_micros", (json_int_t)ev->cost_micros);
    if (ev->connection)
        data = with_string(data, "connection", ev->connection);
    if (ev->denied)
        data = with_string(data, "denied", ev->denied);
    /* The record a replay answers from (the broker builds none with zero data retention). */
    if (data && ev->exchange && json_object_set(data, "exchange", ev->exchange)) {
        json_decref(data);
        data = NULL;
    }

    char bytes[32];
    eph_format_thousands(ev->bytes_down, bytes);
    const char *sep = ev->denied ? " · " : "", *why = ev->denied ? ev->denied : "";
    if (ev->connection) {
        snprintf(msg, msglen, "%s · %s %s → %d%s%s", ev->connection, method, path, ev->status, sep,
                 why);
    } else if (strcmp(scheme, "tunnel") == 0) {
        snprintf(msg, msglen, "CONNECT %s:%u → %d · %s bytes%s%s", host, ev->port, ev->status,
                 bytes, sep, why);
    } else {
        char port[16] = "";
        if (ev->port && ev->port != (strcmp(scheme, "https") == 0 ? 443u : 80u))
            snprintf(port, sizeof(port), ":%u", ev->port);
        snprintf(msg, msglen, "%s %s://%s%s%s → %d · %s bytes%s%s", method, scheme, host, port,
                 path, ev->status, bytes, sep, why);
    }
    return data;
}
