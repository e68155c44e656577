/*
 * sandbox.c - `ephemeral sandbox create|exec|cp|ls|rm|list|get|watch`: sandboxes a caller drives
 * (docs/SANDBOXES.md, docs/CLI.md).
 *
 * create takes run's flags (request.c) and waits until the sandbox is ready; list, get and watch
 * are runs.c's and run.c's on /v1/sandboxes. exec streams the command's output as the server
 * sends it (POST …/commands, text/event-stream), its stdout to stdout and its stderr to stderr,
 * and exits with the command's status. cp moves bytes: an upload is read from the file as it is
 * sent, a download written as it arrives (to a temporary file renamed once complete). The
 * output is the caller's own command's, written as it is, except to a terminal, where control
 * characters are made visible (render.h) so that a sandbox cannot drive the terminal.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/render.h"
#include "cli/request.h"
#include "cli/sse.h"
#include "common/buf.h"
#include "common/id.h"

/* create waits this long for the sandbox to be ready (Prefer: wait). */
#define CREATE_WAIT_S 120
/* A stream's silence that means the connection is gone: the server's keep-alives come every
 * 15 s. A file call waits in the sandbox's queue up to 60 s first. */
#define STREAM_IDLE_S 45L
#define FILE_IDLE_S 75L
#define UPLOAD_TIMEOUT_S 600L
/* One output event: a chunk of a command's live output, far below this. */
#define SSE_MAX ((size_t)1 << 20)
/* The API's cap on a command (docs/SANDBOXES.md). */
#define COMMAND_MAX ((size_t)64 << 10)
#define EXEC_DONE 1 /* the exit event came: stop reading */

/* ---- create ---- */

static int sbx_create(int argc, char **argv)
{
    struct eph_cli_run_opts o;
    struct eph_cli_http h;
    struct eph_cli_response resp;
    const char *id = NULL;
    int code = EPH_CLI_EXIT_USAGE;
    if (eph_cli_start(argc, argv, true, CREATE_WAIT_S, &o, &h, &resp, &id, &code))
        return code;
    const char *status = json_string_value(json_object_get(resp.json, "status"));
    if (o.json)
        eph_cli_print_json(resp.json);
    else
        printf("%s\n", id);
    code = EPH_CLI_EXIT_OK;
    if (!status || strcmp(status, "ready") != 0) {
        /* Created (and charged as it lives) but not usable: say so, and why. */
        const char *msg =
            json_string_value(json_object_get(json_object_get(resp.json, "error"), "message"));
        fprintf(stderr, "ephemeral: sandbox %s is %s, not ready", id, status ? status : "?");
        if (msg) {
            fputs(": ", stderr);
            eph_cli_render_text(stderr, msg, false, 500);
        }
        fputc('\n', stderr);
        code = EPH_CLI_EXIT_RUN_FAILED;
    }
    eph_cli_response_release(&resp);
    eph_cli_http_release(&h);
    eph_cli_run_opts_release(&o);
    return code;
}

/* ---- exec ---- */

struct exec_opts {
    const char *id;
    long timeout; /* -1: the server's default */
    const char *cwd;
    bool background;
    struct eph_buf command;
};

/* Appends word to the command, quoted for /bin/sh unless it is plain. */
static int quote_word(struct eph_buf *b, const char *word)
{
    bool plain = *word != '\0';
    for (const char *p = word; *p && plain; p++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%",
                       *p) != NULL;
    int rc = b->len ? eph_buf_append(b, " ", 1) : 0;
    if (rc || plain)
        return rc ? rc : eph_buf_appends(b, word);
    rc = eph_buf_append(b, "'", 1);
    for (const char *p = word; !rc && *p; p++)
        rc = *p == '\'' ? eph_buf_appends(b, "'\\''") : eph_buf_append(b, p, 1);
    return rc ? rc : eph_buf_append(b, "'", 1);
}

