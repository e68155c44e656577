/* The agent loop and its tools (src/agent/agent.c, tools.c) against a scripted model and an
 * in-memory sandbox: each tool's happy path and its bad arguments, a long output kept as head and
 * tail, edit_file with 0, 1 and 2 matches, a script written executable then run, rejected calls
 * as events, the system prompt per permissions, and the record's data fields (docs/AGENT.md). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/id.h"

/* ---- an in-memory sandbox ---- */

#define FAKE_FILES 8

struct fake_file {
    char path[64];
    char *data;
    size_t len;
    unsigned mode;
};

struct fake_sb {
    struct eph_sandbox base;
    struct fake_file files[FAKE_FILES];
    struct eph_exec_request last; /* the last exec asked for (command not kept) */
    unsigned execs;
};

static struct fake_file *fake_find(struct fake_sb *f, const char *path)
{
    for (int i = 0; i < FAKE_FILES; i++)
        if (f->files[i].data && strcmp(f->files[i].path, path) == 0)
            return &f->files[i];
    return NULL;
}

/* Appends a stream of n bytes ("0123456789" repeated) as the guest would keep it for req. */
static void fake_stream(const struct eph_exec_request *req, struct eph_buf *b, uint64_t *total,
                        size_t n)
{
    char *all = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        all[i] = (char)('0' + i % 10);
    *total = n;
    size_t cap = req->stdout_cap;
    if (n <= cap) {
        assert_int_equal(eph_buf_append(b, all, n), 0);
    } else if (req->head_tail) {
        assert_int_equal(eph_buf_append(b, all, cap - cap / 2), 0);
        assert_int_equal(eph_buf_append(b, all + n - cap / 2, cap / 2), 0);
    } else {
        assert_int_equal(eph_buf_append(b, all, cap), 0);
    }
    free(all);
}

static int fake_exec(struct eph_sandbox *sb, const struct eph_exec_request *req,
                     struct eph_exec_result *res)
{
    struct fake_sb *f = (struct fake_sb *)sb;
    f->last = *req;
    f->execs++;
    eph_buf_init(&res->out, req->stdout_cap);
    eph_buf_init(&res->err, req->stderr_cap);
    res->exit_code = 0;
    unsigned n;
    const char *cmd = req->command;
    if (strncmp(cmd, "say ", 4) == 0) {
        /* Written while it runs (the live output), then kept as the result's stdout. */
        if (req->on_output)
            req->on_output(req->on_output_arg, 1, cmd + 4, strlen(cmd + 4));
        assert_int_equal(eph_buf_appends(&res->out, cmd + 4), 0);
        res->stdout_total = res->out.len;
    } else if (sscanf(cmd, "out %u", &n) == 1) {
        fake_stream(req, &res->out, &res->stdout_total, n);
    } else if (strncmp(cmd, "stat -c %a", 10) == 0) {
        const char *p = req->env && req->env[0] ? strchr(req->env[0], '=') + 1 : "";
        struct fake_file *ff = fake_find(f, p);
        char m[16];
        snprintf(m, sizeof(m), "%o\n", ff ? ff->mode : 0);
        res->exit_code = ff ? 0 : 1;
        assert_int_equal(eph_buf_appends(&res->out, ff ? m : ""), 0);
        res->stdout_total = res->out.len;
    } else if (strncmp(cmd, "./", 2) == 0) {
        struct fake_file *ff = fake_find(f, cmd + 2);
        const char *say = !ff ? "not found\n" : ff->mode & 0100 ? "ran\n" : "Permission denied\n";
        res->exit_code = ff && (ff->mode & 0100) ? 0 : 126;
        struct eph_buf *b = res->exit_code ? &res->err : &res->out;
        assert_int_equal(eph_buf_appends(b, say), 0);
        res->stdout_total = res->out.len;
        res->stderr_total = res->err.len;
    } else {
        assert_int_equal(eph_buf_appends(&res->out, cmd), 0);
        res->stdout_total = res->out.len;
    }
    return 0;
}

static int fake_write(struct eph_sandbox *sb, const char *path, const void *data, size_t len,
                      unsigned mode)
{
    struct fake_sb *f = (struct fake_sb *)sb;
    struct fake_file *ff = fake_find(f, path);
    for (int i = 0; !ff && i < FAKE_FILES; i++)
        if (!f->files[i].data)
            ff = &f->files[i];
    if (!ff)
        return -ENOSPC;
    free(ff->data);
    snprintf(ff->path, sizeof(ff->path), "%s", path);
    ff->data = malloc(len + 1);
    memcpy(ff->data, data, len);
    ff->len = len;
    ff->mode = mode;
    return 0;
}

static int fake_read(struct eph_sandbox *sb, const char *path, size_t cap, struct eph_buf *out)
{
    struct fake_file *ff = fake_find((struct fake_sb *)sb, path);
    if (!ff)
        return -ENOENT;
    if (ff->len > cap)
        return -EMSGSIZE;
    return eph_buf_append(out, ff->data, ff->len);
}

