/*
 * budget.h - the hard limit of one run, as pure arithmetic (no I/O, no clock of its own).
 *
 * The worker holds one eph_budget per run. Everything that costs money goes through it, and it
 * keeps one invariant at every instant: model + web + compute (+ the worst case of the model
 * attempt in flight) <= reserved. Compute accrues with the sandbox's lifetime;
 * eph_budget_compute_deadline() says the instant at which compute alone would use what is left,
 * and the worker destroys the sandbox then.
 *
 * Model attempts are pre-authorised (docs/MONEY.md): before an attempt is sent, an upper bound of
 * what the provider can bill for it - the input bound at the dearest input price plus max_tokens
 * at the output price - must fit what is left, and it is earmarked while the attempt is in
 * flight. The attempt is then charged what the provider reported, or its earmark when it may have
 * been billed without reporting (a cut stream), or nothing (an HTTP error status, a request that
 * never left). So what a provider can bill for a run never exceeds its reservation, as long as
 * it bills within the bound. A reported usage above the bound is charged up to what is left (the
 * operator absorbs the rest) and the budget remembers that it capped.
 *
 * Shared between threads: the worker's thread (the agent loop, its tools, the settlement) and the
 * run's broker (the sandbox's channel thread and one thread per stream) all charge it at any
 * instant. Every operation below takes the budget's own lock for its whole read-check-write, so
 * each check and the charge it allows are one step, whatever runs beside it: an authorisation
 * sees every web charge made before it, a web charge cannot take an earmark, and the invariant
 * holds after every operation. Callers never read or copy its fields: eph_budget_read() gives a
 * consistent view, eph_budget_authorise_check() a probe. The lock is a leaf: no callback or other
 * lock is taken under it.
 */
#ifndef EPH_BUDGET_H
#define EPH_BUDGET_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Token counts saturate here, so they fit the signed 64-bit columns and JSON integers that store
 * and show them: a count can never wrap or turn negative. */
#define EPH_TOKENS_MAX ((uint64_t)INT64_MAX)

static inline uint64_t eph_tokens_add(uint64_t a, uint64_t b)
{
    if (a > EPH_TOKENS_MAX)
        a = EPH_TOKENS_MAX;
    if (b > EPH_TOKENS_MAX - a)
        return EPH_TOKENS_MAX;
    return a + b;
}

/* Micros per million tokens, per class of token as providers bill them. */
struct eph_price {
    uint64_t input_micros_per_mtok;
    uint64_t cached_input_micros_per_mtok;   /* cache reads */
    uint64_t output_micros_per_mtok;         /* reasoning tokens included */
    uint64_t cache_write_micros_per_mtok;    /* cache writes that live 5 minutes */
    uint64_t cache_write_1h_micros_per_mtok; /* cache writes that live 1 hour */
};

/* What one attempt reported using, each class apart (they are disjoint: input_tokens is the
 * uncached part). reasoning_tokens is part of output_tokens, kept apart only to be shown. */
struct eph_token_usage {
    uint64_t input_tokens;
    uint64_t cached_input_tokens;
    uint64_t cache_write_tokens;
    uint64_t cache_write_1h_tokens;
    uint64_t output_tokens;
    uint64_t reasoning_tokens;
};

/* Private: only budget.c reads or writes these, under lock. */
struct eph_budget {
    pthread_mutex_t lock;
    int64_t reserved;
    int64_t model;          /* charged for model attempts */
    int64_t web;            /* charged for web and connection traffic */
    int64_t earmark;        /* worst case of the attempt in flight */
    uint64_t compute_price; /* micros per sandbox-second */
    uint64_t sandbox_start_ns;
    uint64_t sandbox_end_ns; /* 0 while it lives */
    bool started;
    bool capped; /* some charge was cut to fit the reservation */
};

void eph_budget_init(struct eph_budget *b, int64_t reserved, uint64_t compute_price);
/* Once no thread uses it any more (the broker's threads joined). */
void eph_budget_destroy(struct eph_budget *b);
void eph_budget_sandbox_started(struct eph_budget *b, uint64_t now_ns);
void eph_budget_sandbox_stopped(struct eph_budget *b, uint64_t now_ns);

/* Compute charged as of now_ns (capped at what model, web and the earmark leave). */
int64_t eph_budget_compute(struct eph_budget *b, uint64_t now_ns);
/* What is left as of now_ns, after the earmark: never negative. */
int64_t eph_budget_available(struct eph_budget *b, uint64_t now_ns);
/* One consistent view of the budget as of now_ns (all read under one lock). */
struct eph_budget_view {
    int64_t reserved;
    int64_t model;
    int64_t web;
    int64_t earmark;   /* of the attempt in flight */
    int64_t compute;   /* as eph_budget_compute */
    int64_t available; /* as eph_budget_available */
    bool capped;
};
void eph_budget_read(struct eph_budget *b, uint64_t now_ns, struct eph_budget_view *out);
/* Monotonic instant at which compute would exhaust what is left; UINT64_MAX when compute is free
 * or no sandbox runs. */
