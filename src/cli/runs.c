/*
 * runs.c - `ephemeral get`, `list`, `cancel` and `balance`: one request each, shown as text (or
 * the JSON as the server sent it, with --json).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "common/id.h"
#include "common/money.h"

#define LABEL_W 13

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The integer at o.key, or -1. */
static int64_t num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

void eph_cli_print_json(const json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        puts(s);
    free(s);
    fflush(stdout);
}

/* "Label        " then the value, made safe for the terminal. */
static void field(const char *label, const char *value)
{
    printf("%-*s", LABEL_W, label);
    eph_cli_render_text(stdout, value ? value : "-", false, 2000);
    fputc('\n', stdout);
}

static const char *on_off(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? (json_is_true(v) ? "on" : "off") : "-";
}

/* A list of strings (or of objects with a path) as "a, b, c", or "none". */
static void names(const json_t *arr, char *out, size_t outlen)
{
    size_t o = 0, i;
    json_t *v;
    out[0] = '\0';
    json_array_foreach(arr, i, v)
    {
        const char *s = json_is_string(v) ? json_string_value(v) : str(v, "path");
        int n = snprintf(out + o, outlen - o, "%s%s", i ? ", " : "", s ? s : "?");
        if (n < 0 || (size_t)n >= outlen - o) {
            snprintf(out + (outlen > 4 ? outlen - 4 : 0), 4, "…");
            return;
        }
        o += (size_t)n;
    }
    if (o == 0)
        snprintf(out, outlen, "none");
}

static void money(char *out, size_t outlen, int64_t micros)
{
    char m[EPH_MONEY_FMT_MAX];
    snprintf(out, outlen, "%s", micros < 0 ? "-" : eph_money_format(micros, m));
}

/* The time from a to b, both API timestamps, or "" when either is missing. */
static void span(const char *a, const char *b, char *out, size_t outlen)
{
    int64_t ta, tb;
    out[0] = '\0';
    if (eph_cli_time_parse(a, &ta) == 0 && eph_cli_time_parse(b, &tb) == 0)
        eph_cli_format_duration(tb - ta, out, outlen);
}

/* The run's header: its id (bold on a terminal) and status. */
static void print_heading(const json_t *run, bool color)
{
    const char *status = str(run, "status");
    const char *label = eph_cli_status_label(status);
    if (color)
        fputs("\033[1m", stdout);
    eph_cli_render_text(stdout, str(run, "id"), false, 64);
    if (color)
        fputs("\033[0m", stdout);
    fputs(" · ", stdout);
    eph_cli_render_text(stdout, label ? label : status ? status : "?", false, 64);
    fputs("\n\n", stdout);
}

/* Model, times and the sandbox it ran in. */
static void print_times(const json_t *run)
{
    char buf[1024], a[64];
    bool sandbox = eph_id_is_sandbox(str(run, "id") ? str(run, "id") : "");
    if (!sandbox)
        field("Model", str(run, "model"));
    field("Created", str(run, "created_at"));
    if (sandbox)
        field("Ready", str(run, "ready_at"));
    else
        field("Started", str(run, "started_at"));
    const char *finished = str(run, "finished_at");
    span(str(run, "created_at"), finished, a, sizeof(a));
    if (finished && a[0])
        snprintf(buf, sizeof(buf), "%s (%s after creation)", finished, a);
    else
        snprintf(buf, sizeof(buf), "%s", finished ? finished : "-");
    field("Finished", buf);
    json_t *sb = json_object_get(run, "sandbox");
    if (json_is_object(sb)) {
        snprintf(buf, sizeof(buf), "%s · %lld vCPU · %lld MiB",
                 str(sb, "backend") ? str(sb, "backend") : "?", (long long)num(sb, "vcpus"),
                 (long long)num(sb, "memory_mib"));
        field("Sandbox", buf);
    }
}

static void print_permissions(const json_t *p)
{
    char buf[1024], a[64];
    if (json_object_get(p, "shell")) /* a sandbox always has one */
        field("Shell", on_off(p, "shell"));
    json_t *allow = json_object_get(json_object_get(p, "web"), "allow");
    if (json_is_array(allow)) {
        char list[512];
        names(allow, list, sizeof(list));
        snprintf(buf, sizeof(buf), "on, only %s", list);
        field("Web", buf);
    } else {
        field("Web", on_off(p, "web"));
    }
    names(json_object_get(p, "connections"), buf, sizeof(buf));
    field("Connections", buf);
    names(json_object_get(p, "files"), buf, sizeof(buf));
    field("Files", buf);
    snprintf(buf, sizeof(buf), "%s", on_off(p, "zero_data_retention"));
    field("Zero data", buf);
    snprintf(buf, sizeof(buf), "%lld s", (long long)num(p, "timeout_seconds"));
    field("Time limit", buf);
    if (num(p, "idle_timeout_seconds") >= 0) {
        snprintf(buf, sizeof(buf), "%lld s", (long long)num(p, "idle_timeout_seconds"));
        field("Idle limit", buf);
    }
    money(a, sizeof(a), num(p, "max_cost_micros"));
    snprintf(buf, sizeof(buf), "%s, hard limit", a);
    field("Budget", buf);
}

