/*
 * drive.h - a sandbox a caller drives (docs/SANDBOXES.md): the calls the API hands to the one
 * thread that owns the sandbox, and that thread's loop (drive.c).
 *
 * A sandbox is a run of its own kind (EPH_KIND_SANDBOX): the same record, reservation, lease,
 * fence, broker, timeline and settlement as a run, worked by eph_worker_run on a thread of its
 * own (never one of the run workers, which a sandbox would hold for its whole life). Where a run's
 * worker runs the agent, a sandbox's serves calls: eph_drive_serve() takes them one at a time from
 * the sandbox's queue and runs them on the sandbox, until the caller deletes it (a cancel), its
 * time limit, its budget, its idle timeout, or the server's shutdown ends it.
 *
 * Threads: an API handler makes an operation, submits it and parks its connection until the
 * operation is done (eph_drive_op_done, polled by the parker after eph_live_poke). The sandbox's
 * thread fills the operation's result and marks it done; from then on the result is read-only.
 * Operations are reference counted: the submitter's reference and the queue's.
 */
#ifndef EPH_DRIVE_H
#define EPH_DRIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/sink.h"
#include "ledger/budget.h"
#include "run/service.h"
#include "sandbox/sandbox.h"

struct eph_drives; /* the service's registry of live sandboxes (svc->drives) */
struct eph_drive;  /* one live sandbox's queue */
struct eph_broker;

enum eph_drive_kind {
    EPH_DRIVE_EXEC,  /* a command through /bin/sh -c */
    EPH_DRIVE_WRITE, /* a file written */
    EPH_DRIVE_READ,  /* a file read */
    EPH_DRIVE_LIST,  /* the scratch directory listed */
    EPH_DRIVE_KILL,  /* a background command's process group killed (target) */
};

/* A sandbox keeps its last commands (for GET …/commands/{id}) and runs at most so many in the
 * background at once. */
#define EPH_DRIVE_RECENT 64
#define EPH_DRIVE_BACKGROUND_MAX 16

struct eph_drive_op {
    enum eph_drive_kind kind;
    char id[40]; /* "cmd_" + hex, for an exec (its shell.output and shell.command say it) */
    /* An exec's request (the API validated it). */
    char *command;
    char *cwd;  /* NULL: the scratch directory */
    char **env; /* "K=V" entries, NULL-terminated; may be NULL */
    unsigned char *stdin_data;
    size_t stdin_len;
    uint32_t timeout_ms;         /* 0: the server's per-command limit */
    bool background;             /* detached: answered at once, polled by the sandbox's thread */
    struct eph_drive_op *target; /* a kill's command (a reference) */
    /* A file's. */
    char *path;
    unsigned char *data; /* a write's bytes (owned) */
    size_t len;
    size_t cap; /* a read's limit */

    /* The result: written by the sandbox's thread before done is set, read-only after. */
    atomic_bool done;
    int rc;              /* 0, or -errno of the sandbox */
    const char *stopped; /* the sandbox ended while it ran: "timed_out", "budget_exhausted", … */
    struct eph_exec_result res;
    uint32_t timeout_used; /* the limit the command ran under */
    struct eph_buf file;   /* a read's bytes */
    struct eph_sandbox_listing listing;
    bool killed; /* a background command ended by a kill */

    /* A background command while it runs, the sandbox's thread's only: its process group, the
     * bytes of its two output files already emitted, its live output. */
    uint32_t pgid;
    uint64_t bg_off[2];
    struct eph_live_output *bg_lo;
    uint64_t bg_next_ns; /* when its files are looked at next */
    bool bg_started;

    atomic_uint refs;
};

/* A new operation (one reference), or NULL. */
struct eph_drive_op *eph_drive_op_new(enum eph_drive_kind kind);
void eph_drive_op_put(struct eph_drive_op *op);
bool eph_drive_op_done(const struct eph_drive_op *op);

/* The registry: made with the service's workers, stopped (every live sandbox ended as the
 * server's shutdown, its thread joined) when they stop. */
int eph_drives_new(struct eph_drives **out) __attribute__((warn_unused_result));
void eph_drives_stop(struct eph_drives *ds, struct eph_live_registry *live);
void eph_drives_free(struct eph_drives *ds);
/* Live sandboxes of this process (metrics). */
unsigned eph_drives_count(struct eph_drives *ds);

/* Starts the thread of a sandbox that is registered live and stored queued, held by this node:
 * it runs work(svc, id) (the worker) and leaves the registry when that returns. 0, -ESHUTDOWN
 * once stopping, -ENOMEM or -EAGAIN (no thread). */
int eph_drive_spawn(struct eph_drives *ds, struct eph_service *svc, const char *id,
                    void (*work)(struct eph_service *svc, const char *id));
/* The live sandbox id of this process (a reference), or NULL. */
struct eph_drive *eph_drive_get(struct eph_drives *ds, const char *id);
void eph_drive_put(struct eph_drive *d);

/* Queues op (takes a reference of its own). -EBUSY while another foreground exec is queued or
 * running (one command at a time), -ENOSPC with EPH_DRIVE_BACKGROUND_MAX background commands
 * running, -ESHUTDOWN once the sandbox is ending or ended. Every exec is remembered by its id. */
int eph_drive_submit(struct eph_drive *d, struct eph_drive_op *op);
/* One of the sandbox's last EPH_DRIVE_RECENT commands by id (a reference), or NULL. */
struct eph_drive_op *eph_drive_find(struct eph_drive *d, const char *cmd_id);

/* What the sandbox's loop is given by its worker. */
struct eph_drive_ctx {
    struct eph_service *svc;
    struct eph_live *live;
    const struct eph_sink *sink;
    struct eph_cancel cancel;
    struct eph_sandbox *sb;
    struct eph_budget *budget;
    struct eph_broker *broker; /* NULL without web or connections */
    uint64_t deadline_ns;      /* the sandbox's time limit (monotonic) */
    unsigned idle_timeout_seconds;
    bool zdr;
    uint64_t *shell_commands; /* counted as they run */
    const char *sandbox_id;
};

/* How the loop ended. */
enum eph_drive_end {
    EPH_DRIVE_CANCELLED, /* deleted by its owner, or the server shuts down */
    EPH_DRIVE_TIMED_OUT, /* its time limit */
    EPH_DRIVE_IDLE,      /* no call for idle_timeout_seconds */
    EPH_DRIVE_BUDGET,    /* compute (or web) used the reservation */
    EPH_DRIVE_FAILED,    /* the sandbox broke */
};

/* Serves d's queue on ctx->sb until the sandbox ends; every operation still queued then is done
 * with -ESHUTDOWN. */
enum eph_drive_end eph_drive_serve(struct eph_drive *d, const struct eph_drive_ctx *ctx);

#endif
