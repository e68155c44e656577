/*
 * redact.c - the streaming redactor. See redact.h.
 *
 * Every value becomes a few forms, each a pattern and a way to match it: exactly, in any case,
 * percent-decoding the input as it goes, or JSON-unescaping it as it goes. A decoding matcher
 * reads one escape or one literal byte of the input per byte of the value, so a form is matched
 * in one pass, without backtracking, whatever mix of escaped and literal bytes the upstream
 * chose. An index by first input byte keeps the work at each position to the forms that could
 * start there.
 */
#include "broker/redact.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "common/text.h"

/* FORM_DECODED is FORM_PCT and FORM_JSON in one pass, for a value with neither '%' nor '\\' (the
 * characters that start an escape): it matches all that the raw, percent and JSON forms do. */
enum form_kind { FORM_EXACT, FORM_CI, FORM_PCT, FORM_JSON, FORM_DECODED };

struct eph_redact_form {
    enum form_kind kind;
    char *s; /* the pattern: the value, or its hex or base64 */
    size_t len;
};

/* The base64 characters that a value alone decides, inside a larger base64 text, are redacted
 * when there are at least this many (shorter runs would match ordinary text). */
#define B64_MIN_CORE 8

/* A matcher's answer: the input length matched (> 0), 0, or PARTIAL: the input ended while it
 * still matched as far as it went. */
#define PARTIAL ((size_t)-1)

static int lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

static int upper(int c)
{
    return c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c;
}

static int eq_ci(unsigned char a, unsigned char b)
{
    return lower(a) == lower(b);
}

/* How long an input a form can match at most: an escape per byte of its pattern. */
static size_t form_maxin(const struct eph_redact_form *f)
{
    return f->kind == FORM_PCT                               ? 3 * f->len
           : f->kind == FORM_JSON || f->kind == FORM_DECODED ? 6 * f->len
                                                             : f->len;
}

void eph_redactor_begin(struct eph_redactor *r)
{
    memset(r, 0, sizeof(*r));
}

void eph_redactor_release(struct eph_redactor *r)
{
    for (size_t i = 0; i < r->nforms; i++) {
        sodium_memzero(r->forms[i].s, r->forms[i].len);
        free(r->forms[i].s);
    }
    free(r->forms);
    free(r->index);
    if (r->hold) {
        sodium_memzero(r->hold, r->maxin - 1);
        free(r->hold);
    }
    if (r->scratch) {
        sodium_memzero(r->scratch, r->scratch_cap);
        free(r->scratch);
    }
    memset(r, 0, sizeof(*r));
}

/* Adds a form, unless forms[from..] (the current value's) has it already. */
static int add_form_from(struct eph_redactor *r, size_t from, enum form_kind kind, const char *s,
                         size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = from; i < r->nforms; i++)
        if (r->forms[i].kind == kind && r->forms[i].len == len &&
            memcmp(r->forms[i].s, s, len) == 0)
            return 0;
    if (r->nforms == r->forms_cap) {
        size_t cap = r->forms_cap ? 2 * r->forms_cap : 16;
        struct eph_redact_form *f = realloc(r->forms, cap * sizeof(*f));
        if (!f)
            return -ENOMEM;
        r->forms = f;
        r->forms_cap = cap;
    }
    struct eph_redact_form *f = &r->forms[r->nforms];
    f->s = malloc(len);
    if (!f->s)
        return -ENOMEM;
    memcpy(f->s, s, len);
    f->len = len;
    f->kind = kind;
    r->nforms++;
    size_t m = form_maxin(f);
    if (m > r->maxin)
        r->maxin = m;
    return 0;
}

static int add_form(struct eph_redactor *r, enum form_kind kind, const char *s, size_t len)
{
    return add_form_from(r, r->nforms, kind, s, len);
}

/* The base64 forms of v: the whole value, in both alphabets, padded or not; then the runs of
 * characters that v alone decides at each byte alignment within a larger text. With a (0, 1 or
 * 2) bytes of that text before v in its group of three, character j of the encoding covers bits
 * 6j..6j+5, so the characters from ceil(8a/6) to floor((8a+8L)/6) hold bits of v only, whatever
 * comes before and after. */