static const char *fake_scratch(struct eph_sandbox *sb)
{
    (void)sb;
    return "/home/worker/scratch";
}

static const struct eph_sandbox_ops fake_ops = {
    .name = "fake",
    .exec = fake_exec,
    .write_file = fake_write,
    .read_file = fake_read,
    .scratch_dir = fake_scratch,
};

/* ---- a sink that keeps the events ---- */

static int keep_event(void *ctx, const char *source, const char *type, json_t *data,
                      const char *message)
{
    json_array_append_new((json_t *)ctx, json_pack("{s:s, s:s, s:o?, s:s}", "source", source,
                                                   "type", type, "data", data, "message", message));
    return 0;
}

/* A sink that records events in batches, as the server's does (each batch one transaction):
 * ctx is an array of arrays of event types. */
static int keep_batch(void *ctx, const struct eph_sink_event *ev, size_t n)
{
    json_t *batch = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(batch,
                              json_pack("{s:s, s:o?}", "type", ev[i].type, "data", ev[i].data));
    }
    json_array_append_new((json_t *)ctx, batch);
    return 0;
}

static unsigned progress_calls;
static int count_progress(void *ctx)
{
    (void)ctx;
    progress_calls++;
    return 0;
}

/* ---- a scripted model ---- */

struct script_model {
    struct eph_model base;
    json_t *answers; /* [{text?, calls?: [[id, name, args]]}] */
    json_t *seen;    /* a copy of the messages of each call */
    size_t next;
};

static int script_call(struct eph_model *m, const struct eph_model_request *req,
                       struct eph_model_response *resp, char *err, size_t errlen)
{
    struct script_model *s = (struct script_model *)m;
    json_array_append_new(s->seen, json_deep_copy(req->messages));
    json_t *a = json_array_get(s->answers, s->next++);
    if (!a) {
        snprintf(err, errlen, "script exhausted");
        return -EIO;
    }
    const char *text = json_string_value(json_object_get(a, "text"));
    resp->content = text ? strdup(text) : NULL;
    json_t *calls = json_object_get(a, "calls");
    resp->ncalls = json_array_size(calls);
    resp->calls = resp->ncalls ? calloc(resp->ncalls, sizeof(*resp->calls)) : NULL;
    for (size_t i = 0; i < resp->ncalls; i++) {
        json_t *c = json_array_get(calls, i);
        resp->calls[i].id = strdup(json_string_value(json_array_get(c, 0)));
        resp->calls[i].name = strdup(json_string_value(json_array_get(c, 1)));
        resp->calls[i].arguments = strdup(json_string_value(json_array_get(c, 2)));
    }
    resp->finish_reason = strdup(resp->ncalls ? "tool_calls" : "stop");
    resp->input_tokens = 100;
    resp->output_tokens = 10;
    resp->usage_final = true;
    resp->sent = true;
    resp->http_status = 200;
    return 0;
}

static void script_free(struct eph_model *m)
{
    (void)m;
}

static const struct eph_model_ops script_ops = {
    .name = "script", .call = script_call, .free = script_free};

/* ---- fixture ---- */

struct fx {
    struct fake_sb sb;
    struct eph_budget budget;
    struct eph_agent_usage usage;
    json_t *events;
    struct eph_sink sink;
    struct eph_model_config mcfg;
    struct script_model model;
    struct eph_sandbox_limits limits;
    struct eph_agent_ctx ctx;
};

static struct fx *fx_new(bool shell, bool web, bool zdr)
{
    struct fx *x = calloc(1, sizeof(*x));
    x->sb.base.ops = &fake_ops;
    eph_budget_init(&x->budget, 2000000, 0);
    eph_budget_sandbox_started(&x->budget, eph_clock_mono_ns());
    x->events = json_array();
    x->sink = (struct eph_sink){.ctx = x->events, .event = keep_event, .progress = count_progress};
    x->mcfg = (struct eph_model_config){.id = "script",
                                        .provider = "script",
                                        .input_micros_per_mtok = 1000000,
                                        .output_micros_per_mtok = 1000000,
                                        .max_output_tokens = 1000};
    x->model.base.ops = &script_ops;
    x->model.base.cfg = &x->mcfg;
    x->model.answers = json_array();
    x->model.seen = json_array();
    eph_sandbox_limits_default(&x->limits);
    x->ctx = (struct eph_agent_ctx){.sink = &x->sink,
                                    .run_id = "run_test",
                                    .prompt = "do the thing",
                                    .shell = shell,
                                    .web = web,
                                    .zdr = zdr,
                                    .timeout_seconds = 600,
                                    .usage = &x->usage,
                                    .model = &x->model.base,
                                    .mcfg = &x->mcfg,
                                    .sb = &x->sb.base,
                                    .budget = &x->budget,
                                    .deadline_ns = eph_clock_mono_ns() + 600000000000ull,
                                    .turn_limit = 7,
                                    .command_timeout_ms = 60000,
                                    .output_cap = 100,
                                    .limits = &x->limits,
                                    .backend_name = "fake",
                                    .turn = 1};
    return x;
}

