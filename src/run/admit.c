/*
 * admit.c - a new run's way in: whether it can succeed (before anything is reserved), and its
 * admission (docs/RUN.md, "Admission").
 */
#include <errno.h>
#include <stdio.h>

#include "agent/agent.h"
#include "common/error.h"
#include "common/log.h"
#include "common/money.h"
#include "run/admit.h"
#include "run/live.h"
#include "run/worker.h"

int eph_run_check(struct eph_service *svc, const struct eph_run_ask *ask,
                  struct eph_run_refusal *why)
{
    if (ask->replay_of)
        return 0;
    const struct eph_model_config *mcfg = eph_config_model(svc->cfg, ask->model);
    struct eph_model *m = eph_service_model(svc, ask->model);
    char err[768];
    if (!mcfg || eph_model_unavailable(m, err, sizeof(err))) {
        why->kind = EPH_RUN_MODEL_UNAVAILABLE;
        snprintf(why->message, sizeof(why->message),
                 "the model '%s' is not available on this server: %s; nothing was reserved",
                 ask->model, err);
        return 1;
    }
    if (m->ops->answers && m->ops->answers(m, ask->prompt, ask->recording, err, sizeof(err))) {
        why->kind = EPH_RUN_NO_RECORDING;
        snprintf(why->message, sizeof(why->message), "%s", err);
        return 1;
    }
    struct eph_agent_ctx ctx = {
        .prompt = ask->prompt,
        .recording = ask->recording,
        .shell = ask->shell,
        .web = ask->web,
        .zdr = ask->zdr,
        .timeout_seconds = ask->timeout_seconds,
        .model = m,
        .mcfg = mcfg,
        .turn_limit = svc->cfg->turn_limit,
        .command_timeout_ms = svc->cfg->sandbox.command_timeout_seconds * 1000u,
        .output_cap = svc->cfg->sandbox.output_cap_bytes,
        .limits = &svc->sandbox_cfg.limits,
        .backend_name = svc->sandbox_ops ? svc->sandbox_ops->name : "",
    };
    int64_t least = 0;
    if (eph_agent_first_call_min(&ctx, &least, err, sizeof(err)))
        return 0; /* not measurable: the run's own meter decides */
    if (ask->max_cost >= least)
        return 0;
    /* Shown rounded up to what a display shows (5 decimals), so that the amount stated is
     * enough. */
    int64_t shown = least > INT64_MAX - 9 ? least : (least + 9) / 10 * 10;
    char want[EPH_MONEY_FMT_MAX], have[EPH_MONEY_FMT_MAX];
    why->kind = EPH_RUN_BUDGET_TOO_SMALL;
    snprintf(why->message, sizeof(why->message),
             "a budget of %s cannot pay for one call of the model '%s': its first call costs at "
             "least %s (%lld micros: the prompt, the tools and the system prompt at the model's "
             "input price, and the least output); nothing was reserved",
             eph_money_format(ask->max_cost, have), ask->model, eph_money_format(shown, want),
             (long long)least);
    return 1;
}

/* Closes a live entry registered for a run that was never queued. */
static void live_drop(struct eph_live_registry *reg, const char *run_id)
{
    struct eph_live *l = eph_live_get(reg, run_id);
    if (l) {
        eph_live_close(l, 1, NULL);
        eph_live_put(l);
    }
}

int eph_run_admit(struct eph_service *svc, const struct eph_run *r, const struct eph_event *first,
                  const char *zdr_prompt, json_t *zdr_files,
                  int (*submit)(struct eph_service *svc, const char *run_id), bool *queue_failed)
{
    struct eph_store *st = svc->store;
    *queue_failed = false;
    /* What can fail in this process is done before the store is written: the live entry and a
     * zero-data-retention prompt held on it. */
    int rc = eph_live_register(svc->live, r->id, r->created_at_ms, 1);
    if (!rc && r->zdr && (rc = eph_live_set_prompt(svc->live, r->id, zdr_prompt, zdr_files)))
        live_drop(svc->live, r->id);
    if (!rc && r->zdr) {
        /* This node holds a zero-data-retention run from birth. */
        struct eph_live *l = eph_live_get(svc->live, r->id);
        if (l) {
            eph_live_set_worked_here(l);
            eph_live_put(l);
        }
    }
    if (rc) {
        *queue_failed = true;
        return rc;
    }
    /* The queue limit, the balance check, the reservation, the run and its first event: one
     * transaction, so that concurrent creations can exceed neither the limit nor the balance. */
    rc = st->ops->run_insert_capped(st, r, first, svc->cfg->max_queued_per_org);
    if (rc) {
        live_drop(svc->live, r->id);
        return rc;
    }
    rc = submit(svc, r->id);
    if (rc) {
        /* Stored but not queued: settle it now as failed, everything released, so that no budget
         * stays reserved until a restart. */
        *queue_failed = true;
        EPH_ERROR("queue", "run %s: cannot queue: %s; released", r->id, eph_strerror(rc));
        eph_worker_refuse(svc, r->id, "queue_unavailable",
                          "the run could not be queued; nothing was charged");
    }
    return rc;
}