static void print_usage(const json_t *u)
{
    char buf[1024], t1[32], t2[32], t3[32], tries[48] = "";
    long long calls = num(u, "model_calls"), attempts = num(u, "model_attempts");
    if (calls < 0) { /* a sandbox: no model */
        snprintf(buf, sizeof(buf),
                 "%lld shell commands · %lld web requests · %lld connection "
                 "requests",
                 (long long)num(u, "shell_commands"), (long long)num(u, "web_requests"),
                 (long long)num(u, "connection_requests"));
        field("Usage", buf);
        return;
    }
    if (attempts > calls)
        snprintf(tries, sizeof(tries), " (%lld attempts)", attempts);
    snprintf(buf, sizeof(buf),
             "%lld model calls%s · %s tokens (%s in, %s out) · %lld shell commands · %lld "
             "web requests · %lld connection requests",
             calls, tries,
             eph_format_thousands(
                 (uint64_t)(num(u, "total_tokens") < 0 ? 0 : num(u, "total_tokens")), t1),
             eph_format_thousands(
                 (uint64_t)(num(u, "input_tokens") < 0 ? 0 : num(u, "input_tokens")), t2),
             eph_format_thousands(
                 (uint64_t)(num(u, "output_tokens") < 0 ? 0 : num(u, "output_tokens")), t3),
             (long long)num(u, "shell_commands"), (long long)num(u, "web_requests"),
             (long long)num(u, "connection_requests"));
    field("Usage", buf);
}

static void print_cost(const json_t *run, const json_t *cost)
{
    char buf[1024], a[64];
    int64_t charged = num(cost, "charged_micros"), reserved = num(cost, "reserved_micros");
    char bar[400], b[64], c[64];
    money(a, sizeof(a), charged);
    money(b, sizeof(b), reserved);
    /* The released amount as budget - charged, so the line adds up (common/money.h). */
    int64_t released = num(cost, "released_micros");
    char m[EPH_MONEY_FMT_MAX];
    if (charged >= 0 && released >= 0 && charged <= reserved && charged + released == reserved)
        snprintf(c, sizeof(c), "%s", eph_money_format_rest(reserved, charged, m));
    else
        money(c, sizeof(c), released);
    eph_cli_render_cost_bar(charged, reserved, 20, bar, sizeof(bar));
    printf("%-*s%s %s of %s charged · %s released\n", LABEL_W, "Cost", bar, a, b, c);
    if (eph_cli_render_cost_line(run, buf, sizeof(buf)) == 0)
        printf("%-*s%s\n", LABEL_W, "", buf);
}

/* Retention, the error, the metadata and the result. */
static void print_outcome(const json_t *run)
{
    char buf[1024];
    json_t *ret = json_object_get(run, "retention");
    if (json_is_object(ret) && num(ret, "log_kept_days") >= 0) {
        const char *exp = str(ret, "expires_at");
        snprintf(buf, sizeof(buf), "log kept %lld days%s%s", (long long)num(ret, "log_kept_days"),
                 exp ? ", until " : "", exp ? exp : "");
        field("Retention", buf);
    }
    json_t *err = json_object_get(run, "error");
    if (json_is_object(err)) {
        snprintf(buf, sizeof(buf), "%s%s%s", str(err, "message") ? str(err, "message") : "",
                 str(err, "code") ? " · " : "", str(err, "code") ? str(err, "code") : "");
        field("Error", buf);
    }
    json_t *md = json_object_get(run, "metadata");
    if (json_is_object(md) && json_object_size(md)) {
        const char *k;
        json_t *v;
        size_t o = 0;
        buf[0] = '\0';
        json_object_foreach(md, k, v)
        {
            int n = snprintf(buf + o, sizeof(buf) - o, "%s%s=%s", o ? ", " : "", k,
                             json_is_string(v) ? json_string_value(v) : "?");
            if (n < 0 || (size_t)n >= sizeof(buf) - o)
                break;
            o += (size_t)n;
        }
        field("Metadata", buf);
    }
    const char *result = str(run, "result");
    if (result && *result) {
        fputs("\n", stdout);
        eph_cli_render_text(stdout, result, true, 0);
        if (result[strlen(result) - 1] != '\n')
            fputc('\n', stdout);
    }
}