/* "exec SANDBOX_ID [flags] (-- WORD... | 'COMMAND')". 0, or -1 with *code the exit status. */
static int exec_parse(int argc, char **argv, struct exec_opts *o, int *code)
{
    const char *cmd = "sandbox exec", *line = NULL;
    bool words = false;
    *code = EPH_CLI_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool missing = false;
        if (words) {
            if (quote_word(&o->command, a))
                return eph_cli_usage_error(cmd, "the command is too long"), -1;
        } else if (strcmp(a, "--") == 0) {
            words = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eph_cli_usage(stdout, cmd);
            *code = EPH_CLI_EXIT_OK;
            return -1;
        } else if (strcmp(a, "--background") == 0) {
            o->background = true;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--timeout", &missing))) {
            char *end;
            errno = 0;
            o->timeout = strtol(v, &end, 10);
            if (errno || *end || v[0] < '0' || v[0] > '9' || o->timeout < 1 || o->timeout > 86400)
                return eph_cli_usage_error(cmd, "--timeout must be from 1 to 86400 seconds"), -1;
        } else if ((v = eph_cli_opt_value(argc, argv, &i, "--cwd", &missing))) {
            o->cwd = v;
        } else if (missing) {
            return eph_cli_usage_error(cmd, "option '%.40s' needs a value", a), -1;
        } else if (a[0] == '-') {
            return eph_cli_usage_error(cmd, "unknown option '%.100s'", a), -1;
        } else if (!o->id) {
            o->id = a;
        } else if (!line) {
            line = a;
        } else {
            return eph_cli_usage_error(cmd,
                                       "unexpected argument '%.200s' (give the command "
                                       "after --, or as one string)",
                                       a),
                   -1;
        }
    }
    if (!o->id)
        return eph_cli_usage_error(cmd, "a sandbox id is required"), -1;
    if (eph_cli_check_sandbox_id(o->id))
        return -1;
    if (line && words)
        return eph_cli_usage_error(cmd, "give the command after --, or as one string: not both"),
               -1;
    if (line && eph_buf_appends(&o->command, line))
        return eph_cli_usage_error(cmd, "the command is too long"), -1;
    if (!o->command.len)
        return eph_cli_usage_error(cmd, "a command is required"), -1;
    if (o->background && o->timeout > 0)
        return eph_cli_usage_error(cmd, "a background command has no --timeout (kill it, or "
                                        "let the sandbox end)"),
               -1;
    return 0;
}

/* The command's request body. */
static char *exec_body(const struct exec_opts *o)
{
    json_t *b = json_object();
    json_object_set_new(b, "command", json_stringn(o->command.data, o->command.len));
    if (o->timeout > 0)
        json_object_set_new(b, "timeout_seconds", json_integer(o->timeout));
    if (o->cwd)
        json_object_set_new(b, "cwd", json_string(o->cwd));
    if (o->background)
        json_object_set_new(b, "background", json_true());
    /* A command or cwd that is not UTF-8 is missing from the object: the server says so. */
    char *text = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return text;
}

struct exec_state {
    struct eph_cli_sse sse;
    json_t *exit;       /* the exit event's command object */
    long long shown[2]; /* bytes of stdout and stderr streamed */
    bool any;           /* an output event came */
    bool tty[2];        /* the stream is a terminal: made safe */
    bool write_failed;
};

/* Writes a command's output to stdout or stderr, as it is, or made safe on a terminal. */
static void write_output(struct exec_state *x, int s, const char *text, size_t len)
{
    FILE *f = s ? stderr : stdout;
    if (x->tty[s])
        eph_cli_render_text(f, text, true, 0);
    else if (fwrite(text, 1, len, f) != len)
        x->write_failed = true;
    if (fflush(f) != 0)
        x->write_failed = true;
}

static int on_exec_event(void *arg, const struct eph_cli_sse_event *ev)
{
    struct exec_state *x = arg;
    json_t *o = json_loadb(ev->data, ev->data_len, 0, NULL);
    int s = strcmp(ev->type, "stderr") == 0 ? 1 : strcmp(ev->type, "stdout") == 0 ? 0 : -1;
    if (s >= 0) {
        json_t *t = json_object_get(o, "text");
        json_t *off = json_object_get(o, "offset");
        size_t len = json_string_length(t);
        if (json_is_string(t))
            write_output(x, s, json_string_value(t), len);
        x->any = true;
        if (json_is_integer(off) && json_integer_value(off) + (long long)len > x->shown[s])
            x->shown[s] = json_integer_value(off) + (long long)len;
    } else if (strcmp(ev->type, "exit") == 0 && json_is_object(o)) {
        x->exit = json_incref(o);
    }
    json_decref(o);
    return x->exit ? EXEC_DONE : 0;
}

static int on_exec_chunk(void *arg, const char *data, size_t n)
{
    struct exec_state *x = arg;
    return eph_cli_sse_feed(&x->sse, data, n);
}

