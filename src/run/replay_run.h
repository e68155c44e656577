/*
 * replay_run.h - what a run with replay_of answers from (docs/AGENT.md): the original run's record,
 * loaded from its stored events, behind a model that replays its model turns (agent/replay.h) and
 * reports every tool result that differs from the original's as a replay.divergence event.
 */
#ifndef EPH_REPLAY_RUN_H
#define EPH_REPLAY_RUN_H

#include <stddef.h>

#include "agent/model.h"
#include "run/live.h"
#include "run/run.h"
#include "run/service.h"

struct eph_replay_run;

/* Loads r->replay_of's record. r and live are borrowed for the replay's life: each divergence is
 * an event on live and counted in r->divergences. 0, or an error with err saying why. */
int eph_replay_run_open(struct eph_service *svc, struct eph_run *r, struct eph_live *live,
                        struct eph_replay_run **out, char *err, size_t errlen);
/* The replaying model and its configuration (every price 0: a replay calls no model). */
struct eph_model *eph_replay_run_model(struct eph_replay_run *rr);
const struct eph_model_config *eph_replay_run_config(struct eph_replay_run *rr);
/* The original's recorded broker exchanges (the transcript's exchange lines; borrowed). */
json_t *eph_replay_run_exchanges(struct eph_replay_run *rr);
void eph_replay_run_free(struct eph_replay_run *rr);

#endif
