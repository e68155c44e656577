/*
 * egress.h - a run's way out: its broker, fed from the server's configuration and the org's
 * connections, wired to the sandbox's tunnel and to the run's timeline (docs/BROKER.md).
 *
 * Only runs with web or connections get one. The connections the run names are read from the
 * store and their credentials unsealed here, handed to the broker, and wiped; they never reach
 * the sandbox, an event or a log line.
 */
#ifndef EPH_EGRESS_H
#define EPH_EGRESS_H

#include <stdbool.h>
#include <stddef.h>

#include "ledger/budget.h"
#include "run/live.h"
#include "run/run.h"
#include "run/service.h"
#include "sandbox/sandbox.h"

struct eph_egress;

/* Fills svc->broker_own from the configuration, at start-up before any run: the API's listen
 * address and port (which serves /metrics too), and the store's PostgreSQL servers. Logs what it
 * cannot know (a listen port of 0). */
void eph_egress_learn_own(struct eph_service *svc);
/* Whether a run needs the broker at all. */
bool eph_egress_wanted(const struct eph_run *r);
/* Builds the broker and opens the sandbox's tunnel. 0 with *out (NULL when the run needs none),
 * or a negative error with a reason in err (no credential in it). */
int eph_egress_start(struct eph_service *svc, struct eph_run *r, struct eph_live *live,
                     struct eph_budget *budget, struct eph_sandbox *sb, struct eph_egress **out,
                     char *err, size_t errlen) __attribute__((warn_unused_result));
/* The broker, for the agent (NULL when e is NULL). */
struct eph_broker *eph_egress_broker(struct eph_egress *e);
/* Ends every tunnel at once and counts the requests into r->usage: before the sandbox is
 * destroyed (NULL is fine). */
void eph_egress_stop(struct eph_egress *e, struct eph_run *r);
/* After the sandbox is destroyed (its tunnel may call the broker until then). */
void eph_egress_free(struct eph_egress *e);

#endif
