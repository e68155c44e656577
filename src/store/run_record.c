#include "store/run_record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

static const char *const status_names[] = {
    [EPH_RUN_QUEUED] = "queued",
    [EPH_RUN_STARTING] = "starting",
    [EPH_RUN_RUNNING] = "running",
    [EPH_RUN_COMPLETED] = "completed",
    [EPH_RUN_FAILED] = "failed",
    [EPH_RUN_TIMED_OUT] = "timed_out",
    [EPH_RUN_BUDGET_EXHAUSTED] = "budget_exhausted",
    [EPH_RUN_CANCELLED] = "cancelled",
};

void eph_run_init(struct eph_run *r)
{
    memset(r, 0, sizeof(*r));
}

void eph_run_release(struct eph_run *r)
{
    free(r->model);
    free(r->prompt);
    json_decref(r->files);
    json_decref(r->connections);
    json_decref(r->web_allow);
    json_decref(r->outputs);
    json_decref(r->metadata);
    free(r->result);
    free(r->error_type);
    free(r->error_code);
    free(r->error_message);
    free(r->sandbox_backend);
    free(r->replay_of);
    memset(r, 0, sizeof(*r));
}

const char *eph_run_kind_name(enum eph_run_kind k)
{
    return k == EPH_KIND_SANDBOX ? "sandbox" : "run";
}

const char *eph_run_status_name(enum eph_run_status s)
{
    if ((unsigned)s >= sizeof(status_names) / sizeof(status_names[0]))
        return "unknown";
    return status_names[s];
}

int eph_run_status_parse(const char *s, enum eph_run_status *out)
{
    for (unsigned i = 0; i < sizeof(status_names) / sizeof(status_names[0]); i++) {
        if (strcmp(s, status_names[i]) == 0) {
            *out = (enum eph_run_status)i;
            return 0;
        }
    }
    return -EINVAL;
}

bool eph_run_status_terminal(enum eph_run_status s)
{
    return s >= EPH_RUN_COMPLETED;
}

bool eph_run_transition_ok(enum eph_run_status from, enum eph_run_status to)
{
    if (eph_run_status_terminal(from))
        return false;
    switch (to) {
    case EPH_RUN_QUEUED:
        return false;
    case EPH_RUN_STARTING:
        return from == EPH_RUN_QUEUED;
    case EPH_RUN_RUNNING:
        return from == EPH_RUN_STARTING;
    case EPH_RUN_COMPLETED:
        return from == EPH_RUN_RUNNING;
    default:
        /* failed, timed_out, budget_exhausted, cancelled: from any live state */
        return true;
    }
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int eph_run_set_error(struct eph_run *r, const char *type, const char *code, const char *message)
{
    free(r->error_type);
    free(r->error_code);
    free(r->error_message);
    r->error_type = dup_or_null(type);
    r->error_code = dup_or_null(code);
    r->error_message = dup_or_null(message);
    if ((type && !r->error_type) || (code && !r->error_code) || (message && !r->error_message)) {
        /* All set or none (struct eph_run): never a code without its message. */
        free(r->error_type);
        free(r->error_code);
        free(r->error_message);
        r->error_type = r->error_code = r->error_message = NULL;
        return -ENOMEM;
    }
    return 0;
}