static void print_run(const json_t *run, bool color)
{
    print_heading(run, color);
    print_times(run);
    json_t *p = json_object_get(run, "permissions");
    if (json_is_object(p))
        print_permissions(p);
    json_t *u = json_object_get(run, "usage");
    if (json_is_object(u))
        print_usage(u);
    json_t *cost = json_object_get(run, "cost");
    if (json_is_object(cost))
        print_cost(run, cost);
    print_outcome(run);
}

/* Parses "CMD [RUN_ID] [--json]" style arguments shared by get and balance. */
static int parse_simple(int argc, char **argv, bool want_id, bool sandbox, const char **id,
                        bool *json, int *code)
{
    *id = NULL;
    *json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            *json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eph_cli_usage(stdout, argv[0]);
            *code = EPH_CLI_EXIT_OK;
            return -1;
        } else if (a[0] == '-') {
            *code = eph_cli_usage_error(argv[0], "unknown option '%.100s'", a);
            return -1;
        } else if (want_id && !*id) {
            *id = a;
        } else {
            *code = eph_cli_usage_error(argv[0], "unexpected argument '%.200s'", a);
            return -1;
        }
    }
    if (want_id && !*id) {
        *code = eph_cli_usage_error(argv[0],
                                    sandbox ? "a sandbox id is required" : "a run id is required");
        return -1;
    }
    if (want_id && (sandbox ? eph_cli_check_sandbox_id(*id) : eph_cli_check_run_id(argv[0], *id))) {
        *code = EPH_CLI_EXIT_USAGE;
        return -1;
    }
    return 0;
}

int eph_cli_get_kind(int argc, char **argv, bool sandbox)
{
    const char *id;
    bool json;
    int code = EPH_CLI_EXIT_USAGE;
    if (parse_simple(argc, argv, true, sandbox, &id, &json, &code))
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    h.json_errors = json;
    json_t *run = NULL;
    if (eph_cli_fetch_run(&h, id, 0, &run) == 0) {
        if (json)
            eph_cli_print_json(run);
        else
            print_run(run, eph_cli_color_wanted(stdout));
        code = EPH_CLI_EXIT_OK;
        json_decref(run);
    } else {
        code = eph_cli_http_exit(&h);
    }
    eph_cli_http_release(&h);
    return code;
}

int eph_cli_get(int argc, char **argv)
{
    return eph_cli_get_kind(argc, argv, false);
}

/* The statuses --status takes, of runs and of sandboxes (NULL-terminated). */
static const char *const run_statuses[] = {"queued",    "starting",         "running",
                                           "completed", "failed",           "timed_out",
                                           "cancelled", "budget_exhausted", NULL};
static const char *const sandbox_statuses[] = {"starting",         "ready",  "stopped", "timed_out",
                                               "budget_exhausted", "failed", NULL};

/* One GET whose 200 answer is a JSON object. 0 and *out (a new reference), or reported. */
static int get_object(struct eph_cli_http *h, const char *path, json_t **out)
{
    struct eph_cli_request rq = {.method = "GET", .path = path};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(h, &rq, &resp);
    if (rc == 0 && resp.status == 200 && json_is_object(resp.json)) {
        *out = json_incref(resp.json);
    } else if (rc == 0 && resp.status == 200) {
        eph_cli_http_bad_answer(h, "json");
        rc = -EPROTO;
    } else {
        eph_cli_http_report(h, &resp, rc);
        rc = rc ? rc : (int)resp.status;
    }
    eph_cli_response_release(&resp);
    return rc;
}

const char *eph_cli_opt_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (*i + 1 < argc)
        return argv[++*i];
    *missing = true;
    return NULL;
}

/* Appends "&name=value" (value escaped) to the list's query; -EMSGSIZE when it does not fit. */
static int query_add(char *q, size_t qlen, const char *name, const char *value)
{
    char esc[1600];
    int rc = eph_cli_http_escape(value, esc, sizeof(esc));
    if (rc)
        return rc;
    size_t used = strlen(q);
    int n = snprintf(q + used, qlen - used, "&%s=%s", name, esc);
    return n < 0 || (size_t)n >= qlen - used ? -EMSGSIZE : 0;
}

