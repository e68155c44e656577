/* libFuzzer driver: the Server-Sent Events parser the model providers stream through
 * (src/agent/http_client.c). Differential: the same bytes fed whole and fed in pieces cut where
 * the input says (as the network cuts them) must give the same events and the same result, and
 * no event's data may exceed the line cap. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/http_client.h"
#include "common/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE_MAX_TEST 300

struct log {
    struct eph_buf b;
    unsigned n;
    int stop_at; /* the n-th event returns an error (tests that the error is passed through) */
};

static int on_event(void *ctx, const char *event, const char *d, size_t len)
{
    struct log *l = ctx;
    if (len > LINE_MAX_TEST)
        abort();
    l->n++;
    if (l->stop_at && (int)l->n == l->stop_at)
        return -1234;
    /* name, NUL, length, data: unambiguous */
    if (eph_buf_append(&l->b, event, strlen(event) + 1) ||
        eph_buf_append(&l->b, &len, sizeof(len)) || eph_buf_append(&l->b, d, len))
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int stop_at = data[0] % 8; /* 0: never */
    unsigned step = data[1];
    const char *p = (const char *)data + 2;
    size_t n = size - 2;

    struct log whole = {.stop_at = stop_at}, pieces = {.stop_at = stop_at};
    eph_buf_init(&whole.b, 1u << 24);
    eph_buf_init(&pieces.b, 1u << 24);
    int rc1 = eph_sse_parse(p, n, LINE_MAX_TEST, on_event, &whole);

    struct eph_sse s;
    eph_sse_init(&s, LINE_MAX_TEST, on_event, &pieces);
    int rc2 = 0;
    size_t off = 0, k = 0;
    while (off < n && !rc2) {
        /* piece sizes from 0 to 16, varying with the position */
        size_t len = (size_t)((step + k * 7) % 17);
        k++;
        if (len > n - off)
            len = n - off;
        rc2 = eph_sse_feed(&s, p + off, len);
        off += len;
    }
    if (!rc2)
        rc2 = eph_sse_finish(&s);
    eph_sse_release(&s);

    if (rc1 != rc2 || whole.n != pieces.n || whole.b.len != pieces.b.len ||
        (whole.b.len && memcmp(whole.b.data, pieces.b.data, whole.b.len) != 0))
        abort();
    eph_buf_release(&whole.b);
    eph_buf_release(&pieces.b);
    return 0;
}
