/*
 * worker.c - one run, from the queue to settlement, as ordered steps (eph_worker_run):
 *
 *   1. load: the run, its live entry, its lease
 *   2. prompt: a zero-data-retention prompt taken from the live entry; cancelled? model?
 *   3. sandbox: queued -> starting, the sandbox created (compute starts accruing), -> running,
 *      sandbox.ready, worker.started
 *   4. files: the request's files placed, the broker started
 *   5. agent: the agent loop, until a result or a stop
 *   6. destroy (always): the tunnels end, the sandbox is destroyed (sandbox.destroyed), compute
 *      stops
 *   7. settle (always): the money split once (ledger/), the terminal status, the ledger's charge
 *      and release, and the closing events (run.<status>, worker.destroyed) in one transaction
 *
 * The budget's compute deadline bounds everything the run waits on, so the sandbox is destroyed no
 * later than the instant compute would exhaust the reservation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <sodium.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/money.h"
#include "common/sink.h"
#include "image/image.h"
#include "ledger/budget.h"
#include "ledger/settle.h"
#include "run/drive.h"
#include "run/egress.h"
#include "run/event_wire.h"
#include "run/live.h"
#include "run/replay_run.h"
#include "run/fence.h"
#include "run/lease_span.h"
#include "run/outputs.h"
#include "run/service.h"
#include "run/webhooks.h"
#include "run/worker.h"
#include "sandbox/pool.h"

/* 250 ms apart: two minutes of retries. */
#define SETTLE_RETRIES 480

/* A sandbox's closing event says how it ended in its own words (docs/SANDBOXES.md): stopped by
 * its owner or the server, or ended by a limit. */
static const char *sandbox_event_type(enum eph_run_status st)
{
    switch (st) {
    case EPH_RUN_COMPLETED:
    case EPH_RUN_CANCELLED:
        return "sandbox.stopped";
    case EPH_RUN_TIMED_OUT:
        return "sandbox.timed_out";
    case EPH_RUN_BUDGET_EXHAUSTED:
        return "sandbox.budget_exhausted";
    default:
        return "sandbox.failed";
    }
}

static const char *run_event_type(const struct eph_run *r)
{
    if (r->kind == EPH_KIND_SANDBOX)
        return sandbox_event_type(r->status);
    switch (r->status) {
    case EPH_RUN_COMPLETED:
        return "run.completed";
    case EPH_RUN_TIMED_OUT:
        return "run.timed_out";
    case EPH_RUN_BUDGET_EXHAUSTED:
        return "run.budget_exhausted";
    case EPH_RUN_CANCELLED:
        return "run.cancelled";
    default:
        return "run.failed";
    }
}

/* Writes the terminal transaction and closes the live entry (may be NULL). r carries status,
 * error, result and its cost already split (ledger/settle.h): model, web, compute, charged and
 * released are written as they are. When the store refuses the settlement for good, the live
 * entry is not closed: the run is still running in the store, and a client waiting on it must not
 * be told it ended. The entry is handed back instead (eph_live_abandon): its timeline goes back to
 * what is stored, and the lease keeper, or the next start, settles the run as lost. */
/* "3 model calls, 1,200 tokens", or "1 model call (4 attempts), …" when calls were retried; a
 * sandbox's "4 commands". */
static void calls_phrase(const struct eph_run *r, char *buf, size_t len)
{
    const struct eph_usage *u = &r->usage;
    if (r->kind == EPH_KIND_SANDBOX) {
        snprintf(buf, len, "%llu %s", (unsigned long long)u->shell_commands,
                 u->shell_commands == 1 ? "command" : "commands");
        return;
    }
    char tok[32];
    eph_format_thousands(u->input_tokens + u->output_tokens, tok);
    int n = snprintf(buf, len, "%llu %s", (unsigned long long)u->model_calls,
                     u->model_calls == 1 ? "model call" : "model calls");
    if (u->model_attempts > u->model_calls && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " (%llu attempts)",
                      (unsigned long long)u->model_attempts);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", %s tokens", tok);
}

/* The closing events of a settlement into all (3 at most): the run's terminal event and
 * worker.destroyed, after sandbox.destroyed: a live run's own (destroyed, prepared by step 6, moved
 * in and cleared; may be NULL), or a lost run's when it had a sandbox. A live run's are numbered
 * by its live entry; a lost run's after last_seq_if_not_live. Returns their count. */