static int add_base64(struct eph_redactor *r, const unsigned char *v, size_t len)
{
    static const int variants[] = {
        sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
        sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING};
    size_t cap = sodium_base64_ENCODED_LEN(len + 2, sodium_base64_VARIANT_ORIGINAL);
    unsigned char *in = malloc(len + 2);
    char *enc = malloc(cap);
    int rc = in && enc ? 0 : -ENOMEM;
    size_t from = r->nforms;
    for (size_t i = 0; !rc && i < sizeof(variants) / sizeof(variants[0]); i++) {
        sodium_bin2base64(enc, cap, v, len, variants[i]);
        size_t el = strlen(enc);
        /* Without padding it is the padded form's prefix: kept for an echo that drops it. */
        rc = add_form_from(r, from, FORM_EXACT, enc, el);
    }
    for (size_t a = 0; !rc && a < 3; a++) {
        memset(in, 0, a);
        memcpy(in + a, v, len);
        size_t lo = (8 * a + 5) / 6, hi = (8 * a + 8 * len) / 6;
        if (hi < lo + B64_MIN_CORE || (a == 0 && len % 3 == 0))
            continue; /* too short to tell from text; or the whole form already */
        for (size_t i = 1; !rc && i < 4; i += 2) {
            sodium_bin2base64(enc, cap, in, len + a, variants[i]);
            rc = add_form_from(r, from, FORM_EXACT, enc + lo, hi - lo);
        }
    }
    if (in) {
        sodium_memzero(in, len + 2);
        free(in);
    }
    if (enc) {
        sodium_memzero(enc, cap);
        free(enc);
    }
    return rc;
}

int eph_redactor_add(struct eph_redactor *r, const char *value, size_t len)
{
    if (len == 0)
        return 0;
    if (len > EPH_REDACT_MAX_VALUE) {
        eph_redactor_release(r);
        return -EINVAL;
    }
    int rc;
    if (!memchr(value, '%', len) && !memchr(value, '\\', len)) {
        rc = add_form(r, FORM_DECODED, value, len);
    } else {
        rc = add_form(r, FORM_CI, value, len);
        if (!rc)
            rc = add_form(r, FORM_PCT, value, len);
        if (!rc)
            rc = add_form(r, FORM_JSON, value, len);
    }
    if (!rc) {
        char *hex = malloc(2 * len + 1);
        rc = hex ? 0 : -ENOMEM;
        if (hex) {
            sodium_bin2hex(hex, 2 * len + 1, (const unsigned char *)value, len);
            rc = add_form(r, FORM_CI, hex, 2 * len);
            sodium_memzero(hex, 2 * len + 1);
            free(hex);
        }
    }
    if (!rc)
        rc = add_base64(r, (const unsigned char *)value, len);
    if (rc)
        eph_redactor_release(r);
    return rc;
}

int eph_redactor_add_header_value(struct eph_redactor *r, const char *value)
{
    size_t len = strlen(value);
    int rc = eph_redactor_add(r, value, len);
    const char *sp = strchr(value, ' ');
    if (rc || !sp)
        return rc;
    const char *tok = sp;
    while (*tok == ' ')
        tok++;
    size_t tl = strlen(tok);
    if ((rc = eph_redactor_add(r, tok, tl)))
        return rc;
    if (sp - value != 5 || strncasecmp(value, "basic", 5) != 0 || tl == 0)
        return 0;
    /* Basic: the upstream may echo the user or the password it decoded. */
    size_t cap = tl, bl;
    unsigned char *bin = malloc(cap);
    if (!bin) {
        eph_redactor_release(r);
        return -ENOMEM;
    }
    if (sodium_base642bin(bin, cap, tok, tl, NULL, &bl, NULL, sodium_base64_VARIANT_ORIGINAL) ==
            0 ||
        sodium_base642bin(bin, cap, tok, tl, NULL, &bl, NULL,
                          sodium_base64_VARIANT_ORIGINAL_NO_PADDING) == 0) {
        const unsigned char *colon = memchr(bin, ':', bl);
        rc = eph_redactor_add(r, (const char *)bin, bl);
        if (!rc && colon)
            rc = eph_redactor_add(r, (const char *)bin, (size_t)(colon - bin));
        if (!rc && colon)
            rc = eph_redactor_add(r, (const char *)colon + 1, bl - (size_t)(colon - bin) - 1);
    }
    sodium_memzero(bin, cap);
    free(bin);
    return rc;
}

/* The bytes that may start an input a form matches (at most five). */
static size_t first_bytes(const struct eph_redact_form *f, unsigned char out[5])
{
    unsigned char c = (unsigned char)f->s[0];
    size_t n = 0;
    out[n++] = c;
    if (f->kind == FORM_EXACT)
        return n;
    if (lower(c) != c)
        out[n++] = (unsigned char)lower(c);
    else if (upper(c) != c)
        out[n++] = (unsigned char)upper(c);
    bool pct = f->kind == FORM_PCT || f->kind == FORM_DECODED;
    bool json = f->kind == FORM_JSON || f->kind == FORM_DECODED;
    if (pct && c != '%')
        out[n++] = '%';
    if (pct && c == ' ')
        out[n++] = '+';
    if (json && c != '\\')
        out[n++] = '\\';
    return n;
}

