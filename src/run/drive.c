/*
 * drive.c - a sandbox a caller drives (drive.h): the registry of live sandboxes, their queues,
 * and the loop that serves a queue on its sandbox.
 *
 * Locks: the registry's lock guards its list and count; a sandbox's own lock guards its queue
 * and state. The registry's lock may be taken before a sandbox's, never after. No lock is held
 * while an operation runs on the sandbox or while an event is emitted.
 */
#include "run/drive.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/live_output.h"
#include "broker/broker.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/text.h"
#include "run/live.h"

/* A queue wait wakes at least this often, to see a cancel that came from another node. */
#define POLL_NS (250u * 1000000u)
/* The scratch listing's bounds (the API filters it by directory). */
#define LIST_MAX_ENTRIES 10000u
#define LIST_MAX_DEPTH 16u
/* A sandbox thread's stack. */
#define DRIVE_STACK_BYTES (2u << 20)
/* How often a running command's held-back output is looked at (live_output.h). */
#define LIVE_TICK_MS 250u

struct queued {
    struct eph_drive_op *op;
    struct queued *next;
};

struct eph_drive {
    char id[EPH_RUN_ID_LEN + 1];
    struct eph_drives *ds;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct queued *head, *tail;
    bool exec_pending; /* a foreground exec is queued or running */
    bool ending;       /* the loop ended or is ending: nothing more is taken */
    unsigned bg_count; /* background commands queued or running */
    /* The last EPH_DRIVE_RECENT commands (references), by id for GET …/commands/{id}. */
    struct eph_drive_op *recent[EPH_DRIVE_RECENT];
    unsigned recent_next;
    /* The background commands running: the sandbox's thread's only. */
    struct eph_drive_op *bg[EPH_DRIVE_BACKGROUND_MAX];
    unsigned refs; /* under ds->lock */
    struct eph_service *svc;
    void (*work)(struct eph_service *svc, const char *id);
    struct eph_drive *next; /* the registry's list */
};

struct eph_drives {
    pthread_mutex_t lock;
    pthread_cond_t cond; /* a sandbox's thread left */
    struct eph_drive *head;
    unsigned n;
    bool stopping;
};

/* ---- operations ---- */

struct eph_drive_op *eph_drive_op_new(enum eph_drive_kind kind)
{
    struct eph_drive_op *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->kind = kind;
    atomic_init(&op->refs, 1);
    atomic_init(&op->done, false);
    eph_exec_result_init(&op->res);
    eph_buf_init(&op->file, 0);
    return op;
}

void eph_drive_op_put(struct eph_drive_op *op)
{
    if (!op || atomic_fetch_sub(&op->refs, 1) != 1)
        return;
    free(op->command);
    free(op->cwd);
    for (char **e = op->env; e && *e; e++)
        free(*e);
    free(op->env);
    free(op->stdin_data);
    free(op->path);
    free(op->data);
    eph_drive_op_put(op->target);
    free(op->bg_lo);
    eph_exec_result_release(&op->res);
    eph_buf_release(&op->file);
    eph_sandbox_listing_release(&op->listing);
    free(op);
}

bool eph_drive_op_done(const struct eph_drive_op *op)
{
    return atomic_load(&op->done);
}

/* ---- the registry ---- */

int eph_drives_new(struct eph_drives **out)
{
    struct eph_drives *ds = calloc(1, sizeof(*ds));
    if (!ds)
        return -ENOMEM;
    pthread_mutex_init(&ds->lock, NULL);
    pthread_cond_init(&ds->cond, NULL);
    *out = ds;
    return 0;
}

static void drive_free(struct eph_drive *d)
{
    for (unsigned i = 0; i < EPH_DRIVE_RECENT; i++)
        eph_drive_op_put(d->recent[i]);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->cond);
    free(d);
}

void eph_drive_put(struct eph_drive *d)
{
    if (!d)
        return;
    struct eph_drives *ds = d->ds;
    pthread_mutex_lock(&ds->lock);
    bool last = --d->refs == 0;
    pthread_mutex_unlock(&ds->lock);
    if (last)
        drive_free(d);
}

