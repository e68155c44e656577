/*
 * cluster.h - several nodes on one shared store (cluster.c).
 */
#ifndef EPH_CLUSTER_H
#define EPH_CLUSTER_H

#include "run/live.h"
#include "run/service.h"

/* Several nodes on one shared store (cluster.c); each does nothing on a single-node store.
 * start: listens for other nodes' events, queued runs and cancels. follow: the live entry of a
 * run, registered as followed when another node works on it (NULL when finished or unknown);
 * the caller puts it. cancel: tells the node working on the run. take_next (every store): claims
 * the next queued run by the store's fair rule, with max_concurrent_runs_per_org, among the runs
 * no node holds and waiting (this node's own queue), and registers it live here (-ENOENT when
 * none). */
int eph_cluster_start(struct eph_service *svc);
struct eph_live *eph_cluster_follow(struct eph_service *svc, const char *run_id);
int eph_cluster_cancel(struct eph_service *svc, const char *run_id);
int eph_cluster_take_next(struct eph_service *svc, const char *const *waiting, size_t nwaiting,
                          char *run_id, size_t idlen);

#endif