static size_t closing_events(struct eph_live *live, const struct eph_run *r,
                             uint64_t last_seq_if_not_live, struct eph_event *destroyed,
                             struct eph_event all[3])
{
    const struct eph_cost *c = &r->cost;
    char charged[EPH_MONEY_FMT_MAX], released[EPH_MONEY_FMT_MAX];
    eph_money_format(c->charged_micros, charged);
    /* Shown so that the two add up to the budget shown (money.h). */
    eph_money_format_rest(c->reserved_micros, c->charged_micros, released);
    struct eph_event ev[2];
    json_t *run_data = json_pack("{s:s}", "status", eph_run_status_name(r->status));
    if (r->error_code)
        json_object_set_new(run_data, "error",
                            json_pack("{s:s, s:s}", "code", r->error_code, "message",
                                      r->error_message ? r->error_message : ""));
    json_t *money = json_pack("{s:I, s:I, s:I}", "reserved_micros", (json_int_t)c->reserved_micros,
                              "charged_micros", (json_int_t)c->charged_micros, "released_micros",
                              (json_int_t)c->released_micros);
    char calls[128];
    calls_phrase(r, calls, sizeof(calls));
    const char *source = r->kind == EPH_KIND_SANDBOX ? "sandbox" : "run";
    if (live) {
        if (r->error_message && r->status != EPH_RUN_COMPLETED && !r->zdr)
            eph_live_prepare(live, &ev[0], source, run_event_type(r), run_data, "%s · %s", calls,
                             r->error_message);
        else
            eph_live_prepare(live, &ev[0], source, run_event_type(r), run_data, "%s", calls);
        eph_live_prepare(live, &ev[1], "worker", "worker.destroyed", money,
                         "%s charged, %s released", charged, released);
    } else {
        /* A lost run: no live entry; number the events after what is stored. */
        for (int i = 0; i < 2; i++) {
            memset(&ev[i], 0, sizeof(ev[i]));
            ev[i].seq = last_seq_if_not_live + 1 + (uint64_t)i;
            ev[i].at_ms = eph_clock_real_ms();
            ev[i].t_ms = ev[i].at_ms - r->created_at_ms;
        }
        snprintf(ev[0].source, sizeof(ev[0].source), "%s", source);
        snprintf(ev[0].type, sizeof(ev[0].type), "%s", run_event_type(r));
        ev[0].data = run_data;
        if (asprintf(&ev[0].message, "%s · %s", calls, r->error_message ? r->error_message : "") <
            0)
            ev[0].message = NULL;
        snprintf(ev[1].source, sizeof(ev[1].source), "worker");
        snprintf(ev[1].type, sizeof(ev[1].type), "worker.destroyed");
        ev[1].data = money;
        if (asprintf(&ev[1].message, "%s charged, %s released", charged, released) < 0)
            ev[1].message = NULL;
    }
    size_t nev = 0;
    if (live && destroyed && destroyed->seq) {
        all[0] = *destroyed;
        memset(destroyed, 0, sizeof(*destroyed));
        nev = 1;
    } else if (!live && r->sandbox_backend) {
        /* Its sandbox died with its worker (or is destroyed by that node's restart): the
         * timeline says so before it closes. */
        memset(&all[0], 0, sizeof(all[0]));
        all[0].at_ms = ev[0].at_ms;
        all[0].t_ms = ev[0].t_ms;
        snprintf(all[0].source, sizeof(all[0].source), "sandbox");
        snprintf(all[0].type, sizeof(all[0].type), "sandbox.destroyed");
        all[0].data = json_pack("{s:s, s:b}", "backend", r->sandbox_backend, "worker_lost", 1);
        all[0].message = strdup("sandbox lost with its worker; compute charged to the last "
                                "checkpoint");
        nev = 1;
    }
    for (int i = 0; i < 2; i++) {
        all[nev] = ev[i];
        all[nev].seq = live ? ev[i].seq : last_seq_if_not_live + 1 + nev;
        nev++;
    }
    if (nev == 3 && !live)
        all[0].seq = last_seq_if_not_live + 1;
    /* Each is stored as the API serves it, serialised once its number is final (a live run's
     * were, when prepared). */
    for (size_t i = 0; i < nev; i++)
        if (!live || !all[i].wire)
            eph_event_serialise(&all[i]);
    return nev;
}

/* The terminal transaction. A full disk, a read-only file or a busy database is usually
 * temporary: with may_retry, it is tried for a while, so that the money is settled as soon as
 * the store takes writes again. Past that, the run stays unsettled in the store and the next
 * start settles it (worker_lost). */
static int finish_in_store(struct eph_service *svc, const struct eph_run_final *fin, bool may_retry)
{
    int rc = svc->store->ops->run_finish(svc->store, fin);
    for (unsigned tries = 0;
         (rc == -ENOSPC || rc == -EROFS || rc == -EBUSY || rc == -EIO || rc == -ENOTCONN) &&
         may_retry && tries < SETTLE_RETRIES && !atomic_load(&svc->shutting_down);
         tries++) {
        if (tries == 0)
            EPH_ERROR("worker", "run %s: cannot settle yet: %s; retrying", fin->run->id,
                      eph_strerror(rc));
        struct timespec ts = {0, 250000000};
        nanosleep(&ts, NULL);
        rc = svc->store->ops->run_finish(svc->store, fin);
    }
    return rc;
}

static int settle(struct eph_service *svc, struct eph_live *live, struct eph_run *r,
                  uint64_t last_seq_if_not_live, int64_t lease_expired_before_ms, bool may_retry,
                  struct eph_event *destroyed)
{
    r->finished_at_ms = eph_clock_real_ms();
    if (!r->zdr)
        r->log_expires_at_ms =
            r->finished_at_ms + (svc->cfg->retention_seconds
                                     ? (int64_t)svc->cfg->retention_seconds * 1000
                                     : (int64_t)svc->cfg->retention_days * 86400 * 1000);
    struct eph_event all[3];
    size_t nev = closing_events(live, r, last_seq_if_not_live, destroyed, all);
    struct eph_run_final fin = {.run = r,
                                .events = all,
                                .nevents = nev,
                                .lease_expired_before_ms = lease_expired_before_ms};
    /* Its webhook event, queued in the same transaction (docs/WEBHOOKS.md). */
    struct eph_webhook_event wev;
    char *wbody = NULL;
    json_t *obj = svc->run_object ? svc->run_object(r, svc->cfg->retention_days) : NULL;
    if (obj && eph_webhook_event_make(obj, r, &wev, &wbody) == 0)
        fin.webhook = &wev;
    json_decref(obj);
    /* A run that ended with an error it could not keep (fail_run, out of memory) is not stored
     * without it: it stays unsettled, and is settled as lost (worker_lost). */
    bool error_lost =
        eph_run_status_terminal(r->status) && r->status != EPH_RUN_COMPLETED && !r->error_code;
    int rc = error_lost ? -ENOMEM : finish_in_store(svc, &fin, may_retry);
    free(wbody);
    if (!rc && fin.webhook)
        eph_webhooks_kick(svc->webhooks);
    if (rc == -EALREADY && (lease_expired_before_ms || (live && eph_live_is_lease_lost(live)))) {
        EPH_INFO("worker", "run %s: settled elsewhere; not settled here", r->id);
    } else if (rc) {
        EPH_ERROR("worker", "run %s: cannot settle: %s", r->id, eph_strerror(rc));
    } else {
        char charged[EPH_MONEY_FMT_MAX], released[EPH_MONEY_FMT_MAX];
        eph_money_format(r->cost.charged_micros, charged);
        eph_money_format_rest(r->cost.reserved_micros, r->cost.charged_micros, released);
        EPH_INFO("worker", "run %s %s: %s charged, %s released", r->id,
                 eph_run_status_name(r->status), charged, released);
    }
    uint64_t last = all[nev - 1].seq, before = all[0].seq - 1;
    for (size_t i = 0; i < nev; i++)
        eph_event_release(&all[i]);
    if (live && rc && rc != -EALREADY) {
        /* Not settled: the closing events were numbered but never stored. */
        eph_live_abandon(live, before);
    } else if (live) {
        char *zdr_result = r->zdr && r->result ? strdup(r->result) : NULL;
        eph_live_close(live, rc ? before : last, zdr_result);
    }
    return rc;
}

