/*
 * budget.h - the hard limit of one run, as pure arithmetic (no I/O, no clock of its own).
 *
 * The worker holds one eph_budget per run. Everything that costs money goes through it, and it
 * keeps one invariant at every instant: model + web + compute (+ the worst case of a call in
 * flight) <= reserved. Compute accrues with the sandbox's lifetime; eph_budget_compute_deadline()
 * says the instant at which compute alone would use what is left, and the worker destroys the
 * sandbox then. Every charge that would cross the reservation is capped at it (the operator absorbs
 * the difference, the user's limit holds) and the budget remembers that it capped.
 */
#ifndef EPH_BUDGET_H
#define EPH_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

struct eph_price {
    uint64_t input_micros_per_mtok;
    uint64_t cached_input_micros_per_mtok;
    uint64_t output_micros_per_mtok;
};

struct eph_budget {
    int64_t reserved;
    int64_t model;          /* charged for model calls */
    int64_t web;            /* charged for web and connection traffic */
    int64_t earmark;        /* worst case of the call in flight */
    uint64_t compute_price; /* micros per sandbox-second */
    uint64_t sandbox_start_ns;
    uint64_t sandbox_end_ns; /* 0 while it lives */
    bool started;
    bool capped; /* some charge was cut to fit the reservation */
};

void eph_budget_init(struct eph_budget *b, int64_t reserved, uint64_t compute_price);
void eph_budget_sandbox_started(struct eph_budget *b, uint64_t now_ns);
void eph_budget_sandbox_stopped(struct eph_budget *b, uint64_t now_ns);

/* Compute charged as of now_ns (capped at what model and web leave). */
int64_t eph_budget_compute(const struct eph_budget *b, uint64_t now_ns);
/* What is left as of now_ns, after earmarks: never negative. */
int64_t eph_budget_available(const struct eph_budget *b, uint64_t now_ns);
/* Monotonic instant at which compute would exhaust what is left; UINT64_MAX when compute is free
 * or no sandbox runs. */
uint64_t eph_budget_compute_deadline(const struct eph_budget *b);

/* Plans a model call: the worst case (input estimate at the input price + max_tokens at the output
 * price) must fit what is left once the compute of call_ns (the longest the call may take) is set
 * aside, since the sandbox keeps accruing while the call is in flight; that compute is never more
 * than half of what is left, so a small budget still gets a (smaller) call. Lowers *max_tokens to
 * fit, earmarks the worst case, and returns 0; -EDQUOT when not even min_tokens of output fit. */
int eph_budget_plan_model_call(struct eph_budget *b, uint64_t now_ns, uint64_t input_tokens_est,
                               uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                               uint32_t *max_tokens);
/* Charges a finished call from its reported usage and drops the earmark. Returns the micros
 * charged; *capped is set when the usage cost more than was left. */
int64_t eph_budget_charge_model_call(struct eph_budget *b, uint64_t now_ns, uint64_t input_tokens,
                                     uint64_t cached_input_tokens, uint64_t output_tokens,
                                     const struct eph_price *p, bool *capped);
/* Charges a finished call whose answer reported no usage: the worst case earmarked for it (the
 * user agreed to pay up to that, and less cannot be known), plus the usage that earlier attempts
 * of the call did report, capped like any charge. Drops the earmark; returns the micros charged. */
int64_t eph_budget_charge_model_worst_case(struct eph_budget *b, uint64_t now_ns,
                                           uint64_t input_tokens, uint64_t cached_input_tokens,
                                           uint64_t output_tokens, const struct eph_price *p,
                                           bool *capped);
/* Charges an amount for web traffic, capped at what is left. Returns the micros charged. */
int64_t eph_budget_charge_web(struct eph_budget *b, uint64_t now_ns, int64_t micros, bool *capped);
/* Whether micros can be spent now without crossing the limit. */
bool eph_budget_fits(const struct eph_budget *b, uint64_t now_ns, int64_t micros);

/* Settlement: the final split. charged + released = reserved and charged = model + web +
 * compute always hold. */
void eph_budget_settle(const struct eph_budget *b, uint64_t end_ns, int64_t *model, int64_t *web,
                       int64_t *compute, int64_t *charged, int64_t *released);

#endif