/* A command that failed: the sandbox ended under it (deleted, its limits), or the server says
 * why. The exit status. */
static int exec_failed(struct eph_cli_http *h, const char *id, const json_t *e)
{
    json_t *sbx = NULL;
    const char *err = json_string_value(json_object_get(e, "error"));
    /* A delete settles within 5 s (docs/SANDBOXES.md): wait that long for the end. */
    if (eph_cli_fetch_run(h, id, 5, &sbx) == 0 &&
        eph_cli_status_exit(json_string_value(json_object_get(sbx, "status"))) >= 0) {
        fprintf(stderr, "ephemeral: sandbox %s ended while the command ran\n", id);
        json_decref(sbx);
        return EPH_CLI_EXIT_SANDBOX_ENDED;
    }
    json_decref(sbx);
    fprintf(stderr, "ephemeral: the command failed: %.300s\n", err ? err : "no reason given");
    return EPH_CLI_EXIT_SERVER;
}

/* What the exit event says, after the output: the exit status. */
static int exec_result(struct eph_cli_http *h, struct exec_state *x, const char *id)
{
    const json_t *e = x->exit;
    static const char *const names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2; s++) {
        char key[32];
        snprintf(key, sizeof(key), "%s_bytes", names[s]);
        json_int_t total = json_integer_value(json_object_get(e, key));
        const char *text = json_string_value(json_object_get(e, names[s]));
        /* No output event (zero data retention, no live output): the answer's output. */
        if (!x->any && text)
            write_output(x, s, text, json_string_length(json_object_get(e, names[s])));
        else if (x->any && total > x->shown[s])
            fprintf(stderr, "ephemeral: the server streamed %lld of the %lld bytes of %s\n",
                    x->shown[s], (long long)total, names[s]);
    }
    const char *status = json_string_value(json_object_get(e, "status"));
    const char *ended = json_string_value(json_object_get(e, "sandbox_ended"));
    json_t *code = json_object_get(e, "exit_code");
    if (ended) {
        fprintf(stderr, "ephemeral: sandbox %s ended (%.40s) while the command ran\n", id, ended);
        return EPH_CLI_EXIT_SANDBOX_ENDED;
    }
    if (json_is_true(json_object_get(e, "timed_out")))
        fputs("ephemeral: the command timed out and was killed\n", stderr);
    if (!json_is_integer(code) || (status && strcmp(status, "failed") == 0))
        return exec_failed(h, id, e);
    json_int_t c = json_integer_value(code);
    return c >= 0 && c <= 255 ? (int)c : EPH_CLI_EXIT_SERVER;
}

/* A foreground command, streamed; the exit status. */
static int exec_stream(struct eph_cli_http *h, const char *id, const char *path, const char *body)
{
    struct exec_state x = {.tty = {isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1}};
    eph_cli_sse_init(&x.sse, SSE_MAX, SSE_MAX, on_exec_event, &x);
    const char *hdrs[] = {"Accept: text/event-stream", "Cache-Control: no-cache", NULL};
    struct eph_cli_stream st = {.method = "POST",
                                .path = path,
                                .body = body,
                                .body_len = strlen(body),
                                .headers = hdrs,
                                .content_type = "text/event-stream",
                                .idle_timeout_s = STREAM_IDLE_S,
                                .on_chunk = on_exec_chunk,
                                .arg = &x};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_stream(h, &st, &resp), code;
    if (rc == EXEC_DONE || (rc == 0 && x.exit)) {
        code = exec_result(h, &x, id);
    } else if (rc == 0 && !resp.streamed) {
        eph_cli_http_report(h, &resp, 0); /* refused: busy, ended, unknown, a bad command */
        code = eph_cli_http_exit(h);
    } else {
        /* The command cannot be asked for again without running it again: say what is known. */
        fprintf(stderr, "ephemeral: lost the output of the command in %s before it ended%s%s\n", id,
                h->error[0] ? ": " : "", h->error);
        code = rc == -EMSGSIZE ? EPH_CLI_EXIT_SERVER : EPH_CLI_EXIT_UNREACHABLE;
    }
    if (x.write_failed) {
        fputs("ephemeral: cannot write the command's output\n", stderr);
        code = EPH_CLI_EXIT_USAGE;
    }
    json_decref(x.exit);
    eph_cli_sse_release(&x.sse);
    eph_cli_response_release(&resp);
    return code;
}