struct eph_drive *eph_drive_get(struct eph_drives *ds, const char *id)
{
    if (!ds)
        return NULL;
    pthread_mutex_lock(&ds->lock);
    struct eph_drive *d = ds->head;
    while (d && strcmp(d->id, id))
        d = d->next;
    if (d)
        d->refs++;
    pthread_mutex_unlock(&ds->lock);
    return d;
}

unsigned eph_drives_count(struct eph_drives *ds)
{
    if (!ds)
        return 0;
    pthread_mutex_lock(&ds->lock);
    unsigned n = ds->n;
    pthread_mutex_unlock(&ds->lock);
    return n;
}

/* Every operation still queued is done with -ESHUTDOWN; nothing more is taken. */
static void drive_end(struct eph_drive *d, struct eph_live *live)
{
    pthread_mutex_lock(&d->lock);
    d->ending = true;
    struct queued *q = d->head;
    d->head = d->tail = NULL;
    d->exec_pending = false;
    pthread_mutex_unlock(&d->lock);
    while (q) {
        struct queued *next = q->next;
        q->op->rc = -ESHUTDOWN;
        atomic_store(&q->op->done, true);
        eph_drive_op_put(q->op);
        free(q);
        q = next;
    }
    if (live)
        eph_live_poke(live);
}

