#include "ledger/budget.h"

#include <errno.h>

#include "common/money.h"
#include "ledger/settle.h"

typedef unsigned __int128 u128;

/* Every public operation on a budget takes its lock; the static helpers below the lock expect it
 * held. Nothing under the lock calls out or takes another lock. */

void eph_budget_init(struct eph_budget *b, int64_t reserved, uint64_t compute_price)
{
    *b = (struct eph_budget){.reserved = reserved < 0 ? 0 : reserved,
                             .compute_price = compute_price};
    pthread_mutex_init(&b->lock, NULL);
}

void eph_budget_destroy(struct eph_budget *b)
{
    pthread_mutex_destroy(&b->lock);
}

void eph_budget_sandbox_started(struct eph_budget *b, uint64_t now_ns)
{
    pthread_mutex_lock(&b->lock);
    b->sandbox_start_ns = now_ns;
    b->sandbox_end_ns = 0;
    b->started = true;
    pthread_mutex_unlock(&b->lock);
}

void eph_budget_sandbox_stopped(struct eph_budget *b, uint64_t now_ns)
{
    pthread_mutex_lock(&b->lock);
    if (b->started && !b->sandbox_end_ns)
        b->sandbox_end_ns = now_ns < b->sandbox_start_ns ? b->sandbox_start_ns : now_ns;
    pthread_mutex_unlock(&b->lock);
}

/* What model, web and the earmark leave for compute: compute never eats into the worst case of
 * the attempt in flight, so that attempt's charge always fits. */
static int64_t compute_room(const struct eph_budget *b)
{
    int64_t room = b->reserved - b->model - b->web - b->earmark;
    return room < 0 ? 0 : room;
}

static int64_t compute_of(const struct eph_budget *b, uint64_t now_ns)
{
    if (!b->started)
        return 0;
    uint64_t end = b->sandbox_end_ns ? b->sandbox_end_ns : now_ns;
    uint64_t ns = end > b->sandbox_start_ns ? end - b->sandbox_start_ns : 0;
    uint64_t cost = eph_money_compute_cost(ns, b->compute_price);
    int64_t room = compute_room(b);
    return cost > (uint64_t)room ? room : (int64_t)cost;
}

static int64_t available_of(const struct eph_budget *b, uint64_t now_ns)
{
    int64_t left = b->reserved - b->model - b->web - b->earmark - compute_of(b, now_ns);
    return left < 0 ? 0 : left;
}

int64_t eph_budget_compute(struct eph_budget *b, uint64_t now_ns)
{
    pthread_mutex_lock(&b->lock);
    int64_t c = compute_of(b, now_ns);
    pthread_mutex_unlock(&b->lock);
    return c;
}

int64_t eph_budget_available(struct eph_budget *b, uint64_t now_ns)
{
    pthread_mutex_lock(&b->lock);
    int64_t left = available_of(b, now_ns);
    pthread_mutex_unlock(&b->lock);
    return left;
}

void eph_budget_read(struct eph_budget *b, uint64_t now_ns, struct eph_budget_view *out)
{
    pthread_mutex_lock(&b->lock);
    *out = (struct eph_budget_view){.reserved = b->reserved,
                                    .model = b->model,
                                    .web = b->web,
                                    .earmark = b->earmark,
                                    .compute = compute_of(b, now_ns),
                                    .available = available_of(b, now_ns),
                                    .capped = b->capped};
    pthread_mutex_unlock(&b->lock);
}

uint64_t eph_budget_compute_deadline(struct eph_budget *b)
{
    pthread_mutex_lock(&b->lock);
    uint64_t deadline = UINT64_MAX;
    if (b->started && !b->sandbox_end_ns && b->compute_price != 0) {
        int64_t room = compute_room(b);
        /* The largest duration whose cost (rounded up) still fits room:
         * floor(room * 1e9 / price). */
        u128 ns = room <= 0 ? 0 : (u128)room * 1000000000u / b->compute_price;
        u128 d = (u128)b->sandbox_start_ns + ns;
        deadline = d > UINT64_MAX ? UINT64_MAX : (uint64_t)d;
    }
    pthread_mutex_unlock(&b->lock);
    return deadline;
}

/* ---- prices ---- */

static u128 add_sat(u128 a, u128 b)
{
    return a + b < a ? ~(u128)0 : a + b;
}

/* tokens x price, each below 2^64: the product fits 128 bits. */
static u128 mul(uint64_t tokens, uint64_t price)
{
    return (u128)tokens * price;
}

/* A numerator (micro-micros) to micros, rounded up, saturating at INT64_MAX. */
static int64_t to_micros(u128 num)
{
    u128 m = num / 1000000u + (num % 1000000u ? 1 : 0);
    return m > (u128)INT64_MAX ? INT64_MAX : (int64_t)m;
}

uint64_t eph_price_input_max(const struct eph_price *p)
{
    uint64_t m = p->input_micros_per_mtok;
    if (p->cached_input_micros_per_mtok > m)
        m = p->cached_input_micros_per_mtok;
    if (p->cache_write_micros_per_mtok > m)
        m = p->cache_write_micros_per_mtok;
    if (p->cache_write_1h_micros_per_mtok > m)
        m = p->cache_write_1h_micros_per_mtok;
    return m;
}

int64_t eph_price_cost(const struct eph_price *p, const struct eph_token_usage *u)
{
    u128 num = mul(u->input_tokens, p->input_micros_per_mtok);
    num = add_sat(num, mul(u->cached_input_tokens, p->cached_input_micros_per_mtok));
    num = add_sat(num, mul(u->cache_write_tokens, p->cache_write_micros_per_mtok));
    num = add_sat(num, mul(u->cache_write_1h_tokens, p->cache_write_1h_micros_per_mtok));
    num = add_sat(num, mul(u->output_tokens, p->output_micros_per_mtok));
    return to_micros(num);
}