/* The split of a cost as stored (a run settled without its budget: refused, or lost). */
static void split_stored(struct eph_cost *c)
{
    struct eph_settlement st;
    eph_ledger_split(c->reserved_micros, c->model_micros, c->web_micros, c->compute_micros, &st);
    if (st.capped)
        EPH_WARN("worker", "charges capped at the reservation");
    c->model_micros = st.model;
    c->web_micros = st.web;
    c->compute_micros = st.compute;
    c->charged_micros = st.charged;
    c->released_micros = st.released;
}

/* The error type a run's outcome shows (docs/API.md, "Why a run did not complete"): a stop the
 * run's own limits or its owner decided is not a server error, and each says which it was. */
static const char *error_type_for(enum eph_run_status st)
{
    switch (st) {
    case EPH_RUN_CANCELLED:
        return "cancelled_error";
    case EPH_RUN_TIMED_OUT:
        return "timeout_error";
    case EPH_RUN_BUDGET_EXHAUSTED:
        return "budget_error";
    default:
        return "api_error";
    }
}

/* The error message a zero-data-retention run keeps (docs/API.md "Zero data
 * retention"): the server's own sentence for the codes whose messages are made of fixed words,
 * numbers, the org's connection names and system errors only; for every other code (a file's
 * path, the model's refusal, a provider's or a recording's answer, anything yet to come) a fixed
 * sentence, since its message can quote what the run was given or what the model said. */
