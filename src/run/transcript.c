/*
 * transcript.c - a run's events as the lines of its transcript (see transcript.h).
 */
#include "run/transcript.h"

#include <errno.h>
#include <string.h>

#include "common/clock.h"

static json_t *time_or_null(int64_t ms)
{
    char buf[32];
    return ms ? json_string(eph_clock_format_iso8601(ms, buf, sizeof(buf))) : json_null();
}

/* Sets o[key] to a new reference v (stolen); false when it could not be set (v NULL, or no
 * memory): a line is then not made at all, never made with a field missing. */
static bool put(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

json_t *eph_transcript_run_line(const struct eph_run *r)
{
    json_t *perm = json_pack("{s:b, s:b, s:O?, s:b, s:I, s:I}", "shell", r->shell, "web", r->web,
                             "connections", r->connections, "zero_data_retention", r->zdr,
                             "timeout_seconds", (json_int_t)r->timeout_seconds, "max_cost_micros",
                             (json_int_t)r->cost.reserved_micros);
    json_t *o = json_pack("{s:s, s:s, s:s?, s:o, s:o, s:s}", "kind", "run", "id", r->id, "model",
                          r->model, "permissions", perm, "created_at",
                          time_or_null(r->created_at_ms), "status", eph_run_status_name(r->status));
    /* Not json_pack's "s*": a string it cannot make would leave the key out without a word. */
    if (o && ((r->prompt && !put(o, "prompt", json_string(r->prompt))) ||
              (r->replay_of && !put(o, "replay_of", json_string(r->replay_of))))) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

/* A line's common head: its kind, the event's sequence number and time, the model turn. */
static json_t *line_head(const struct eph_event *e, const char *kind)
{
    json_t *o = json_pack("{s:s, s:I, s:f, s:s}", "kind", kind, "seq", (json_int_t)e->seq, "t",
                          (double)e->t_ms / 1000.0, "type", e->type);
    json_t *turn = json_object_get(e->data, "turn");
    if (o && json_is_integer(turn) && !put(o, "turn", json_incref(turn))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Appends the line (stolen), when ok; else drops it: -ENOMEM. */
static int append(json_t *lines, json_t *line, bool ok)
{
    if (!line || !ok) {
        json_decref(line);
        return -ENOMEM;
    }
    return json_array_append_new(lines, line) ? -ENOMEM : 0;
}

/* The event types a tool call leaves (docs/AGENT.md, "The record"). */
static bool is_tool_event(const char *type)
{
    static const char *const types[] = {"shell.command", "file.read",   "file.write",
                                        "file.edit",     "web.request", "tool.rejected"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcmp(type, types[i]) == 0)
            return true;
    return false;
}

static int model_turn(const struct eph_event *e, json_t *lines)
{
    json_t *resp = json_object_get(e->data, "response");
    if (!json_is_object(resp))
        return 0; /* an attempt that produced no answer: nothing to replay */
    json_t *o = line_head(e, "model_turn");
    if (!o)
        return -ENOMEM;
    json_t *digest = json_object_get(e->data, "request_digest");
    bool ok = !json_is_string(digest) || put(o, "request_digest", json_incref(digest));
    ok = ok && put(o, "response", json_incref(resp)) &&
         put(o, "replayed", json_boolean(json_is_true(json_object_get(e->data, "replayed"))));
    return append(lines, o, ok);
}

static int tool_call(const struct eph_event *e, json_t *lines)
{
    json_t *call = json_object_get(e->data, "call");
    if (!json_is_object(call))
        return 0;
    json_t *o = line_head(e, "tool_call");
    if (!o)
        return -ENOMEM;
    json_t *result = json_object_get(e->data, "result");
    bool ok = put(o, "call", json_incref(call)) &&
              put(o, "result", json_is_string(result) ? json_incref(result) : json_null());
    return append(lines, o, ok);
}

static int exchange(const struct eph_event *e, json_t *lines)
{
    json_t *x = json_object_get(e->data, "exchange");
    if (!json_is_object(x))
        return 0;
    json_t *o = line_head(e, "exchange");
    if (!o)
        return -ENOMEM;
    /* request, response, and for a CONNECT tunnel its target and byte counts: as recorded. */
    bool ok = json_object_update(o, x) == 0 && put(o, "kind", json_string("exchange"));
    return append(lines, o, ok);
}

static int divergence(const struct eph_event *e, json_t *lines)
{
    json_t *o = line_head(e, "divergence");
    if (!o)
        return -ENOMEM;
    static const char *const fields[] = {"call_id", "tool", "original", "replayed"};
    bool ok = true;
    for (size_t i = 0; ok && i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_t *v = json_object_get(e->data, fields[i]);
        ok = put(o, fields[i], json_is_string(v) ? json_incref(v) : json_null());
    }
    return append(lines, o, ok);
}

int eph_transcript_event_lines(const struct eph_event *e, json_t *lines)
{
    if (!json_is_object(e->data))
        return 0;
    if (strcmp(e->type, "model.call") == 0)
        return model_turn(e, lines);
    if (strcmp(e->type, "replay.divergence") == 0)
        return divergence(e, lines);
    int rc = 0;
    if (is_tool_event(e->type))
        rc = tool_call(e, lines);
    if (!rc && (strcmp(e->type, "web.request") == 0 || strcmp(e->type, "connection.request") == 0))
        rc = exchange(e, lines);
    return rc;
}