/* A background command: started, its id printed. */
static int exec_background(struct eph_cli_http *h, const char *path, const char *body)
{
    struct eph_cli_request rq = {
        .method = "POST", .path = path, .body = body, .body_len = strlen(body)};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(h, &rq, &resp), code = EPH_CLI_EXIT_OK;
    const char *cid = json_string_value(json_object_get(resp.json, "id"));
    if (rc == 0 && resp.status == 202 && cid && strncmp(cid, "cmd_", 4) == 0) {
        eph_cli_render_text(stdout, cid, false, 64);
        fputc('\n', stdout);
    } else if (rc == 0 && resp.status == 202) {
        eph_cli_http_bad_answer(h, "a command with an id");
        code = eph_cli_http_exit(h);
    } else {
        eph_cli_http_report(h, &resp, rc);
        code = eph_cli_http_exit(h);
    }
    eph_cli_response_release(&resp);
    return code;
}

static int sbx_exec(int argc, char **argv)
{
    struct exec_opts o = {.timeout = -1};
    eph_buf_init(&o.command, COMMAND_MAX);
    int code = EPH_CLI_EXIT_USAGE;
    struct eph_cli_http h;
    char *body = NULL;
    if (exec_parse(argc, argv, &o, &code) == 0 && (body = exec_body(&o)) != NULL &&
        eph_cli_http_init(&h) == 0) {
        char path[96];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/commands", o.id);
        code = o.background ? exec_background(&h, path, body) : exec_stream(&h, o.id, path, body);
        eph_cli_http_release(&h);
    }
    free(body);
    eph_buf_release(&o.command);
    return code;
}

/* ---- cp, ls, rm ---- */

/* "sbx_…:PATH": the id into id[] and the path; NULL when arg does not name a sandbox's file. */
static const char *remote_path(const char *arg, char id[EPH_RUN_ID_LEN + 1])
{
    const char *colon = strchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : 0;
    if (!colon || n > EPH_RUN_ID_LEN)
        return NULL;
    memcpy(id, arg, n);
    id[n] = '\0';
    return eph_id_is_sandbox(id) ? colon + 1 : NULL;
}

/* "/v1/sandboxes/ID/files/PATH", the path escaped; -EMSGSIZE when it is too long. */
static int files_url(const char *id, const char *path, char *out, size_t outlen)
{
    char esc[3 * PATH_MAX];
    if (eph_cli_http_escape_path(path, esc, sizeof(esc)))
        return -EMSGSIZE;
    int n = snprintf(out, outlen, "/v1/sandboxes/%s/files/%s", id, esc);
    return n < 0 || (size_t)n >= outlen ? -EMSGSIZE : 0;
}

static int cp_upload(struct eph_cli_http *h, const char *local, const char *url)
{
    FILE *f = stdin;
    off_t size = -1;
    if (strcmp(local, "-") != 0) {
        int rc = eph_cli_open_regular(local, &f, &size);
        if (rc) {
            fprintf(stderr, "ephemeral: cannot read '%.200s': %s\n", local,
                    rc == -EINVAL ? "not a regular file" : strerror(-rc));
            return EPH_CLI_EXIT_USAGE;
        }
    }
    struct eph_cli_request rq = {.method = "PUT",
                                 .path = url,
                                 .upload = f,
                                 .upload_size = (long long)size,
                                 .timeout_s = UPLOAD_TIMEOUT_S};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_do(h, &rq, &resp), code = EPH_CLI_EXIT_OK;
    if (f != stdin)
        fclose(f);
    if (rc || resp.status != 200) {
        eph_cli_http_report(h, &resp, rc);
        code = eph_cli_http_exit(h);
    }
    eph_cli_response_release(&resp);
    return code;
}

struct download {
    FILE *out;
    bool failed;
};

static int on_file_chunk(void *arg, const char *data, size_t n)
{
    struct download *d = arg;
    if (fwrite(data, 1, n, d->out) == n)
        return 0;
    d->failed = true;
    return -EIO;
}

/* Where a download goes: local itself, or local/NAME when local is a directory. */
static int download_target(const char *local, const char *path, char *out, size_t outlen)
{
    struct stat st;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int n = stat(local, &st) == 0 && S_ISDIR(st.st_mode)
                ? snprintf(out, outlen, "%s/%s", local, base)
                : snprintf(out, outlen, "%s", local);
    return n < 0 || (size_t)n >= outlen || !*base ? -EINVAL : 0;
}

