/*
 * sandbox_cmd.c - `ephemerald sandbox run`: one fresh sandbox, one command, for operators and
 * benchmarks.
 *
 *   ephemerald sandbox run [--backend B] [--memory-mib N] [--pids N] [--vcpus N] [--disk-mib N]
 *                          [--timeout S] [--output-cap BYTES] [--env K=V]... [--image DIR]
 *                          [--file LOCAL[:PATH]]... [--json] -- COMMAND [ARG...]
 *
 * --file copies a local file into the sandbox first (PATH relative to the scratch directory,
 * default the file's name; its permission bits are kept).
 * The arguments are joined, each shell-quoted, into one `/bin/sh -c` string run as worker in the
 * scratch directory. Output is streamed as it arrives (at most --output-cap bytes per stream,
 * default 1 MiB, then a note of what was dropped); the sandbox is destroyed; the exit status is
 * the command's (128+N for signal N, 125 when the sandbox itself failed). --json prints one JSON
 * object instead of the output: status, output, totals, truncation and create/exec/destroy times.
 *
 * SIGINT, SIGTERM and SIGHUP interrupt the sandbox from a separate thread (the documented use of
 * eph_sandbox_interrupt) so that it is still destroyed cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "daemon/commands.h"
#include "sandbox/sandbox.h"

#define EXIT_SANDBOX_FAILED 125
#define MAX_ENV 64
#define MAX_FILES 16
#define MAX_FILE_BYTES (64u << 20)

static void usage(FILE *f)
{
    fputs("usage: ephemerald sandbox run [--backend B] [--memory-mib N] [--pids N] [--vcpus N]\n"
          "                              [--disk-mib N] [--timeout S] [--output-cap BYTES]\n"
          "                              [--env K=V]... [--image DIR] [--file LOCAL[:PATH]]...\n"
          "                              [--json] -- COMMAND [ARG...]\n",
          f);
}

static int parse_uint(const char *s, unsigned long max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v == 0 || v > max || s[0] == '-')
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

/* Seconds, possibly fractional ("0.5"), into milliseconds. */
static int parse_seconds(const char *s, uint32_t *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 86400.0)
        return -EINVAL;
    *ms = (uint32_t)(v * 1000.0 + 0.5);
    if (*ms == 0)
        *ms = 1;
    return 0;
}

/* Appends arg to b as one shell word: bare when it is made of safe characters, else in single
 * quotes with each ' written as '\''. */
static int shell_quote(struct eph_buf *b, const char *arg)
{
    static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                               "@%_-+=:,./";
    int rc;
    if (arg[0] && strspn(arg, safe) == strlen(arg))
        return eph_buf_appends(b, arg);
    rc = eph_buf_appends(b, "'");
    for (const char *p = arg; !rc && *p; p++)
        rc = *p == '\'' ? eph_buf_appends(b, "'\\''") : eph_buf_append(b, p, 1);
    if (!rc)
        rc = eph_buf_appends(b, "'");
    return rc;
}

static void write_all(int fd, const void *data, size_t len)
{
    /* A failure means our reader went away; the command's status still matters. */
    int rc = eph_fileio_write_all(fd, data, len);
    (void)rc;
}

/* Output for a terminal: what the sandbox prints must not drive the operator's terminal (escape
 * sequences can retitle it, move the cursor over earlier lines, and on some terminals answer back
 * as if typed). Control characters but newline and tab, DEL, and the C1 controls in their UTF-8
 * form (C2 80-9F) are shown as \xNN. A C1 control split between two pieces of output passes;
 * terminals that act on C1 controls in UTF-8 are rare. */
static void write_escaped(int fd, const unsigned char *p, size_t len)
{
    char out[4096 + 8];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned c = p[i];
        bool c1 = c == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f;
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c1) {
            if (c1)
                c = p[++i];
            n += (size_t)snprintf(out + n, sizeof(out) - n, "\\x%02x", c);
        } else {
            out[n++] = (char)c;
        }
        if (n >= sizeof(out) - 8) {
            write_all(fd, out, n);
            n = 0;
        }
    }
    write_all(fd, out, n);
}

struct output_ctx {
    bool tty[3]; /* indexed by stream: 1 stdout, 2 stderr */
};

static void on_output(void *arg, int stream, const void *data, size_t len)
{
    const struct output_ctx *o = arg;
    int fd = stream == 1 ? STDOUT_FILENO : STDERR_FILENO;
    if (o->tty[stream == 1 ? 1 : 2])
        write_escaped(fd, data, len);
    else
        write_all(fd, data, len);
}

