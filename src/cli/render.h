/*
 * render.h - the timeline and run summaries as text, in the product page's layout:
 *
 *      0.00  Queued            budget of $0.04 reserved
 *      2.42  MicroVM           microVM ready
 *     16.24  Worker destroyed  $0.00353 charged, $0.03647 released
 *
 * Everything shown comes from the server, and much of it (commands, results) from a model or a
 * sandbox, so every string is written through eph_cli_render_text(), which turns terminal control
 * characters (ESC, C1 controls, bidi overrides) into visible escapes: a run cannot drive the
 * terminal of the person watching it.
 */
#ifndef EPH_CLI_RENDER_H
#define EPH_CLI_RENDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define EPH_CLI_LABEL_MAX 32
/* A message longer than this (in bytes) is cut with "…" in the timeline. */
#define EPH_CLI_MESSAGE_MAX 2000

/* The state of one timeline being printed. */
/* The longest line of live output held back for its end; a longer one is shown in pieces. */
#define EPH_CLI_LIVE_LINE_MAX 1024

struct eph_cli_render {
    FILE *out;
    bool color;
    int64_t last_seq; /* -1 before the first event: events at or below it are not printed again */
    bool final_seen;  /* the final event (worker.destroyed) was printed */
    size_t printed;
    char sandbox_label[EPH_CLI_LABEL_MAX]; /* from sandbox.ready, for worker.started */
    /* A running command's live output (shell.output): the line of each stream (stdout, stderr)
     * not ended yet, shown when its end comes, when it grows past its size, or before the next
     * other event. */
    char live[2][EPH_CLI_LIVE_LINE_MAX + 1];
    size_t live_len[2];
};

void eph_cli_render_init(struct eph_cli_render *r, FILE *out, bool color);

/* True when out is a terminal and NO_COLOR is unset or empty (https://no-color.org). */
bool eph_cli_color_wanted(FILE *out);

/* The source column for an event: "Queued", "MicroVM", "Shell", "Completed", "Worker destroyed"…
 * A sandbox event is labelled after its data.backend ("microvm", "gvisor", "namespaces"); only
 * when an event lacks it (an older server) after what its message names. Writes into out and
 * returns it. Updates r's sandbox label on sandbox events. Any argument may be NULL. */
const char *eph_cli_render_label(struct eph_cli_render *r, const char *source, const char *type,
                                 const char *backend, const char *message,
                                 char out[EPH_CLI_LABEL_MAX]);

/* Prints one event object as a timeline line, unless its seq was printed already. 0, or -EPROTO
 * when ev is not an object. A missing field prints as "?" (t) or is left out. */
int eph_cli_render_event(struct eph_cli_render *r, const json_t *ev);
/* The same from the event's JSON text (an SSE data field or a list element). -EPROTO when the
 * text is not a JSON object. */
int eph_cli_render_event_json(struct eph_cli_render *r, const char *text, size_t len);

/* Writes s to out with control characters made visible. multiline keeps LF and TAB (results);
 * otherwise they are shown as "\n" and a space (one timeline line). max_bytes > 0 cuts the text
 * there, at a character boundary, with "…". */
void eph_cli_render_text(FILE *out, const char *s, bool multiline, size_t max_bytes);

/* "Model $0.00033 · Web $0.00 · Compute $0.0032" from run.cost into out (a sandbox's, without
 * model_micros: "Web … · Compute …"). -ENOENT when the run has no cost yet. */
int eph_cli_render_cost_line(const json_t *run, char *out, size_t outlen);

/* The line before the timeline: "run_… · openai/gpt-6-luna". */
void eph_cli_render_header(struct eph_cli_render *r, const json_t *run);
/* After the timeline: the result (Markdown shown as text) or the error, then the cost line. */
void eph_cli_render_result(struct eph_cli_render *r, const json_t *run);

/* Parses an API timestamp, "2026-10-07T15:01:48.120Z" (fraction optional), into milliseconds
 * since the epoch. 0 or -EINVAL. */
int eph_cli_time_parse(const char *iso, int64_t *ms);
/* "850 ms", "13.82 s", "2 min 05 s", "1 h 02 min" into out; returns out. */
char *eph_cli_format_duration(int64_t ms, char *out, size_t outlen);
/* A text cost bar, "[█████░░░░░░░░░░░░░░░]", cells wide: charged out of reserved, rounded up so
 * that any charge shows. Into out; returns out. */
char *eph_cli_render_cost_bar(int64_t charged, int64_t reserved, int cells, char *out,
                              size_t outlen);

/* "Completed", "Timed out"… for a run status (the label of its run.* event). */
const char *eph_cli_status_label(const char *status);
/* 0 for completed (a sandbox: stopped), 1 for another terminal status, -EAGAIN when status is
 * not terminal. */
int eph_cli_status_exit(const char *status);

#endif
