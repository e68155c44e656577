/*
 * tools.c - the tools the model may call: shell, read_file, write_file, web_fetch.
 *
 * Arguments come from the model and are checked against each tool's schema here; anything wrong
 * goes back to the model as {"error": "..."} so that it can correct itself. Results are JSON
 * objects rendered to text, with every stream capped and a note saying how much was dropped.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/error.h"
#include "common/text.h"

#define TOOL_FILE_MAX (1u << 20)     /* read_file / write_file content */
#define EVENT_OUTPUT_MAX (16u << 10) /* per stream, in a timeline event */
#define COMMAND_MAX (64u << 10)

json_t *eph_tools_declare(bool shell, bool web)
{
    json_t *tools = json_array();
    if (shell) {
        json_array_append_new(
            tools,
            json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s], s:b}}", "name", "shell",
                      "description",
                      "Run a command with /bin/sh -c in the sandbox, as user worker, in the "
                      "scratch directory. Returns exit_code, stdout and stderr (each capped).",
                      "parameters", "type", "object", "properties", "command", "type", "string",
                      "description", "the shell command", "required", "command",
                      "additionalProperties", 0));
        json_array_append_new(
            tools, json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s], s:b}}", "name", "read_file",
                             "description",
                             "Read a text file of the sandbox; the path is relative to the scratch "
                             "directory.",
                             "parameters", "type", "object", "properties", "path", "type", "string",
                             "required", "path", "additionalProperties", 0));
        json_array_append_new(
            tools,
            json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s}, s:{s:s}}, s:[s, s], s:b}}", "name",
                      "write_file", "description",
                      "Write a text file in the sandbox; the path is relative to the scratch "
                      "directory.",
                      "parameters", "type", "object", "properties", "path", "type", "string",
                      "content", "type", "string", "required", "path", "content",
                      "additionalProperties", 0));
    }
    if (web)
        json_array_append_new(
            tools, json_pack("{s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s], s:b}}", "name", "web_fetch",
                             "description",
                             "Fetch a public http(s) URL and return its status, content type "
                             "and text (capped).",
                             "parameters", "type", "object", "properties", "url", "type", "string",
                             "required", "url", "additionalProperties", 0));
    return tools;
}

/* The broker's part of the system prompt (SPEC 8.5: true, and nothing that does not work): how
 * the web is reached, and each connection by name with its methods and path prefixes. */
static char *broker_prompt(const struct eph_run *r)
{
    struct eph_buf b;
    eph_buf_init(&b, 64 * 1024);
    int rc = 0;
    if (r->web)
        rc = eph_buf_appends(&b, "Web is on: the sandbox reaches public http and https sites "
                                 "only through the proxy at http://127.0.0.1:3128, already set "
                                 "in HTTP_PROXY and HTTPS_PROXY (curl, pip, git and Python use "
                                 "it as they are); names resolve on the proxy, not in the "
                                 "sandbox; private and local addresses are refused. The "
                                 "web_fetch tool fetches a URL for you. ");
    size_t n = r->connections ? json_array_size(r->connections) : 0;
    if (!r->web && n == 0)
        rc = eph_buf_appends(&b, "There is no network: the sandbox cannot reach the internet.");
    else if (!r->web)
        rc = eph_buf_appends(&b, "Web is off: there is no internet access, only the "
                                 "connections below. ");
    if (!rc && n) {
        rc = eph_buf_appends(&b, "Connections (external APIs; the proxy adds their credential, "
                                 "which you never see and must not ask for): call "
                                 "http://127.0.0.1:3128/NAME/PATH in plain http, e.g. curl -sS "
                                 "http://127.0.0.1:3128/NAME/PATH. Allowed:");
        for (size_t i = 0; !rc && i < n; i++)
            rc = eph_buf_appendf(&b, " %s", json_string_value(json_array_get(r->connections, i)));
        if (!rc)
            rc = eph_buf_appends(&b, " (other methods and paths than the connection allows are "
                                     "refused with 403). ");
    }
    if (rc) {
        eph_buf_release(&b);
        return NULL;
    }
    return eph_buf_steal(&b);
}