static void fx_free(struct fx *x)
{
    for (int i = 0; i < FAKE_FILES; i++)
        free(x->sb.files[i].data);
    json_decref(x->events);
    json_decref(x->model.answers);
    json_decref(x->model.seen);
    free(x);
}

/* Runs one call; returns its result parsed (decref it). */
static json_t *call(struct fx *x, const char *id, const char *name, const char *args)
{
    struct eph_tool_call c = {(char *)id, (char *)name, (char *)args};
    char *content = NULL;
    assert_int_equal(eph_tools_execute(&x->ctx, &c, &content), 0);
    assert_non_null(content);
    json_t *o = json_loads(content, 0, NULL);
    assert_non_null(o);
    free(content);
    return o;
}

/* Runs one call that must succeed: its result, which is no error (a sandbox's failure, out of
 * memory included, is the tool's error text for the model). */
static json_t *call_ok(struct fx *x, const char *id, const char *name, const char *args)
{
    json_t *o = call(x, id, name, args);
    const char *err = json_string_value(json_object_get(o, "error"));
    if (err)
        fail_msg("%s %s: %s", name, args, err);
    return o;
}

static json_t *last_event(struct fx *x)
{
    return json_array_get(x->events, json_array_size(x->events) - 1);
}

static const char *ev_str(json_t *ev, const char *path1, const char *path2)
{
    json_t *v = json_object_get(json_object_get(ev, "data"), path1);
    if (path2)
        v = json_object_get(v, path2);
    return json_string_value(v);
}

/* The error of a call, and that it was recorded as tool.rejected with the same reason. */
static void expect_rejected(struct fx *x, const char *name, const char *args, const char *why)
{
    size_t before = json_array_size(x->events);
    unsigned execs = x->sb.execs;
    json_t *o = call(x, "c_bad", name, args);
    const char *err = json_string_value(json_object_get(o, "error"));
    assert_non_null(err);
    if (!strstr(err, why))
        fail_msg("%s %s: '%s' does not say '%s'", name, args, err, why);
    assert_int_equal(json_array_size(x->events), before + 1);
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "type")), "tool.rejected");
    assert_non_null(strstr(ev_str(ev, "reason", NULL), why));
    assert_string_equal(ev_str(ev, "call", "arguments"), args);
    assert_string_equal(ev_str(ev, "call", "id"), "c_bad");
    assert_non_null(strstr(ev_str(ev, "result", NULL), why));
    assert_int_equal(x->sb.execs, execs); /* nothing ran */
    json_decref(o);
}

/* ---- tools ---- */

static void test_shell_head_and_tail(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_t *o = call_ok(x, "c1", "shell", "{\"command\": \"out 1000\"}");
    assert_true(x->sb.last.head_tail);
    assert_int_equal(x->sb.last.stdout_cap, 100);
    const char *out = json_string_value(json_object_get(o, "stdout"));
    /* head: the first 50 bytes, tail: the last 50, and what was cut between them */
    assert_memory_equal(out, "01234567890123456789", 20);
    assert_non_null(strstr(out, "\n[… 900 bytes cut …]\n"));
    const char *tail = strstr(out, "…]\n") + strlen("…]\n");
    assert_int_equal(strlen(tail), 50);
    assert_string_equal(tail + 40, "0123456789"); /* byte 999 is '9' */
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "type")), "shell.command");
    assert_string_equal(json_string_value(json_object_get(ev, "message")), "$ out 1000");
    assert_string_equal(ev_str(ev, "command", NULL), "out 1000");
    assert_string_equal(ev_str(ev, "call", "name"), "shell");
    assert_string_equal(ev_str(ev, "call", "arguments"), "{\"command\": \"out 1000\"}");
    char *content = json_dumps(o, JSON_COMPACT);
    assert_string_equal(ev_str(ev, "result", NULL), content);
    free(content);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "data"), "turn")), 1);
    assert_int_equal(x->usage.shell_commands, 1);
    json_decref(o);
    /* a short output is whole, without a note */
    o = call_ok(x, "c2", "shell", "{\"command\": \"out 30\"}");
    assert_string_equal(json_string_value(json_object_get(o, "stdout")),
                        "012345678901234567890123456789");
    json_decref(o);
    fx_free(x);
}

/* A command that ends before its first live text was due: its output, shown live, is recorded
 * with its shell.command event, in the one batch (transaction) the sink is asked for, in order;
 * a sink without batches gets the same events one by one. */
