/*
 * admit.h - a new run's way in (admit.c): whether it can succeed at all, judged before anything
 * is reserved, and its admission (live entry, store, queue). The API layer parses and validates a
 * create and answers; what a run needs to be taken is decided here.
 */
#ifndef EPH_ADMIT_H
#define EPH_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "run/service.h"

/* What a create asks, as far as whether it can succeed depends on it. */
struct eph_run_ask {
    const char *model;
    const char *prompt;
    const char *recording; /* the recording a replay model is told to answer from, or NULL */
    const char *replay_of; /* a replay answers from its original's record: never refused here */
    bool shell, web, zdr;
    unsigned timeout_seconds;
    int64_t max_cost;
};

enum eph_run_refusal_kind {
    EPH_RUN_MODEL_UNAVAILABLE, /* the server could not set the model up (its key is unset, ...) */
    EPH_RUN_NO_RECORDING,      /* the replay model has no recording of this prompt */
    EPH_RUN_BUDGET_TOO_SMALL,  /* below the least the first model call can cost */
};

struct eph_run_refusal {
    enum eph_run_refusal_kind kind;
    char message[1024]; /* the whole sentence, ending with "nothing was reserved" where true */
};

/* 0 when the run can succeed, or cannot be judged before it runs (its own meter decides then);
 * 1 with *why filled when it cannot (docs/API.md, "Runs that cannot succeed"). */
int eph_run_check(struct eph_service *svc, const struct eph_run_ask *ask,
                  struct eph_run_refusal *why);

/* Admits a new run: registers it live (with a zero-data-retention prompt and files
 * held there, never stored), stores it with its reservation and first event, and queues it with
 * submit (eph_service_submit; tests pass another). Everything that can fail in this process
 * happens before the store is written; when the queue refuses after that, the run is settled at
 * once as failed with its whole budget released. 0, or the store's error (-EDQUOT, -EAGAIN, ...)
 * with nothing written, or a live/queue error with *queue_failed set and nothing reserved. */
int eph_run_admit(struct eph_service *svc, const struct eph_run *r, const struct eph_event *first,
                  const char *zdr_prompt, json_t *zdr_files,
                  int (*submit)(struct eph_service *svc, const char *run_id), bool *queue_failed);

#endif