char *eph_agent_system_prompt(const struct eph_agent_ctx *ctx)
{
    const struct eph_run *r = ctx->run;
    char *s = NULL;
    char *broker = broker_prompt(r);
    int n = asprintf(
        &s,
        "You are an agent working inside a disposable, isolated sandbox (%s backend) that is "
        "destroyed when the run ends; nothing you write survives. Permissions: shell %s, web %s, "
        "connections %s. Commands run with /bin/sh -c as user worker in the scratch directory, "
        "with %u MiB of memory, %u processes, %u MiB of disk, and %u seconds per command; each "
        "output stream returned to you is capped at %u bytes. %s The run has a time limit of %u "
        "seconds and a hard budget. Report real outputs, never what you expect. Answer in "
        "Markdown when you are done, without calling a tool.",
        ctx->backend_name ? ctx->backend_name : "sandbox", r->shell ? "on" : "off",
        r->web ? "on" : "off",
        r->connections && json_array_size(r->connections) ? "as listed" : "none",
        ctx->limits->memory_mib, ctx->limits->pids, ctx->limits->disk_mib,
        ctx->command_timeout_ms / 1000, ctx->output_cap, broker ? broker : "", r->timeout_seconds);
    free(broker);
    return n < 0 ? NULL : s;
}

static char *tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *tool_error(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *o = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* A string for JSON from raw bytes, cut at cap with a note of what was dropped. */
static json_t *capped_text(const struct eph_buf *b, uint64_t total, size_t cap, bool note)
{
    size_t n = b->len < cap ? b->len : cap;
    char *clean = eph_text_utf8_sanitize(b->data ? b->data : "", n);
    if (!clean)
        return json_string("");
    json_t *s;
    if (note && total > n) {
        char *with = NULL;
        if (asprintf(&with, "%s\n[output cut: %llu of %llu bytes not shown]", clean,
                     (unsigned long long)(total - n), (unsigned long long)total) < 0)
            with = NULL;
        s = json_string(with ? with : clean);
        free(with);
    } else {
        s = json_string(clean);
    }
    free(clean);
    return s;
}

static void record_progress(struct eph_agent_ctx *ctx)
{
    struct eph_run *r = ctx->run;
    r->cost.model_micros = ctx->budget->model;
    r->cost.web_micros = ctx->budget->web;
    r->cost.compute_micros = eph_budget_compute(ctx->budget, eph_clock_mono_ns());
    int rc = ctx->store->ops->run_progress(ctx->store, r);
    if (rc)
        EPH_WARN("agent", "run %s: cannot record progress: %s", r->id, strerror(-rc));
}

/* The time a command may take: its own limit, never past the run's deadline or the instant the
 * budget runs out. 0 when no time is left. *stop says what ends the run if the command is still
 * running when that time is up: -ETIMEDOUT (the deadline), -EDQUOT (the budget), or 0 (only the
 * command's own limit, which the model is told about). */
static uint32_t command_timeout(struct eph_agent_ctx *ctx, int *stop)
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
    if (ms > ctx->command_timeout_ms) {
        ms = ctx->command_timeout_ms;
        *stop = 0;
    }
    return ms ? (uint32_t)ms : 1;
}