static void test_quick_command_output_goes_with_its_event(void **state)
{
    struct fx *x = fx_new(true, false, false);
    json_t *batches = json_array();
    x->sink.ctx = batches;
    x->sink.event_progress = keep_batch;
    x->ctx.live_output_bytes = 1024;
    json_decref(call_ok(x, "c1", "shell", "{\"command\": \"say hello\\n\"}"));
    assert_int_equal(json_array_size(batches), 1);
    json_t *b = json_array_get(batches, 0);
    assert_int_equal(json_array_size(b), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(b, 0), "type")),
                        "shell.output");
    json_t *d = json_object_get(json_array_get(b, 0), "data");
    assert_string_equal(json_string_value(json_object_get(d, "text")), "hello\n");
    assert_string_equal(json_string_value(json_object_get(d, "call")), "c1");
    assert_string_equal(json_string_value(json_object_get(json_array_get(b, 1), "type")),
                        "shell.command");
    json_decref(batches);
    x->sink.ctx = x->events;
    x->sink.event_progress = NULL;

    /* Without batches: the same two events, in that order, each alone. */
    json_decref(call_ok(x, "c2", "shell", "{\"command\": \"say again\\n\"}"));
    assert_int_equal(json_array_size(x->events), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(x->events, 0), "type")),
                        "shell.output");
    assert_string_equal(json_string_value(json_object_get(json_array_get(x->events, 1), "type")),
                        "shell.command");
    fx_free(x);
}

static void test_shell_timeout_argument(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_decref(call(x, "c1", "shell", "{\"command\": \"true\", \"timeout_seconds\": 5}"));
    assert_int_equal(x->sb.last.timeout_ms, 5000);
    json_decref(call(x, "c2", "shell", "{\"command\": \"true\"}"));
    assert_int_equal(x->sb.last.timeout_ms, 60000);
    /* never past the run's deadline */
    x->ctx.deadline_ns = eph_clock_mono_ns() + 3000000000ull;
    json_decref(call(x, "c3", "shell", "{\"command\": \"true\", \"timeout_seconds\": 50}"));
    assert_true(x->sb.last.timeout_ms <= 3000);
    expect_rejected(x, "shell", "{\"command\": \"true\", \"timeout_seconds\": 0}",
                    "timeout_seconds must be 1 to 60");
    expect_rejected(x, "shell", "{\"command\": \"true\", \"timeout_seconds\": 61}",
                    "timeout_seconds must be 1 to 60");
    expect_rejected(x, "shell", "{\"command\": \"true\", \"timeout_seconds\": \"5\"}",
                    "argument 'timeout_seconds' must be an integer");
    expect_rejected(x, "shell", "{\"command\": \"\"}", "command must be 1 byte to 64 KiB");
    fx_free(x);
}

static void test_bad_arguments_are_rejected(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    expect_rejected(x, "shell", "{\"command\": \"ls\"", "arguments are not valid JSON");
    expect_rejected(x, "shell", "[\"ls\"]", "arguments must be a JSON object");
    expect_rejected(x, "shell", "{\"cmd\": \"ls\"}", "unexpected argument 'cmd'");
    expect_rejected(x, "shell", "{}", "missing argument 'command'");
    expect_rejected(x, "shell", "{\"command\": 42}", "argument 'command' must be a string");
    expect_rejected(x, "shell", "{\"command\": \"a\\u0000b\"}", "not valid JSON"); /* NUL */
    expect_rejected(x, "launch", "{}", "unknown tool 'launch'");
    expect_rejected(x, "web_fetch", "{\"url\": \"http://x\"}", "unknown tool 'web_fetch'");
    expect_rejected(x, "read_file", "{\"path\": \"../etc/passwd\"}", "invalid path");
    expect_rejected(x, "read_file", "{\"path\": \"/etc/passwd\"}", "invalid path");
    expect_rejected(x, "write_file", "{\"path\": \"a\", \"content\": \"x\", \"executable\": 1}",
                    "argument 'executable' must be a boolean");
    expect_rejected(x, "write_file", "{\"path\": \"a\"}", "missing argument 'content'");
    expect_rejected(x, "write_file", "{\"path\": \"a/../../b\", \"content\": \"x\"}",
                    "invalid path");
    expect_rejected(x, "edit_file", "{\"path\": \"a\", \"old\": \"\", \"new\": \"x\"}",
                    "old must not be empty");
    expect_rejected(x, "edit_file", "{\"path\": \"a\", \"old\": \"x\"}", "missing argument 'new'");
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "message")),
                        "rejected edit_file: missing argument 'new'");
    fx_free(x);

    /* without shell, the file tools do not exist either */
    x = fx_new(false, true, false);
    expect_rejected(x, "read_file", "{\"path\": \"a\"}", "unknown tool 'read_file'");
    expect_rejected(x, "web_fetch", "{\"url\": \"\"}", "url must be an http(s) URL");
    fx_free(x);
}