const char *eph_worker_zdr_message(const char *code, const char *msg)
{
    static const char *const fixed[] = {
        "cancelled",      "server_shutdown",   "timeout",       "budget_exhausted",
        "internal_error", "idle_timeout",      "turn_limit",    "model_output_truncated",
        "prompt_lost",    "model_unavailable", "sandbox_error", "broker_error",
        "worker_lost",    "queue_unavailable"};
    for (size_t i = 0; code && i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (strcmp(code, fixed[i]) == 0)
            return msg;
    return "the details are not kept: the run has zero data retention";
}

/* The run ends with an error. When its error cannot be kept (out of memory) the run is left
 * without one, and settle() does not store it so. */
static void fail_run(struct eph_run *r, enum eph_run_status st, const char *code, const char *msg)
{
    if (r->zdr)
        msg = eph_worker_zdr_message(code, msg);
    r->status = st;
    if (eph_run_set_error(r, error_type_for(st), code, msg))
        EPH_ERROR("worker", "run %s: out of memory", r->id);
}

/* A cancelled run: by its owner, or by a server that stops (its runs are cancelled past the
 * grace period). */
static void fail_cancelled(struct eph_service *svc, struct eph_run *r, const char *when)
{
    char msg[128];
    if (atomic_load(&svc->shutting_down)) {
        snprintf(msg, sizeof(msg), "the server shut down %s", when);
        fail_run(r, EPH_RUN_CANCELLED, "server_shutdown", msg);
    } else {
        snprintf(msg, sizeof(msg), "the run was cancelled %s", when);
        fail_run(r, EPH_RUN_CANCELLED, "cancelled", msg);
    }
}

int eph_worker_refuse(struct eph_service *svc, const char *run_id, const char *code,
                      const char *message)
{
    struct eph_live *live = eph_live_get(svc->live, run_id);
    if (!live)
        return -ENOENT;
    eph_live_refuse(live, code, message);
    /* The settler settles it like any run: step_prompt stops it before a sandbox. */
    int rc = eph_service_settle(svc, run_id);
    if (rc) {
        /* No thread can take it (the server is stopping, or memory ran out): one attempt here,
         * no retries, so the caller, maybe an HTTP thread, never waits on a store that refuses.
         * Should that attempt fail too, the run stays reserved until the next start. */
        EPH_WARN("worker", "run %s: cannot hand the refused run on: %s; settling it here", run_id,
                 eph_strerror(rc));
        struct eph_run r;
        rc = svc->store->ops->run_get(svc->store, run_id, NULL, &r);
        if (!rc) {
            fail_run(&r, EPH_RUN_FAILED, code, message);
            /* Never started: nothing measured, everything released. */
            r.cost.model_micros = r.cost.web_micros = r.cost.compute_micros = 0;
            split_stored(&r.cost);
            rc = settle(svc, live, &r, 1, 0, false, NULL);
            eph_run_release(&r);
        }
    }
    eph_live_put(live);
    return rc;
}

/* The request's files, placed in the scratch directory before the first turn. */
static int place_files(struct eph_sandbox *sb, const struct eph_run *r, char *err, size_t errlen)
{
    size_t i;
    json_t *f;
    json_array_foreach(r->files, i, f)
    {
        const char *path = json_string_value(json_object_get(f, "path"));
        const char *b64 = json_string_value(json_object_get(f, "content_base64"));
        if (!path || !b64)
            continue;
        size_t b64len = strlen(b64);
        size_t cap = b64len / 4 * 3 + 3;
        unsigned char *bin = malloc(cap ? cap : 1);
        if (!bin)
            return -ENOMEM;
        size_t len = 0;
        if (sodium_base642bin(bin, cap, b64, b64len, NULL, &len, NULL,
                              sodium_base64_VARIANT_ORIGINAL)) {
            free(bin);
            snprintf(err, errlen, "file '%s' is not valid base64", path);
            return -EINVAL;
        }
        int rc = sb->ops->write_file(sb, path, bin, len, 0644);
        free(bin);
        if (rc) {
            snprintf(err, errlen, "cannot place file '%s': %s", path, eph_strerror(rc));
            return rc;
        }
    }
    return 0;
}

static int last_seq_cb(const struct eph_event *e, void *ctx)
{
    *(uint64_t *)ctx = e->seq;
    return 0;
}

/* ---- one run as ordered steps ----
 *
 * Each step returns 0 to go on, or non-zero when the run stops there: its outcome is then in
 * j->r (status and error), and eph_worker_run() goes straight to the steps that always run
 * (destroy, settle). Like nsjail's containProc(): the order is the list below, read top down. */

struct job {
    struct eph_service *svc;
    struct eph_live *live;
    struct eph_run r;
    bool loaded;
    bool start_stored; /* the claim stored the start (queued -> starting) */
    /* sandbox.destroyed, numbered by step 6 and stored with the settlement (seq 0: none). */
    struct eph_event destroyed;
    const struct eph_model_config *mcfg;
    struct eph_model *model;
    struct eph_budget budget;
    struct eph_sandbox *sb;
    struct eph_egress *egress;
    uint64_t start_ns, deadline_ns;
    /* How the worker's own steps (and, through it, the layers below) report: the run's live
     * timeline, stored; and the run's cancel flag. */
    struct eph_sink sink;
    struct eph_cancel cancel;
    struct eph_agent_usage usage;  /* the agent's counts, copied into r on progress */
    struct eph_replay_run *replay; /* a replay: the original's record (replay_run.h), or NULL */
};

static bool is_sandbox(const struct job *j)
{
    return j->r.kind == EPH_KIND_SANDBOX;
}

/* The sink of a run: an event is numbered under the run's emit lock and stored outside the
 * registry's lock (live.c), then published to every waiter. */
static int sink_event(void *ctx, const char *source, const char *type, json_t *data,
                      const char *message)
{
    struct job *j = ctx;
    int rc = eph_live_emit(j->live, j->svc->store, source, type, data, "%s", message);
    /* Fenced off (the run was settled by another node): the live layer said so once and stopped
     * the run; the callers need not say it again for every event. */
    return rc == -ESTALE ? 0 : rc;
}

static void agent_usage_copy(struct eph_run *r, const struct eph_agent_usage *u)
{
    r->usage.model_calls = u->model_calls;
    r->usage.model_attempts = u->model_attempts;
    r->usage.input_tokens = u->input_tokens;
    r->usage.output_tokens = u->output_tokens;
    r->usage.shell_commands = u->shell_commands;
}

/* The usage and cost measured so far, into the run's record. */
static void progress_read(struct job *j)
{
    agent_usage_copy(&j->r, &j->usage);
    struct eph_budget_view v;
    eph_budget_read(&j->budget, eph_clock_mono_ns(), &v);
    j->r.cost.model_micros = v.model;
    j->r.cost.web_micros = v.web;
    j->r.cost.compute_micros = v.compute;
}

/* Usage and cost changed (the agent's counts, the costs the budget measured): persisted to the
 * run's record, so that a crash settles what was measured. */
static int sink_progress(void *ctx)
{
    struct job *j = ctx;
    progress_read(j);
    return j->svc->store->ops->run_progress(j->svc->store, &j->r);
}

/* An event with the progress it reports: one transaction (a model call, a command). */
/* A held command's output and its shell.command fit one step (common/sink.h). */
_Static_assert(EPH_SINK_HELD_MAX + 1 <= EPH_LIVE_STEP_MAX, "a step holds a sink's events");

static int sink_event_progress(void *ctx, const struct eph_sink_event *ev, size_t n)
{
    struct job *j = ctx;
    progress_read(j);
    struct eph_live_new evs[EPH_LIVE_STEP_MAX];
    if (n > EPH_LIVE_STEP_MAX) {
        for (size_t i = 0; i < n; i++)
            json_decref(ev[i].data);
        return -E2BIG;
    }
    for (size_t i = 0; i < n; i++)
        evs[i] = (struct eph_live_new){.source = ev[i].source,
                                       .type = ev[i].type,
                                       .data = ev[i].data,
                                       .message = ev[i].message};
    int rc = eph_live_emit_step(j->live, j->svc->store, &j->r, EPH_STEP_PROGRESS, evs, n);
    return rc == -ESTALE ? 0 : rc;
}

static enum eph_run_status agent_status(enum eph_agent_status s)
{
    switch (s) {
    case EPH_AGENT_COMPLETED:
        return EPH_RUN_COMPLETED;
    case EPH_AGENT_TIMED_OUT:
        return EPH_RUN_TIMED_OUT;
    case EPH_AGENT_BUDGET_EXHAUSTED:
        return EPH_RUN_BUDGET_EXHAUSTED;
    case EPH_AGENT_CANCELLED:
        return EPH_RUN_CANCELLED;
    case EPH_AGENT_FAILED:
        break;
    }
    return EPH_RUN_FAILED;
}

/* The run read again after a claim refused: 0 when it is now starting on this node (its fair
 * claim started it since it was read), the new row in j->r; else the old row kept. */
static int reload_started_here(struct job *j, const char *run_id)
{
    struct eph_run again;
    if (j->svc->store->ops->run_get(j->svc->store, run_id, NULL, &again))
        return -EALREADY;
    if (again.status != EPH_RUN_STARTING || strcmp(again.node_id, j->svc->node_id) != 0) {
        eph_run_release(&again);
        return -EALREADY;
    }
    eph_run_release(&j->r);
    j->r = again;
    return 0;
}

/* Step 1: the run, its live entry and its lease, taken with the run's start (queued -> starting,
 * one statement; already done when this node's fair claim chose it). Non-zero: not this worker's
 * to work on (nothing to settle here). */
static int step_load(struct job *j, const char *run_id)
{
    struct eph_service *svc = j->svc;
    struct eph_store *st = svc->store;
    j->live = eph_live_get(svc->live, run_id);
    if (!j->live) {
        /* On a shared store, another node may have claimed and finished a run queued here. */
        if (st->ops->shared)
            EPH_DEBUG("worker", "run %s: ended elsewhere", run_id);
        else
            EPH_ERROR("worker", "run %s is not live", run_id);
        return -ENOENT;
    }
    int rc = st->ops->run_get(st, run_id, NULL, &j->r);
    if (rc) {
        EPH_ERROR("worker", "run %s: cannot load: %s", run_id, eph_strerror(rc));
        return rc;
    }
    j->loaded = true;
    /* This node's fair claim may have started it already (cluster.c: the choice, the claim and
     * the start in one statement): a run starting here that no worker of this node holds is
     * this worker's as it stands. */
    bool started = j->r.status == EPH_RUN_STARTING && strcmp(j->r.node_id, svc->node_id) == 0;
    if (j->r.status != EPH_RUN_QUEUED && !started) {
        /* Settled or taken elsewhere (another node, a cancel): a finished run no worker here
         * will close leaves the registry; a running one stays followed. */
        if (eph_run_status_terminal(j->r.status) && !eph_live_worked_here(j->live)) {
            uint64_t last = 0;
            st->ops->events_list(st, run_id, 0, 0, last_seq_cb, &last);
            eph_live_close(j->live, last, NULL);
        }
        return -EALREADY;
    }
    /* Another worker of this node may have it already: the lease is the node's, not the
     * worker's, so it would be granted twice. Holding this, the worker is the node's one. */
    if (!eph_live_take_worker(j->live))
        return -EALREADY;
    /* The lease: from here this node works on the run; the lease keeper renews it. The claim
     * is the start too (queued -> starting): one statement, or none when the claim that chose
     * the run did both. */
    uint64_t claimed_ns = eph_clock_mono_ns();
    int64_t now_ms = eph_clock_real_ms();
    rc = started
             ? 0
             : st->ops->run_claim_start(st, run_id, svc->node_id,
                                        now_ms + (int64_t)svc->cfg->lease_seconds * 1000, now_ms);
    if (rc == -EALREADY && reload_started_here(j, run_id) == 0) {
        /* Read queued, then started by this node's fair claim meanwhile (that claim's worker
         * found this one holding the run): this worker's. */
        started = true;
        rc = 0;
    }
    if (rc == -EALREADY || (rc && st->ops->shared)) {
        /* Another node took it first (it is followed here until it ends), or the database is
         * out of reach (the run stays queued there for whichever node reaches it first). */
        if (rc != -EALREADY)
            EPH_WARN("worker", "run %s: not claimed: %s", run_id, eph_strerror(rc));
        eph_live_drop_worker(j->live);
        return rc;
    }
    /* The claim's instant on the monotonic clock: just before this worker's claim, or, for a
     * run the fair claim started, that claim's start as stored (taken just before it), moved
     * back by as much: the fence is never later than the lease the claim granted. */
    int64_t ago_ms = started ? now_ms - j->r.started_at_ms : 0;
    if (ago_ms > 0)
        claimed_ns =
            (uint64_t)ago_ms * 1000000u < claimed_ns ? claimed_ns - (uint64_t)ago_ms * 1000000u : 0;
    if (started)
        now_ms = j->r.started_at_ms;
    if (rc) /* one node: nobody else could take it; work on it, the renewals will lease it */
        EPH_WARN("worker", "run %s: cannot record its lease: %s", run_id, eph_strerror(rc));
    else
        j->start_stored = true;
    j->r.status = EPH_RUN_STARTING;
    j->r.started_at_ms = now_ms;
    /* The run's fence (fence.c): from the claim, then from each renewal (lease.c). */
    if (!rc && st->ops->shared)
        eph_live_set_fence(j->live, claimed_ns + eph_lease_fence_span_ns(svc->cfg));
    eph_live_set_worked_here(j->live);
    eph_budget_init(&j->budget, j->r.cost.reserved_micros,
                    svc->cfg->prices.compute_micros_per_second);
    j->sink = (struct eph_sink){.ctx = j,
                                .event = sink_event,
                                .progress = sink_progress,
                                .event_progress = sink_event_progress};
    j->cancel = (struct eph_cancel){.flag = eph_live_cancel_flag(j->live),
                                    .fence_ns = eph_live_fence_ptr(j->live)};
    return 0;
}

/* The backend writes every command and its output to the host's disk (a debug setting): the
 * promise of a zero-data-retention run could not be kept. */
static int refuse_recording_backend(struct eph_run *r, struct eph_service *svc)
{
    if (!r->zdr || !eph_sandbox_records_commands(svc->sandbox_ops))
        return 0;
    fail_run(r, EPH_RUN_FAILED, "sandbox_error",
             "zero data retention is refused while the sandbox backend records every command "
             "(EPHEMERAL_RUNSC_DEBUG_DIR is set)");
    return -EPERM;
}

/* Step 2: the prompt (a zero-data-retention run's waits on the live entry), and what must hold
 * before a sandbox is worth creating. A sandbox has no prompt and no model. */
static int step_prompt(struct job *j)
{
    struct eph_run *r = &j->r;
    if (r->zdr) {
        /* Taken first, refused or not, so that it leaves the live entry with the run record. */
        json_t *files = NULL;
        r->prompt = eph_live_take_prompt(j->live, &files);
        json_decref(r->files);
        r->files = files;
    }
    const char *code, *message;
    if (eph_live_refusal(j->live, &code, &message)) {
        /* Stored but refused (it could not be queued): settled failed, everything released. */
        fail_run(r, EPH_RUN_FAILED, code, message);
        return -ECANCELED;
    }
    if (r->zdr && !r->prompt && !is_sandbox(j)) {
        fail_run(r, EPH_RUN_FAILED, "prompt_lost",
                 "the prompt of this zero-data-retention run was not kept across a restart");
        return -ENOENT;
    }
    if (eph_cancelled(&j->cancel)) {
        fail_cancelled(j->svc, r, "before the run started");
        return -ECANCELED;
    }
    if (is_sandbox(j))
        return refuse_recording_backend(r, j->svc);
    j->mcfg = eph_config_model(j->svc->cfg, r->model);
    j->model = eph_service_model(j->svc, r->model);
    if (r->replay_of) {
        /* A replay answers from the original's record, not from its model. */
        char why[256];
        if (eph_replay_run_open(j->svc, r, j->live, &j->replay, why, sizeof(why))) {
            fail_run(r, EPH_RUN_FAILED, "replay_error", why);
            return -ENOENT;
        }
        j->mcfg = eph_replay_run_config(j->replay);
        j->model = eph_replay_run_model(j->replay);
    }
    if (!j->mcfg || !j->model) {
        fail_run(r, EPH_RUN_FAILED, "model_unavailable", "the run's model is not configured");
        return -ENOENT;
    }
    return refuse_recording_backend(r, j->svc);
}

/* Step 3: starting (stored by the claim) -> running; the sandbox (compute starts accruing). */
static int step_sandbox(struct job *j)
{
    struct eph_service *svc = j->svc;
    struct eph_store *st = svc->store;
    struct eph_run *r = &j->r;
    int rc;
    /* Stored with the claim (step 1), unless that write failed on one node. */
    if (!j->start_stored && (rc = st->ops->run_update(st, r)))
        EPH_WARN("worker", "run %s: cannot record start: %s", r->id, eph_strerror(rc));
    j->start_ns = eph_clock_mono_ns();
    j->deadline_ns = j->start_ns + (uint64_t)r->timeout_seconds * 1000000000u;
    if (!svc->sandbox_ops) {
        /* A server started not ready, without a backend (see /healthz). */
        fail_run(r, EPH_RUN_FAILED, "sandbox_error", "this server has no usable sandbox backend");
        return -ENODEV;
    }
    /* Compute runs from the start of the sandbox's creation; a pooled sandbox was made before
     * this run existed, so its compute runs from the take. */
    bool pooled = false;
    /* A run on an image of its own gets that image's root (by digest, docs/IMAGES.md); the warm
     * pool holds sandboxes of the default image only, so it is not taken from. */
    struct eph_sandbox_config cfg = svc->sandbox_cfg;
    char root[4200];
    if (r->image[0] && strcmp(r->image, "default")) {
        char dir[4096];
        struct stat sb;
        if (eph_image_dir(r->image_digest, dir, sizeof(dir)) ||
            snprintf(root, sizeof(root), "%s/rootfs", dir) >= (int)sizeof(root) ||
            stat(root, &sb) != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "image '%s' (%.19s) is not built on this node", r->image,
                     r->image_digest);
            fail_run(r, EPH_RUN_FAILED, "sandbox_error", msg);
            return -ENOENT;
        }
        cfg.image = root;
    }
    rc = cfg.image == svc->sandbox_cfg.image
             ? eph_sandbox_pool_take(svc->pool, svc->sandbox_ops, &cfg, &j->sb, &pooled)
             : svc->sandbox_ops->create(&cfg, &j->sb);
    uint64_t ready_ns = eph_clock_mono_ns();
    eph_budget_sandbox_started(&j->budget, pooled ? ready_ns : j->start_ns);
    eph_live_set_compute_start(j->live, pooled ? ready_ns : j->start_ns);
    if (rc) {
        j->sb = NULL;
        eph_budget_sandbox_stopped(&j->budget, ready_ns);
        eph_live_set_compute_start(j->live, 0);
        EPH_ERROR("worker", "run %s: sandbox create failed: %s", r->id, eph_strerror(rc));
        char msg[128];
        snprintf(msg, sizeof(msg), "the sandbox could not be created: %s", eph_strerror(rc));
        fail_run(r, EPH_RUN_FAILED, "sandbox_error", msg);
        return rc;
    }
    eph_live_attach_sandbox(j->live, j->sb);
    eph_fence_arm(svc->fence, j->live, j->sb);
    eph_metrics_observe_sandbox_start(ready_ns - j->start_ns);
    free(r->sandbox_backend);
    r->sandbox_backend = strdup(svc->sandbox_ops->name);
    if (!r->sandbox_backend) {
        /* Never a run stored without the sandbox it ran in: it ends here (destroyed, settled). */
        fail_run(r, EPH_RUN_FAILED, "internal_error", "out of memory");
        return -ENOMEM;
    }
    r->vcpus = svc->sandbox_cfg.limits.vcpus;
    r->memory_mib = svc->sandbox_cfg.limits.memory_mib;
    r->status = EPH_RUN_RUNNING;
    /* A sandbox's start is the instant it is ready for its caller's calls (its ready_at). */
    if (r->kind == EPH_KIND_SANDBOX)
        r->started_at_ms = eph_clock_real_ms();
    /* Running, ready and started: one step, one transaction (docs/STORE.md). */
    char started[64];
    snprintf(started, sizeof(started), "worker started · shell %s · web %s",
             r->shell ? "on" : "off", r->web ? "on" : "off");
    struct eph_live_new ev[] = {
        {"sandbox", "sandbox.ready",
         json_pack("{s:s, s:I, s:I, s:I, s:s, s:s?}", "backend", svc->sandbox_ops->name,
                   "create_ms", (json_int_t)((ready_ns - j->start_ns) / 1000000u), "vcpus",
                   (json_int_t)r->vcpus, "memory_mib", (json_int_t)r->memory_mib, "image",
                   r->image[0] ? r->image : "default", "image_digest",
                   r->image_digest[0] ? r->image_digest : NULL),
         svc->sandbox_ops->ready_message},
        {"worker", "worker.started",
         json_pack("{s:b, s:b, s:s}", "shell", r->shell, "web", r->web, "model", r->model),
         started},
    };
    if ((rc = eph_live_emit_step(j->live, st, r, EPH_STEP_STATE, ev, 2)) && rc != -ESTALE)
        EPH_WARN("worker", "run %s: cannot record running: %s", r->id, eph_strerror(rc));
    return 0;
}

