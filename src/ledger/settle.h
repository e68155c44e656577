/*
 * settle.h - a run's money at settlement, split once: what the model, the web and compute are
 * charged, what is charged in all and what is released of the reservation.
 *
 * The one place the hard limit is applied to the final figures: every path that settles a run
 * (the worker at the end of its run, a run refused before it started, a run whose worker was lost
 * and is settled for its last checkpoint) goes through eph_ledger_split(), and the store writes
 * what it returns. Pure arithmetic, no I/O.
 */
#ifndef EPH_LEDGER_SETTLE_H
#define EPH_LEDGER_SETTLE_H

#include <stdbool.h>
#include <stdint.h>

struct eph_settlement {
    int64_t model, web, compute; /* each >= 0 */
    int64_t charged;             /* model + web + compute <= reserved */
    int64_t released;            /* reserved - charged */
    bool capped;                 /* some part was cut to fit the reservation */
};

/*
 * Splits a reservation (negative counts as 0) among the measured parts (negative ones count as
 * 0): each is charged what was measured up to what the parts before it leave, in the order model,
 * web, compute (model and web were charged as they happened, compute accrues to the end), so that
 * charged + released = reserved and charged = model + web + compute always hold.
 */
void eph_ledger_split(int64_t reserved, int64_t model, int64_t web, int64_t compute,
                      struct eph_settlement *out);

#endif
