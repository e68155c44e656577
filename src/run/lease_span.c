/*
 * lease_span.c - the lease's spans, from the configuration alone (docs/RUN.md, "Leases" and
 * "Fencing").
 */
#include "run/lease_span.h"

unsigned eph_lease_renew_seconds(const struct eph_config *cfg)
{
    unsigned lease = cfg->lease_seconds ? cfg->lease_seconds : 30;
    unsigned renew = cfg->lease_renew_seconds ? cfg->lease_renew_seconds : 10;
    /* A renewal must come well before the lease ends. */
    if (renew * 2 > lease)
        renew = lease / 3 ? lease / 3 : 1;
    return renew;
}

uint64_t eph_lease_ns(const struct eph_config *cfg)
{
    return (uint64_t)(cfg->lease_seconds ? cfg->lease_seconds : 30) * 1000000000u;
}

uint64_t eph_lease_fence_span_ns(const struct eph_config *cfg)
{
    /* Three quarters of the lease from the moment a renewal (or the claim) was sent: the store
     * wrote a lease ending no earlier than a whole lease after that moment, so the last quarter
     * is the margin in which the fence's watchdog kills the sandbox before any other node may
     * call the lease expired. */
    return eph_lease_ns(cfg) / 4 * 3;
}