/* Downloads into a new temporary file beside target, renamed over it once complete. */
static int cp_download(struct eph_cli_http *h, const char *url, const char *path, const char *local)
{
    char target[PATH_MAX], tmp[PATH_MAX + 16];
    bool to_stdout = strcmp(local, "-") == 0;
    int fd = -1;
    if (!to_stdout && (download_target(local, path, target, sizeof(target)) ||
                       snprintf(tmp, sizeof(tmp), "%s.XXXXXX", target) >= (int)sizeof(tmp))) {
        fprintf(stderr, "ephemeral: cannot write to '%.200s'\n", local);
        return EPH_CLI_EXIT_USAGE;
    }
    if (!to_stdout && (fd = mkstemp(tmp)) < 0) {
        fprintf(stderr, "ephemeral: cannot write '%.200s': %s\n", target, strerror(errno));
        return EPH_CLI_EXIT_USAGE;
    }
    struct download d = {.out = to_stdout ? stdout : fdopen(fd, "wb")};
    if (!d.out) {
        close(fd);
        unlink(tmp);
        return EPH_CLI_EXIT_USAGE;
    }
    struct eph_cli_stream st = {.path = url,
                                .content_type = "application/octet-stream",
                                .idle_timeout_s = FILE_IDLE_S,
                                .on_chunk = on_file_chunk,
                                .arg = &d};
    struct eph_cli_response resp;
    eph_cli_response_init(&resp);
    int rc = eph_cli_http_stream(h, &st, &resp), code = EPH_CLI_EXIT_OK;
    if (fflush(d.out) != 0)
        d.failed = true;
    if (d.failed) {
        fprintf(stderr, "ephemeral: cannot write '%.200s'\n",
                to_stdout ? "standard output" : target);
        code = EPH_CLI_EXIT_USAGE;
    } else if (rc || resp.status != 200 || !resp.streamed) {
        eph_cli_http_report(h, &resp, rc ? rc : resp.status == 200 ? -EPROTO : 0);
        code = eph_cli_http_exit(h);
    }
    if (!to_stdout) {
        mode_t mask = umask(0);
        umask(mask);
        fchmod(fd, 0666 & ~mask); /* as a new file would be, not mkstemp's 0600 */
        if (fclose(d.out) != 0 && code == EPH_CLI_EXIT_OK)
            code = (fprintf(stderr, "ephemeral: cannot write '%.200s'\n", target), 2);
        if (code != EPH_CLI_EXIT_OK || rename(tmp, target) != 0) {
            if (code == EPH_CLI_EXIT_OK)
                code = (fprintf(stderr, "ephemeral: cannot write '%.200s': %s\n", target,
                                strerror(errno)),
                        EPH_CLI_EXIT_USAGE);
            unlink(tmp);
        }
    }
    eph_cli_response_release(&resp);
    return code;
}

static int sbx_cp(int argc, char **argv)
{
    const char *cmd = "sandbox cp";
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        eph_cli_usage(stdout, cmd);
        return EPH_CLI_EXIT_OK;
    }
    if (argc != 3)
        return eph_cli_usage_error(cmd, "give a source and a destination, one of them "
                                        "SANDBOX_ID:PATH");
    char src_id[EPH_RUN_ID_LEN + 1], dst_id[EPH_RUN_ID_LEN + 1];
    const char *src = remote_path(argv[1], src_id), *dst = remote_path(argv[2], dst_id);
    if (!src == !dst)
        return eph_cli_usage_error(cmd, src ? "both are in a sandbox: one must be local"
                                            : "neither is SANDBOX_ID:PATH (sbx_ and 32 hex "
                                              "digits, a colon, the path)");
    const char *path = src ? src : dst, *id = src ? src_id : dst_id;
    if (!*path)
        return eph_cli_usage_error(cmd, "the path in the sandbox is empty");
    char url[3 * PATH_MAX + 96];
    if (files_url(id, path, url, sizeof(url)))
        return eph_cli_usage_error(cmd, "the path in the sandbox is too long");
    struct eph_cli_http h;
    if (eph_cli_http_init(&h))
        return EPH_CLI_EXIT_USAGE;
    int code = src ? cp_download(&h, url, path, argv[2]) : cp_upload(&h, argv[1], url);
    eph_cli_http_release(&h);
    return code;
}

