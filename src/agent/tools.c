/*
 * tools.c - the tools the model may call (docs/AGENT.md): shell, read_file, write_file,
 * edit_file, web_fetch; the system prompt; and the record of every call.
 *
 * Arguments come from the model and are checked against each tool's schema here; anything wrong
 * goes back to the model as {"error": "..."} so that it can correct itself, and the call is
 * recorded as a tool.rejected event. A call that ran is recorded as its tool's event
 * (shell.command, file.read, file.write, file.edit, web.request) whose data holds the call
 * exactly as the model sent it, the exact text returned to it and the model turn: the run's
 * record, from which a transcript is made and a run replayed. Zero data retention keeps none of
 * that content, only counts.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "agent/agent.h"
#include "agent/live_output.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/money.h"
#include "common/text.h"

#define COMMAND_MAX (64u << 10)
#define URL_MAX 2000u
/* edit_file asks the sandbox for the file's mode this long at most. */
#define MODE_PROBE_MS 5000u
/* How often a running command's held-back output is looked at (live_output.h: 250 ms apart). */
#define LIVE_TICK_MS 50u

/* ---- declarations ---------------------------------------------------------------------------- */

static json_t *tool(const char *name, const char *description, json_t *properties, json_t *required)
{
    return json_pack("{s:s, s:s, s:{s:s, s:o, s:o, s:b}}", "name", name, "description", description,
                     "parameters", "type", "object", "properties", properties, "required", required,
                     "additionalProperties", 0);
}

json_t *eph_tools_declare(bool shell, bool web)
{
    json_t *tools = json_array();
    if (!tools)
        return NULL;
    /* A tool that cannot be declared is not left out: the declaration fails. */
    int rc = 0;
    if (shell) {
        rc |= json_array_append_new(
            tools,
            tool("shell",
                 "Run a command with /bin/sh -c in the sandbox, as user worker. Every command "
                 "starts in the scratch directory (a cd does not carry over to the next "
                 "command; files do). Returns exit_code, stdout and stderr; a long output keeps "
                 "its head and its tail, with a note of how many bytes were cut between them.",
                 json_pack("{s:{s:s, s:s}, s:{s:s, s:i, s:s}}", "command", "type", "string",
                           "description", "the shell command", "timeout_seconds", "type", "integer",
                           "minimum", 1, "description",
                           "wall-time limit of this command (default and maximum: the "
                           "per-command limit the system prompt states)"),
                 json_pack("[s]", "command")));
        rc |= json_array_append_new(
            tools,
            tool("read_file",
                 "Read part of a file of the sandbox, by byte offset; a relative path is "
                 "relative to the scratch directory. Returns the total size and whether more "
                 "remains (next_offset); a binary file is returned as base64.",
                 json_pack("{s:{s:s}, s:{s:s, s:i}, s:{s:s, s:i, s:I}}", "path", "type", "string",
                           "offset", "type", "integer", "minimum", 0, "limit", "type", "integer",
                           "minimum", 1, "maximum", (json_int_t)EPH_TOOL_READ_MAX),
                 json_pack("[s]", "path")));
        rc |= json_array_append_new(
            tools, tool("write_file",
                        "Create or replace a file in the sandbox (parents are created); the path "
                        "is relative to the scratch directory. executable: true makes it mode "
                        "0755 (else 0644).",
                        json_pack("{s:{s:s}, s:{s:s}, s:{s:s}}", "path", "type", "string",
                                  "content", "type", "string", "executable", "type", "boolean"),
                        json_pack("[s, s]", "path", "content")));
        rc |= json_array_append_new(
            tools, tool("edit_file",
                        "Replace one exact piece of text in a file of the sandbox: old must "
                        "appear exactly once (else nothing changes and the error says how many "
                        "times it appears); the file keeps its mode.",
                        json_pack("{s:{s:s}, s:{s:s}, s:{s:s}}", "path", "type", "string", "old",
                                  "type", "string", "new", "type", "string"),
                        json_pack("[s, s, s]", "path", "old", "new")));
    }
    if (web)
        rc |= json_array_append_new(
            tools, tool("web_fetch",
                        "Fetch a public http(s) URL and return its status, content type and "
                        "text (capped).",
                        json_pack("{s:{s:s}}", "url", "type", "string"), json_pack("[s]", "url")));
    if (rc) {
        json_decref(tools);
        return NULL;
    }
    return tools;
}

/* ---- the system prompt ------------------------------------------------------------------------
 */

/* The broker's part (docs/AGENT.md: true, and nothing that does not work): how the web is reached,
 * and each connection by name with its methods and path prefixes. Only with shell: without it
 * nothing in the sandbox can make a request, and web_fetch describes itself. */