int eph_redactor_seal(struct eph_redactor *r)
{
    unsigned char fb[5];
    memset(r->start, 0, sizeof(r->start));
    for (size_t i = 0; i < r->nforms; i++)
        for (size_t k = 0, n = first_bytes(&r->forms[i], fb); k < n; k++)
            r->start[fb[k] + 1]++;
    for (size_t c = 0; c < 256; c++)
        r->start[c + 1] += r->start[c];
    size_t fill[256];
    memcpy(fill, r->start, sizeof(fill));
    if (r->start[256]) {
        r->index = malloc(r->start[256] * sizeof(*r->index));
        if (!r->index) {
            eph_redactor_release(r);
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < r->nforms; i++)
        for (size_t k = 0, n = first_bytes(&r->forms[i], fb); k < n; k++)
            r->index[fill[fb[k]]++] = i;
    if (r->maxin > 1) {
        r->hold = malloc(r->maxin - 1);
        if (!r->hold) {
            eph_redactor_release(r);
            return -ENOMEM;
        }
    }
    return 0;
}

int eph_redactor_init(struct eph_redactor *r, const char *const *values, size_t n)
{
    eph_redactor_begin(r);
    for (size_t i = 0; i < n; i++) {
        int rc = eph_redactor_add(r, values[i], strlen(values[i]));
        if (rc)
            return rc;
    }
    return eph_redactor_seal(r);
}

/* ---- matchers: the input length matched, 0, or PARTIAL ---- */

static size_t match_plain(const struct eph_redact_form *f, const unsigned char *p, size_t n)
{
    size_t k = n < f->len ? n : f->len;
    const unsigned char *s = (const unsigned char *)f->s;
    if (f->kind == FORM_EXACT) {
        if (memcmp(p, s, k) != 0)
            return 0;
    } else {
        for (size_t i = 0; i < k; i++)
            if (!eq_ci(p[i], s[i]))
                return 0;
    }
    return k < f->len ? PARTIAL : f->len;
}

/* Four hex digits at p (n available): their value, -1 when one is not hex, -2 when the input
 * ends first. */
static long hex4(const unsigned char *p, size_t n)
{
    long v = 0;
    for (size_t i = 0; i < 4; i++) {
        if (i >= n)
            return -2;
        int h = eph_text_hex_value((unsigned char)p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t utf8_encode(uint32_t cp, unsigned char out[4])
{
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

static int json_short_escape(unsigned char e)
{
    switch (e) {
    case '/':
    case '"':
    case '\\':
        return e;
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    }
    return -1;
}

/* One JSON escape at p[k] (a backslash) for the value's bytes from s[j]: a short one, \uXXXX of an
 * ASCII byte, of the UTF-8 character that starts at s[j] (a surrogate pair above the BMP), or of
 * the byte read as Latin-1. 1 with *dj value bytes and *dk input bytes matched, 0, or PARTIAL. */
static size_t json_escape(const unsigned char *s, size_t len, size_t j, const unsigned char *p,
                          size_t n, size_t k, size_t *dj, size_t *dk)
{
    unsigned char want = s[j];
    if (k + 1 >= n)
        return PARTIAL;
    int se = json_short_escape(p[k + 1]);
    if (se >= 0) {
        *dj = 1;
        *dk = 2;
        return (unsigned char)se == want;
    }
    if (p[k + 1] != 'u')
        return 0;
    long cu = hex4(p + k + 2, n - (k + 2));
    if (cu == -2)
        return PARTIAL;
    if (cu < 0 || (cu >= 0xdc00 && cu <= 0xdfff))
        return 0;
    uint32_t cp = (uint32_t)cu;
    *dk = 6;
    if (cu >= 0xd800 && cu <= 0xdbff) {
        if (j + 4 > len) /* a pair stands for four bytes of UTF-8 */
            return 0;
        if (k + 6 >= n)
            return PARTIAL;
        if (p[k + 6] != '\\')
            return 0;
        if (k + 7 >= n)
            return PARTIAL;
        if (p[k + 7] != 'u')
            return 0;
        long lo = hex4(p + k + 8, n - (k + 8));
        if (lo == -2)
            return PARTIAL;
        if (lo < 0xdc00 || lo > 0xdfff)
            return 0;
        cp = 0x10000 + (((uint32_t)cu - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
        *dk = 12;
    }
    *dj = 1;
    if (cp < 0x80)
        return eq_ci((unsigned char)cp, want);
    unsigned char u8[4];
    size_t ul = utf8_encode(cp, u8);
    if (j + ul <= len && memcmp(s + j, u8, ul) == 0) {
        *dj = ul;
        return 1;
    }
    return cp < 0x100 && want == cp;
}

/* Each byte of the value as itself (any case) or, as the form's kind says, as %XX (either case of
 * hex) or '+' for a space, and as a JSON escape. A '%' followed by two hex digits and a backslash
 * always start an escape; one pass, no backtracking. */
static size_t match_decoded(const struct eph_redact_form *f, const unsigned char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)f->s;
    bool pct = f->kind != FORM_JSON, json = f->kind != FORM_PCT;
    size_t j = 0, k = 0;
    while (j < f->len) {
        if (k >= n)
            return PARTIAL;
        unsigned char c = p[k], want = s[j];
        if (pct && c == '%') {
            if (k + 1 >= n)
                return PARTIAL;
            int h = eph_text_hex_value((unsigned char)p[k + 1]);
            if (h >= 0 && k + 2 >= n)
                return PARTIAL;
            int l = h >= 0 ? eph_text_hex_value((unsigned char)p[k + 2]) : -1;
            if (l >= 0) {
                if (!eq_ci((unsigned char)(h * 16 + l), want))
                    return 0;
                k += 3;
                j++;
                continue;
            }
        } else if (pct && c == '+' && want == ' ') {
            k++;
            j++;
            continue;
        } else if (json && c == '\\') {
            size_t dj = 0, dk = 0, m = json_escape(s, f->len, j, p, n, k, &dj, &dk);
            if (m != 1)
                return m;
            j += dj;
            k += dk;
            continue;
        }
        if (!eq_ci(c, want))
            return 0;
        k++;
        j++;
    }
    return k;
}

static size_t match(const struct eph_redact_form *f, const unsigned char *p, size_t n)
{
    return f->kind == FORM_EXACT || f->kind == FORM_CI ? match_plain(f, p, n)
                                                       : match_decoded(f, p, n);
}

/* Redacts p[0..n); with at_end false, a tail that may start a form is kept in hold. */
static int redact(struct eph_redactor *r, const char *p, size_t n, int at_end, struct eph_buf *out)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0, plain = 0; /* p[plain..i) is ready to go out as it is */
    while (i < n) {
        size_t best = 0;
        int partial = 0;
        for (size_t x = r->start[u[i]]; x < r->start[u[i] + 1]; x++) {
            size_t m = match(&r->forms[r->index[x]], u + i, n - i);
            if (m == PARTIAL)
                partial = 1;
            else if (m > best)
                best = m;
        }
        /* A longer form may still complete past the end of the input: wait for it. (A partial
         * match is shorter than the longest input a form can match, so the hold fits.) */
        if (partial && !at_end && n - i < r->maxin)
            break;
        if (best) {
            int rc = eph_buf_append(out, p + plain, i - plain);
            if (!rc)
                rc = eph_buf_append(out, EPH_REDACTED, sizeof(EPH_REDACTED) - 1);
            if (rc)
                return rc;
            i += best;
            plain = i;
        } else {
            i++;
        }
    }
    int rc = eph_buf_append(out, p + plain, i - plain);
    if (rc)
        return rc;
    r->hold_len = n - i;
    if (r->hold_len)
        memmove(r->hold, p + i, r->hold_len);
    return 0;
}

static int scratch_fit(struct eph_redactor *r, size_t need)
{
    if (need <= r->scratch_cap)
        return 0;
    char *s = malloc(need);
    if (!s)
        return -ENOMEM;
    if (r->scratch) {
        sodium_memzero(r->scratch, r->scratch_cap);
        free(r->scratch);
    }
    r->scratch = s;
    r->scratch_cap = need;
    return 0;
}

int eph_redactor_feed(struct eph_redactor *r, const void *data, size_t n, struct eph_buf *out)
{
    if (r->nforms == 0)
        return eph_buf_append(out, data, n);
    if (n == 0)
        return 0;
    size_t need = r->hold_len + n;
    int rc = scratch_fit(r, need);
    if (rc)
        return rc;
    if (r->hold_len) /* hold is NULL when the longest form is one byte */
        memcpy(r->scratch, r->hold, r->hold_len);
    memcpy(r->scratch + r->hold_len, data, n);
    return redact(r, r->scratch, need, 0, out);
}

int eph_redactor_finish(struct eph_redactor *r, struct eph_buf *out)
{
    if (r->hold_len == 0)
        return 0;
    size_t n = r->hold_len;
    int rc = scratch_fit(r, n);
    if (rc)
        return rc;
    memcpy(r->scratch, r->hold, n);
    r->hold_len = 0;
    return redact(r, r->scratch, n, 1, out);
}
