/*
 * transcript.h - a run's complete record (GET /v1/runs/{id}/transcript) built from its events.
 *
 * One JSON object per line, each with a "kind", in timeline order (docs/AGENT.md, "The record"):
 *   run        the first line: id, model, permissions, created_at, status, prompt (and
 *              replay_of for a replay)
 *   model_turn a model.call attempt that produced an answer: turn, request_digest, response
 *   tool_call  a tool call's event: turn, call {id, name, arguments}, result
 *   exchange   a broker exchange: request, response (bodies capped, no credentials)
 *   divergence a replay's tool result that differs from the original's
 * Lines are built one event at a time, so a long run is streamed in bounded memory. The events
 * come from the store and are trusted only for their shape: a field of the wrong type is left out,
 * never a crash.
 */
#ifndef EPH_TRANSCRIPT_H
#define EPH_TRANSCRIPT_H

#include <jansson.h>

#include "run/run.h"
#include "store/store.h"

/* The first line of r's transcript (new reference, NULL when out of memory). */
json_t *eph_transcript_run_line(const struct eph_run *r);

/* Appends to lines (an array) the transcript lines of one event: none for an event that records
 * nothing replayable, one, or two (a web_fetch call is a tool call and a broker exchange).
 * 0 or -ENOMEM. */
int eph_transcript_event_lines(const struct eph_event *e, json_t *lines);

#endif
