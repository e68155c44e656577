#include "common/money.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

char *eph_money_format(int64_t micros, char out[EPH_MONEY_FMT_MAX])
{
    const char *sign = "";
    uint64_t m;
    if (micros < 0) {
        sign = "-";
        m = (uint64_t)(-(micros + 1)) + 1;
    } else {
        m = (uint64_t)micros;
    }
    /* Round half up to 10 micros (the fifth decimal). */
    uint64_t tens = m / 10 + (m % 10 >= 5 ? 1 : 0);
    uint64_t dollars = tens / 100000;
    uint64_t frac = tens % 100000; /* five decimals */
    char digits[6];
    snprintf(digits, sizeof(digits), "%05llu", (unsigned long long)frac);
    int keep = 5;
    while (keep > 2 && digits[keep - 1] == '0')
        keep--;
    digits[keep] = '\0';
    snprintf(out, EPH_MONEY_FMT_MAX, "%s$%llu.%s", sign, (unsigned long long)dollars, digits);
    return out;
}

/* micros (>= 0) rounded half up to the fifth decimal, as eph_money_format shows it. */
static int64_t shown_micros(int64_t micros)
{
    if (micros > INT64_MAX - 10)
        return micros;
    return (micros / 10 + (micros % 10 >= 5 ? 1 : 0)) * 10;
}

char *eph_money_format_rest(int64_t total, int64_t part, char out[EPH_MONEY_FMT_MAX])
{
    if (part < 0 || part > total)
        return eph_money_format(total - part, out);
    return eph_money_format(shown_micros(total) - shown_micros(part), out);
}

void eph_money_split(const int64_t *parts, size_t n, int64_t *shown)
{
    int64_t p[8], total = 0, floor_sum = 0;
    if (n > 8)
        n = 8;
    for (size_t i = 0; i < n; i++) {
        p[i] = parts[i] < 0 ? 0 : parts[i];
        total = p[i] > INT64_MAX - total ? INT64_MAX : total + p[i];
        shown[i] = p[i] - p[i] % 10;
        floor_sum += shown[i];
    }
    /* What the total shows, less what the floors show: a whole number of 10s, fewer than n. */
    int64_t missing = (shown_micros(total) - floor_sum) / 10;
    bool given[8] = {false};
    for (; missing > 0; missing--) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (!given[i] && p[i] % 10 > 0 && (best == n || p[i] % 10 > p[best] % 10))
                best = i;
        if (best == n)
            break;
        given[best] = true;
        shown[best] += 10;
    }
}

int eph_money_parse_dollars_why(const char *s, int64_t *out, const char **why)
{
    *why = "not an amount in dollars";
    if (*s == '$')
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (whole > (uint64_t)INT64_MAX / 10000000) {
            *why = "too large";
            return -EOVERFLOW;
        }
        whole = whole * 10 + (uint64_t)(*s - '0');
    }
    uint64_t frac = 0;
    int places = 0;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            return -EINVAL;
        for (; isdigit((unsigned char)*s); s++) {
            if (++places > 6) {
                *why = "more than 6 decimals (a micro-dollar is the smallest amount)";
                return -EINVAL;
            }
            frac = frac * 10 + (uint64_t)(*s - '0');
        }
    }
    if (*s)
        return -EINVAL;
    for (; places < 6; places++)
        frac *= 10;
    uint64_t total = whole * 1000000u + frac;
    if (total > (uint64_t)INT64_MAX) {
        *why = "too large";
        return -EOVERFLOW;
    }
    *why = NULL;
    *out = (int64_t)total;
    return 0;
}

int eph_money_parse_dollars(const char *s, int64_t *out)
{
    const char *why;
    return eph_money_parse_dollars_why(s, out, &why);
}

const char *eph_money_credit_refusal(int64_t micros, int64_t balance)
{
    if (micros <= 0)
        return "a credit must be a positive number of micros";
    if (micros > EPH_MONEY_CREDIT_MAX)
        return "a credit is at most 1000000000000000 micros ($1,000,000,000)";
    if (balance > EPH_MONEY_BALANCE_MAX - micros)
        return "the balance would pass 100000000000000000 micros ($100,000,000,000)";
    return NULL;
}

int eph_money_mtok_numerator(uint64_t tokens, uint64_t micros_per_mtok, uint64_t *out)
{
    if (micros_per_mtok && tokens > UINT64_MAX / micros_per_mtok)
        return -EOVERFLOW;
    *out = tokens * micros_per_mtok;
    return 0;
}

uint64_t eph_money_ceil_mtok(uint64_t numerator)
{
    return numerator / 1000000u + (numerator % 1000000u ? 1 : 0);
}

uint64_t eph_money_compute_cost(uint64_t ns, uint64_t micros_per_second)
{
    /* Split to avoid overflow: whole seconds and the remainder. */
    uint64_t secs = ns / 1000000000u, rem = ns % 1000000000u;
    if (micros_per_second && secs > UINT64_MAX / micros_per_second)
        return UINT64_MAX;
    uint64_t whole = secs * micros_per_second;
    /* rem < 1e9; rem * price fits while price < 1.8e10 micros per second. */
    if (micros_per_second > UINT64_MAX / 1000000000u)
        return UINT64_MAX;
    uint64_t part = rem * micros_per_second;
    uint64_t add = part / 1000000000u + (part % 1000000000u ? 1 : 0);
    if (whole > UINT64_MAX - add)
        return UINT64_MAX;
    return whole + add;
}

char *eph_format_thousands(uint64_t n, char out[32])
{
    char tmp[32];
    int len = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)n);
    int o = 0;
    for (int i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = tmp[i];
    }
    out[o] = '\0';
    return out;
}
