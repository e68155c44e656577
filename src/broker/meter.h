/*
 * meter.h - web and connection traffic inside the run's hard limit (docs/MONEY.md,
 * docs/BROKER.md).
 *
 * One meter per request or tunnel. Its fee (prices.web_micros_per_request) is checked against
 * what the run has left before anything is sent; then every byte that crosses the broker, either
 * way, is metered before it is forwarded: the meter says how many of the bytes offered the budget
 * still pays for, charges them, and the caller forwards exactly those and cuts the transfer there.
 * The byte price (prices.web_micros_per_mib per 1,048,576 bytes) is applied to the running total,
 * rounded up once, so a transfer in many small pieces costs what it would in one.
 *
 * A meter is one caller's (no lock of its own); the budget it charges is shared and locks itself.
 * Each fee and each byte's charge is all or nothing on the budget, so what the meter counts as
 * paid is what the budget charged, whatever other threads spend at the same time.
 */
#ifndef EPH_BROKER_METER_H
#define EPH_BROKER_METER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ledger/budget.h"

struct eph_meter {
    uint64_t per_request; /* micros */
    uint64_t per_mib;     /* micros per MiB */
    uint64_t bytes;       /* metered so far, both directions */
    int64_t charged;      /* micros charged so far: the fee plus the bytes */
    bool started;         /* the fee is paid */
    bool exhausted;       /* a take was cut short: the budget is spent */
};

void eph_meter_init(struct eph_meter *m, uint64_t per_request, uint64_t per_mib);
/* Charges the fee: 0, or -EDQUOT when it does not fit what is left (nothing charged). */
int eph_meter_start(struct eph_meter *m, struct eph_budget *b, uint64_t now_ns)
    __attribute__((warn_unused_result));
/* Meters up to n more bytes: returns how many the budget pays for (all n, or fewer when it ends
 * there; then m->exhausted is set) and charges them. */
size_t eph_meter_take(struct eph_meter *m, struct eph_budget *b, uint64_t now_ns, size_t n);
/* The price of a byte total: ceil(bytes * per_mib / 2^20), saturating. */
int64_t eph_meter_bytes_cost(uint64_t bytes, uint64_t per_mib);

#endif