/* The signal thread: turns SIGINT/SIGTERM/SIGHUP into an interrupt of the sandbox. */
struct sigctx {
    sigset_t set;
    pthread_mutex_t lock;
    struct eph_sandbox *sb;
    atomic_int got;
};

static void *signal_thread(void *arg)
{
    struct sigctx *s = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&s->set, &sig) != 0)
            continue;
        atomic_store(&s->got, sig);
        pthread_mutex_lock(&s->lock);
        if (s->sb)
            s->sb->ops->interrupt(s->sb);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

/* Copies LOCAL[:PATH] into the sandbox. */
static int copy_in(struct eph_sandbox *sb, const char *spec)
{
    char local[4096];
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= sizeof(local))
        return -EINVAL;
    memcpy(local, spec, n);
    local[n] = '\0';
    const char *dest = colon ? colon + 1 : strrchr(local, '/') ? strrchr(local, '/') + 1 : local;
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    struct eph_buf data;
    eph_buf_init(&data, MAX_FILE_BYTES);
    int rc = fstat(fd, &st) != 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
    char chunk[65536];
    while (!rc) {
        ssize_t r = EPH_RETRY_EINTR(read(fd, chunk, sizeof(chunk)));
        if (r <= 0) {
            rc = r < 0 ? -errno : 0;
            break;
        }
        rc = eph_buf_append(&data, chunk, (size_t)r);
    }
    close(fd);
    if (!rc)
        rc = sb->ops->write_file(sb, dest, data.data ? data.data : "", data.len,
                                 (unsigned)(st.st_mode & 0777));
    if (rc)
        fprintf(stderr, "ephemerald sandbox run: cannot copy '%s' to '%s': %s\n", local, dest,
                eph_strerror(rc));
    eph_buf_release(&data);
    return rc;
}

static double ms_since(uint64_t t0)
{
    return (double)(eph_clock_mono_ns() - t0) / 1e6;
}

static void print_dropped(const char *name, size_t kept, uint64_t total)
{
    if (total > kept)
        fprintf(stderr, "[ephemeral: %s truncated: %zu of %llu bytes shown, %llu dropped]\n", name,
                kept, (unsigned long long)total, (unsigned long long)(total - kept));
}

static int print_json(const char *backend, const char *scratch, int rc,
                      const struct eph_exec_result *res, double create_ms, double exec_ms,
                      double destroy_ms)
{
    json_t *o = json_object();
    if (!o)
        return -ENOMEM;
    json_object_set_new(o, "backend", json_string(backend));
    if (scratch)
        json_object_set_new(o, "scratch_dir", json_string(scratch));
    if (rc) {
        json_object_set_new(o, "error", json_string(eph_strerror(rc)));
    } else {
        json_object_set_new(o, "exit_code",
                            res->signal ? json_null() : json_integer(res->exit_code));
        json_object_set_new(o, "signal", json_integer(res->signal));
        json_object_set_new(o, "timed_out", json_boolean(res->timed_out));
        json_object_set_new(o, "stdout",
                            json_stringn(res->out.data ? res->out.data : "", res->out.len));
        json_object_set_new(o, "stderr",
                            json_stringn(res->err.data ? res->err.data : "", res->err.len));
        json_object_set_new(o, "stdout_total", json_integer((json_int_t)res->stdout_total));
        json_object_set_new(o, "stderr_total", json_integer((json_int_t)res->stderr_total));
        json_object_set_new(o, "stdout_truncated", json_boolean(res->stdout_total > res->out.len));
        json_object_set_new(o, "stderr_truncated", json_boolean(res->stderr_total > res->err.len));
        json_object_set_new(o, "duration_us", json_integer((json_int_t)res->duration_us));
    }
    json_object_set_new(o, "create_ms", json_real(create_ms));
    json_object_set_new(o, "exec_ms", json_real(exec_ms));
    json_object_set_new(o, "destroy_ms", json_real(destroy_ms));
    /* Invalid UTF-8 in the output becomes U+FFFD rather than a refusal to print. */
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!s)
        return -ENOMEM;
    printf("%s\n", s);
    free(s);
    return 0;
}

/* What `sandbox run` was asked. */
struct run_opts {
    struct eph_sandbox_config cfg;
    uint32_t timeout_ms;
    unsigned cap;
    bool json;
    const char *env[MAX_ENV + 1];
    size_t nenv;
    const char *files[MAX_FILES];
    size_t nfiles;
};