static void test_long_hostile_names_are_cut(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    /* 300 two-byte characters as an argument name, and as a tool's name */
    char key[700] = "{\"";
    for (int i = 0; i < 300; i++)
        strcat(key, "\u00e9");
    strcat(key, "\": 1}");
    expect_rejected(x, "shell", key, "unexpected argument '\xc3\xa9\xc3\xa9");
    json_t *ev = last_event(x);
    const char *reason = ev_str(ev, "reason", NULL);
    assert_non_null(strstr(reason, "\xe2\x80\xa6")); /* cut, with "…" */
    assert_true(strlen(reason) < 300);
    char name[700] = "";
    for (int i = 0; i < 300; i++)
        strcat(name, "\xc3\xa9");
    expect_rejected(x, name, "{}", "unknown tool '");
    assert_true(strlen(json_string_value(json_object_get(last_event(x), "message"))) < 512);
    fx_free(x);
}

static void test_write_too_large_is_rejected(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    size_t n = EPH_TOOL_WRITE_MAX + 1;
    char *big = malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    json_t *a = json_pack("{s:s, s:s}", "path", "big.txt", "content", big);
    char *args = json_dumps(a, JSON_COMPACT);
    expect_rejected(x, "write_file", args, "content too large");
    assert_null(fake_find(&x->sb, "big.txt"));
    free(args);
    json_decref(a);
    free(big);
    fx_free(x);
}

static void test_read_file_ranges(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    char text[40000];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (char)('a' + i % 26);
    assert_int_equal(fake_write(&x->sb.base, "t.txt", text, sizeof(text), 0644), 0);
    json_t *o = call_ok(x, "r1", "read_file", "{\"path\": \"t.txt\"}");
    assert_int_equal(json_integer_value(json_object_get(o, "size")), 40000);
    assert_int_equal(json_integer_value(json_object_get(o, "bytes")), EPH_TOOL_READ_DEFAULT);
    assert_true(json_is_true(json_object_get(o, "more")));
    assert_int_equal(json_integer_value(json_object_get(o, "next_offset")), EPH_TOOL_READ_DEFAULT);
    json_decref(o);
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "type")), "file.read");
    assert_string_equal(json_string_value(json_object_get(ev, "message")),
                        "read t.txt · 16,384 of 40,000 bytes");
    o = call_ok(x, "r2", "read_file", "{\"path\": \"t.txt\", \"offset\": 39990, \"limit\": 100}");
    /* 39990 % 26 = 2: "cdefghijkl" */
    assert_string_equal(json_string_value(json_object_get(o, "content")), "cdefghijkl");
    assert_false(json_is_true(json_object_get(o, "more")));
    assert_null(json_object_get(o, "next_offset"));
    json_decref(o);
    o = call_ok(x, "r3", "read_file", "{\"path\": \"t.txt\", \"offset\": 50000}");
    assert_int_equal(json_integer_value(json_object_get(o, "bytes")), 0);
    json_decref(o);
    expect_rejected(x, "read_file", "{\"path\": \"t.txt\", \"offset\": -1}",
                    "offset must be 0 or more");
    expect_rejected(x, "read_file", "{\"path\": \"t.txt\", \"limit\": 0}", "limit must be 1 to");
    expect_rejected(x, "read_file", "{\"path\": \"t.txt\", \"limit\": 65537}",
                    "limit must be 1 to 65536");
    /* a missing file is the tool's error, recorded as its event */
    o = call(x, "r4", "read_file", "{\"path\": \"nope\"}");
    assert_non_null(strstr(json_string_value(json_object_get(o, "error")), "cannot read"));
    assert_string_equal(json_string_value(json_object_get(last_event(x), "type")), "file.read");
    json_decref(o);
    fx_free(x);
}

static void test_read_file_binary(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    assert_int_equal(fake_write(&x->sb.base, "b.bin", "\x00\x01\x02\xff", 4, 0644), 0);
    json_t *o = call_ok(x, "r1", "read_file", "{\"path\": \"b.bin\"}");
    assert_true(json_is_true(json_object_get(o, "binary")));
    assert_string_equal(json_string_value(json_object_get(o, "content_base64")), "AAEC/w==");
    assert_null(json_object_get(o, "content"));
    assert_string_equal(json_string_value(json_object_get(last_event(x), "message")),
                        "read b.bin · binary file, 4 bytes");
    json_decref(o);
    /* a NUL makes it binary, even when the rest is text */
    assert_int_equal(fake_write(&x->sb.base, "n.dat", "ab\0cd", 5, 0644), 0);
    o = call_ok(x, "r3", "read_file", "{\"path\": \"n.dat\"}");
    assert_string_equal(json_string_value(json_object_get(o, "content_base64")), "YWIAY2Q=");
    json_decref(o);
    /* UTF-8 cut by the range is still text */
    assert_int_equal(fake_write(&x->sb.base, "u.txt", "h\xc3\xa9h\xc3\xa9", 6, 0644), 0);
    o = call_ok(x, "r2", "read_file", "{\"path\": \"u.txt\", \"offset\": 2, \"limit\": 3}");
    assert_null(json_object_get(o, "binary"));
    json_decref(o);
    fx_free(x);
}

