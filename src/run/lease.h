/*
 * lease.h - the lease keeper's pass (lease.c; docs/RUN.md, "Leases").
 */
#ifndef EPH_LEASE_H
#define EPH_LEASE_H

#include "run/lease_span.h"
#include "run/service.h"

/* The lease keeper (lease.c): every lease_renew_seconds it renews the lease of each run this
 * node works on (checkpointing its compute), stops the runs whose lease another node took over,
 * and settles as worker_lost the runs of any node whose lease expired. The scheduler's periodic
 * pass; one pass, for tests and start-up: */
void eph_lease_pass(struct eph_service *svc);

#endif
