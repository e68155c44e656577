/*
 * lease_span.h - the lease's spans, from the configuration alone: how often a lease is renewed and
 * how long a node may work on a run after a renewal (lease_span.c). Below everything that works on
 * runs.
 */
#ifndef EPH_LEASE_SPAN_H
#define EPH_LEASE_SPAN_H

#include "common/config.h"

/* The lease, in nanoseconds (lease_seconds, 30 when unset). */
uint64_t eph_lease_ns(const struct eph_config *cfg);
/* Seconds between two passes of the lease keeper: lease_renew_seconds, lowered to fit well
 * within the lease. */
unsigned eph_lease_renew_seconds(const struct eph_config *cfg);
/* How long after sending a renewal (or the claim) a node may work on the run without a newer one:
 * its fence (three quarters of the lease). */
uint64_t eph_lease_fence_span_ns(const struct eph_config *cfg);

#endif