static int run_shell(struct eph_agent_ctx *ctx, const char *command, char **content)
{
    struct eph_run *r = ctx->run;
    int stop;
    uint32_t timeout = command_timeout(ctx, &stop);
    if (timeout == 0)
        return stop;

    /* The sandbox keeps at most what the events show; the model sees output_cap of it. */
    uint32_t keep = ctx->output_cap > EVENT_OUTPUT_MAX ? ctx->output_cap : EVENT_OUTPUT_MAX;
    struct eph_exec_request req = {
        .command = command, .timeout_ms = timeout, .stdout_cap = keep, .stderr_cap = keep};
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    int rc = eph_sandbox_exec(ctx->sb, &req, &res);
    if (!rc)
        eph_metrics_observe_exec(res.duration_us * 1000u);
    r->usage.shell_commands++;

    bool zdr = r->zdr;
    json_t *data;
    if (rc) {
        data = json_pack("{s:s}", "error",
                         eph_live_cancelled(ctx->live) ? "cancelled" : "sandbox failed");
    } else {
        data = json_pack(
            "{s:i, s:I, s:I, s:I}", "exit_code", res.signal ? 128 + res.signal : res.exit_code,
            "duration_ms", (json_int_t)(res.duration_us / 1000), "stdout_bytes",
            (json_int_t)res.stdout_total, "stderr_bytes", (json_int_t)res.stderr_total);
        if (res.signal)
            json_object_set_new(data, "signal", json_integer(res.signal));
        if (res.timed_out)
            json_object_set_new(data, "timed_out", json_true());
        if (!zdr) {
            json_object_set_new(data, "stdout",
                                capped_text(&res.out, res.stdout_total, EVENT_OUTPUT_MAX, false));
            json_object_set_new(data, "stderr",
                                capped_text(&res.err, res.stderr_total, EVENT_OUTPUT_MAX, false));
            json_object_set_new(data, "stdout_truncated",
                                json_boolean(res.stdout_total > EVENT_OUTPUT_MAX));
            json_object_set_new(data, "stderr_truncated",
                                json_boolean(res.stderr_total > EVENT_OUTPUT_MAX));
        }
    }
    if (zdr) {
        eph_live_emit(ctx->live, ctx->store, "shell", "shell.command", data, "shell.command");
    } else {
        char *clean = eph_text_utf8_sanitize(command, strlen(command));
        char *shown = clean ? eph_text_cut(clean, 200) : NULL;
        eph_live_emit(ctx->live, ctx->store, "shell", "shell.command", data, "$ %s",
                      shown ? shown : "");
        free(shown);
        free(clean);
    }
    record_progress(ctx);

    if (rc) {
        eph_exec_result_release(&res);
        if (eph_live_cancelled(ctx->live))
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

    json_t *o =
        json_pack("{s:i, s:o, s:o}", "exit_code", res.signal ? 128 + res.signal : res.exit_code,
                  "stdout", capped_text(&res.out, res.stdout_total, ctx->output_cap, true),
                  "stderr", capped_text(&res.err, res.stderr_total, ctx->output_cap, true));
    if (res.signal)
        json_object_set_new(o, "signal", json_integer(res.signal));
    if (res.timed_out)
        json_object_set_new(o, "timed_out", json_true());
    *content = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    eph_exec_result_release(&res);
    return 0;
}

static int run_write_file(struct eph_agent_ctx *ctx, const char *path, const char *text,
                          char **content)
{
    if (!eph_text_safe_relpath(path, strlen(path))) {
        *content = tool_error("invalid path '%s': use a relative path inside the scratch "
                              "directory, without '..'",
                              path);
        return 0;
    }
    size_t len = strlen(text);
    if (len > TOOL_FILE_MAX) {
        *content = tool_error("content too large: at most 1 MiB");
        return 0;
    }
    int rc = ctx->sb->ops->write_file(ctx->sb, path, text, len, 0644);
    if (rc)
        *content = tool_error("cannot write the file: %s", eph_strerror(rc));
    else
        *content = strdup("{\"ok\":true}");
    return 0;
}

static int run_read_file(struct eph_agent_ctx *ctx, const char *path, char **content)
{
    if (!eph_text_safe_relpath(path, strlen(path))) {
        *content = tool_error("invalid path '%s': use a relative path inside the scratch "
                              "directory, without '..'",
                              path);
        return 0;
    }
    struct eph_buf b;
    eph_buf_init(&b, ctx->output_cap);
    int rc = ctx->sb->ops->read_file(ctx->sb, path, ctx->output_cap, &b);
    if (rc) {
        *content = tool_error("cannot read the file: %s", eph_strerror(rc));
    } else {
        json_t *o = json_pack("{s:o}", "content", capped_text(&b, b.len, b.len, false));
        *content = json_dumps(o, JSON_COMPACT);
        json_decref(o);
    }
    eph_buf_release(&b);
    return 0;
}

/* web_fetch: executed by the run's broker on this thread (it meters on the budget), each hop an
 * event of its own. */
static int run_web_fetch(struct eph_agent_ctx *ctx, const char *url, char **content)
{
    if (!ctx->broker) {
        *content = tool_error("web_fetch is not available in this run");
        return 0;
    }
    struct eph_web_fetch f;
    char err[256] = "";
    int rc = eph_broker_web_fetch(ctx->broker, url, ctx->output_cap, &f, err, sizeof(err));
    record_progress(ctx);
    if (rc == -EDQUOT)
        return -EDQUOT;
    if (rc) {
        *content = tool_error("%s", err[0] ? err : eph_strerror(rc));
        return 0;
    }
    struct eph_buf b = {.data = f.text, .len = strlen(f.text)};
    json_t *o =
        json_pack("{s:i, s:s, s:o, s:b}", "status", f.status, "content_type", f.content_type,
                  "text", capped_text(&b, b.len, b.len, false), "truncated", f.truncated);
    if (f.redirects)
        json_object_set_new(o, "redirects", json_integer(f.redirects));
    *content = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    free(f.text);
    return 0;
}

int eph_tools_execute(struct eph_agent_ctx *ctx, const struct eph_tool_call *call, char **content)
{
    struct eph_run *r = ctx->run;
    *content = NULL;
    const char *name = call->name ? call->name : "";
    bool is_shell = strcmp(name, "shell") == 0, is_read = strcmp(name, "read_file") == 0,
         is_write = strcmp(name, "write_file") == 0, is_web = strcmp(name, "web_fetch") == 0;
    if (!((r->shell && (is_shell || is_read || is_write)) || (r->web && is_web))) {
        char *clean = eph_text_utf8_sanitize(name, strlen(name));
        char *shown = clean ? eph_text_cut(clean, 64) : NULL;
        *content = tool_error("unknown tool '%s' (not available in this run)", shown ? shown : "");
        free(shown);
        free(clean);
        return 0;
    }
    json_error_t je;
    json_t *args = json_loads(call->arguments ? call->arguments : "", JSON_REJECT_DUPLICATES, &je);
    if (!args || !json_is_object(args)) {
        *content = args ? tool_error("arguments must be a JSON object")
                        : tool_error("arguments are not valid JSON: %s", je.text);
        json_decref(args);
        return 0;
    }
    int rc = 0;
    const char *allowed[3] = {NULL, NULL, NULL};
    if (is_shell)
        allowed[0] = "command";
    else if (is_read)
        allowed[0] = "path";
    else if (is_write)
        allowed[0] = "path", allowed[1] = "content";
    else
        allowed[0] = "url";
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v)
    {
        bool ok = false;
        for (int i = 0; allowed[i]; i++)
            ok |= strcmp(key, allowed[i]) == 0;
        if (!ok) {
            char *clean = eph_text_utf8_sanitize(key, strlen(key));
            char *shown = clean ? eph_text_cut(clean, 64) : NULL;
            *content = tool_error("unexpected argument '%s'", shown ? shown : "");
            free(shown);
            free(clean);
            goto out;
        }
        if (!json_is_string(v)) {
            *content = tool_error("argument '%s' must be a string", key);
            goto out;
        }
    }
    for (int i = 0; allowed[i]; i++) {
        if (!json_object_get(args, allowed[i])) {
            *content = tool_error("missing argument '%s'", allowed[i]);
            goto out;
        }
    }
    if (is_shell) {
        const char *cmd = json_string_value(json_object_get(args, "command"));
        size_t len = json_string_length(json_object_get(args, "command"));
        if (len == 0 || len > COMMAND_MAX || strlen(cmd) != len)
            *content = tool_error("command must be 1 byte to 64 KiB, without NUL");
        else
            rc = run_shell(ctx, cmd, content);
    } else if (is_write) {
        const char *path = json_string_value(json_object_get(args, "path"));
        rc =
            run_write_file(ctx, path, json_string_value(json_object_get(args, "content")), content);
    } else if (is_read) {
        rc = run_read_file(ctx, json_string_value(json_object_get(args, "path")), content);
    } else {
        const char *url = json_string_value(json_object_get(args, "url"));
        size_t len = json_string_length(json_object_get(args, "url"));
        if (!url || len == 0 || len > 2000 || strlen(url) != len)
            *content = tool_error("url must be an http(s) URL of at most 2000 bytes");
        else
            rc = run_web_fetch(ctx, url, content);
    }
out:
    json_decref(args);
    if (!rc && !*content)
        *content = tool_error("out of memory");
    return rc;
}