static int broker_prompt(const struct eph_agent_ctx *ctx, struct eph_buf *b)
{
    int rc = 0;
    size_t n = ctx->broker ? eph_broker_conn_count(ctx->broker) : 0;
    if (ctx->web) {
        rc = eph_buf_appends(b, " Web is on: commands reach public http and https sites only "
                                "through the proxy at http://127.0.0.1:3128, already set in "
                                "HTTP_PROXY and HTTPS_PROXY (curl, pip, git and Python use it as "
                                "they are); names resolve on the proxy, not in the sandbox; "
                                "private and local addresses are refused.");
        /* The run's web allow-list (docs/API.md): these hosts only. */
        for (size_t i = 0; !rc && eph_broker_web_allowed(ctx->broker, i); i++)
            rc = eph_buf_appendf(b, "%s%s", i ? ", " : " Only these hosts are allowed: ",
                                 eph_broker_web_allowed(ctx->broker, i));
        if (!rc && eph_broker_web_allowed(ctx->broker, 0))
            rc = eph_buf_appends(b, " (*.name: its subdomains); any other is refused with 403.");
    } else if (n == 0)
        rc = eph_buf_appends(b, " There is no network: commands cannot reach the internet.");
    else
        rc = eph_buf_appends(b, " There is no internet access, only the connections below.");
    if (rc || n == 0)
        return rc;
    rc = eph_buf_appends(b, " Connections (external APIs; the proxy adds their credential, which "
                            "you never see and must not ask for) are called in plain http as "
                            "http://127.0.0.1:3128/NAME/PATH, e.g. curl -sS "
                            "http://127.0.0.1:3128/NAME/PATH; any other method or path is "
                            "refused with 403:");
    for (size_t i = 0; !rc && i < n; i++) {
        struct eph_broker_conn_rules cr;
        if (!eph_broker_conn_rules(ctx->broker, i, &cr))
            break;
        rc = eph_buf_appendf(b, "%s %s (methods", i ? ";" : "", cr.name);
        for (size_t j = 0; !rc && j < cr.nmethods; j++)
            rc = eph_buf_appendf(b, "%s %s", j ? "," : "", cr.methods[j]);
        if (!rc && cr.nprefixes == 0)
            rc = eph_buf_appends(b, "; every path)");
        for (size_t j = 0; !rc && j < cr.nprefixes; j++)
            rc = eph_buf_appendf(b, "%s %s", j ? "," : "; paths under", cr.prefixes[j]);
        if (!rc && cr.nprefixes)
            rc = eph_buf_appends(b, ")");
    }
    return rc ? rc : eph_buf_appends(b, ".");
}

char *eph_agent_system_prompt(const struct eph_agent_ctx *ctx)
{
    struct eph_buf b;
    eph_buf_init(&b, 64 * 1024);
    uint64_t now = eph_clock_mono_ns();
    uint64_t left_s = ctx->deadline_ns > now ? (ctx->deadline_ns - now) / 1000000000u : 0;
    char money[EPH_MONEY_FMT_MAX];
    eph_money_format(ctx->budget ? eph_budget_available(ctx->budget, now) : 0, money);
    const char *backend = ctx->backend_name ? ctx->backend_name : "sandbox";
    size_t nconn = ctx->broker ? eph_broker_conn_count(ctx->broker) : 0;
    int rc = eph_buf_appendf(
        &b,
        "You are an agent working inside a disposable, isolated sandbox (%s backend) that is "
        "destroyed when the run ends; nothing you write survives. Permissions: shell %s, web "
        "%s, connections %s.",
        backend, ctx->shell ? "on" : "off", ctx->web ? "on" : "off", nconn ? "as listed" : "none");
    if (!rc && ctx->shell) {
        const struct eph_sandbox_limits *l = ctx->limits;
        const char *scratch = ctx->sb && ctx->sb->ops->scratch_dir
                                  ? ctx->sb->ops->scratch_dir(ctx->sb)
                                  : "the scratch directory";
        rc = eph_buf_appendf(
            &b,
            " Tools: shell, read_file, write_file, edit_file%s. Commands run with /bin/sh -c as "
            "user worker; each starts in the scratch directory %s (relative file paths are "
            "relative to it). The sandbox has %u MiB of memory, %u processes and %u MiB of "
            "disk. A command may take at most %u seconds (timeout_seconds may ask for less). "
            "Each output stream returned to you is capped at %u bytes, keeping its head and "
            "its tail. read_file returns at most %u bytes per call (%u by default) of files up "
            "to %u MiB; write_file and edit_file write at most %u MiB.",
            ctx->web ? ", web_fetch" : "", scratch, l ? l->memory_mib : 0, l ? l->pids : 0,
            l ? l->disk_mib : 0, ctx->command_timeout_ms / 1000, ctx->output_cap, EPH_TOOL_READ_MAX,
            EPH_TOOL_READ_DEFAULT, EPH_TOOL_FILE_MAX >> 20, EPH_TOOL_WRITE_MAX >> 20);
        if (!rc)
            rc = broker_prompt(ctx, &b);
    } else if (!rc && ctx->web) {
        rc = eph_buf_appends(&b, " Tools: web_fetch (public http and https URLs only).");
    } else if (!rc) {
        rc = eph_buf_appends(&b, " You have no tools: answer from what you know.");
    }
    if (!rc)
        rc = eph_buf_appendf(&b,
                             " Limits: %s of budget and %llu of the run's %u seconds are left (the "
                             "run stops when either runs out), and at most %u model turns.",
                             money, (unsigned long long)left_s, ctx->timeout_seconds,
                             ctx->turn_limit);
    if (!rc)
        rc = eph_buf_appends(&b, " Report real outputs, never what you expect. Answer in "
                                 "Markdown when you are done, without calling a tool.");
    if (rc) {
        eph_buf_release(&b);
        return NULL;
    }
    return eph_buf_steal(&b);
}

/* ---- results ------------------------------------------------------------------------------- */