/* Step 4: the request's files in the scratch directory, and the run's way out (the broker). */
static int step_files(struct job *j)
{
    struct eph_run *r = &j->r;
    char err[256];
    int rc;
    if (r->files && json_array_size(r->files) && (rc = place_files(j->sb, r, err, sizeof(err)))) {
        /* A cancel interrupts the sandbox, so a file being written fails: that is the cancel. */
        if (eph_cancelled(&j->cancel))
            fail_cancelled(j->svc, r, "while its files were being placed");
        else
            fail_run(r, EPH_RUN_FAILED, "files_error", err);
        return rc;
    }
    if (eph_cancelled(&j->cancel)) {
        fail_cancelled(j->svc, r, "before the agent started");
        return -ECANCELED;
    }
    if ((rc = eph_egress_start(j->svc, r, j->live, &j->budget, j->sb, &j->egress, err,
                               sizeof(err)))) {
        EPH_ERROR("worker", "run %s: broker: %s", r->id, err);
        fail_run(r, EPH_RUN_FAILED, "broker_error", err);
        return rc;
    }
    if (j->replay && eph_egress_broker(j->egress) &&
        eph_broker_set_replay(eph_egress_broker(j->egress), eph_replay_run_exchanges(j->replay))) {
        /* A replay's broker answers from the record only: nothing leaves the machine. */
        fail_run(r, EPH_RUN_FAILED, "replay_error",
                 "the recorded exchanges could not be given to the broker");
        return -EIO;
    }
    return 0;
}

