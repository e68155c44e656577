/* libFuzzer driver: the client's Server-Sent Events parser on hostile streams, fed in chunks whose
 * sizes come from the input itself, with small caps so the "too large" paths are exercised. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cli/sse.h"

static int on_event(void *arg, const struct eph_cli_sse_event *ev)
{
    size_t *seen = arg;
    /* Touch every byte the parser hands out: ASan catches a read past the end. */
    for (size_t i = 0; i < ev->data_len; i++)
        *seen += (unsigned char)ev->data[i];
    *seen += strlen(ev->type) + strlen(ev->id);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t seen = 0;
    struct eph_cli_sse p;
    eph_cli_sse_init(&p, 64, 256, on_event, &seen);
    /* The first byte picks the chunk size: 1 to 16 bytes. */
    size_t chunk = (data[0] & 15) + 1;
    for (size_t off = 1; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        int rc = eph_cli_sse_feed(&p, (const char *)data + off, n);
        if (rc) {
            eph_cli_sse_reset(&p);
        }
    }
    eph_cli_sse_release(&p);
    return 0;
}