uint64_t eph_budget_compute_deadline(struct eph_budget *b);

/* The dearest price an input token can be billed at (uncached, cache read or cache write). */
uint64_t eph_price_input_max(const struct eph_price *p);
/* The cost of a usage in micros: one numerator, divided once, rounded up; saturates at
 * INT64_MAX. */
int64_t eph_price_cost(const struct eph_price *p, const struct eph_token_usage *u);
/* The worst case of an attempt: input_bound tokens at the dearest input price + max_tokens at the
 * output price, rounded up; saturates at INT64_MAX. */
int64_t eph_price_worst_case(const struct eph_price *p, uint64_t input_bound, uint64_t max_tokens);

/*
 * Pre-authorises one model attempt (first try or retry): its worst case (see
 * eph_price_worst_case) must fit what is left once the compute of call_ns (the longest the
 * attempt may take) is set aside, since the sandbox keeps accruing while the attempt is in flight;
 * that compute is never more than half of what is left, so a small budget still gets a (smaller)
 * attempt. Lowers *max_tokens to fit, earmarks the worst case, and returns 0; -EDQUOT (nothing
 * earmarked) when not even min_tokens of output fit.
 */
int eph_budget_authorise(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound,
                         uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                         uint32_t *max_tokens) __attribute__((warn_unused_result));
/* The same decision as eph_budget_authorise (an earmark in flight counted as replaced), made
 * under the lock, without earmarking anything: whether an attempt would be authorised, and at
 * what max_tokens. */
int eph_budget_authorise_check(struct eph_budget *b, uint64_t now_ns, uint64_t input_bound,
                               uint64_t call_ns, const struct eph_price *p, uint32_t min_tokens,
                               uint32_t *max_tokens) __attribute__((warn_unused_result));

/* How an attempt is charged. */
enum eph_attempt_charge {
    EPH_CHARGE_USAGE,   /* the usage the provider reported */
    EPH_CHARGE_EARMARK, /* no usage, but the provider may bill it: its worst case */
    EPH_CHARGE_NOTHING, /* the provider does not bill it (an HTTP error, never sent) */
};

struct eph_attempt_cost {
    int64_t micros;   /* what was charged */
    int64_t earmark;  /* what was earmarked for the attempt */
    bool capped;      /* the charge was cut to fit the reservation */
    bool above_bound; /* the reported usage cost more than the earmark: the provider billed past
                         the bound it is assumed to respect */
};

/*
 * Settles the attempt in flight: charges it as how says (u is read for EPH_CHARGE_USAGE only),
 * drops the earmark, and fills *out. A usage within the earmark always fits; more is capped at
 * what is left. Returns the micros charged.
 */
int64_t eph_budget_charge_attempt(struct eph_budget *b, uint64_t now_ns,
                                  enum eph_attempt_charge how, const struct eph_token_usage *u,
                                  const struct eph_price *p, struct eph_attempt_cost *out);

/* Charges an amount for web traffic as it flows, capped at what is left (the earmark of a model
 * attempt in flight stays untouched). A negative amount charges nothing. Returns the micros
 * charged; *capped is set when the amount did not fit. */
int64_t eph_budget_charge_web(struct eph_budget *b, uint64_t now_ns, int64_t micros, bool *capped);
/* Charges micros for web traffic only if all of it fits what is left (the earmark untouched), as
 * one step: true when charged (0 always is), false when nothing was (a negative amount never
 * is). A check with
 * eph_budget_fits() followed by a charge would let another thread take the room in between. */
bool eph_budget_charge_web_all(struct eph_budget *b, uint64_t now_ns, int64_t micros)
    __attribute__((warn_unused_result));
/* Whether micros can be spent now without crossing the limit (a hint: another thread may spend
 * before the caller does). */
bool eph_budget_fits(struct eph_budget *b, uint64_t now_ns, int64_t micros);

/* Settlement: the final split (eph_ledger_split of ledger/settle.h on what the budget measured).
 * charged + released = reserved and charged = model + web + compute always hold. */
void eph_budget_settle(struct eph_budget *b, uint64_t end_ns, int64_t *model, int64_t *web,
                       int64_t *compute, int64_t *charged, int64_t *released);

#endif