/* Step 5: the agent loop, until a result or a stop. */
static int step_agent(struct job *j)
{
    struct eph_service *svc = j->svc;
    struct eph_run *r = &j->r;
    j->usage = (struct eph_agent_usage){.model_calls = r->usage.model_calls,
                                        .model_attempts = r->usage.model_attempts,
                                        .input_tokens = r->usage.input_tokens,
                                        .output_tokens = r->usage.output_tokens,
                                        .shell_commands = r->usage.shell_commands};
    struct eph_agent_ctx ctx = {
        .sink = &j->sink,
        .cancel = j->cancel,
        .run_id = r->id,
        .prompt = r->prompt,
        .recording = json_string_value(json_object_get(r->metadata, "transcript")),
        .shell = r->shell,
        .web = r->web,
        .zdr = r->zdr,
        .timeout_seconds = r->timeout_seconds,
        .usage = &j->usage,
        .model = j->model,
        .mcfg = j->mcfg,
        .sb = j->sb,
        .budget = &j->budget,
        .deadline_ns = j->deadline_ns,
        .turn_limit = svc->cfg->turn_limit,
        .command_timeout_ms = svc->cfg->sandbox.command_timeout_seconds * 1000u,
        .output_cap = svc->cfg->sandbox.output_cap_bytes,
        .live_output_bytes = svc->cfg->sandbox.live_output_bytes,
        .limits = &svc->sandbox_cfg.limits,
        .backend_name = svc->sandbox_ops->name,
        .broker = eph_egress_broker(j->egress),
    };
    struct eph_agent_outcome out;
    eph_agent_run(&ctx, &out);
    agent_usage_copy(r, &j->usage);
    r->status = agent_status(out.status);
    if (r->status == EPH_RUN_COMPLETED) {
        r->result = out.result;
        if (r->zdr && eph_live_set_zdr_result(j->live, r->result))
            EPH_ERROR("worker", "run %s: out of memory keeping the result", r->id);
        return 0;
    }
    if (r->status == EPH_RUN_CANCELLED)
        fail_cancelled(svc, r, "while it was running");
    else
        fail_run(r, r->status, out.error_code, out.error_message);
    free(out.result);
    return -ECANCELED;
}

