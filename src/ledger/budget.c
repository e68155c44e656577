#include "ledger/budget.h"

#include <errno.h>

#include "common/money.h"

void eph_budget_init(struct eph_budget *b, int64_t reserved, uint64_t compute_price)
{
    *b = (struct eph_budget){.reserved = reserved < 0 ? 0 : reserved,
                             .compute_price = compute_price};
}

void eph_budget_sandbox_started(struct eph_budget *b, uint64_t now_ns)
{
    b->sandbox_start_ns = now_ns;
    b->sandbox_end_ns = 0;
    b->started = true;
}

void eph_budget_sandbox_stopped(struct eph_budget *b, uint64_t now_ns)
{
    if (b->started && !b->sandbox_end_ns)
        b->sandbox_end_ns = now_ns < b->sandbox_start_ns ? b->sandbox_start_ns : now_ns;
}

/* What model and web leave for compute. */
static int64_t compute_room(const struct eph_budget *b)
{
    int64_t room = b->reserved - b->model - b->web;
    return room < 0 ? 0 : room;
}

int64_t eph_budget_compute(const struct eph_budget *b, uint64_t now_ns)
{
    if (!b->started)
        return 0;
    uint64_t end = b->sandbox_end_ns ? b->sandbox_end_ns : now_ns;
    uint64_t ns = end > b->sandbox_start_ns ? end - b->sandbox_start_ns : 0;
    uint64_t cost = eph_money_compute_cost(ns, b->compute_price);
    int64_t room = compute_room(b);
    return cost > (uint64_t)room ? room : (int64_t)cost;
}

int64_t eph_budget_available(const struct eph_budget *b, uint64_t now_ns)
{
    int64_t left = b->reserved - b->model - b->web - b->earmark - eph_budget_compute(b, now_ns);
    return left < 0 ? 0 : left;
}

uint64_t eph_budget_compute_deadline(const struct eph_budget *b)
{
    if (!b->started || b->sandbox_end_ns || b->compute_price == 0)
        return UINT64_MAX;
    int64_t room = b->reserved - b->model - b->web - b->earmark;
    if (room <= 0)
        return b->sandbox_start_ns;
    /* The largest duration whose cost (rounded up) still fits room: floor(room * 1e9 / price). */
    unsigned __int128 ns = (unsigned __int128)room * 1000000000u / b->compute_price;
    unsigned __int128 deadline = (unsigned __int128)b->sandbox_start_ns + ns;
    return deadline > UINT64_MAX ? UINT64_MAX : (uint64_t)deadline;
}

int eph_budget_plan_model_call(struct eph_budget *b, uint64_t now_ns, uint64_t input_tokens_est,
                               uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                               uint32_t *max_tokens)
{
    b->earmark = 0;
    int64_t room = eph_budget_available(b, now_ns);
    /* Without this, a worst case that took everything would leave the call no time at all: its
     * deadline, the compute deadline, would be now. */
    if (b->started && !b->sandbox_end_ns && b->compute_price) {
        uint64_t keep = eph_money_compute_cost(call_ns, b->compute_price);
        if (keep > (uint64_t)room / 2)
            keep = (uint64_t)room / 2;
        room -= (int64_t)keep;
    }
    unsigned __int128 avail = (unsigned __int128)room * 1000000u;
    unsigned __int128 in = (unsigned __int128)input_tokens_est * p->input_micros_per_mtok;
    if (in > avail)
        return -EDQUOT;
    unsigned __int128 left = avail - in;
    uint64_t fit = *max_tokens;
    if (p->output_micros_per_mtok) {
        unsigned __int128 n = left / p->output_micros_per_mtok;
        if (n < fit)
            fit = (uint64_t)n;
    }
    if (fit < min_tokens || fit == 0)
        return -EDQUOT;
    *max_tokens = (uint32_t)fit;
    unsigned __int128 worst = in + (unsigned __int128)fit * p->output_micros_per_mtok;
    b->earmark = (int64_t)(worst / 1000000u + (worst % 1000000u ? 1 : 0));
    return 0;
}

/* One numerator per call, divided once, rounded up; 128-bit, so absurd usages cannot wrap. */
static unsigned __int128 model_cost(uint64_t input_tokens, uint64_t cached_input_tokens,
                                    uint64_t output_tokens, const struct eph_price *p)
{
    unsigned __int128 num =
        (unsigned __int128)input_tokens * p->input_micros_per_mtok +
        (unsigned __int128)cached_input_tokens * p->cached_input_micros_per_mtok +
        (unsigned __int128)output_tokens * p->output_micros_per_mtok;
    return num / 1000000u + (num % 1000000u ? 1 : 0);
}

/* Drops the earmark and charges cost to the model, capped at what is left. */
static int64_t charge_model(struct eph_budget *b, uint64_t now_ns, unsigned __int128 cost,
                            bool *capped)
{
    b->earmark = 0;
    int64_t left = b->reserved - b->model - b->web - eph_budget_compute(b, now_ns);
    if (left < 0)
        left = 0;
    int64_t charge;
    *capped = false;
    if (cost > (unsigned __int128)left) {
        charge = left;
        *capped = true;
        b->capped = true;
    } else {
        charge = (int64_t)cost;
    }
    b->model += charge;
    return charge;
}

int64_t eph_budget_charge_model_call(struct eph_budget *b, uint64_t now_ns, uint64_t input_tokens,
                                     uint64_t cached_input_tokens, uint64_t output_tokens,
                                     const struct eph_price *p, bool *capped)
{
    return charge_model(b, now_ns, model_cost(input_tokens, cached_input_tokens, output_tokens, p),
                        capped);
}

int64_t eph_budget_charge_model_worst_case(struct eph_budget *b, uint64_t now_ns,
                                           uint64_t input_tokens, uint64_t cached_input_tokens,
                                           uint64_t output_tokens, const struct eph_price *p,
                                           bool *capped)
{
    unsigned __int128 cost = model_cost(input_tokens, cached_input_tokens, output_tokens, p) +
                             (unsigned __int128)(b->earmark > 0 ? b->earmark : 0);
    return charge_model(b, now_ns, cost, capped);
}

int64_t eph_budget_charge_web(struct eph_budget *b, uint64_t now_ns, int64_t micros, bool *capped)
{
    int64_t left = eph_budget_available(b, now_ns);
    *capped = false;
    if (micros < 0)
        micros = 0;
    if (micros > left) {
        micros = left;
        *capped = true;
        b->capped = true;
    }
    b->web += micros;
    return micros;
}

bool eph_budget_fits(const struct eph_budget *b, uint64_t now_ns, int64_t micros)
{
    return micros <= eph_budget_available(b, now_ns);
}

void eph_budget_settle(const struct eph_budget *b, uint64_t end_ns, int64_t *model, int64_t *web,
                       int64_t *compute, int64_t *charged, int64_t *released)
{
    *model = b->model;
    *web = b->web;
    *compute = eph_budget_compute(b, end_ns);
    *charged = *model + *web + *compute;
    *released = b->reserved - *charged;
}
