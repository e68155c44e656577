/*
 * money.h - integer micro-dollar arithmetic (1 USD = 1 000 000 micros) and its display form.
 *
 * No floating point anywhere in cost arithmetic. Every operation that could overflow checks and
 * fails with -EOVERFLOW rather than wrap.
 */
#ifndef EPH_MONEY_H
#define EPH_MONEY_H

#include <stddef.h>
#include <stdint.h>

#define EPH_MONEY_FMT_MAX 32

/* "$0.04", "$0.00353", "$0.00": dollars, up to 5 decimals, trailing zeros trimmed, at least 2
 * decimals. Amounts with a sixth decimal are rounded half up at the fifth. Negative amounts get a
 * leading "-". Returns out. */
char *eph_money_format(int64_t micros, char out[EPH_MONEY_FMT_MAX]);

/* The rest of a split shown beside its part: "$X charged, $Y released" must add up to the budget
 * shown, but rounding each amount on its own can be a digit off (each of 0.000005 + 0.000005 is
 * shown as $0.00001, their sum too). So the rest is shown as the shown total minus the shown part,
 * each rounded once: eph_money_format(part) + this = eph_money_format(total) to the last digit.
 * 0 <= part <= total. Returns out. */
char *eph_money_format_rest(int64_t total, int64_t part, char out[EPH_MONEY_FMT_MAX]);

/* The parts of a total as they are shown (model, web, compute of a charge): each rounded to the
 * fifth decimal so that the shown parts add up to the shown total, to the last digit. Each part is
 * rounded down to 10 micros, then the 10s still missing go to the parts with the largest
 * remainders (the first on a tie): the largest-remainder method. parts are >= 0, n <= 8; shown[i]
 * gets a multiple of 10 that eph_money_format prints exactly. */
void eph_money_split(const int64_t *parts, size_t n, int64_t *shown);

/* Parses "0.04", "$1", "12.5" into micros (at most 6 decimals). 0 or -EINVAL / -EOVERFLOW. */
int eph_money_parse_dollars(const char *s, int64_t *out);
/* The same, with the rule that failed in *why ("more than 6 decimals", "too large", ...). */
int eph_money_parse_dollars_why(const char *s, int64_t *out, const char **why);

/* Credits, for the API and `ephemerald admin credit` alike: one credit adds at most
 * EPH_MONEY_CREDIT_MAX ($1 billion), and no balance may pass EPH_MONEY_BALANCE_MAX ($100 billion),
 * far below what int64 sums of every ledger entry could overflow. */
#define EPH_MONEY_CREDIT_MAX ((int64_t)1000000000000000)
#define EPH_MONEY_BALANCE_MAX ((int64_t)100000000000000000)
/* NULL when micros may be added to an org whose balance is balance, else why not. */
const char *eph_money_credit_refusal(int64_t micros, int64_t balance);

/* The cost numerator of tokens at a price in micros per million tokens, tokens x price; add the
 * numerators of one call and divide once with eph_money_ceil_mtok(). -EOVERFLOW on overflow. */
int eph_money_mtok_numerator(uint64_t tokens, uint64_t micros_per_mtok, uint64_t *out);
/* ceil(numerator / 1 000 000). */
uint64_t eph_money_ceil_mtok(uint64_t numerator);

/* Compute cost: ceil(ns x micros_per_second / 1e9), saturating at UINT64_MAX. */
uint64_t eph_money_compute_cost(uint64_t ns, uint64_t micros_per_second);

/* 1234567 -> "1,234,567" (for token counts in messages). Returns out. */
char *eph_format_thousands(uint64_t n, char out[32]);

#endif