static void print_run_table(const json_t *data)
{
    printf("%-36s  %-16s  %-19s  %10s  %s\n", "ID", "STATUS", "CREATED (UTC)", "DURATION",
           "CHARGED");
    size_t i;
    json_t *run;
    json_array_foreach(data, i, run)
    {
        char created[20] = "-", dur[32], charged[EPH_MONEY_FMT_MAX];
        const char *c = str(run, "created_at");
        if (c && strlen(c) >= 19) {
            memcpy(created, c, 19);
            created[19] = '\0';
            created[10] = ' ';
        }
        span(c, str(run, "finished_at"), dur, sizeof(dur));
        money(charged, sizeof(charged), num(json_object_get(run, "cost"), "charged_micros"));
        /* Padding is computed on what is printed, so print each column made safe. */
        char id[40], st[20];
        snprintf(id, sizeof(id), "%s", str(run, "id") ? str(run, "id") : "?");
        snprintf(st, sizeof(st), "%s", str(run, "status") ? str(run, "status") : "?");
        for (char *q = id; *q; q++)
            if (*q < 0x21 || *q > 0x7e)
                *q = '?';
        for (char *q = st; *q; q++)
            if (*q < 0x21 || *q > 0x7e)
                *q = '?';
        for (char *q = created; *q; q++)
            if (*q < 0x20 || *q > 0x7e)
                *q = '?';
        printf("%-36s  %-16s  %-19s  %10s  %s\n", id, st, created, dur[0] ? dur : "-", charged);
    }
}

/* --status S: one of the kind's statuses, or a usage error naming them. */
static int status_arg(const char *cmd, const char *const *statuses, const char *v, const char **out)
{
    for (size_t k = 0; statuses[k]; k++)
        if (strcmp(v, statuses[k]) == 0) {
            *out = statuses[k];
            return 0;
        }
    char all[256] = "";
    for (size_t k = 0, o = 0; statuses[k] && o < sizeof(all); k++)
        o += (size_t)snprintf(all + o, sizeof(all) - o, "%s%s", k ? ", " : "", statuses[k]);
    return eph_cli_usage_error(cmd, "--status must be one of %s, not '%.40s'", all, v);
}

/* --metadata KEY=VALUE as the API's metadata[KEY]=VALUE filter, appended to query. */
static int metadata_arg(const char *cmd, const char *v, char *query, size_t qlen)
{
    const char *eq = strchr(v, '=');
    size_t klen = eq ? (size_t)(eq - v) : 0;
    if (!eq || klen == 0 || klen > 64 || strlen(eq + 1) > 512)
        return eph_cli_usage_error(
            cmd, "--metadata needs KEY=VALUE (a key of 1 to 64 bytes), not '%.100s'", v);
    char key[65], name[256], esc[200];
    memcpy(key, v, klen);
    key[klen] = '\0';
    if (eph_cli_http_escape(key, esc, sizeof(esc)) ||
        snprintf(name, sizeof(name), "metadata%%5B%s%%5D", esc) >= (int)sizeof(name) ||
        query_add(query, qlen, name, eq + 1))
        return eph_cli_usage_error(cmd, "too many --metadata filters");
    return 0;
}

/* The arguments of list into the query after limit (status, after and metadata filters, each
 * escaped). 0, or -1 with *code the exit status (--help, a usage error). */
static int list_parse(int argc, char **argv, bool sandbox, char *query, size_t qlen, long *limit,
                      bool *json, int *code)
{
    const char *cmd = sandbox ? "sandbox list" : "list";
    const char *status = NULL, *after = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool missing = false;
        const char *v;
        *code = EPH_CLI_EXIT_USAGE;
        if (strcmp(a, "--json") == 0) {
            *json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eph_cli_usage(stdout, cmd);
            *code = EPH_CLI_EXIT_OK;
            return -1;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--limit", &missing))) {
            char *end;
            errno = 0;
            *limit = strtol(v, &end, 10);
            if (errno || *end || v[0] < '0' || v[0] > '9' || *limit < 1 || *limit > 100)
                return eph_cli_usage_error(cmd, "--limit must be from 1 to 100, not '%.40s'", v),
                       -1;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--status", &missing))) {
            if (status_arg(cmd, sandbox ? sandbox_statuses : run_statuses, v, &status))
                return -1;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--after", &missing))) {
            if (sandbox ? eph_cli_check_sandbox_id(v) : eph_cli_check_run_id(cmd, v))
                return -1;
            after = v;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--metadata", &missing))) {
            if (metadata_arg(cmd, v, query, qlen))
                return -1;
        } else if (missing) {
            return eph_cli_usage_error(cmd, "option '%.40s' needs a value", a), -1;
        } else {
            return eph_cli_usage_error(
                       cmd,
                       a[0] == '-' ? "unknown option '%.100s'" : "unexpected argument '%.100s'", a),
                   -1;
        }
    }
    if ((status && query_add(query, qlen, "status", status)) ||
        (after && query_add(query, qlen, "after", after)))
        return eph_cli_usage_error(cmd, "the filters are too long"), -1;
    return 0;
}