/* Parses "CMD SANDBOX_ID [ARG] [--json]": 0, or -1 with *code the exit status. */
static int parse_id_args(int argc, char **argv, const char *cmd, bool want_arg, const char **id,
                         const char **arg, bool *json, int *code)
{
    *code = EPH_CLI_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            *json = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            eph_cli_usage(stdout, cmd);
            *code = EPH_CLI_EXIT_OK;
            return -1;
        } else if (a[0] == '-') {
            return eph_cli_usage_error(cmd, "unknown option '%.100s'", a), -1;
        } else if (!*id) {
            *id = a;
        } else if (want_arg && !*arg) {
            *arg = a;
        } else {
            return eph_cli_usage_error(cmd, "unexpected argument '%.200s'", a), -1;
        }
    }
    if (!*id)
        return eph_cli_usage_error(cmd, "a sandbox id is required"), -1;
    return eph_cli_check_sandbox_id(*id) ? -1 : 0;
}

static void print_listing(const json_t *list)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(list, "data"), i, e)
    {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *target = json_string_value(json_object_get(e, "target"));
        printf("%-9s  %12lld  ", type && strlen(type) < 10 ? type : "?",
               (long long)json_integer_value(json_object_get(e, "size")));
        eph_cli_render_text(stdout, json_string_value(json_object_get(e, "path")), false, 4096);
        if (target) {
            fputs(" -> ", stdout);
            eph_cli_render_text(stdout, target, false, 4096);
        }
        fputc('\n', stdout);
    }
    if (json_is_true(json_object_get(list, "has_more")))
        puts("(the listing was cut: the sandbox holds more files)");
}

static void show_listing(const json_t *o, const char *id)
{
    (void)id;
    print_listing(o);
}

static int sbx_ls(int argc, char **argv)
{
    const char *id = NULL, *dir = NULL;
    bool json = false;
    int code;
    if (parse_id_args(argc, argv, "sandbox ls", true, &id, &dir, &json, &code))
        return code;
    char path[1400], esc[1200] = "";
    if (dir && eph_cli_http_escape(dir, esc, sizeof(esc)))
        return eph_cli_usage_error("sandbox ls", "the directory is too long");
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/files%s%s", id, dir ? "?path=" : "", esc);
    return eph_cli_object_call("GET", path, json, show_listing, id);
}

static int sbx_rm(int argc, char **argv)
{
    const char *id = NULL, *unused = NULL;
    bool json = false;
    int code;
    if (parse_id_args(argc, argv, "sandbox rm", false, &id, &unused, &json, &code))
        return code;
    char path[96];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
    return eph_cli_object_call("DELETE", path, json, eph_cli_show_status, id);
}

static int sbx_list(int argc, char **argv)
{
    return eph_cli_list_kind(argc, argv, true);
}

static int sbx_get(int argc, char **argv)
{
    return eph_cli_get_kind(argc, argv, true);
}

static int sbx_watch(int argc, char **argv)
{
    return eph_cli_watch_kind(argc, argv, true);
}

static const struct {
    const char *name;
    const char *usage; /* its usage's name, argv[0] of the subcommand */
    int (*fn)(int argc, char **argv);
} subcommands[] = {
    {"create", "sandbox create", sbx_create},
    {"exec", "sandbox exec", sbx_exec},
    {"cp", "sandbox cp", sbx_cp},
    {"ls", "sandbox ls", sbx_ls},
    {"rm", "sandbox rm", sbx_rm},
    {"list", "sandbox list", sbx_list},
    {"get", "sandbox get", sbx_get},
    {"watch", "sandbox watch", sbx_watch},
};

int eph_cli_sandbox(int argc, char **argv)
{
    if (argc < 2)
        return eph_cli_usage_error("sandbox", "a subcommand is required");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        /* "ephemeral sandbox help exec" is "ephemeral sandbox exec --help". */
        char name[64];
        snprintf(name, sizeof(name), "sandbox %.40s", argc > 2 && sub[0] == 'h' ? argv[2] : "");
        eph_cli_usage(stdout, name[8] ? name : "sandbox");
        return EPH_CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++) {
        if (strcmp(sub, subcommands[i].name) != 0)
            continue;
        /* The subcommand sees its usage's name as argv[0], as run.c's and runs.c's expect. */
        argv[1] = (char *)subcommands[i].usage;
        return subcommands[i].fn(argc - 1, argv + 1);
    }
    return eph_cli_usage_error("sandbox", "unknown subcommand '%.100s'", sub);
}
