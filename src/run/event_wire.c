#include "run/event_wire.h"

#include <errno.h>
#include <stdlib.h>

#include "common/clock.h"

json_t *eph_event_to_json(const struct eph_event *e)
{
    char at[32];
    /* t in seconds with two decimals, as a JSON number. */
    double t = (double)(e->t_ms / 10) / 100.0;
    return json_pack("{s:I, s:f, s:s, s:s, s:s, s:s, s:o}", "seq", (json_int_t)e->seq, "t", t, "at",
                     eph_clock_format_iso8601(e->at_ms, at, sizeof(at)), "source", e->source,
                     "type", e->type, "message", e->message ? e->message : "", "data",
                     e->data ? json_incref(e->data) : json_object());
}

static char *dump(const struct eph_event *e)
{
    json_t *o = eph_event_to_json(e);
    /* The flags of the API's replies (api/server.c): the text a list of them carried before. */
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(o);
    return text;
}

int eph_event_serialise(struct eph_event *e)
{
    char *text = dump(e);
    if (!text)
        return -ENOMEM;
    free(e->wire);
    e->wire = text;
    return 0;
}

const char *eph_event_wire(const struct eph_event *e, char **made)
{
    *made = NULL;
    if (e->wire)
        return e->wire;
    return *made = dump(e);
}