static void test_write_executable_then_run(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_t *o = call_ok(x, "w1", "write_file",
                        "{\"path\": \"x.sh\", \"content\": \"echo hi\\n\", \"executable\": true}");
    assert_true(json_is_true(json_object_get(o, "ok")));
    json_decref(o);
    assert_int_equal(fake_find(&x->sb, "x.sh")->mode, 0755);
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "type")), "file.write");
    assert_string_equal(json_string_value(json_object_get(ev, "message")),
                        "wrote x.sh · 8 bytes · executable");
    o = call_ok(x, "s1", "shell", "{\"command\": \"./x.sh\"}");
    assert_int_equal(json_integer_value(json_object_get(o, "exit_code")), 0);
    json_decref(o);
    json_decref(
        call_ok(x, "w2", "write_file", "{\"path\": \"y.sh\", \"content\": \"echo hi\\n\"}"));
    assert_int_equal(fake_find(&x->sb, "y.sh")->mode, 0644);
    o = call_ok(x, "s2", "shell", "{\"command\": \"./y.sh\"}");
    assert_int_equal(json_integer_value(json_object_get(o, "exit_code")), 126);
    json_decref(o);
    fx_free(x);
}

static void test_edit_file_matches(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_decref(call_ok(x, "w1", "write_file",
                        "{\"path\": \"a.py\", \"content\": \"a = 1\\nb = 1\\n\", \"executable\": "
                        "true}"));
    /* 0 matches: nothing changes */
    json_t *o =
        call(x, "e0", "edit_file", "{\"path\": \"a.py\", \"old\": \"c = 1\", \"new\": \"\"}");
    assert_non_null(strstr(json_string_value(json_object_get(o, "error")), "not found"));
    json_decref(o);
    assert_string_equal(json_string_value(json_object_get(last_event(x), "type")), "file.edit");
    assert_memory_equal(fake_find(&x->sb, "a.py")->data, "a = 1\nb = 1\n", 12);
    /* 2 matches: nothing changes, the error says how many */
    o = call(x, "e2", "edit_file", "{\"path\": \"a.py\", \"old\": \" = 1\", \"new\": \" = 2\"}");
    assert_non_null(strstr(json_string_value(json_object_get(o, "error")), "appears 2 times"));
    json_decref(o);
    assert_memory_equal(fake_find(&x->sb, "a.py")->data, "a = 1\nb = 1\n", 12);
    /* 1 match: replaced, the mode kept */
    o = call_ok(x, "e1", "edit_file",
                "{\"path\": \"a.py\", \"old\": \"b = 1\", \"new\": \"b = 22\"}");
    assert_true(json_is_true(json_object_get(o, "ok")));
    json_decref(o);
    struct fake_file *f = fake_find(&x->sb, "a.py");
    assert_int_equal(f->len, 13);
    assert_memory_equal(f->data, "a = 1\nb = 22\n", 13);
    assert_int_equal(f->mode, 0755);
    json_t *ev = last_event(x);
    assert_string_equal(json_string_value(json_object_get(ev, "message")), "edited a.py");
    assert_string_equal(ev_str(ev, "call", "name"), "edit_file");
    /* a missing file */
    o = call(x, "e3", "edit_file", "{\"path\": \"none.py\", \"old\": \"a\", \"new\": \"b\"}");
    assert_non_null(strstr(json_string_value(json_object_get(o, "error")), "cannot read"));
    json_decref(o);
    fx_free(x);
}

static void test_zdr_keeps_no_content(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, true);
    json_decref(call(x, "w1", "write_file", "{\"path\": \"secret.txt\", \"content\": \"CANARY\"}"));
    json_decref(call(x, "r1", "read_file", "{\"path\": \"secret.txt\"}"));
    json_decref(call(x, "s1", "shell", "{\"command\": \"echo CANARY\"}"));
    json_decref(call(x, "b1", "shell", "{\"CANARY\": \"x\"}"));
    json_decref(call(x, "r2", "read_file", "{\"path\": \"CANARY/../..\"}"));
    char *all = json_dumps(x->events, 0);
    assert_null(strstr(all, "CANARY"));
    assert_null(strstr(all, "secret"));
    free(all);
    json_t *ev;
    size_t i;
    json_array_foreach(x->events, i, ev)
    {
        assert_string_equal(json_string_value(json_object_get(ev, "message")),
                            json_string_value(json_object_get(ev, "type")));
        assert_null(json_object_get(json_object_get(ev, "data"), "call"));
        assert_null(json_object_get(json_object_get(ev, "data"), "result"));
    }
    fx_free(x);
}