static void *drive_main(void *arg)
{
    struct eph_drive *d = arg;
    struct eph_drives *ds = d->ds;
    d->work(d->svc, d->id);
    /* The worker returned without serving (refused, failed before ready): what was queued for
     * it is answered. */
    struct eph_live *live = eph_live_get(d->svc->live, d->id);
    drive_end(d, live);
    eph_live_put(live);
    pthread_mutex_lock(&ds->lock);
    for (struct eph_drive **pp = &ds->head; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    ds->n--;
    bool last = --d->refs == 0;
    pthread_cond_broadcast(&ds->cond);
    pthread_mutex_unlock(&ds->lock);
    if (last)
        drive_free(d);
    return NULL;
}

int eph_drive_spawn(struct eph_drives *ds, struct eph_service *svc, const char *id,
                    void (*work)(struct eph_service *svc, const char *id))
{
    if (!ds)
        return -ESHUTDOWN;
    struct eph_drive *d = calloc(1, sizeof(*d));
    if (!d)
        return -ENOMEM;
    snprintf(d->id, sizeof(d->id), "%s", id);
    d->ds = ds;
    d->svc = svc;
    d->work = work;
    d->refs = 1; /* the thread's */
    pthread_mutex_init(&d->lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* the loop waits on monotonic instants */
    int crc = pthread_cond_init(&d->cond, &a);
    pthread_condattr_destroy(&a);
    if (crc) {
        pthread_mutex_destroy(&d->lock);
        free(d);
        return -crc;
    }
    pthread_mutex_lock(&ds->lock);
    if (ds->stopping) {
        pthread_mutex_unlock(&ds->lock);
        drive_free(d);
        return -ESHUTDOWN;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* A sandbox's thread waits most of its life: a smaller stack than the default 8 MiB keeps a
     * hundred idle sandboxes cheap (the deepest path, the worker's steps, needs far less). */
    pthread_attr_setstacksize(&attr, DRIVE_STACK_BYTES);
    pthread_t t;
    int rc = pthread_create(&t, &attr, drive_main, d);
    pthread_attr_destroy(&attr);
    if (rc) {
        pthread_mutex_unlock(&ds->lock);
        drive_free(d);
        return -rc;
    }
    /* Listed before its thread can look itself up or leave (it takes this lock to leave). */
    d->next = ds->head;
    ds->head = d;
    ds->n++;
    pthread_mutex_unlock(&ds->lock);
    return 0;
}

void eph_drives_stop(struct eph_drives *ds, struct eph_live_registry *live)
{
    if (!ds)
        return;
    pthread_mutex_lock(&ds->lock);
    ds->stopping = true;
    /* Each live sandbox ends now (cancelled: the server shuts down), and its thread settles it. */
    for (struct eph_drive *d = ds->head; d; d = d->next) {
        struct eph_live *l = eph_live_get(live, d->id);
        if (l) {
            eph_live_cancel(l);
            eph_live_put(l);
        }
        pthread_mutex_lock(&d->lock);
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
    }
    while (ds->n)
        pthread_cond_wait(&ds->cond, &ds->lock);
    pthread_mutex_unlock(&ds->lock);
}

void eph_drives_free(struct eph_drives *ds)
{
    if (!ds)
        return;
    pthread_mutex_destroy(&ds->lock);
    pthread_cond_destroy(&ds->cond);
    free(ds);
}

int eph_drive_submit(struct eph_drive *d, struct eph_drive_op *op)
{
    struct queued *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    pthread_mutex_lock(&d->lock);
    int rc = 0;
    bool exec = op->kind == EPH_DRIVE_EXEC;
    if (d->ending)
        rc = -ESHUTDOWN;
    else if (exec && !op->background && d->exec_pending)
        rc = -EBUSY;
    else if (exec && op->background && d->bg_count >= EPH_DRIVE_BACKGROUND_MAX)
        rc = -ENOSPC;
    if (!rc) {
        atomic_fetch_add(&op->refs, 1);
        q->op = op;
        if (d->tail)
            d->tail->next = q;
        else
            d->head = q;
        d->tail = q;
        if (exec && op->background)
            d->bg_count++;
        else if (exec)
            d->exec_pending = true;
        if (exec) {
            /* Remembered by id; the oldest is forgotten. */
            unsigned i = d->recent_next++ % EPH_DRIVE_RECENT;
            eph_drive_op_put(d->recent[i]);
            atomic_fetch_add(&op->refs, 1);
            d->recent[i] = op;
        }
        pthread_cond_signal(&d->cond);
    }
    pthread_mutex_unlock(&d->lock);
    if (rc)
        free(q);
    return rc;
}

struct eph_drive_op *eph_drive_find(struct eph_drive *d, const char *cmd_id)
{
    struct eph_drive_op *found = NULL;
    pthread_mutex_lock(&d->lock);
    for (unsigned i = 0; i < EPH_DRIVE_RECENT && !found; i++)
        if (d->recent[i] && !strcmp(d->recent[i]->id, cmd_id)) {
            found = d->recent[i];
            atomic_fetch_add(&found->refs, 1);
        }
    pthread_mutex_unlock(&d->lock);
    return found;
}

/* An operation is over: its result is published and its waiters look again. */
static void op_finish(struct eph_drive *d, const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    if (op->kind == EPH_DRIVE_EXEC) {
        pthread_mutex_lock(&d->lock);
        if (op->background)
            d->bg_count--;
        else
            d->exec_pending = false;
        pthread_mutex_unlock(&d->lock);
    }
    atomic_store(&op->done, true);
    eph_live_poke(c->live);
}

/* ---- the loop ---- */

/* Why the sandbox must end now, or -1 while it may go on. */
static int must_end(const struct eph_drive_ctx *c, uint64_t now, uint64_t idle_end)
{
    if (eph_cancelled(&c->cancel))
        return EPH_DRIVE_CANCELLED;
    if (c->broker && eph_broker_exhausted(c->broker))
        return EPH_DRIVE_BUDGET;
    if (now >= eph_budget_compute_deadline(c->budget))
        return EPH_DRIVE_BUDGET;
    if (now >= c->deadline_ns)
        return EPH_DRIVE_TIMED_OUT;
    if (now >= idle_end)
        return EPH_DRIVE_IDLE;
    return -1;
}

/* A running command's output as shell.output events, as the agent's shell tool emits them (never
 * under zero data retention). */
struct live {
    const struct eph_drive_ctx *c;
    const char *call;
    char *line;
    struct eph_live_exec le;
    struct eph_sink_held *held; /* set once the command has ended: what is left is held */
};

static int live_emit(void *arg, int stream, const char *text, size_t len, uint64_t offset)
{
    struct live *lv = arg;
    json_t *d = json_pack("{s:s, s:s, s:s%, s:I}", "call", lv->call, "stream",
                          stream == 1 ? "stdout" : "stderr", "text", text, len, "offset",
                          (json_int_t)offset);
    const char *line = lv->line ? lv->line : "";
    if (lv->held)
        return eph_sink_hold(lv->c->sink, lv->held, "shell", "shell.output", d, "$ %s", line);
    return eph_sink_emit(lv->c->sink, "shell", "shell.output", d, "$ %s", line);
}

/* The limit a command runs under: asked (0: the per-command limit), never past the sandbox's
 * time limit or the instant the budget runs out; *stop says which of those two it is, if any. */
static uint32_t exec_timeout(const struct eph_drive_ctx *c, uint32_t asked_ms, const char **stop)
{
    uint64_t now = eph_clock_mono_ns();
    uint64_t until = c->deadline_ns, budget_end = eph_budget_compute_deadline(c->budget);
    *stop = "timed_out";
    if (budget_end < until) {
        until = budget_end;
        *stop = "budget_exhausted";
    }
    if (until <= now)
        return 0;
    uint64_t ms = (until - now) / 1000000u;
    uint32_t limit = c->svc->cfg->sandbox.command_timeout_seconds * 1000u;
    if (asked_ms && asked_ms < limit)
        limit = asked_ms;
    if (ms > limit) {
        ms = limit;
        *stop = NULL;
    }
    return ms ? (uint32_t)ms : 1;
}

/* stdin is a file the command's shell reads from (the guest gives a command /dev/null). */
static char *exec_command(const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    if (!op->stdin_len)
        return strdup(op->command);
    char path[96];
    snprintf(path, sizeof(path), "/tmp/.ephemeral-stdin-%s", op->id);
    int rc = c->sb->ops->write_file(c->sb, path, op->stdin_data, op->stdin_len, 0644);
    if (rc) {
        op->rc = rc;
        return NULL;
    }
    char *cmd = NULL;
    /* Opened, then unlinked: the command reads it, and nothing of it is left behind. */
    if (asprintf(&cmd, "exec 0<%s && rm -f %s\n%s", path, path, op->command) < 0)
        cmd = NULL;
    return cmd;
}

static json_t *stream_text(const struct eph_buf *b)
{
    char *t = eph_text_utf8_sanitize(b->data ? b->data : "", b->len);
    json_t *s = json_string(t ? t : "");
    free(t);
    return s;
}

/* held: the command's live output left when it ended (may be NULL), recorded first in the same
 * transaction. */
static void exec_event(const struct eph_drive_ctx *c, struct eph_drive_op *op, const char *line,
                       struct eph_sink_held *held)
{
    json_t *d = json_pack("{s:s}", "call", op->id);
    if (!d) {
        if (held)
            eph_sink_held_flush(c->sink, held);
        return;
    }
    if (op->background)
        json_object_set_new(d, "background", json_true());
    if (op->killed)
        json_object_set_new(d, "killed", json_true());
    if (!c->zdr) {
        /* The whole command in the data (the message has it cut). */
        char *whole = eph_text_utf8_sanitize(op->command, strlen(op->command));
        json_object_set_new(d, "command", json_string(whole ? whole : line ? line : ""));
        free(whole);
    }
    if (op->rc) {
        json_object_set_new(d, "error", json_string(eph_strerror(op->rc)));
    } else {
        const struct eph_exec_result *r = &op->res;
        json_object_set_new(d, "exit_code",
                            json_integer(r->signal ? 128 + r->signal : r->exit_code));
        json_object_set_new(d, "duration_ms", json_integer((json_int_t)(r->duration_us / 1000)));
        json_object_set_new(d, "stdout_bytes", json_integer((json_int_t)r->stdout_total));
        json_object_set_new(d, "stderr_bytes", json_integer((json_int_t)r->stderr_total));
        json_object_set_new(d, "timeout_ms", json_integer(op->timeout_used));
        if (r->signal)
            json_object_set_new(d, "signal", json_integer(r->signal));
        if (r->timed_out)
            json_object_set_new(d, "timed_out", json_true());
        if (!c->zdr) {
            json_object_set_new(d, "stdout", stream_text(&r->out));
            json_object_set_new(d, "stderr", stream_text(&r->err));
            json_object_set_new(d, "stdout_truncated", json_boolean(r->stdout_total > r->out.len));
            json_object_set_new(d, "stderr_truncated", json_boolean(r->stderr_total > r->err.len));
        }
    }
    /* With the compute and the count it brought, and the output left: one write. */
    if (c->zdr)
        eph_sink_emit_progress_after(c->sink, held, "shell", "shell.command", d,
                                     "a command ran (zero data retention)");
    else
        eph_sink_emit_progress_after(c->sink, held, "shell", "shell.command", d, "$ %s",
                                     line ? line : "");
}

static void run_exec(const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    const char *stop;
    uint32_t timeout = exec_timeout(c, op->timeout_ms, &stop);
    char *line =
        eph_text_utf8_sanitize(op->command, strlen(op->command) > 200 ? 200 : strlen(op->command));
    if (!timeout) {
        op->rc = -ETIMEDOUT;
        op->stopped = stop;
        free(line);
        return;
    }
    char *command = exec_command(c, op);
    if (!command) {
        if (!op->rc)
            op->rc = -ENOMEM;
        free(line);
        return;
    }
    unsigned cap = c->svc->cfg->sandbox.output_cap_bytes;
    struct eph_exec_request req = {.command = command,
                                   .timeout_ms = timeout,
                                   .stdout_cap = cap,
                                   .stderr_cap = cap,
                                   .head_tail = true,
                                   .env = (const char *const *)op->env,
                                   .cwd = op->cwd};
    struct live *lv = NULL;
    unsigned live_bytes = c->svc->cfg->sandbox.live_output_bytes;
    if (!c->zdr && live_bytes && (lv = calloc(1, sizeof(*lv)))) {
        lv->c = c;
        lv->call = op->id;
        lv->line = line;
        eph_live_exec_attach(&lv->le, &req, cap < 2 ? cap : cap - cap / 2, live_bytes, LIVE_TICK_MS,
                             live_emit, lv);
    }
    op->timeout_used = timeout;
    op->rc = eph_sandbox_exec(c->sb, &req, &op->res);
    struct eph_sink_held held = {0};
    if (lv) {
        lv->held = &held; /* what is left goes with the shell.command event */
        eph_live_output_finish(&lv->le.lo);
        free(lv);
    }
    free(command);
    if (!op->rc)
        eph_metrics_observe_exec(op->res.duration_us * 1000u);
    (*c->shell_commands)++;
    /* Killed where the sandbox's time or budget ended: the sandbox ends with it. */
    if ((op->rc || op->res.timed_out) && stop) {
        uint64_t now = eph_clock_mono_ns();
        if (now >= c->deadline_ns || now >= eph_budget_compute_deadline(c->budget))
            op->stopped = stop;
    }
    if (c->broker && eph_broker_exhausted(c->broker))
        op->stopped = "budget_exhausted";
    exec_event(c, op, line, &held);
    free(line);
}

/* ---- background commands ----
 *
 * A background command runs detached inside the sandbox: a first exec starts it in the exec's
 * own process group (the guest gives every exec one, and ends it only at the exec's timeout),
 * its output going to files under BG_DIR/<id>, and prints that group; the sandbox's thread then
 * looks at the files every BG_POLL_NS (one short exec), emits what they gained as shell.output
 * and, once the command wrote its exit status, takes its result and removes the files. The
 * command's text reaches the shell in an environment variable, never inside the script, so
 * nothing in it is parsed twice. */
#define BG_DIR "/tmp/.ephemeral-bg"
#define BG_POLL_NS (250u * 1000000u)
#define BG_EXEC_MS 10000u

/* A short exec of the sandbox's own (not the caller's): out and err capped at cap each. */
static int bg_exec(const struct eph_drive_ctx *c, const char *script, const char *const *env,
                   const char *cwd, uint32_t cap, struct eph_exec_result *res)
{
    struct eph_exec_request req = {.command = script,
                                   .timeout_ms = BG_EXEC_MS,
                                   .stdout_cap = cap,
                                   .stderr_cap = cap,
                                   .env = env,
                                   .cwd = cwd};
    eph_exec_result_init(res);
    return eph_sandbox_exec(c->sb, &req, res);
}

static void bg_remove(struct eph_drive *d, struct eph_drive_op *op)
{
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX; i++)
        if (d->bg[i] == op)
            d->bg[i] = NULL;
}

/* The command has ended (its exit file is there, or it was killed): its result (the head of
 * each stream, up to the output cap, and the byte counts), its event, its files removed. */
static void bg_finish(struct eph_drive *d, const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    if (op->bg_lo)
        eph_live_output_finish(op->bg_lo);
    char script[256];
    snprintf(script, sizeof(script),
             "d=" BG_DIR "/%s; head -n 1 $d/exit >&2; cat $d/out; "
             "cat $d/err >&2; rm -rf $d",
             op->id);
    unsigned cap = c->svc->cfg->sandbox.output_cap_bytes;
    uint64_t started_us = op->res.duration_us; /* its start, kept there while it ran */
    struct eph_exec_result res;
    op->rc = bg_exec(c, script, NULL, NULL, cap + 32, &res);
    if (!op->rc) {
        /* stderr: the exit status line first, then the command's own stderr. */
        char *e = res.err.data ? res.err.data : "";
        char *nl = memchr(e, '\n', res.err.len);
        size_t skip = nl ? (size_t)(nl - e) + 1 : res.err.len;
        int status = atoi(e);
        memmove(e, e + skip, res.err.len - skip);
        res.err.len -= skip;
        res.stderr_total = res.stderr_total > skip ? res.stderr_total - skip : 0;
        if (res.out.len > cap)
            res.out.len = cap;
        if (res.err.len > cap)
            res.err.len = cap;
        res.exit_code = op->killed ? 0 : status;
        res.signal = op->killed ? 9 : 0;
        eph_exec_result_release(&op->res);
        op->res = res;
    } else {
        eph_exec_result_release(&res);
    }
    op->res.duration_us = eph_clock_mono_ns() / 1000u - started_us;
    size_t n = strlen(op->command);
    char *line = eph_text_utf8_sanitize(op->command, n > 200 ? 200 : n);
    exec_event(c, op, line, NULL);
    free(line);
    bg_remove(d, op);
    op_finish(d, c, op);
    eph_drive_op_put(op);
}

/* Starts it; on success the sandbox's list holds the queue's reference until it ends. */
static void bg_start(struct eph_drive *d, const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    char in[128] = "/dev/null";
    size_t nenv = 0;
    while (op->env && op->env[nenv])
        nenv++;
    const char **env = calloc(nenv + 2, sizeof(*env));
    char *cmd_env = NULL;
    if (!env || asprintf(&cmd_env, "EPH_BG_COMMAND=%s", op->command) < 0) {
        cmd_env = NULL;
        op->rc = -ENOMEM;
    }
    if (!op->rc && op->stdin_len) {
        snprintf(in, sizeof(in), BG_DIR "/%s/in", op->id);
        op->rc = c->sb->ops->write_file(c->sb, in, op->stdin_data, op->stdin_len, 0600);
    }
    struct eph_exec_result res;
    eph_exec_result_init(&res);
    if (!op->rc) {
        for (size_t i = 0; i < nenv; i++)
            env[i] = op->env[i];
        env[nenv] = cmd_env;
        char script[512];
        snprintf(script, sizeof(script),
                 "d=" BG_DIR "/%s; mkdir -p $d && c=$EPH_BG_COMMAND && unset EPH_BG_COMMAND && "
                 "{ (sh -c \"$c\"; echo $? > $d/exit.t; mv $d/exit.t $d/exit) <%s >$d/out "
                 "2>$d/err & } && echo $$",
                 op->id, in);
        op->rc = bg_exec(c, script, env, op->cwd, 64, &res);
    }
    free(cmd_env);
    free(env);
    if (!op->rc && (res.signal || res.exit_code || !res.out.len))
        op->rc = -EIO;
    if (!op->rc)
        op->pgid = (uint32_t)strtoul(res.out.data, NULL, 10);
    eph_exec_result_release(&res);
    unsigned slot = EPH_DRIVE_BACKGROUND_MAX;
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX && slot == EPH_DRIVE_BACKGROUND_MAX; i++)
        if (!d->bg[i])
            slot = i;
    if (op->rc || !op->pgid || slot == EPH_DRIVE_BACKGROUND_MAX) {
        if (!op->rc)
            op->rc = -EIO;
        op_finish(d, c, op);
        eph_drive_op_put(op);
        return;
    }
    (*c->shell_commands)++;
    op->res.duration_us = eph_clock_mono_ns() / 1000u;
    unsigned live_bytes = c->svc->cfg->sandbox.live_output_bytes;
    if (!c->zdr && live_bytes &&
        (op->bg_lo = calloc(1, sizeof(*op->bg_lo) + sizeof(struct live)))) {
        struct live *lv = (struct live *)(op->bg_lo + 1);
        lv->c = c;
        lv->call = op->id;
        eph_live_output_init(op->bg_lo, live_bytes, live_emit, lv);
    }
    d->bg[slot] = op;
}

/* Looks at one running command's files: what they gained is emitted; it has ended when its exit
 * file is there (looked at before the output is read, so what is read then is all it wrote). */
static void bg_poll_one(struct eph_drive *d, const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    size_t n = op->bg_lo && !op->bg_lo->closed ? EPH_LIVE_OUTPUT_CHUNK : 0;
    char script[384];
    snprintf(script, sizeof(script),
             "d=" BG_DIR "/%s; [ -e $d/exit ]; x=$?; tail -c +%llu $d/out 2>/dev/null | "
             "head -c %zu; tail -c +%llu $d/err 2>/dev/null | head -c %zu >&2; exit $x",
             op->id, (unsigned long long)op->bg_off[0] + 1, n,
             (unsigned long long)op->bg_off[1] + 1, n);
    struct eph_exec_result res;
    int rc = bg_exec(c, script, NULL, NULL, (uint32_t)(n ? n : 1), &res);
    uint64_t now = eph_clock_mono_ns();
    op->bg_next_ns = now + BG_POLL_NS;
    if (!rc && n) {
        eph_live_output_feed(op->bg_lo, 1, res.out.data, res.out.len, now);
        eph_live_output_feed(op->bg_lo, 2, res.err.data, res.err.len, now);
        eph_live_output_tick(op->bg_lo, now);
        op->bg_off[0] += res.out.len;
        op->bg_off[1] += res.err.len;
    }
    bool ended = !rc && !res.signal && res.exit_code == 0;
    eph_exec_result_release(&res);
    if (ended)
        bg_finish(d, c, op);
}

static void bg_poll(struct eph_drive *d, const struct eph_drive_ctx *c)
{
    uint64_t now = eph_clock_mono_ns();
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX; i++)
        if (d->bg[i] && d->bg[i]->bg_next_ns <= now)
            bg_poll_one(d, c, d->bg[i]);
}

static bool bg_any(const struct eph_drive *d)
{
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX; i++)
        if (d->bg[i])
            return true;
    return false;
}

