/* libFuzzer driver: the streaming redactor and every form of a value (redact.h). The input picks
 * one or two values (from an alphabet with the characters encoders touch, and no letter of
 * "[REDACTED]"), then a stream of filler bytes and forms of the values, each form made here the
 * way an upstream would make it: raw, upper case, percent-encoded (upper or lower hex, every byte
 * or only the reserved ones, '+' for space), JSON-escaped (\u00XX or \/), hex, base64 and
 * base64url, and the value inside a larger base64 text at each of the three alignments. The
 * stream is fed in pieces whose sizes the input chooses, and (when short) split in two at every
 * offset. The promise: the output is the same whatever the split, and no form of a value is left
 * in it (inside a larger base64 text: none of the characters that the value alone decides, for
 * values of 7 bytes or more). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "broker/redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_STREAM 4096
#define NFORMS 16
#define FORM_MAX 256

static const char value_alpha[] = "xyz/+ =%\\~";
static const char filler_alpha[] = "xyz%\\u0025fF2bB+ =/\"qQ";

struct form {
    char s[FORM_MAX];    /* what goes into the stream */
    char must[FORM_MAX]; /* what must not be in the output ("" for nothing) */
    int ci;              /* must is checked in any case */
};

static void pct(const char *v, char *out, const char *hexd, int all, int plus)
{
    for (; *v; v++) {
        unsigned char c = (unsigned char)*v;
        if (plus && c == ' ')
            *out++ = '+';
        else if (!all && ((c >= 'a' && c <= 'z') || c == '~'))
            *out++ = (char)c;
        else
            out += sprintf(out, "%%%c%c", hexd[c >> 4], hexd[c & 15]);
    }
    *out = '\0';
}

/* The forms of v (at most 12 bytes: every form fits FORM_MAX). */
static size_t make_forms(const char *v, struct form *f)
{
    size_t n = 0, len = strlen(v);
    char tmp[FORM_MAX];
    memset(f, 0, NFORMS * sizeof(*f));
    snprintf(f[n].s, FORM_MAX, "%s", v);
    f[n++].ci = 1;
    for (size_t i = 0; i <= len; i++)
        f[n].s[i] = (char)(v[i] >= 'a' && v[i] <= 'z' ? v[i] - 32 : v[i]);
    f[n++].ci = 1;
    pct(v, f[n].s, "0123456789ABCDEF", 0, 0);
    f[n++].ci = 1;
    pct(v, f[n].s, "0123456789abcdef", 1, 0);
    f[n++].ci = 1;
    pct(v, f[n].s, "0123456789ABCDEF", 0, 1);
    f[n++].ci = 1;
    char *o = f[n].s;
    for (size_t i = 0; i < len; i++)
        o += sprintf(o, "\\u00%02x", (unsigned char)v[i]);
    f[n++].ci = 1;
    o = f[n].s;
    for (size_t i = 0; i < len; i++)
        o += v[i] == '/' || v[i] == '\\' ? sprintf(o, "\\%c", v[i]) : sprintf(o, "%c", v[i]);
    f[n++].ci = 1;
    sodium_bin2hex(f[n].s, FORM_MAX, (const unsigned char *)v, len);
    f[n++].ci = 1;
    sodium_bin2hex(tmp, FORM_MAX, (const unsigned char *)v, len);
    for (size_t i = 0; tmp[i]; i++)
        f[n].s[i] = (char)(tmp[i] >= 'a' ? tmp[i] - 32 : tmp[i]);
    f[n++].ci = 1;
    static const int variants[] = {
        sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
        sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING};
    for (size_t i = 0; i < 4; i++)
        sodium_bin2base64(f[n++].s, FORM_MAX, (const unsigned char *)v, len, variants[i]);
    for (size_t i = 0; i < n; i++)
        memcpy(f[i].must, f[i].s, FORM_MAX);
    /* Inside a larger base64 text: what must go is the run of characters v alone decides. */
    for (size_t a = 0; a < 3; a++, n++) {
        unsigned char bin[32];
        memset(bin, 0xa5, a);
        memcpy(bin + a, v, len);
        memcpy(bin + a + len, "tail", 4);
        sodium_bin2base64(f[n].s, FORM_MAX, bin, a + len + 4, sodium_base64_VARIANT_ORIGINAL);
        size_t lo = (8 * a + 5) / 6, hi = (8 * a + 8 * len) / 6;
        if (hi >= lo + 8)
            memcpy(f[n].must, f[n].s + lo, hi - lo);
    }
    return n;
}

static char *run(const char *const *v, size_t nv, const char *s, size_t n, const uint8_t *sizes,
                 size_t ns, size_t cut)
{
    struct eph_redactor r;
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    if (eph_redactor_init(&r, v, nv))
        abort();
    size_t off = 0, k = 0;
    while (off < n) {
        size_t piece = ns ? 1 + sizes[k++ % ns] % 16 : cut && off < cut ? cut : n;
        if (piece > n - off)
            piece = n - off;
        if (eph_redactor_feed(&r, s + off, piece, &out))
            abort();
        off += piece;
    }
    if (eph_redactor_finish(&r, &out))
        abort();
    eph_redactor_release(&r);
    char *res = out.data ? eph_buf_steal(&out) : strdup("");
    eph_buf_release(&out);
    return res;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4 || size > 4096)
        return 0;
    size_t nv = 1 + data[0] % 2, at = 1;
    char vals[2][13];
    for (size_t i = 0; i < nv; i++) {
        size_t l = 1 + data[at++ % size] % 12;
        for (size_t j = 0; j < l; j++)
            vals[i][j] = value_alpha[data[at++ % size] % (sizeof(value_alpha) - 1)];
        vals[i][l] = '\0';
    }
    if (at >= size)
        return 0;
    const char *v[] = {vals[0], vals[1]};
    static struct form forms[2][NFORMS];
    size_t nf = 0;
    for (size_t i = 0; i < nv; i++)
        nf = make_forms(vals[i], forms[i]);
    char *s = malloc(MAX_STREAM + FORM_MAX);
    size_t n = 0;
    for (size_t i = at; i + 1 < size && n < MAX_STREAM; i += 2) {
        if (data[i] < 160) {
            s[n++] = filler_alpha[data[i + 1] % (sizeof(filler_alpha) - 1)];
        } else {
            const struct form *f = &forms[data[i] % nv][data[i + 1] % nf];
            memcpy(s + n, f->s, strlen(f->s));
            n += strlen(f->s);
        }
    }
    s[n] = '\0';
    char *whole = run(v, nv, s, n, NULL, 0, 0);
    char *split = run(v, nv, s, n, data, size, 0);
    if (strcmp(whole, split) != 0)
        abort();
    for (size_t cut = 1; n <= 200 && cut < n; cut++) {
        char *two = run(v, nv, s, n, NULL, 0, cut);
        if (strcmp(whole, two) != 0)
            abort();
        free(two);
    }
    for (size_t i = 0; i < nv; i++) {
        for (size_t k = 0; k < nf; k++) {
            const char *m = forms[i][k].must;
            /* A form that "[REDACTED]" itself spells is no leak. */
            if (!*m || strcasestr(EPH_REDACTED, m))
                continue;
            if (forms[i][k].ci ? strcasestr(whole, m) != NULL : strstr(whole, m) != NULL) {
                fprintf(stderr, "value '%s': form '%s' left in '%s'\n", vals[i], m, whole);
                abort();
            }
        }
    }
    free(whole);
    free(split);
    free(s);
    return 0;
}