/* ---- the prompt ---- */

static void test_prompt_per_permissions(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    char *p = eph_agent_system_prompt(&x->ctx);
    assert_non_null(p);
    assert_non_null(strstr(p, "shell on, web off"));
    assert_non_null(strstr(p, "Tools: shell, read_file, write_file, edit_file."));
    assert_non_null(strstr(p, "/home/worker/scratch"));
    assert_non_null(strstr(p, "at most 60 seconds"));
    assert_non_null(strstr(p, "capped at 100 bytes"));
    assert_non_null(strstr(p, "$2.00 of budget and "));
    assert_non_null(strstr(p, " of the run's 600 seconds are left"));
    assert_non_null(strstr(p, "at most 7 model turns"));
    assert_non_null(strstr(p, "There is no network"));
    assert_null(strstr(p, "web_fetch"));
    assert_null(strstr(p, "proxy"));
    free(p);
    x->ctx.web = true;
    p = eph_agent_system_prompt(&x->ctx);
    assert_non_null(p);
    assert_non_null(strstr(p, "edit_file, web_fetch."));
    assert_non_null(strstr(p, "HTTP_PROXY"));
    assert_null(strstr(p, "no network"));
    free(p);
    x->ctx.shell = false;
    p = eph_agent_system_prompt(&x->ctx);
    assert_non_null(p);
    assert_non_null(strstr(p, "Tools: web_fetch"));
    assert_null(strstr(p, "shell,"));
    assert_null(strstr(p, "HTTP_PROXY"));
    assert_null(strstr(p, "seconds (timeout"));
    free(p);
    x->ctx.web = false;
    p = eph_agent_system_prompt(&x->ctx);
    assert_non_null(p);
    assert_non_null(strstr(p, "You have no tools"));
    assert_null(strstr(p, "web_fetch"));
    assert_null(strstr(p, "read_file"));
    free(p);
    fx_free(x);
}

static void test_prompt_states_connections(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    const char *methods[] = {"GET", "POST"};
    const char *prefixes[] = {"/repos", "/user"};
    const char *any[] = {"GET"};
    struct eph_broker_conn conns[] = {
        {.name = "github",
         .base_url = "https://api.github.com",
         .methods = methods,
         .nmethods = 2,
         .prefixes = prefixes,
         .nprefixes = 2},
        {.name = "wiki", .base_url = "https://wiki.example", .methods = any, .nmethods = 1}};
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    struct eph_broker_run run = {.conns = conns, .nconns = 2, .budget = &x->budget};
    struct eph_broker *b;
    assert_int_equal(eph_broker_new(&s, &run, &b), 0);
    x->ctx.broker = b;
    char *p = eph_agent_system_prompt(&x->ctx);
    assert_non_null(p);
    assert_non_null(
        strstr(p, "github (methods GET, POST; paths under /repos, /user); wiki (methods GET; "
                  "every path)."));
    assert_non_null(strstr(p, "only the connections below"));
    assert_null(strstr(p, "api.github.com")); /* the upstream is not the sandbox's business */
    free(p);
    eph_broker_free(b);
    fx_free(x);
}

/* ---- the loop and the record ---- */