/* A kill: the target's whole process group, then its result as it is. */
static void bg_kill(struct eph_drive *d, const struct eph_drive_ctx *c, struct eph_drive_op *kop)
{
    struct eph_drive_op *t = kop->target;
    bool running = false;
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX; i++)
        running |= d->bg[i] == t;
    if (!running)
        return; /* it ended already (or never started): nothing to kill */
    char script[192];
    snprintf(script, sizeof(script), "kill -9 -%u 2>/dev/null; echo 137 > " BG_DIR "/%s/exit",
             t->pgid, t->id);
    struct eph_exec_result res;
    kop->rc = bg_exec(c, script, NULL, NULL, 64, &res);
    eph_exec_result_release(&res);
    if (!kop->rc) {
        t->killed = true;
        bg_finish(d, c, t);
    }
}

/* The sandbox ends: its background commands end with it. */
static void bg_end(struct eph_drive *d, const struct eph_drive_ctx *c)
{
    for (unsigned i = 0; i < EPH_DRIVE_BACKGROUND_MAX; i++) {
        struct eph_drive_op *op = d->bg[i];
        if (!op)
            continue;
        d->bg[i] = NULL;
        op->rc = -ESHUTDOWN;
        op_finish(d, c, op);
        eph_drive_op_put(op);
    }
}