/* Step 5 of a sandbox: the caller's calls, until it is deleted or a limit ends it (drive.h). */
static int step_drive(struct job *j)
{
    struct eph_service *svc = j->svc;
    struct eph_run *r = &j->r;
    struct eph_drive *d = eph_drive_get(svc->drives, r->id);
    if (!d) {
        fail_run(r, EPH_RUN_FAILED, "sandbox_error", "the sandbox is not served by this process");
        return -ENOENT;
    }
    j->usage.shell_commands = r->usage.shell_commands;
    struct eph_drive_ctx ctx = {
        .svc = svc,
        .live = j->live,
        .sink = &j->sink,
        .cancel = j->cancel,
        .sb = j->sb,
        .budget = &j->budget,
        .broker = eph_egress_broker(j->egress),
        .deadline_ns = j->deadline_ns,
        .idle_timeout_seconds = r->idle_timeout_seconds,
        .zdr = r->zdr,
        .shell_commands = &j->usage.shell_commands,
        .sandbox_id = r->id,
    };
    enum eph_drive_end end = eph_drive_serve(d, &ctx);
    eph_drive_put(d);
    agent_usage_copy(r, &j->usage);
    char msg[128];
    switch (end) {
    case EPH_DRIVE_CANCELLED:
        if (atomic_load(&svc->shutting_down)) {
            fail_cancelled(svc, r, "while the sandbox was live");
            return -ECANCELED;
        }
        r->status = EPH_RUN_COMPLETED; /* deleted by its owner: stopped, no error */
        return 0;
    case EPH_DRIVE_TIMED_OUT:
        snprintf(msg, sizeof(msg), "the sandbox reached its time limit of %u seconds",
                 r->timeout_seconds);
        fail_run(r, EPH_RUN_TIMED_OUT, "timeout", msg);
        break;
    case EPH_DRIVE_IDLE:
        snprintf(msg, sizeof(msg), "the sandbox had no call for %u seconds (its idle timeout)",
                 r->idle_timeout_seconds);
        fail_run(r, EPH_RUN_TIMED_OUT, "idle_timeout", msg);
        break;
    case EPH_DRIVE_BUDGET:
        fail_run(r, EPH_RUN_BUDGET_EXHAUSTED, "budget_exhausted",
                 "the sandbox used its whole budget");
        break;
    case EPH_DRIVE_FAILED:
        fail_run(r, EPH_RUN_FAILED, "sandbox_error", "the sandbox failed");
        break;
    }
    return -ECANCELED;
}

/* Step 6a: the files the run asked for come back from the scratch directory (outputs.h), in
 * every state in which the sandbox is still there: a zero-data-retention run's only to the live
 * entry, everyone else's to the store. */
static void step_outputs(struct job *j)
{
    struct eph_service *svc = j->svc;
    struct eph_run *r = &j->r;
    if (!j->sb || !r->outputs || !json_array_size(r->outputs))
        return;
    struct eph_outputs_result res;
    int rc = eph_outputs_collect(j->sb, r->outputs, svc->cfg->outputs.max_files,
                                 svc->cfg->outputs.max_bytes, &res);
    if (rc) {
        /* An interrupted (cancelled) sandbox, or a guest out of step: nothing to bring back. */
        eph_sink_emit(&j->sink, "worker", "outputs.collected",
                      json_pack("{s:I, s:s}", "count", (json_int_t)0, "error", eph_strerror(rc)),
                      "outputs could not be collected: %s", eph_strerror(rc));
        return;
    }
    if (!r->zdr && svc->store->ops->run_outputs_put &&
        (rc = svc->store->ops->run_outputs_put(svc->store, r->id, &res.got)))
        EPH_ERROR("worker", "run %s: storing its outputs: %s", r->id, eph_strerror(rc));
    eph_sink_emit(&j->sink, "worker", "outputs.collected", eph_outputs_event(&res, !r->zdr),
                  "%zu output%s collected (%llu bytes), %zu skipped", res.got.n,
                  res.got.n == 1 ? "" : "s", (unsigned long long)res.bytes, res.skipped_total);
    if (r->zdr)
        eph_live_set_zdr_outputs(j->live, &res.got);
    eph_outputs_result_release(&res);
}