int64_t eph_price_worst_case(const struct eph_price *p, uint64_t input_bound, uint64_t max_tokens)
{
    return to_micros(add_sat(mul(input_bound, eph_price_input_max(p)),
                             mul(max_tokens, p->output_micros_per_mtok)));
}

/* ---- model attempts ---- */

/* The decision of an authorisation, the lock held: the earmark in flight is replaced (counted as
 * 0); earmarks the worst case when commit, else leaves the budget as it was. */
static int authorise_locked(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound,
                            uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                            uint32_t *max_tokens, bool commit)
{
    int64_t before = b->earmark;
    b->earmark = 0;
    int64_t room = available_of(b, now_ns);
    if (!commit)
        b->earmark = before;
    /* Without this, a worst case that took everything would leave the attempt no time at all:
     * its deadline, the compute deadline, would be now. */
    if (b->started && !b->sandbox_end_ns && b->compute_price) {
        uint64_t keep = eph_money_compute_cost(call_ns, b->compute_price);
        if (keep > (uint64_t)room / 2)
            keep = (uint64_t)room / 2;
        room -= (int64_t)keep;
    }
    u128 avail = (u128)room * 1000000u;
    u128 in = mul(input_bound, eph_price_input_max(p));
    if (in > avail)
        return -EDQUOT;
    u128 left = avail - in;
    uint64_t fit = *max_tokens;
    if (p->output_micros_per_mtok) {
        u128 n = left / p->output_micros_per_mtok;
        if (n < fit)
            fit = (uint64_t)n;
    }
    if (fit < min_tokens || fit == 0)
        return -EDQUOT;
    *max_tokens = (uint32_t)fit;
    /* fits room, so it is below INT64_MAX */
    if (commit)
        b->earmark = eph_price_worst_case(p, input_bound, fit);
    return 0;
}

static int authorise(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound, uint64_t call_ns,
                     const struct eph_price *p, uint32_t min_tokens, uint32_t *max_tokens,
                     bool commit)
{
    pthread_mutex_lock(&b->lock);
    int rc = authorise_locked(b, now_ns, input_bound, call_ns, p, min_tokens, max_tokens, commit);
    pthread_mutex_unlock(&b->lock);
    return rc;
}

int eph_budget_authorise(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound,
                         uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                         uint32_t *max_tokens)
{
    return authorise(b, now_ns, input_bound, call_ns, p, min_tokens, max_tokens, true);
}

int eph_budget_authorise_check(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound,
                               uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                               uint32_t *max_tokens)
{
    return authorise(b, now_ns, input_bound, call_ns, p, min_tokens, max_tokens, false);
}

int64_t eph_budget_charge_attempt(struct eph_budget *b, uint64_t now_ns,
                                  enum eph_attempt_charge how, const struct eph_token_usage *u,
                                  const struct eph_price *p, struct eph_attempt_cost *out)
{
    int64_t cost = 0;
    if (how == EPH_CHARGE_USAGE && u)
        cost = eph_price_cost(p, u);
    pthread_mutex_lock(&b->lock);
    int64_t earmark = b->earmark > 0 ? b->earmark : 0;
    /* What the attempt may take: its earmark and whatever else is left. Compute is measured with
     * the earmark still set aside, so an attempt billed within its bound always fits whole. */
    int64_t left = b->reserved - b->model - b->web - compute_of(b, now_ns);
    if (left < 0)
        left = 0;
    if (how == EPH_CHARGE_EARMARK)
        cost = earmark;
    *out = (struct eph_attempt_cost){.earmark = earmark,
                                     .above_bound = how == EPH_CHARGE_USAGE && cost > earmark};
    if (cost > left) {
        cost = left;
        out->capped = true;
        b->capped = true;
    }
    b->earmark = 0;
    b->model += cost;
    pthread_mutex_unlock(&b->lock);
    out->micros = cost;
    return cost;
}

int64_t eph_budget_charge_web(struct eph_budget *b, uint64_t now_ns, int64_t micros, bool *capped)
{
    *capped = false;
    if (micros < 0)
        micros = 0;
    pthread_mutex_lock(&b->lock);
    int64_t left = available_of(b, now_ns);
    if (micros > left) {
        micros = left;
        *capped = true;
        b->capped = true;
    }
    b->web += micros;
    pthread_mutex_unlock(&b->lock);
    return micros;
}

bool eph_budget_charge_web_all(struct eph_budget *b, uint64_t now_ns, int64_t micros)
{
    if (micros <= 0)
        return micros == 0;
    pthread_mutex_lock(&b->lock);
    bool fits = micros <= available_of(b, now_ns);
    if (fits)
        b->web += micros;
    pthread_mutex_unlock(&b->lock);
    return fits;
}

bool eph_budget_fits(struct eph_budget *b, uint64_t now_ns, int64_t micros)
{
    return micros >= 0 && micros <= eph_budget_available(b, now_ns);
}

void eph_budget_settle(struct eph_budget *b, uint64_t end_ns, int64_t *model, int64_t *web,
                       int64_t *compute, int64_t *charged, int64_t *released)
{
    struct eph_settlement st;
    pthread_mutex_lock(&b->lock);
    eph_ledger_split(b->reserved, b->model, b->web, compute_of(b, end_ns), &st);
    pthread_mutex_unlock(&b->lock);
    *model = st.model;
    *web = st.web;
    *compute = st.compute;
    *charged = st.charged;
    *released = st.released;
}