/* The options, up to the command (optind then points at it). -1 to go on, else the exit status
 * (0 after --help, 2 for a usage error). */
static int run_parse(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {
        {"backend", required_argument, NULL, 'b'},
        {"memory-mib", required_argument, NULL, 'm'},
        {"pids", required_argument, NULL, 'p'},
        {"vcpus", required_argument, NULL, 'c'},
        {"disk-mib", required_argument, NULL, 'd'},
        {"timeout", required_argument, NULL, 't'},
        {"output-cap", required_argument, NULL, 'o'},
        {"env", required_argument, NULL, 'e'},
        {"image", required_argument, NULL, 'i'},
        {"json", no_argument, NULL, 'j'},
        {"file", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->cfg = (struct eph_sandbox_config){.backend = "auto"};
    eph_sandbox_limits_default(&o->cfg.limits);
    o->cfg.limits.fsize_bytes = 0; /* = disk, whatever --disk-mib says */
    o->timeout_ms = 60000;
    o->cap = 1024 * 1024;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        int rc = 0;
        switch (opt) {
        case 'b':
            o->cfg.backend = optarg;
            break;
        case 'm':
            rc = parse_uint(optarg, 1u << 20, &o->cfg.limits.memory_mib);
            break;
        case 'p':
            rc = parse_uint(optarg, 1u << 22, &o->cfg.limits.pids);
            break;
        case 'c':
            rc = parse_uint(optarg, 1024, &o->cfg.limits.vcpus);
            break;
        case 'd':
            rc = parse_uint(optarg, 1u << 20, &o->cfg.limits.disk_mib);
            break;
        case 't':
            rc = parse_seconds(optarg, &o->timeout_ms);
            break;
        case 'o':
            rc = parse_uint(optarg, 64u << 20, &o->cap);
            break;
        case 'i':
            o->cfg.image = optarg;
            break;
        case 'j':
            o->json = true;
            break;
        case 'e':
            if (o->nenv == MAX_ENV || !strchr(optarg, '=') || optarg[0] == '=')
                rc = -EINVAL;
            else
                o->env[o->nenv++] = optarg;
            break;
        case 'f':
            if (o->nfiles == MAX_FILES)
                rc = -EINVAL;
            else
                o->files[o->nfiles++] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (rc) {
            fprintf(stderr, "ephemerald sandbox run: invalid value '%s'\n", optarg);
            return 2;
        }
    }
    o->env[o->nenv] = NULL;
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (!o->cfg.image)
        o->cfg.image = eph_default_image_path();
    o->cfg.init_path = eph_default_init_path();
    o->cfg.owner_tag = "run";
    return -1;
}

/* Signals go to one thread, which interrupts the sandbox; they are blocked everywhere else first
 * (threads inherit the mask, the sandbox's init resets it). */
static void signals_start(struct sigctx *sc)
{
    pthread_mutex_init(&sc->lock, NULL);
    atomic_init(&sc->got, 0);
    sigemptyset(&sc->set);
    sigaddset(&sc->set, SIGINT);
    sigaddset(&sc->set, SIGTERM);
    sigaddset(&sc->set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sc->set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t tid;
    if (pthread_create(&tid, NULL, signal_thread, sc) == 0)
        pthread_detach(tid);
}

/* The exit status of a command that was run (xrc its exec's error), with what is said of it. */
static int run_status(const struct run_opts *o, const struct sigctx *sc, int xrc,
                      const struct eph_exec_result *res)
{
    if (xrc) {
        if (xrc == -ECANCELED)
            fprintf(stderr, "ephemerald sandbox run: interrupted by signal %d\n",
                    atomic_load(&sc->got));
        else if (xrc == -EPIPE)
            fprintf(stderr, "ephemerald sandbox run: the sandbox died during the command\n");
        else
            fprintf(stderr, "ephemerald sandbox run: the command failed: %s\n", eph_strerror(xrc));
        return xrc == -ECANCELED && atomic_load(&sc->got) ? 128 + atomic_load(&sc->got)
                                                          : EXIT_SANDBOX_FAILED;
    }
    if (!o->json) {
        print_dropped("stdout", res->out.len, res->stdout_total);
        print_dropped("stderr", res->err.len, res->stderr_total);
        if (res->timed_out)
            fprintf(stderr, "[ephemeral: timed out after %.3f s, killed]\n",
                    (double)o->timeout_ms / 1000.0);
    }
    return res->signal ? 128 + res->signal : res->exit_code;
}

static int sandbox_run(int argc, char **argv)
{
    struct run_opts o = {0};
    int status = run_parse(argc, argv, &o);
    if (status >= 0)
        return status;
    /* The server's log level variable is honoured here too (debug shows what the backend did). */
    const char *level = getenv("EPHEMERALD_LOG_LEVEL");
    enum eph_log_level lvl;
    if (level && *level) {
        if (eph_log_level_parse(level, &lvl) || eph_log_configure(lvl, "text")) {
            fprintf(stderr, "ephemerald sandbox run: EPHEMERALD_LOG_LEVEL must be debug, info, "
                            "warn or error\n");
            return 2;
        }
    }
    struct eph_buf cmd;
    eph_buf_init(&cmd, 512 * 1024);
    for (int i = optind; i < argc; i++) {
        if ((i > optind && eph_buf_appends(&cmd, " ")) || shell_quote(&cmd, argv[i])) {
            fprintf(stderr, "ephemerald sandbox run: the command is too long\n");
            eph_buf_release(&cmd);
            return 2;
        }
    }
    struct sigctx sc = {.sb = NULL};
    signals_start(&sc);

    char why[512];
    const struct eph_sandbox_ops *ops = NULL;
    int rc = eph_sandbox_choose(&o.cfg, &ops, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "ephemerald sandbox run: %s\n", why);
        eph_buf_release(&cmd);
        return EXIT_SANDBOX_FAILED;
    }
    EPH_DEBUG("sandbox", "backend %s", ops->name);
    /* What an earlier `sandbox run` killed with SIGKILL left (its cgroups: it could not remove
     * them), swept by the next one, as `serve` does at start-up. */
    if (ops->cleanup_orphans)
        (void)ops->cleanup_orphans();

    uint64_t t0 = eph_clock_mono_ns();
    struct eph_sandbox *sb = NULL;
    rc = ops->create(&o.cfg, &sb);
    double create_ms = ms_since(t0);
    if (rc) {
        fprintf(stderr, "ephemerald sandbox run: cannot create the %s sandbox: %s\n", ops->name,
                eph_strerror(rc));
        if (o.json)
            print_json(ops->name, NULL, rc, NULL, create_ms, 0, 0);
        eph_buf_release(&cmd);
        return EXIT_SANDBOX_FAILED;
    }
    pthread_mutex_lock(&sc.lock);
    sc.sb = sb;
    pthread_mutex_unlock(&sc.lock);
    if (atomic_load(&sc.got))
        ops->interrupt(sb);

    struct output_ctx out_ctx = {
        .tty = {false, isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1}};
    struct eph_exec_request req = {
        .command = cmd.data,
        .timeout_ms = o.timeout_ms,
        .stdout_cap = o.cap,
        .stderr_cap = o.cap,
        .env = o.nenv ? o.env : NULL,
        .on_output = o.json ? NULL : on_output,
        .on_output_arg = &out_ctx,
    };
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    char scratch[128];
    snprintf(scratch, sizeof(scratch), "%s", ops->scratch_dir(sb));
    uint64_t t1 = eph_clock_mono_ns();
    int xrc = 0;
    for (size_t i = 0; i < o.nfiles && !xrc; i++)
        xrc = copy_in(sb, o.files[i]);
    if (!xrc)
        xrc = ops->exec(sb, &req, &res);
    double exec_ms = ms_since(t1);

    pthread_mutex_lock(&sc.lock);
    sc.sb = NULL;
    pthread_mutex_unlock(&sc.lock);
    uint64_t t2 = eph_clock_mono_ns();
    int drc = ops->destroy(sb);
    double destroy_ms = ms_since(t2);
    eph_buf_release(&cmd);

    if (o.json)
        print_json(ops->name, scratch, xrc, &res, create_ms, exec_ms, destroy_ms);
    status = run_status(&o, &sc, xrc, &res);
    if (drc)
        fprintf(stderr, "ephemerald sandbox run: destroying the sandbox: %s\n", eph_strerror(drc));
    eph_exec_result_release(&res);
    fflush(stdout);
    return status;
}

int eph_cmd_sandbox(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "run") == 0)
        return sandbox_run(argc - 1, argv + 1);
    fprintf(stderr, "ephemerald sandbox: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