static void run_op(const struct eph_drive_ctx *c, struct eph_drive_op *op)
{
    switch (op->kind) {
    case EPH_DRIVE_EXEC:
        run_exec(c, op);
        break;
    case EPH_DRIVE_KILL:
        break; /* bg_kill: it needs the sandbox's list */
    case EPH_DRIVE_WRITE:
        op->rc = c->sb->ops->write_file(c->sb, op->path, op->data, op->len, 0644);
        eph_sink_emit(c->sink, "file", "file.written",
                      c->zdr ? json_pack("{s:I}", "bytes", (json_int_t)op->len)
                             : json_pack("{s:s, s:I, s:b}", "path", op->path, "bytes",
                                         (json_int_t)op->len, "ok", op->rc == 0),
                      "%s%s (%zu bytes)%s", c->zdr ? "a file" : "wrote ", c->zdr ? "" : op->path,
                      op->len, op->rc ? " failed" : "");
        break;
    case EPH_DRIVE_READ:
        op->rc = c->sb->ops->read_file(c->sb, op->path, op->cap, &op->file);
        break;
    case EPH_DRIVE_LIST:
        op->rc = eph_sandbox_list_files(c->sb, LIST_MAX_ENTRIES, LIST_MAX_DEPTH, &op->listing);
        break;
    }
}