static void test_loop_records_turns(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_array_append_new(x->model.answers,
                          json_pack("{s:[[s,s,s],[s,s,s]]}", "calls", "t1", "shell",
                                    "{\"command\": \"echo one\"}", "t2", "nope", "{}"));
    json_array_append_new(x->model.answers, json_pack("{s:s}", "text", "all done"));
    struct eph_agent_outcome out;
    assert_int_equal(eph_agent_run(&x->ctx, &out), 0);
    assert_int_equal(out.status, EPH_AGENT_COMPLETED);
    assert_string_equal(out.result, "all done");
    free(out.result);
    assert_int_equal(x->usage.model_calls, 2);
    assert_int_equal(x->usage.model_attempts, 2); /* no retries: one attempt a call */
    assert_int_equal(x->usage.input_tokens, 200);
    assert_int_equal(x->usage.output_tokens, 20);
    assert_true(progress_calls > 0);

    /* model.call 1, shell.command, tool.rejected, model.call 2 */
    assert_int_equal(json_array_size(x->events), 4);
    json_t *m1 = json_array_get(x->events, 0), *sh = json_array_get(x->events, 1),
           *rj = json_array_get(x->events, 2), *m2 = json_array_get(x->events, 3);
    assert_string_equal(json_string_value(json_object_get(m1, "type")), "model.call");
    json_t *d1 = json_object_get(m1, "data");
    assert_int_equal(json_integer_value(json_object_get(d1, "turn")), 1);
    /* the digest of the messages the model was sent */
    char *msgs = json_dumps(json_array_get(x->model.seen, 0), JSON_COMPACT | JSON_SORT_KEYS);
    char hex[65];
    eph_sha256_hex(msgs, strlen(msgs), hex);
    free(msgs);
    assert_string_equal(json_string_value(json_object_get(d1, "request_digest")), hex);
    json_t *r1 = json_object_get(d1, "response");
    assert_string_equal(json_string_value(json_object_get(r1, "finish_reason")), "tool_calls");
    json_t *tc = json_array_get(json_object_get(r1, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "arguments")),
                        "{\"command\": \"echo one\"}");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(r1, "usage"), "input_tokens")), 100);
    assert_string_equal(json_string_value(json_object_get(sh, "type")), "shell.command");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(sh, "data"), "turn")), 1);
    assert_string_equal(ev_str(sh, "call", "id"), "t1");
    assert_string_equal(json_string_value(json_object_get(rj, "type")), "tool.rejected");
    assert_string_equal(ev_str(rj, "call", "name"), "nope");
    json_t *d2 = json_object_get(m2, "data");
    assert_int_equal(json_integer_value(json_object_get(d2, "turn")), 2);
    assert_string_equal(json_string_value(json_object_get(json_object_get(d2, "response"), "text")),
                        "all done");
    assert_string_not_equal(json_string_value(json_object_get(d2, "request_digest")), hex);
    /* each result went back to the model exactly as recorded */
    json_t *second = json_array_get(x->model.seen, 1);
    json_t *tool_msg = json_array_get(second, json_array_size(second) - 2);
    assert_string_equal(json_string_value(json_object_get(tool_msg, "content")),
                        ev_str(sh, "result", NULL));
    fx_free(x);

    /* zero data retention: the turn, not the content */
    x = fx_new(true, false, true);
    json_array_append_new(x->model.answers, json_pack("{s:s}", "text", "done"));
    assert_int_equal(eph_agent_run(&x->ctx, &out), 0);
    free(out.result);
    json_t *d = json_object_get(json_array_get(x->events, 0), "data");
    assert_int_equal(json_integer_value(json_object_get(d, "turn")), 1);
    assert_null(json_object_get(d, "request_digest"));
    assert_null(json_object_get(d, "response"));
    fx_free(x);
}

static void test_tool_events_carry_their_turn(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    json_array_append_new(x->model.answers, json_pack("{s:[[s,s,s]]}", "calls", "a", "shell",
                                                      "{\"command\": \"echo 1\"}"));
    json_array_append_new(x->model.answers, json_pack("{s:[[s,s,s]]}", "calls", "b", "read_file",
                                                      "{\"path\": \"none\"}"));
    json_array_append_new(x->model.answers, json_pack("{s:s}", "text", "done"));
    struct eph_agent_outcome out;
    assert_int_equal(eph_agent_run(&x->ctx, &out), 0);
    free(out.result);
    json_t *ev;
    size_t i;
    unsigned seen = 0;
    json_array_foreach(x->events, i, ev)
    {
        const char *id = ev_str(ev, "call", "id");
        json_int_t turn = json_integer_value(json_object_get(json_object_get(ev, "data"), "turn"));
        if (!id)
            continue;
        assert_int_equal(turn, strcmp(id, "a") == 0 ? 1 : 2);
        seen++;
    }
    assert_int_equal(seen, 2);
    fx_free(x);
}

static void test_loop_cancelled(void **state)
{
    (void)state;
    struct fx *x = fx_new(true, false, false);
    atomic_bool flag = true;
    x->ctx.cancel.flag = &flag;
    json_array_append_new(x->model.answers, json_pack("{s:s}", "text", "never"));
    struct eph_agent_outcome out;
    assert_int_equal(eph_agent_run(&x->ctx, &out), 0);
    assert_int_equal(out.status, EPH_AGENT_CANCELLED);
    assert_int_equal(x->model.next, 0);
    fx_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shell_head_and_tail),
        cmocka_unit_test(test_quick_command_output_goes_with_its_event),
        cmocka_unit_test(test_shell_timeout_argument),
        cmocka_unit_test(test_bad_arguments_are_rejected),
        cmocka_unit_test(test_long_hostile_names_are_cut),
        cmocka_unit_test(test_write_too_large_is_rejected),
        cmocka_unit_test(test_read_file_ranges),
        cmocka_unit_test(test_read_file_binary),
        cmocka_unit_test(test_write_executable_then_run),
        cmocka_unit_test(test_edit_file_matches),
        cmocka_unit_test(test_zdr_keeps_no_content),
        cmocka_unit_test(test_prompt_per_permissions),
        cmocka_unit_test(test_prompt_states_connections),
        cmocka_unit_test(test_loop_records_turns),
        cmocka_unit_test(test_tool_events_carry_their_turn),
        cmocka_unit_test(test_loop_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