int eph_cli_list_kind(int argc, char **argv, bool sandbox)
{
    bool json = false;
    char query[4096] = "";
    long limit = 20;
    int code = EPH_CLI_EXIT_USAGE;
    if (list_parse(argc, argv, sandbox, query, sizeof(query), &limit, &json, &code))
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    h.json_errors = json;
    const char *noun = sandbox ? "sandboxes" : "runs";
    char path[4200];
    snprintf(path, sizeof(path), "/v1/%s?limit=%ld%s", noun, limit, query);
    json_t *list = NULL;
    if (get_object(&h, path, &list) == 0) {
        json_t *data = json_object_get(list, "data");
        char what[32];
        snprintf(what, sizeof(what), "a list of %s", noun);
        if (!json_is_array(data)) {
            eph_cli_http_bad_answer(&h, what);
            code = eph_cli_http_exit(&h);
        } else if (json) {
            eph_cli_print_json(list);
            code = EPH_CLI_EXIT_OK;
        } else {
            print_run_table(data);
            size_t n = json_array_size(data);
            const char *last = n ? str(json_array_get(data, n - 1), "id") : NULL;
            bool id_ok = last && (sandbox ? eph_id_is_sandbox(last) : eph_id_is_run(last));
            if (n == 0)
                printf("(no %s)\n", noun);
            else if (json_is_true(json_object_get(list, "has_more")) && id_ok)
                printf("(more %s: ephemeral %s --after %s)\n", noun,
                       sandbox ? "sandbox list" : "list", last);
            code = EPH_CLI_EXIT_OK;
        }
        json_decref(list);
    } else {
        code = eph_cli_http_exit(&h);
    }
    eph_cli_http_release(&h);
    return code;
}

int eph_cli_list(int argc, char **argv)
{
    return eph_cli_list_kind(argc, argv, false);
}

void eph_cli_show_status(const json_t *o, const char *id)
{
    const char *status = str(o, "status");
    printf("%s ", id);
    eph_cli_render_text(stdout, status ? status : "?", false, 64);
    fputc('\n', stdout);
}

int eph_cli_object_call(const char *method, const char *path, bool json,
                        void (*show)(const json_t *o, const char *id), const char *id)
{
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    h.json_errors = json;
    struct eph_cli_request rq = {.method = method, .path = path};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(&h, &rq, &resp), code = EPH_CLI_EXIT_OK;
    bool ok = rc == 0 && (resp.status == 200 || resp.status == 202);
    if (ok && json_is_object(resp.json)) {
        if (json)
            eph_cli_print_json(resp.json);
        else
            show(resp.json, id);
    } else if (ok) {
        eph_cli_http_bad_answer(&h, "json");
        code = eph_cli_http_exit(&h);
    } else {
        eph_cli_http_report(&h, &resp, rc);
        code = eph_cli_http_exit(&h);
    }
    eph_cli_response_release(&resp);
    eph_cli_http_release(&h);
    return code;
}

int eph_cli_cancel(int argc, char **argv)
{
    const char *id;
    bool json;
    int code = EPH_CLI_EXIT_USAGE;
    if (parse_simple(argc, argv, true, false, &id, &json, &code))
        return code;
    char path[128];
    snprintf(path, sizeof(path), "/v1/runs/%s/cancel", id);
    return eph_cli_object_call("POST", path, json, eph_cli_show_status, id);
}

int eph_cli_balance(int argc, char **argv)
{
    const char *id;
    bool json;
    int code = EPH_CLI_EXIT_USAGE;
    if (parse_simple(argc, argv, false, false, &id, &json, &code))
        return code;
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    h.json_errors = json;
    json_t *b = NULL;
    if (get_object(&h, "/v1/balance", &b) == 0) {
        if (json) {
            eph_cli_print_json(b);
        } else {
            char m[64];
            money(m, sizeof(m), num(b, "balance_micros"));
            printf("%-11s%s\n", "Balance", m);
            money(m, sizeof(m), num(b, "reserved_micros"));
            printf("%-11s%s\n", "Reserved", m);
            money(m, sizeof(m), num(b, "available_micros"));
            printf("%-11s%s\n", "Available", m);
        }
        code = EPH_CLI_EXIT_OK;
        json_decref(b);
    } else {
        code = eph_cli_http_exit(&h);
    }
    eph_cli_http_release(&h);
    return code;
}
