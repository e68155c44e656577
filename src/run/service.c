/*
 * service.c - what the service's parts ask of it: a model by id, and the scheduler's queue and
 * settler (scheduler.h), so that the parts below the worker pool reach them without reaching up.
 */
#include <errno.h>
#include <string.h>

#include "run/scheduler.h"
#include "run/service.h"

struct eph_model *eph_service_model(struct eph_service *svc, const char *id)
{
    /* A service without opened models (a test's) has none to give. */
    for (size_t i = 0; svc->models && i < svc->cfg->nmodels; i++)
        if (strcmp(svc->cfg->models[i].id, id) == 0)
            return svc->models[i];
    return NULL;
}

int eph_service_submit(struct eph_service *svc, const char *run_id)
{
    return svc->sched ? eph_scheduler_submit(svc->sched, run_id) : -ESHUTDOWN;
}

int eph_service_settle(struct eph_service *svc, const char *run_id)
{
    return svc->sched ? eph_scheduler_settle(svc->sched, run_id) : -ESHUTDOWN;
}

void eph_service_kick(struct eph_service *svc)
{
    if (svc->sched)
        eph_scheduler_kick(svc->sched);
}