static enum eph_drive_end end_of(const char *stopped)
{
    return !strcmp(stopped, "budget_exhausted") ? EPH_DRIVE_BUDGET : EPH_DRIVE_TIMED_OUT;
}

enum eph_drive_end eph_drive_serve(struct eph_drive *d, const struct eph_drive_ctx *c)
{
    uint64_t idle_ns = (uint64_t)c->idle_timeout_seconds * 1000000000u;
    uint64_t last = eph_clock_mono_ns();
    int end = -1;
    for (;;) {
        uint64_t now = eph_clock_mono_ns();
        uint64_t idle_end = idle_ns ? last + idle_ns : UINT64_MAX;
        if ((end = must_end(c, now, idle_end)) >= 0)
            break;
        if (bg_any(d)) {
            bg_poll(d, c);
            last = eph_clock_mono_ns(); /* a command running is not idle */
        }
        pthread_mutex_lock(&d->lock);
        struct queued *q = d->head;
        if (q) {
            d->head = q->next;
            if (!d->head)
                d->tail = NULL;
        } else {
            uint64_t until = now + (bg_any(d) ? BG_POLL_NS : POLL_NS);
            uint64_t limits[] = {c->deadline_ns, eph_budget_compute_deadline(c->budget), idle_end};
            for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
                if (limits[i] < until)
                    until = limits[i];
            struct timespec ts;
            eph_clock_timespec(until, &ts);
            pthread_cond_timedwait(&d->cond, &d->lock, &ts);
        }
        pthread_mutex_unlock(&d->lock);
        if (!q)
            continue;
        struct eph_drive_op *op = q->op;
        free(q);
        last = eph_clock_mono_ns();
        if (op->kind == EPH_DRIVE_EXEC && op->background) {
            bg_start(d, c, op); /* it keeps the queue's reference while it runs */
            continue;
        }
        if (op->kind == EPH_DRIVE_KILL)
            bg_kill(d, c, op);
        else
            run_op(c, op);
        last = eph_clock_mono_ns();
        const char *stopped = op->stopped;
        op_finish(d, c, op);
        eph_drive_op_put(op);
        if (stopped) {
            end = (int)end_of(stopped);
            break;
        }
        if (eph_cancelled(&c->cancel)) {
            end = EPH_DRIVE_CANCELLED;
            break;
        }
    }
    bg_end(d, c);
    drive_end(d, c->live);
    return (enum eph_drive_end)end;
}
