/*
 * worker.h - one run from its claim to its settlement, and the runs whose worker is gone
 * (worker.c).
 */
#ifndef EPH_WORKER_H
#define EPH_WORKER_H

#include "run/service.h"

/* Start-up recovery: runs a dead server left starting or running are finished as failed
 * (worker_lost) and settled for what was measured; queued runs are registered and queued. */
int eph_recovery_run(struct eph_service *svc, unsigned *lost, unsigned *requeued);

/* Finishes a run whose worker is gone as failed (worker_lost), charged what was measured up to its
 * last checkpoint, with the closing events (sandbox.destroyed when it had a sandbox). Non-zero
 * lease_expired_before_ms: only if its lease is still expired then (another node's run), and
 * without retrying a store that fails (the lease keeper must get back to its renewals; its next
 * pass tries again). 0 when settled here, -EALREADY when it was not ours to settle (finished or
 * renewed meanwhile). */
int eph_worker_settle_lost(struct eph_service *svc, const char *run_id,
                           int64_t lease_expired_before_ms);

/* One run, start to settlement (worker.c), on a worker or the settler thread, never on an HTTP
 * thread (an HTTP handler hands a run it withdrew to the settler: eph_scheduler_settle). */
void eph_worker_run(struct eph_service *svc, const char *run_id);
/* A stored, live, never started run that could not be queued: marks it refused (code and
 * message, constant strings) and hands it to the settler, which settles it failed, nothing
 * charged, its whole reservation released, its live entry closed. Safe on an HTTP thread: it
 * never works on the run there. Only when no settler can take it (stopping, out of memory) does it
 * settle here, in one attempt without retries. 0 when handed on or settled, else -errno. */
int eph_worker_refuse(struct eph_service *svc, const char *run_id, const char *code,
                      const char *message);
/* The error message a zero-data-retention run stores and shows for code: msg itself for the codes
 * whose messages are the server's own words, else a fixed sentence (worker.c). */
const char *eph_worker_zdr_message(const char *code, const char *msg);

#endif
