/*
 * live.h - the runs this process is working on, and their timelines as they grow.
 *
 * A live run is registered when it is created (or re-queued at start-up) and closed when it is
 * settled. Its entry carries the next event number, the cancel flag, the sandbox to interrupt, and
 * (zero data retention only) the result, kept in memory for the clients waiting on the run. Event
 * writers append through eph_live_emit(), which stores the event and wakes every waiter; readers
 * (SSE streams, long polls) wait on the entry without holding a lock.
 *
 * The registry is an object the service owns (struct eph_service.live): created at start-up with
 * eph_live_registry_new(), freed with eph_live_registry_free() once every thread that could hold
 * a reference has been joined. A test makes one of its own.
 *
 * Ownership: eph_live_get() returns a reference that the caller gives back with eph_live_put().
 *
 * Lock order: a run's emit lock, then the registry's lock; the store is written under neither
 * (docs/RUN.md).
 */
#ifndef EPH_LIVE_H
#define EPH_LIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "store/store.h"

struct eph_sandbox;
struct eph_live;
struct eph_live_registry;

/* 0 or -errno. */
int eph_live_registry_new(struct eph_live_registry **out) __attribute__((warn_unused_result));
void eph_live_registry_free(struct eph_live_registry *reg);
/* Registers a run; its first event (seq 1) is already stored. -EEXIST when it is already. */
int eph_live_register(struct eph_live_registry *reg, const char *run_id, int64_t created_at_ms,
                      uint64_t last_seq);
struct eph_live *eph_live_get(struct eph_live_registry *reg, const char *run_id);
void eph_live_put(struct eph_live *l);
const char *eph_live_id(const struct eph_live *l);

/* Appends an event (stealing data, which may be NULL), serialised once as the API serves it
 * (event_wire.h), and wakes the waiters. */
