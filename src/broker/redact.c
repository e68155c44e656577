/*
 * redact.c - the streaming redactor. See redact.h.
 */
#include "broker/redact.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

int eph_redactor_init(struct eph_redactor *r, const char *const *values, size_t n)
{
    memset(r, 0, sizeof(*r));
    if (n > EPH_REDACT_MAX_VALUES)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(values[i]);
        if (len == 0)
            continue;
        if (len > EPH_REDACT_MAX_VALUE) {
            eph_redactor_release(r);
            return -EINVAL;
        }
        r->values[r->n] = malloc(len);
        if (!r->values[r->n]) {
            eph_redactor_release(r);
            return -ENOMEM;
        }
        memcpy(r->values[r->n], values[i], len);
        r->lens[r->n] = len;
        if (len > r->maxlen)
            r->maxlen = len;
        r->n++;
    }
    if (r->maxlen > 1) {
        r->hold = malloc(r->maxlen - 1);
        if (!r->hold) {
            eph_redactor_release(r);
            return -ENOMEM;
        }
    }
    return 0;
}

void eph_redactor_release(struct eph_redactor *r)
{
    for (size_t i = 0; i < r->n; i++) {
        sodium_memzero(r->values[i], r->lens[i]);
        free(r->values[i]);
    }
    if (r->hold) {
        sodium_memzero(r->hold, r->maxlen - 1);
        free(r->hold);
    }
    if (r->scratch) {
        sodium_memzero(r->scratch, r->scratch_cap);
        free(r->scratch);
    }
    memset(r, 0, sizeof(*r));
}

/* At position i of p[0..n): the length of the longest value that matches whole (> 0), or 0 when
 * none does and none could once more bytes come (*partial false), or 0 with *partial set when a
 * value matches the rest of the input as far as it goes. */
static size_t match_at(const struct eph_redactor *r, const char *p, size_t n, size_t i,
                       int *partial)
{
    size_t best = 0;
    *partial = 0;
    for (size_t k = 0; k < r->n; k++) {
        size_t vl = r->lens[k];
        if (r->values[k][0] != p[i])
            continue;
        if (i + vl <= n) {
            if (vl > best && memcmp(p + i, r->values[k], vl) == 0)
                best = vl;
        } else if (memcmp(p + i, r->values[k], n - i) == 0) {
            *partial = 1;
        }
    }
    return best;
}

/* Redacts p[0..n); with at_end false, a tail that may start a value is kept in hold. */
static int redact(struct eph_redactor *r, const char *p, size_t n, int at_end, struct eph_buf *out)
{
    size_t i = 0, plain = 0; /* p[plain..i) is ready to go out as it is */
    while (i < n) {
        int partial;
        size_t m = match_at(r, p, n, i, &partial);
        /* A longer value may still complete past the end of the input: wait for it. */
        if (partial && !at_end)
            break;
        if (m) {
            int rc = eph_buf_append(out, p + plain, i - plain);
            if (!rc)
                rc = eph_buf_append(out, EPH_REDACTED, sizeof(EPH_REDACTED) - 1);
            if (rc)
                return rc;
            i += m;
            plain = i;
        } else {
            i++;
        }
    }
    int rc = eph_buf_append(out, p + plain, i - plain);
    if (rc)
        return rc;
    r->hold_len = n - i; /* < maxlen: a partial match is shorter than its value */
    if (r->hold_len)
        memmove(r->hold, p + i, r->hold_len);
    return 0;
}

int eph_redactor_feed(struct eph_redactor *r, const void *data, size_t n, struct eph_buf *out)
{
    if (r->n == 0)
        return eph_buf_append(out, data, n);
    if (n == 0)
        return 0;
    size_t need = r->hold_len + n;
    if (need > r->scratch_cap) {
        char *s = malloc(need);
        if (!s)
            return -ENOMEM;
        if (r->scratch) {
            sodium_memzero(r->scratch, r->scratch_cap);
            free(r->scratch);
        }
        r->scratch = s;
        r->scratch_cap = need;
    }
    if (r->hold_len) /* hold is NULL when the longest value is one byte */
        memcpy(r->scratch, r->hold, r->hold_len);
    memcpy(r->scratch + r->hold_len, data, n);
    return redact(r, r->scratch, need, 0, out);
}

int eph_redactor_finish(struct eph_redactor *r, struct eph_buf *out)
{
    if (r->hold_len == 0)
        return 0;
    size_t n = r->hold_len;
    if (n > r->scratch_cap) {
        char *s = malloc(n);
        if (!s)
            return -ENOMEM;
        free(r->scratch);
        r->scratch = s;
        r->scratch_cap = n;
    }
    memcpy(r->scratch, r->hold, n);
    r->hold_len = 0;
    return redact(r, r->scratch, n, 1, out);
}
