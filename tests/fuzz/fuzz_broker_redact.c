/* libFuzzer driver: the streaming redactor. The input is split into two values and a stream
 * (values from a small alphabet that "[REDACTED]" does not use, so the marker cannot form one),
 * and the stream is fed in pieces whose sizes the input chooses. The promise: no value survives
 * in the output, and the output is the same whatever the split. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *run(const char *const *v, const char *s, size_t n, const uint8_t *sizes, size_t ns)
{
    struct eph_redactor r;
    struct eph_buf out;
    eph_buf_init(&out, 1 << 20);
    if (eph_redactor_init(&r, v, 2))
        abort();
    size_t off = 0, k = 0;
    while (off < n) {
        size_t piece = ns ? 1 + sizes[k++ % ns] % 16 : n;
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
    size_t l1 = 1 + data[0] % 8, l2 = 1 + data[1] % 8;
    if (size < 2 + l1 + l2)
        return 0;
    char v1[9], v2[9];
    for (size_t i = 0; i < l1; i++)
        v1[i] = (char)('a' + data[2 + i] % 3);
    for (size_t i = 0; i < l2; i++)
        v2[i] = (char)('a' + data[2 + l1 + i] % 3);
    v1[l1] = v2[l2] = '\0';
    const char *v[] = {v1, v2};
    size_t n = size - 2 - l1 - l2;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)('a' + data[2 + l1 + l2 + i] % 4); /* 'd' never in a value */
    s[n] = '\0';
    char *whole = run(v, s, n, NULL, 0);
    char *split = run(v, s, n, data, size);
    if (strcmp(whole, split) != 0 || strstr(whole, v1) || strstr(whole, v2))
        abort();
    free(whole);
    free(split);
    free(s);
    return 0;
}