static char *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *tool_error(const char *fmt, ...)
{
    char msg[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* Text from hostile bytes, for a message or an error: valid UTF-8, at most max code points. */
static char *shown(const char *s, size_t n, size_t max)
{
    char *clean = eph_text_utf8_sanitize(s ? s : "", s ? n : 0);
    char *cut = clean ? eph_text_cut(clean, max) : NULL;
    free(clean);
    return cut;
}

/* One stream as the model sees it: everything when it all came, else its head and its tail with
 * the number of bytes cut between them. The sandbox keeps the first len - len/2 bytes and the
 * last len/2 of a stream longer than the cap (struct eph_exec_request.head_tail). NULL when it
 * cannot be made (out of memory), never an empty stream in its place. */
static json_t *stream_text(const struct eph_buf *b, uint64_t total)
{
    const char *d = b->data ? b->data : "";
    if (total <= b->len) {
        char *clean = eph_text_utf8_sanitize(d, b->len);
        json_t *s = clean ? json_string(clean) : NULL;
        free(clean);
        return s;
    }
    size_t head = b->len - b->len / 2, tail = b->len / 2;
    char *h = eph_text_utf8_sanitize(d, head);
    char *t = eph_text_utf8_sanitize(d + head, tail);
    char count[32];
    eph_format_thousands(total - b->len, count);
    char *all = NULL;
    if (h && t && asprintf(&all, "%s\n[… %s bytes cut …]\n%s", h, count, t) < 0)
        all = NULL;
    json_t *s = all ? json_string(all) : NULL;
    free(all);
    free(h);
    free(t);
    return s;
}

/* o with key set to v (stolen); NULL when o or v is missing or the field cannot be set, o then
 * released: a result is whole or not made at all. */
static json_t *with_field(json_t *o, const char *key, json_t *v)
{
    if (o && json_object_set_new(o, key, v) == 0)
        return o;
    if (!o)
        json_decref(v);
    json_decref(o);
    return NULL;
}

/* ---- the record --------------------------------------------------------------------------- */

/* One tool call as it is recorded: its event's source, type, message and data. */
struct record {
    const struct eph_tool_call *call; /* the call being recorded */
    const char *source;
    const char *type;
    json_t *data; /* owned */
    /* -ENOMEM once a part of the record could not be made: the call then fails, and no record
     * with a part missing is emitted. */
    int err;
    /* Room for every message whole (at most 200 code points of hostile text, 4 bytes each, plus
     * a few words): the sink cuts it to its own size on a character boundary, vsnprintf would
     * not. */
    char message[1024];
    /* The command's live output still unsent when it ended: recorded with the record's event, in
     * its transaction (or alone when no event comes). */
    struct eph_sink_held held;
};

static void record_set(struct record *rec, const char *source, const char *type, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

static void record_set(struct record *rec, const char *source, const char *type, const char *fmt,
                       ...)
{
    rec->source = source;
    rec->type = type;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec->message, sizeof(rec->message), fmt, ap);
    va_end(ap);
}

/* Sets one field of the record's data (v stolen); a value that could not be made (NULL) or set
 * fails the record. */
static void record_field(struct record *rec, const char *key, json_t *v)
{
    if (!rec->data)
        rec->data = json_object();
    if (!rec->data) {
        json_decref(v);
        rec->err = -ENOMEM;
    } else if (json_object_set_new(rec->data, key, v)) {
        rec->err = -ENOMEM;
    }
}

/* shown() for what goes into the record: a text that cannot be made fails the record. */
static char *record_shown(struct record *rec, const char *s, size_t n, size_t max)
{
    char *t = shown(s, n, max);
    if (!t)
        rec->err = -ENOMEM;
    return t;
}

/* Emits the call's event: its data completed by the call, the result and the turn (without the
 * content under zero data retention, where the message is the event's type). -ENOMEM, and nothing
 * emitted, when a part of the record could not be made. */
static int record_emit(struct eph_agent_ctx *ctx, struct record *rec,
                       const struct eph_tool_call *call, const char *result)
{
    record_field(rec, "turn", json_integer(ctx->turn));
    if (!ctx->zdr) {
        record_field(rec, "call",
                     json_pack("{s:s, s:s, s:s}", "id", call->id ? call->id : "", "name",
                               call->name ? call->name : "", "arguments",
                               call->arguments ? call->arguments : ""));
        record_field(rec, "result", json_string(result ? result : ""));
    }
    json_t *data = rec->data;
    rec->data = NULL;
    if (rec->err) {
        /* No event with a part missing; the usage the call moved is kept all the same, and the
         * output that was shown live is too. */
        json_decref(data);
        eph_sink_held_flush(ctx->sink, &rec->held);
        int prc = eph_sink_progress(ctx->sink);
        if (prc)
            EPH_WARN("agent", "run %s: cannot record progress: %s", ctx->run_id, strerror(-prc));
        return rec->err;
    }
    if (ctx->zdr && data) {
        /* Only numbers and flags: a path, an error or a rejection's reason can quote content. */
        const char *key;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(data, tmp, key, v)
        {
            if (json_is_string(v) || json_is_object(v) || json_is_array(v))
                json_object_del(data, key);
        }
    }
    /* With the usage and cost the call brought (a command, a fetch): one write. */
    int rc = eph_sink_emit_progress_after(ctx->sink, &rec->held, rec->source, rec->type, data, "%s",
                                          ctx->zdr ? rec->type : rec->message);
    if (rc)
        EPH_WARN("agent", "run %s: cannot record a %s event: %s", ctx->run_id, rec->type,
                 strerror(-rc));
    return 0;
}

/* A call refused before it ran: *content is the error for the model (NULL when it cannot be
 * made), the record says why. */
static void reject(struct record *rec, const char *tool_name, char **content, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void reject(struct record *rec, const char *tool_name, char **content, const char *fmt, ...)
{
    char raw[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* The reason may quote the model's text (a parser's message, a name): valid UTF-8 first. */
    char *why = record_shown(rec, raw, strlen(raw), 300);
    free(*content);
    *content = why ? tool_error("%s", why) : NULL;
    json_decref(rec->data);
    rec->data = NULL;
    record_field(rec, "reason", why ? json_string(why) : NULL);
    char *name = record_shown(rec, tool_name, strlen(tool_name), 40);
    char *line = why ? record_shown(rec, why, strlen(why), 160) : NULL;
    record_set(rec, "agent", "tool.rejected", "rejected %s: %s", name ? name : "",
               line ? line : "");
    free(name);
    free(line);
    free(why);
}

/* ---- arguments ------------------------------------------------------------------------------ */

enum arg_type { ARG_STRING, ARG_INTEGER, ARG_BOOLEAN };

struct arg_spec {
    const char *name;
    enum arg_type type;
    bool required;
};

/* One tool: its arguments (the schema eph_tools_declare states) and what runs it once they are
 * valid. */
struct tool_spec {
    const char *name;
    bool needs_shell, needs_web;
    struct arg_spec args[4];
    int (*run)(struct eph_agent_ctx *ctx, json_t *args, struct record *rec, char **content);
};

static const char *TYPE_NAMES[] = {"a string", "an integer", "a boolean"};

/* Checks args against spec: NULL, or why not (into why). Strings must not hold NUL. */
static const char *check_args(const struct tool_spec *spec, json_t *args, struct record *rec,
                              char *why, size_t n)
{
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v)
    {
        const struct arg_spec *a = NULL;
        for (size_t i = 0; i < 4 && spec->args[i].name; i++)
            if (strcmp(key, spec->args[i].name) == 0)
                a = &spec->args[i];
        if (!a) {
            char *k = record_shown(rec, key, strlen(key), 64);
            snprintf(why, n, "unexpected argument '%s'", k ? k : "");
            free(k);
            return why;
        }
        bool ok = a->type == ARG_STRING    ? json_is_string(v)
                  : a->type == ARG_INTEGER ? json_is_integer(v)
                                           : json_is_boolean(v);
        if (!ok) {
            snprintf(why, n, "argument '%s' must be %s", key, TYPE_NAMES[a->type]);
            return why;
        }
        if (a->type == ARG_STRING && strlen(json_string_value(v)) != json_string_length(v)) {
            snprintf(why, n, "argument '%s' must not contain NUL", key);
            return why;
        }
    }
    for (size_t i = 0; i < 4 && spec->args[i].name; i++) {
        if (spec->args[i].required && !json_object_get(args, spec->args[i].name)) {
            snprintf(why, n, "missing argument '%s'", spec->args[i].name);
            return why;
        }
    }
    return NULL;
}

static const char *str_arg(json_t *args, const char *name)
{
    return json_string_value(json_object_get(args, name));
}

/* A path argument: NULL when usable, else why not. */
static const char *path_problem(const char *path)
{
    return eph_text_safe_relpath(path, strlen(path))
               ? NULL
               : "invalid path: use a relative path inside the scratch directory, without '..'";
}

/* ---- shell ---------------------------------------------------------------------------------- */

/* The time a command may take: asked (0: the per-command limit), never more than the per-command
 * limit, the run's deadline or the instant the budget runs out. 0 when no time is left. *stop
 * says what ends the run if the command is still running when that time is up: -ETIMEDOUT (the
 * deadline), -EDQUOT (the budget), or 0 (only the command's own limit, which the model is told
 * about). */
static uint32_t command_timeout(struct eph_agent_ctx *ctx, uint64_t asked_ms, int *stop)
{
    uint64_t now = eph_clock_mono_ns();
    uint64_t until = ctx->deadline_ns;
    uint64_t budget_end = eph_budget_compute_deadline(ctx->budget);
    *stop = -ETIMEDOUT;
    if (budget_end < until) {
        until = budget_end;
        *stop = -EDQUOT;
    }
    if (until <= now)
        return 0;
    uint64_t ms = (until - now) / 1000000u;
    uint64_t limit =
        asked_ms && asked_ms < ctx->command_timeout_ms ? asked_ms : ctx->command_timeout_ms;
    if (ms > limit) {
        ms = limit;
        *stop = 0;
    }
    return ms ? (uint32_t)ms : 1;
}

/* A running command's output as shell.output events (docs/AGENT.md, "Live output"): each stream
 * as the command writes it (its head as the sandbox keeps it, then the bytes past the head that
 * the sandbox sends live, up to live_output_bytes; the kept tail, which arrives when the command
 * has ended, is in the shell.command event only), coalesced and capped by live_output.c. Never
 * under zero data retention: not one byte of output is emitted. */
struct live {
    struct eph_agent_ctx *ctx;
    char *call_id; /* valid UTF-8 */
    char *line;    /* the message: "$ " and the command, cut */
    struct eph_live_exec le;
    struct eph_sink_held *held; /* set once the command has ended: what is left is held */
};

static int live_emit(void *arg, int stream, const char *text, size_t len, uint64_t offset)
{
    struct live *lv = arg;
    json_t *d = json_pack("{s:s, s:s, s:s%, s:I}", "call", lv->call_id ? lv->call_id : "", "stream",
                          stream == 1 ? "stdout" : "stderr", "text", text, len, "offset",
                          (json_int_t)offset);
    if (!d)
        return -ENOMEM;
    const char *line = lv->line ? lv->line : "";
    int rc = lv->held
                 ? eph_sink_hold(lv->ctx->sink, lv->held, "shell", "shell.output", d, "$ %s", line)
                 : eph_sink_emit(lv->ctx->sink, "shell", "shell.output", d, "$ %s", line);
    if (rc)
        EPH_WARN("agent", "run %s: cannot record a shell.output event: %s", lv->ctx->run_id,
                 strerror(-rc));
    return rc;
}

static void live_free(struct live *lv)
{
    free(lv->call_id);
    free(lv->line);
    free(lv);
}

/* The live output of a command about to run, attached to req, into *out (NULL without any: zero
 * data retention, or off). -ENOMEM when it cannot be set up: not skipped, the call fails before
 * the command runs. */
static int live_start(struct eph_agent_ctx *ctx, const struct record *rec, const char *command,
                      size_t len, struct eph_exec_request *req, struct live **out)
{
    *out = NULL;
    if (ctx->zdr || !ctx->live_output_bytes)
        return 0;
    const char *id = rec->call && rec->call->id ? rec->call->id : "";
    struct live *lv = calloc(1, sizeof(*lv));
    if (!lv)
        return -ENOMEM;
    lv->ctx = ctx;
    lv->call_id = shown(id, strlen(id), 200);
    lv->line = shown(command, len, 200);
    if (!lv->call_id || !lv->line) {
        live_free(lv);
        return -ENOMEM;
    }
    uint64_t head = ctx->output_cap < 2 ? ctx->output_cap : ctx->output_cap - ctx->output_cap / 2;
    eph_live_exec_attach(&lv->le, req, head, ctx->live_output_bytes, LIVE_TICK_MS, live_emit, lv);
    *out = lv;
    return 0;
}

static int run_shell(struct eph_agent_ctx *ctx, json_t *args, struct record *rec, char **content)
{
    const char *command = str_arg(args, "command");
    size_t len = strlen(command);
    json_t *ts = json_object_get(args, "timeout_seconds");
    json_int_t asked = ts ? json_integer_value(ts) : 0;
    unsigned max_s = ctx->command_timeout_ms / 1000 ? ctx->command_timeout_ms / 1000 : 1;
    if (len == 0 || len > COMMAND_MAX) {
        reject(rec, "shell", content, "command must be 1 byte to 64 KiB");
        return 0;
    }
    if (ts && (asked < 1 || asked > (json_int_t)max_s)) {
        reject(rec, "shell", content, "timeout_seconds must be 1 to %u", max_s);
        return 0;
    }
    int stop;
    uint32_t timeout = command_timeout(ctx, (uint64_t)asked * 1000u, &stop);
    if (timeout == 0)
        return stop;

    struct eph_exec_request req = {.command = command,
                                   .timeout_ms = timeout,
                                   .stdout_cap = ctx->output_cap,
                                   .stderr_cap = ctx->output_cap,
                                   .head_tail = true};
    struct live *lv;
    if (live_start(ctx, rec, command, len, &req, &lv))
        return -ENOMEM;
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    int rc = eph_sandbox_exec(ctx->sb, &req, &res);
    if (lv) {
        /* Before the shell.command event: every shell.output of a call precedes it. What is left
         * is stored with that event (one transaction: for a quick command, all of its output). */
        lv->held = &rec->held;
        eph_live_output_finish(&lv->le.lo);
        live_free(lv);
    }
    if (!rc)
        eph_metrics_observe_exec(res.duration_us * 1000u);
    ctx->usage->shell_commands++;

    char *line = record_shown(rec, command, len, 200);
    record_set(rec, "shell", "shell.command", "$ %s", line ? line : "");
    free(line);
    char *whole = eph_text_utf8_sanitize(command, len);
    record_field(rec, "command", whole ? json_string(whole) : NULL); /* the message is cut */
    free(whole);
    if (rc) {
        record_field(rec, "error",
                     json_string(eph_cancelled(&ctx->cancel) ? "cancelled" : "sandbox failed"));
    } else {
        int code = res.signal ? 128 + res.signal : res.exit_code;
        record_field(rec, "exit_code", json_integer(code));
        record_field(rec, "duration_ms", json_integer((json_int_t)(res.duration_us / 1000)));
        record_field(rec, "stdout_bytes", json_integer((json_int_t)res.stdout_total));
        record_field(rec, "stderr_bytes", json_integer((json_int_t)res.stderr_total));
        record_field(rec, "timeout_ms", json_integer(timeout));
        if (res.signal)
            record_field(rec, "signal", json_integer(res.signal));
        if (res.timed_out)
            record_field(rec, "timed_out", json_true());
    }

    if (rc) {
        eph_exec_result_release(&res);
        if (eph_cancelled(&ctx->cancel))
            return -ECANCELED;
        if (eph_clock_mono_ns() >= ctx->deadline_ns)
            return -ETIMEDOUT;
        if (eph_clock_mono_ns() >= eph_budget_compute_deadline(ctx->budget))
            return -EDQUOT;
        *content = tool_error("the sandbox failed to run the command: %s", eph_strerror(rc));
        return 0;
    }
    if (ctx->broker && eph_broker_exhausted(ctx->broker)) {
        /* A transfer through the broker was cut where the budget ended (or a request's fee did
         * not fit): the run stops here, budget_exhausted. */
        eph_exec_result_release(&res);
        return -EDQUOT;
    }
    if (res.timed_out && stop) {
        /* Killed at the run's deadline or at the instant compute would exhaust the budget: the
         * run is over, and the sandbox goes now rather than after another turn. */
        eph_exec_result_release(&res);
        return stop;
    }
    json_t *out = stream_text(&res.out, res.stdout_total);
    json_t *err = stream_text(&res.err, res.stderr_total);
    if (!ctx->zdr) {
        record_field(rec, "stdout", json_incref(out));
        record_field(rec, "stderr", json_incref(err));
        record_field(rec, "stdout_truncated", json_boolean(res.stdout_total > res.out.len));
        record_field(rec, "stderr_truncated", json_boolean(res.stderr_total > res.err.len));
    }
    json_t *o =
        json_pack("{s:i, s:o, s:o}", "exit_code", res.signal ? 128 + res.signal : res.exit_code,
                  "stdout", out, "stderr", err);
    if (res.signal)
        o = with_field(o, "signal", json_integer(res.signal));
    if (res.timed_out)
        o = with_field(o, "timed_out", json_true());
    *content = dump(o);
    eph_exec_result_release(&res);
    return 0;
}

/* ---- files ---------------------------------------------------------------------------------- */

/* Whether bytes are not text: a NUL, or invalid UTF-8 other than a sequence cut by the slice's
 * ends. */
static bool looks_binary(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n && i < 3 && (p[i] & 0xC0) == 0x80) /* the slice began inside a character */
        i++;
    while (i < n) {
        unsigned char c = p[i];
        if (c == 0)
            return true;
        size_t need = c < 0x80             ? 0
                      : (c & 0xE0) == 0xC0 ? 1
                      : (c & 0xF0) == 0xE0 ? 2
                      : (c & 0xF8) == 0xF0 ? 3
                                           : 4;
        if (need == 4 || (need == 1 && c < 0xC2))
            return true;
        if (i + need >= n)
            return false; /* cut at the slice's end */
        for (size_t k = 1; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return true;
        i += need + 1;
    }
    return false;
}

static const char *read_problem(int rc, char *why, size_t n)
{
    if (rc == -EMSGSIZE)
        snprintf(why, n,
                 "the file is larger than %u MiB: read parts of it with shell (head -c, "
                 "tail -c, dd)",
                 EPH_TOOL_FILE_MAX >> 20);
    else
        snprintf(why, n, "cannot read the file: %s", eph_strerror(rc));
    return why;
}

static int run_read_file(struct eph_agent_ctx *ctx, json_t *args, struct record *rec,
                         char **content)
{
    const char *path = str_arg(args, "path");
    json_t *jo = json_object_get(args, "offset"), *jl = json_object_get(args, "limit");
    json_int_t offset = jo ? json_integer_value(jo) : 0;
    json_int_t limit = jl ? json_integer_value(jl) : EPH_TOOL_READ_DEFAULT;
    const char *bad = path_problem(path);
    if (bad) {
        reject(rec, "read_file", content, "%s", bad);
        return 0;
    }
    if (offset < 0) {
        reject(rec, "read_file", content, "offset must be 0 or more");
        return 0;
    }
    if (limit < 1 || limit > EPH_TOOL_READ_MAX) {
        reject(rec, "read_file", content, "limit must be 1 to %u", EPH_TOOL_READ_MAX);
        return 0;
    }
    char *name = record_shown(rec, path, strlen(path), 120);
    record_set(rec, "file", "file.read", "read %s", name ? name : "");
    if (!ctx->zdr)
        record_field(rec, "path", json_string(name ? name : ""));
    struct eph_buf b;
    eph_buf_init(&b, EPH_TOOL_FILE_MAX);
    int rc = ctx->sb->ops->read_file(ctx->sb, path, EPH_TOOL_FILE_MAX, &b);
    if (rc) {
        char why[256];
        *content = tool_error("%s", read_problem(rc, why, sizeof(why)));
        record_field(rec, "error", json_string(why));
        record_set(rec, "file", "file.read", "read %s · failed", name ? name : "");
        goto out;
    }
    size_t start = (uint64_t)offset < b.len ? (size_t)offset : b.len;
    size_t n = b.len - start < (size_t)limit ? b.len - start : (size_t)limit;
    bool more = start + n < b.len;
    bool binary = looks_binary((const unsigned char *)b.data + start, n);
    char size[32];
    eph_format_thousands(b.len, size);
    json_t *o = json_pack("{s:I, s:I, s:I, s:b}", "size", (json_int_t)b.len, "offset",
                          (json_int_t)start, "bytes", (json_int_t)n, "more", more);
    if (more)
        o = with_field(o, "next_offset", json_integer((json_int_t)(start + n)));
    if (binary) {
        size_t blen = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
        char *enc = malloc(blen);
        if (enc)
            sodium_bin2base64(enc, blen, (const unsigned char *)b.data + start, n,
                              sodium_base64_VARIANT_ORIGINAL);
        o = with_field(o, "binary", json_true());
        o = with_field(o, "content_base64", enc ? json_string(enc) : NULL);
        free(enc);
        record_set(rec, "file", "file.read", "read %s · binary file, %s bytes", name ? name : "",
                   size);
    } else {
        char *text = eph_text_utf8_sanitize(b.data + start, n);
        o = with_field(o, "content", text ? json_string(text) : NULL);
        free(text);
        char got[32];
        eph_format_thousands(n, got);
        if (n == b.len)
            record_set(rec, "file", "file.read", "read %s · %s bytes", name ? name : "", got);
        else
            record_set(rec, "file", "file.read", "read %s · %s of %s bytes", name ? name : "", got,
                       size);
    }
    record_field(rec, "size", json_integer((json_int_t)b.len));
    record_field(rec, "offset", json_integer((json_int_t)start));
    record_field(rec, "bytes", json_integer((json_int_t)n));
    if (binary)
        record_field(rec, "binary", json_true());
    *content = dump(o);
out:
    free(name);
    eph_buf_release(&b);
    return 0;
}

static int run_write_file(struct eph_agent_ctx *ctx, json_t *args, struct record *rec,
                          char **content)
{
    const char *path = str_arg(args, "path");
    json_t *text = json_object_get(args, "content");
    bool executable = json_is_true(json_object_get(args, "executable"));
    const char *bad = path_problem(path);
    if (bad) {
        reject(rec, "write_file", content, "%s", bad);
        return 0;
    }
    size_t len = json_string_length(text);
    if (len > EPH_TOOL_WRITE_MAX) {
        reject(rec, "write_file", content, "content too large: at most %u MiB",
               EPH_TOOL_WRITE_MAX >> 20);
        return 0;
    }
    unsigned mode = executable ? 0755 : 0644;
    int rc = ctx->sb->ops->write_file(ctx->sb, path, json_string_value(text), len, mode);
    char *name = record_shown(rec, path, strlen(path), 120);
    char bytes[32];
    eph_format_thousands(len, bytes);
    record_set(rec, "file", "file.write", "wrote %s · %s bytes%s%s", name ? name : "", bytes,
               executable ? " · executable" : "", rc ? " · failed" : "");
    if (!ctx->zdr)
        record_field(rec, "path", json_string(name ? name : ""));
    record_field(rec, "bytes", json_integer((json_int_t)len));
    record_field(rec, "mode", json_integer(mode));
    free(name);
    if (rc) {
        record_field(rec, "error", json_string(eph_strerror(rc)));
        *content = tool_error("cannot write the file: %s", eph_strerror(rc));
    } else {
        *content = dump(json_pack("{s:b, s:I, s:s}", "ok", 1, "bytes", (json_int_t)len, "mode",
                                  executable ? "0755" : "0644"));
    }
    return 0;
}

/* The permission bits of a file in the sandbox (edit_file keeps them) into *mode, 0644 when the
 * sandbox does not tell them. The path goes through the environment, never into the command's
 * text. -ENOMEM when the probe cannot be made: the edit must not change the file's mode. */
static int file_mode(struct eph_agent_ctx *ctx, const char *path, unsigned *mode)
{
    char *env_path = NULL;
    if (asprintf(&env_path, "EPH_EDIT_PATH=%s", path) < 0)
        return -ENOMEM;
    const char *env[] = {env_path, NULL};
    struct eph_exec_request req = {.command = "stat -c %a -- \"$EPH_EDIT_PATH\"",
                                   .timeout_ms = MODE_PROBE_MS,
                                   .stdout_cap = 16,
                                   .stderr_cap = 0,
                                   .env = env};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    *mode = 0644;
    if (eph_sandbox_exec(ctx->sb, &req, &res) == 0 && res.exit_code == 0 && !res.signal &&
        res.out.len) {
        char buf[17];
        size_t n = res.out.len < 16 ? res.out.len : 16;
        memcpy(buf, res.out.data, n);
        buf[n] = '\0';
        char *end;
        unsigned long m = strtoul(buf, &end, 8);
        if (end != buf && (*end == '\n' || *end == '\0') && m <= 07777)
            *mode = (unsigned)m & 0777;
    }
    eph_exec_result_release(&res);
    free(env_path);
    return 0;
}

static int run_edit_file(struct eph_agent_ctx *ctx, json_t *args, struct record *rec,
                         char **content)
{
    const char *path = str_arg(args, "path");
    json_t *jold = json_object_get(args, "old"), *jnew = json_object_get(args, "new");
    const char *bad = path_problem(path);
    if (bad) {
        reject(rec, "edit_file", content, "%s", bad);
        return 0;
    }
    size_t olen = json_string_length(jold), nlen = json_string_length(jnew);
    if (olen == 0) {
        reject(rec, "edit_file", content, "old must not be empty");
        return 0;
    }
    char *name = record_shown(rec, path, strlen(path), 120);
    record_set(rec, "file", "file.edit", "edited %s", name ? name : "");
    if (!ctx->zdr)
        record_field(rec, "path", json_string(name ? name : ""));
    struct eph_buf b, w;
    eph_buf_init(&b, EPH_TOOL_FILE_MAX);
    eph_buf_init(&w, EPH_TOOL_WRITE_MAX);
    char why[256] = "";
    int rc = ctx->sb->ops->read_file(ctx->sb, path, EPH_TOOL_FILE_MAX, &b);
    if (rc) {
        read_problem(rc, why, sizeof(why));
        goto out;
    }
    if (memchr(b.data ? b.data : "", '\0', b.len)) {
        snprintf(why, sizeof(why), "the file is binary: edit_file changes text files only");
        goto out;
    }
    const char *d = b.data ? b.data : "", *old = json_string_value(jold);
    const char *first = NULL;
    size_t matches = 0;
    for (const char *p = d; (size_t)(p - d) + olen <= b.len;) {
        const char *m = memmem(p, b.len - (size_t)(p - d), old, olen);
        if (!m)
            break;
        if (!first)
            first = m;
        matches++;
        p = m + 1;
    }
    if (matches != 1) {
        snprintf(why, sizeof(why),
                 matches == 0 ? "old text not found in the file: nothing changed"
                              : "old text appears %zu times in the file: nothing changed; include "
                                "more of the surrounding text so that it appears once",
                 matches);
        goto out;
    }
    size_t at = (size_t)(first - d);
    if (b.len - olen + nlen > EPH_TOOL_WRITE_MAX) {
        snprintf(why, sizeof(why), "the edited file would be larger than %u MiB",
                 EPH_TOOL_WRITE_MAX >> 20);
        goto out;
    }
    if (eph_buf_append(&w, d, at) || eph_buf_append(&w, json_string_value(jnew), nlen) ||
        eph_buf_append(&w, d + at + olen, b.len - at - olen)) {
        snprintf(why, sizeof(why), "out of memory");
        goto out;
    }
    unsigned mode;
    if (file_mode(ctx, path, &mode)) {
        snprintf(why, sizeof(why), "out of memory");
        goto out;
    }
    rc = ctx->sb->ops->write_file(ctx->sb, path, w.data ? w.data : "", w.len, mode);
    if (rc) {
        snprintf(why, sizeof(why), "cannot write the file: %s", eph_strerror(rc));
        goto out;
    }
    record_field(rec, "bytes", json_integer((json_int_t)w.len));
    *content = dump(json_pack("{s:b, s:I}", "ok", 1, "bytes", (json_int_t)w.len));
out:
    if (why[0]) {
        record_set(rec, "file", "file.edit", "edit %s · failed", name ? name : "");
        record_field(rec, "error", json_string(why));
        *content = tool_error("%s", why);
    }
    free(name);
    eph_buf_release(&b);
    eph_buf_release(&w);
    return 0;
}

/* ---- web_fetch ------------------------------------------------------------------------------ */

/* Executed by the run's broker on this thread (it meters on the budget), each hop an event of its
 * own (web.request with the exchange); the call itself is one more web.request, with the call. */
static int run_web_fetch(struct eph_agent_ctx *ctx, json_t *args, struct record *rec,
                         char **content)
{
    const char *url = str_arg(args, "url");
    size_t len = strlen(url);
    if (len == 0 || len > URL_MAX) {
        reject(rec, "web_fetch", content, "url must be an http(s) URL of 1 to %u bytes", URL_MAX);
        return 0;
    }
    if (!ctx->broker) {
        reject(rec, "web_fetch", content, "web_fetch is not available in this run");
        return 0;
    }
    char *line = record_shown(rec, url, len, 200);
    record_set(rec, "web", "web.request", "web_fetch %s", line ? line : "");
    if (!ctx->zdr)
        record_field(rec, "url", json_string(line ? line : ""));
    struct eph_web_fetch f;
    char err[256] = "";
    int rc = eph_broker_web_fetch(ctx->broker, url, ctx->output_cap, &f, err, sizeof(err));
    if (rc == -EDQUOT) {
        free(line);
        return -EDQUOT;
    }
    if (rc) {
        *content = tool_error("%s", err[0] ? err : eph_strerror(rc));
        record_field(rec, "error", json_string(err[0] ? err : eph_strerror(rc)));
        record_set(rec, "web", "web.request", "web_fetch %s · failed", line ? line : "");
        free(line);
        return 0;
    }
    record_set(rec, "web", "web.request", "web_fetch %s · %d", line ? line : "", f.status);
    record_field(rec, "status", json_integer(f.status));
    free(line);
    char *text = eph_text_utf8_sanitize(f.text, strlen(f.text));
    json_t *o = text ? json_pack("{s:i, s:s, s:s, s:b}", "status", f.status, "content_type",
                                 f.content_type, "text", text, "truncated", f.truncated)
                     : NULL;
    free(text);
    if (f.redirects)
        o = with_field(o, "redirects", json_integer(f.redirects));
    *content = dump(o);
    free(f.text);
    return 0;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static const struct tool_spec TOOLS[] = {
    {.name = "shell",
     .needs_shell = true,
     .args = {{"command", ARG_STRING, true}, {"timeout_seconds", ARG_INTEGER, false}},
     .run = run_shell},
    {.name = "read_file",
     .needs_shell = true,
     .args = {{"path", ARG_STRING, true},
              {"offset", ARG_INTEGER, false},
              {"limit", ARG_INTEGER, false}},
     .run = run_read_file},
    {.name = "write_file",
     .needs_shell = true,
     .args = {{"path", ARG_STRING, true},
              {"content", ARG_STRING, true},
              {"executable", ARG_BOOLEAN, false}},
     .run = run_write_file},
    {.name = "edit_file",
     .needs_shell = true,
     .args = {{"path", ARG_STRING, true}, {"old", ARG_STRING, true}, {"new", ARG_STRING, true}},
     .run = run_edit_file},
    {.name = "web_fetch",
     .needs_web = true,
     .args = {{"url", ARG_STRING, true}},
     .run = run_web_fetch},
};

int eph_tools_execute(struct eph_agent_ctx *ctx, const struct eph_tool_call *call, char **content)
{
    *content = NULL;
    const char *name = call->name ? call->name : "";
    struct record rec = {.call = call};
    const struct tool_spec *spec = NULL;
    for (size_t i = 0; i < sizeof(TOOLS) / sizeof(TOOLS[0]); i++)
        if (strcmp(name, TOOLS[i].name) == 0)
            spec = &TOOLS[i];
    int rc = 0;
    json_t *args = NULL;
    if (!spec || (spec->needs_shell && !ctx->shell) || (spec->needs_web && !ctx->web)) {
        char *n = record_shown(&rec, name, strlen(name), 64);
        reject(&rec, name, content, "unknown tool '%s' (not available in this run)", n ? n : "");
        free(n);
        goto out;
    }
    json_error_t je;
    args = json_loads(call->arguments ? call->arguments : "", JSON_REJECT_DUPLICATES, &je);
    if (!args || !json_is_object(args)) {
        if (args)
            reject(&rec, name, content, "arguments must be a JSON object");
        else
            reject(&rec, name, content, "arguments are not valid JSON: %s", je.text);
        goto out;
    }
    char why[512];
    if (check_args(spec, args, &rec, why, sizeof(why))) {
        reject(&rec, name, content, "%s", why);
        goto out;
    }
    rc = spec->run(ctx, args, &rec, content);
out:
    json_decref(args);
    /* A result or a record that could not be made whole fails the call: the model must not be
     * given a result that misses a part, nor the run's record an event that does. */
    if (!rc && (!*content || rec.err))
        rc = -ENOMEM;
    if (rec.type && rc != -ENOMEM && record_emit(ctx, &rec, call, rc ? NULL : *content))
        rc = -ENOMEM;
    eph_sink_held_flush(ctx->sink, &rec.held); /* no event took them: alone */
    json_decref(rec.data);
    if (rc) {
        free(*content);
        *content = NULL;
    }
    return rc;
}