int eph_live_emit(struct eph_live *l, struct eph_store *st, const char *source, const char *type,
                  json_t *data, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* One event of a step (eph_live_emit_step): data is stolen (may be NULL), message one line for
 * people. */
struct eph_live_new {
    const char *source, *type;
    json_t *data;
    const char *message;
};
#define EPH_LIVE_STEP_MAX 8
/* Appends the events of one step (at most EPH_LIVE_STEP_MAX), numbered in order, with r's state
 * (what & EPH_STEP_STATE) or progress (EPH_STEP_PROGRESS) in the same transaction (store.h
 * run_step): one commit. r names the run (it may be NULL only when n is 1 and what is 0). */
int eph_live_emit_step(struct eph_live *l, struct eph_store *st, const struct eph_run *r,
                       unsigned what, struct eph_live_new *evs, size_t n);
/* Fills an event with the next number, the current time and its wire text without storing it
 * (for the events that the settlement transaction writes). Steals data. */
void eph_live_prepare(struct eph_live *l, struct eph_event *e, const char *source, const char *type,
                      json_t *data, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The run is settled: publish the last sequence number and wake everyone. The entry leaves the
 * registry; references still held stay valid. A ZDR result (may be NULL) is handed over and kept
 * for waiters for a short while. */
void eph_live_close(struct eph_live *l, uint64_t last_seq, char *zdr_result);

/* The worker could not settle the run (the store refused): the entry stays open and registered,
 * its last number goes back to what is stored, and it is no longer worked here, so that the lease
 * keeper stops renewing it and settles it as lost once its lease expires (closing it then). */
void eph_live_abandon(struct eph_live *l, uint64_t last_stored_seq);

/* Waits until an event after after_seq exists or the run closed or deadline_ns passes
 * (CLOCK_MONOTONIC). Returns the last sequence number; *closed set when the run is settled. */
uint64_t eph_live_wait(struct eph_live *l, uint64_t after_seq, uint64_t deadline_ns, bool *closed);
/* Waits until the run is settled or the deadline passes. True when settled. */
bool eph_live_wait_closed(struct eph_live *l, uint64_t deadline_ns);

/* Cancellation: sets the flag and interrupts the sandbox if one is attached. */
void eph_live_cancel(struct eph_live *l);
/* Tells the registry's observer that something of the run changed without an event (a sandbox's
 * call is done, drive.h), so that requests waiting on it look again. */
void eph_live_poke(struct eph_live *l);
const atomic_bool *eph_live_cancel_flag(struct eph_live *l);
bool eph_live_cancelled(struct eph_live *l);
/* A run stored but never to be worked on (it could not be queued): the worker that takes it
 * settles it failed with this code and message (constant strings, kept by pointer), nothing
 * measured, everything released. refusal returns false when the run was not refused. */
void eph_live_refuse(struct eph_live *l, const char *code, const char *message);
bool eph_live_refusal(struct eph_live *l, const char **code, const char **message);
/* Attaches (or with NULL detaches) the run's sandbox, so that cancel can interrupt it. */
void eph_live_attach_sandbox(struct eph_live *l, struct eph_sandbox *sb);

/* Zero data retention: the worker hands the result to the live entry as soon as the agent has it,
 * before settlement, so that an event stream can deliver it just before the final event. */
int eph_live_set_zdr_result(struct eph_live *l, const char *result);
/* The result of a zero-data-retention run, for a client that waited on it: a copy (free()) or
 * NULL. */
char *eph_live_zdr_result(struct eph_live *l);

/* Zero data retention: the run's outputs (outputs.h) never reach the store either; the worker
 * hands them here (the entry takes o's contents, o is left empty) and a waiting client reads
 * copies: list without content, get one with its content (-ENOENT when not there). Freed with the
 * entry. */
void eph_live_set_zdr_outputs(struct eph_live *l, struct eph_outputs *o);
/* -ENOENT when the entry holds no outputs (not a ZDR run, or none were collected). */
int eph_live_zdr_outputs_list(struct eph_live *l, struct eph_outputs *out)
    __attribute__((warn_unused_result));
int eph_live_zdr_output_get(struct eph_live *l, const char *path, struct eph_output *out)
    __attribute__((warn_unused_result));

/* Zero data retention: the prompt and files never reach the store; the API hands them to the
 * live entry, and the worker takes them (once). take returns NULL when none is held; the caller
 * frees the prompt and decrefs *files. */
int eph_live_set_prompt(struct eph_live_registry *reg, const char *run_id, const char *prompt,
                        json_t *files);
char *eph_live_take_prompt(struct eph_live *l, json_t **files);

/* The current state without waiting: the last sequence number and whether the run is settled. */
void eph_live_state(struct eph_live *l, uint64_t *last_seq, bool *closed);

/* One observer per registry, called after any live run gains an event, is settled or is cancelled
 * (for servers that park waiting clients instead of blocking a thread on eph_live_wait). It is
 * called without any live lock held, from the thread that made the change, and must be quick and
 * must not call back into this module. NULL removes it. */
void eph_live_set_observer(struct eph_live_registry *reg, void (*fn)(void *ctx), void *ctx);

/* Leases (scheduler.c renews them): the instant compute started accruing for the run's sandbox
 * (0 before it and once the sandbox is destroyed), so that a renewal can checkpoint compute. */
void eph_live_set_compute_start(struct eph_live *l, uint64_t start_ns);
uint64_t eph_live_compute_start(struct eph_live *l);
/* The node lost the run's lease (another node settled it): cancels it, and the worker must not
 * settle it. */
void eph_live_lease_lost(struct eph_live *l);
bool eph_live_is_lease_lost(struct eph_live *l);
/* True the first time only: a node that lost a run says so once (lease.c, emit). */
bool eph_live_first_loss_notice(struct eph_live *l);
/* The fence (docs/RUN.md, "Fencing"): the monotonic instant until which this node may work on
 * the run without a newer successful renewal of its lease (0: no fence, a single-node store).
 * The lease keeper moves it on at each renewal; the fence (fence.c) stops the sandbox at it; the
 * run's work (model calls, broker requests) waits while it has passed (eph_cancel_hold). */
void eph_live_set_fence(struct eph_live *l, uint64_t until_ns);
uint64_t eph_live_fence(struct eph_live *l);
const _Atomic uint64_t *eph_live_fence_ptr(struct eph_live *l);
/* Several nodes: a run registered here is either worked on by a worker of this process
 * (set_worked_here, at its claim) or only followed for the clients streaming it. observe
 * publishes an event another process stored (seq), and with final (worker.destroyed) closes a
 * followed run. */
void eph_live_set_worked_here(struct eph_live *l);
/* One worker of this process per run: true for the first caller, false while another holds it.
 * A run reaches a node's workers two ways (its own queue, and a claim of the oldest queued run
 * on a shared store), and a node's lease cannot tell its own workers apart. drop_worker gives it
 * back when the worker did not get the run's lease. */
bool eph_live_take_worker(struct eph_live *l);
void eph_live_drop_worker(struct eph_live *l);
bool eph_live_worked_here(struct eph_live *l);
void eph_live_observe(struct eph_live *l, uint64_t seq, bool final);
/* Calls fn for every registered run, with a reference held and no lock held. */
int eph_live_foreach(struct eph_live_registry *reg, void (*fn)(struct eph_live *l, void *ctx),
                     void *ctx);

/* Cancels every live run (shutdown). */
void eph_live_cancel_all(struct eph_live_registry *reg);
unsigned eph_live_count(struct eph_live_registry *reg);

#endif