/* Step 6 (always): every tunnel ends, then the sandbox; compute stops. */
static void step_destroy(struct job *j)
{
    struct eph_service *svc = j->svc;
    step_outputs(j);
    eph_egress_stop(j->egress, &j->r);
    if (!j->sb) {
        eph_egress_free(j->egress);
        j->egress = NULL;
        return;
    }
    eph_fence_disarm(svc->fence, j->live);
    eph_live_attach_sandbox(j->live, NULL);
    uint64_t d0 = eph_clock_mono_ns();
    int rc = eph_sandbox_destroy(j->sb);
    j->sb = NULL;
    eph_egress_free(j->egress);
    j->egress = NULL;
    uint64_t end_ns = eph_clock_mono_ns();
    eph_budget_sandbox_stopped(&j->budget, end_ns);
    eph_live_set_compute_start(j->live, 0);
    if (rc)
        EPH_ERROR("worker", "run %s: sandbox destroy reported: %s", j->r.id, eph_strerror(rc));
    /* Numbered now, stored by the settlement that follows, in its transaction (docs/STORE.md, "A
     * step, one commit"): nothing else of the run happens in between. */
    eph_live_prepare(j->live, &j->destroyed, "sandbox", "sandbox.destroyed",
                     json_pack("{s:s, s:I, s:I}", "backend", svc->sandbox_ops->name, "destroy_ms",
                               (json_int_t)((end_ns - d0) / 1000000u), "lifetime_ms",
                               (json_int_t)((end_ns - j->start_ns) / 1000000u)),
                     "%s", svc->sandbox_ops->destroyed_message);
}

/* Step 7 (always): the money split once (the budget's, ledger/settle.h) and the settlement. */
static void step_settle(struct job *j)
{
    struct eph_cost *c = &j->r.cost;
    eph_budget_settle(&j->budget, eph_clock_mono_ns(), &c->model_micros, &c->web_micros,
                      &c->compute_micros, &c->charged_micros, &c->released_micros);
    settle(j->svc, j->live, &j->r, 0, 0, true, &j->destroyed);
    eph_event_release(&j->destroyed); /* when it was not moved into the settlement */
}

void eph_worker_run(struct eph_service *svc, const char *run_id)
{
    struct job j = {.svc = svc};
    if (step_load(&j, run_id) == 0) {
        if (!step_prompt(&j) && !step_sandbox(&j) && !step_files(&j)) {
            if (is_sandbox(&j))
                step_drive(&j);
            else
                step_agent(&j);
        }
        step_destroy(&j);
        step_settle(&j);
        eph_budget_destroy(&j.budget); /* the broker's threads are joined */
    }
    eph_replay_run_free(j.replay);
    if (j.loaded)
        eph_run_release(&j.r);
    eph_live_put(j.live);
}

/* ---- recovery ---- */

struct recovery {
    struct eph_service *svc;
    unsigned lost, requeued;
};

int eph_worker_settle_lost(struct eph_service *svc, const char *run_id,
                           int64_t lease_expired_before_ms)
{
    struct eph_run r;
    int rc = svc->store->ops->run_get(svc->store, run_id, NULL, &r);
    if (rc)
        return rc;
    if (eph_run_status_terminal(r.status)) {
        eph_run_release(&r);
        return -EALREADY;
    }
    uint64_t last = 0;
    svc->store->ops->events_list(svc->store, r.id, 0, 0, last_seq_cb, &last);
    fail_run(&r, EPH_RUN_FAILED, "worker_lost",
             "the server running this run stopped; it was settled for what was measured");
    split_stored(&r.cost);
    rc = settle(svc, NULL, &r, last, lease_expired_before_ms, lease_expired_before_ms == 0, NULL);
    /* A run whose worker here could not settle it (eph_live_abandon) is still live: waiting
     * clients learn now that it ended. */
    struct eph_live *live = rc ? NULL : eph_live_get(svc->live, r.id);
    if (live) {
        if (!eph_live_worked_here(live))
            eph_live_close(live, last + 2 + (r.sandbox_backend ? 1 : 0), NULL);
        eph_live_put(live);
    }
    eph_run_release(&r);
    return rc;
}

static int recover_lost(const struct eph_run *stored, void *ctx)
{
    struct recovery *rec = ctx;
    struct eph_service *svc = rec->svc;
    /* On a shared store, another node's run is its own until its lease expires (the lease keeper
     * settles it then); this node's own runs died with its previous process. */
    if (svc->store->ops->shared && stored->node_id[0] && strcmp(stored->node_id, svc->node_id))
        return 0;
    if (!eph_worker_settle_lost(svc, stored->id, 0))
        rec->lost++;
    return 0;
}

static int requeue(const struct eph_run *r, void *ctx)
{
    struct recovery *rec = ctx;
    /* A sandbox's caller drives it through this process: one its previous process never started
     * is ended like one it had started. */
    if (r->kind == EPH_KIND_SANDBOX)
        return recover_lost(r, ctx);
    uint64_t last = 0;
    rec->svc->store->ops->events_list(rec->svc->store, r->id, 0, 0, last_seq_cb, &last);
    if (eph_live_register(rec->svc->live, r->id, r->created_at_ms, last) == 0 &&
        eph_service_submit(rec->svc, r->id) == 0)
        rec->requeued++;
    return 0;
}

int eph_recovery_run(struct eph_service *svc, unsigned *lost, unsigned *requeued)
{
    struct recovery rec = {.svc = svc};
    int rc = svc->store->ops->runs_in_state(svc->store, EPH_RUN_STARTING, recover_lost, &rec);
    if (!rc)
        rc = svc->store->ops->runs_in_state(svc->store, EPH_RUN_RUNNING, recover_lost, &rec);
    if (!rc)
        rc = svc->store->ops->runs_in_state(svc->store, EPH_RUN_QUEUED, requeue, &rec);
    *lost = rec.lost;
    *requeued = rec.requeued;
    return rc;
}
