/*
 * decode.c - Content-Encoding undone under a cap. See decode.h.
 */
#include "broker/decode.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <brotli/decode.h>
#include <zlib.h>

#define OUT_CHUNK 16384
/* What a brotli decoder may allocate: its window (at most 16 MiB) and its tables. A stream that
 * asks for more fails as corrupt. */
#define BROTLI_MEMORY_MAX (20u << 20)

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool token_is(const char *t, size_t n, const char *name)
{
    return n == strlen(name) && strncasecmp(t, name, n) == 0;
}

void eph_decode_add_header(enum eph_decode_kind *kind, const char *value, size_t n)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_space(value[i]) || value[i] == ','))
            i++;
        const char *t = value + i;
        while (i < n && value[i] != ',' && !is_space(value[i]))
            i++;
        size_t tl = (size_t)(value + i - t);
        bool junk = false; /* parameters, or a second word, before the next comma */
        for (; i < n && value[i] != ','; i++)
            junk |= !is_space(value[i]);
        if (tl == 0 || (!junk && token_is(t, tl, "identity")))
            continue;
        enum eph_decode_kind k = EPH_DECODE_UNSUPPORTED;
        if (!junk && (token_is(t, tl, "gzip") || token_is(t, tl, "x-gzip")))
            k = EPH_DECODE_GZIP;
        else if (!junk && token_is(t, tl, "deflate"))
            k = EPH_DECODE_DEFLATE;
        else if (!junk && token_is(t, tl, "br"))
            k = EPH_DECODE_BR;
        /* One coding is undone; two in a row (or one unknown) are not. */
        *kind = *kind == EPH_DECODE_IDENTITY ? k : EPH_DECODE_UNSUPPORTED;
    }
}

/* ---- brotli's memory, capped ---- */

struct br_state {
    BrotliDecoderState *dec;
    size_t used;
};

static void *br_alloc(void *opaque, size_t size)
{
    struct br_state *b = opaque;
    if (size > BROTLI_MEMORY_MAX - b->used)
        return NULL;
    size_t *p = malloc(sizeof(size_t) + size);
    if (!p)
        return NULL;
    *p = size;
    b->used += size;
    return p + 1;
}

static void br_free(void *opaque, void *address)
{
    struct br_state *b = opaque;
    if (!address)
        return;
    size_t *p = (size_t *)address - 1;
    b->used -= *p;
    free(p);
}

int eph_decoder_init(struct eph_decoder *d, enum eph_decode_kind kind)
{
    memset(d, 0, sizeof(*d));
    d->kind = kind;
    if (kind == EPH_DECODE_GZIP || kind == EPH_DECODE_DEFLATE) {
        d->state = calloc(1, sizeof(z_stream));
        return d->state ? 0 : -ENOMEM;
    }
    if (kind == EPH_DECODE_BR) {
        struct br_state *b = calloc(1, sizeof(*b));
        if (!b)
            return -ENOMEM;
        b->dec = BrotliDecoderCreateInstance(br_alloc, br_free, b);
        if (!b->dec) {
            free(b);
            return -ENOMEM;
        }
        d->state = b;
        return 0;
    }
    return -ENOTSUP;
}

void eph_decoder_release(struct eph_decoder *d)
{
    if (d->kind == EPH_DECODE_BR && d->state) {
        struct br_state *b = d->state;
        BrotliDecoderDestroyInstance(b->dec);
        free(b);
    } else if (d->state) {
        if (d->started)
            inflateEnd(d->state);
        free(d->state);
    }
    memset(d, 0, sizeof(*d));
}

/* zlib's wrapper: CM 8, a window of at most 32 KiB, and a header check that divides by 31. */
static bool zlib_header(const unsigned char h[2])
{
    return (h[0] & 0x0f) == 8 && (h[0] >> 4) <= 7 && ((h[0] << 8) | h[1]) % 31 == 0;
}

static int z_run(struct eph_decoder *d, const unsigned char *in, size_t n, struct eph_buf *out)
{
    z_stream *z = d->state;
    unsigned char tmp[OUT_CHUNK];
    z->next_in = (unsigned char *)in;
    z->avail_in = (uInt)n;
    for (;;) {
        if (d->done) {
            if (z->avail_in == 0)
                return 0;
            /* Bytes after the end: another gzip member, or junk. */
            if (d->kind != EPH_DECODE_GZIP || inflateReset(z) != Z_OK)
                return -EBADMSG;
            d->done = false;
        }
        z->next_out = tmp;
        z->avail_out = sizeof(tmp);
        int zr = inflate(z, Z_NO_FLUSH);
        size_t got = sizeof(tmp) - z->avail_out;
        if (got) {
            int rc = eph_buf_append(out, tmp, got);
            if (rc)
                return rc;
        }
        if (zr == Z_STREAM_END) {
            d->done = true;
            continue;
        }
        if (zr == Z_MEM_ERROR)
            return -ENOMEM;
        if (zr == Z_BUF_ERROR && z->avail_in == 0)
            return 0;
        if (zr != Z_OK)
            return -EBADMSG;
        if (z->avail_in == 0 && z->avail_out != 0)
            return 0;
    }
}

static int z_feed(struct eph_decoder *d, const unsigned char *in, size_t n, struct eph_buf *out)
{
    if (!d->started) {
        if (d->kind == EPH_DECODE_DEFLATE && d->head_len < 2) {
            while (n && d->head_len < 2) {
                d->head[d->head_len++] = *in++;
                n--;
            }
            if (d->head_len < 2)
                return 0;
        }
        int bits = d->kind == EPH_DECODE_GZIP ? 15 + 16 : zlib_header(d->head) ? 15 : -15;
        int zr = inflateInit2((z_stream *)d->state, bits);
        if (zr != Z_OK)
            return zr == Z_MEM_ERROR ? -ENOMEM : -EBADMSG;
        d->started = true;
        if (d->kind == EPH_DECODE_DEFLATE) {
            int rc = z_run(d, d->head, 2, out);
            if (rc)
                return rc;
        }
    }
    return n ? z_run(d, in, n, out) : 0;
}

static int br_feed(struct eph_decoder *d, const unsigned char *in, size_t n, struct eph_buf *out)
{
    struct br_state *b = d->state;
    unsigned char tmp[OUT_CHUNK];
    if (d->done)
        return -EBADMSG; /* bytes after the end */
    d->started = true;
    for (;;) {
        unsigned char *next_out = tmp;
        size_t avail_out = sizeof(tmp);
        BrotliDecoderResult r =
            BrotliDecoderDecompressStream(b->dec, &n, &in, &avail_out, &next_out, NULL);
        size_t got = sizeof(tmp) - avail_out;
        if (got) {
            int rc = eph_buf_append(out, tmp, got);
            if (rc)
                return rc;
        }
        if (r == BROTLI_DECODER_RESULT_ERROR)
            return -EBADMSG;
        if (r == BROTLI_DECODER_RESULT_SUCCESS) {
            d->done = true;
            return n ? -EBADMSG : 0;
        }
        if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT)
            return 0;
    }
}

int eph_decoder_feed(struct eph_decoder *d, const void *data, size_t n, struct eph_buf *out)
{
    if (n == 0)
        return 0;
    if (d->kind == EPH_DECODE_BR)
        return br_feed(d, data, n, out);
    return z_feed(d, data, n, out);
}

int eph_decoder_finish(struct eph_decoder *d, struct eph_buf *out)
{
    (void)out;
    if (!d->started && d->head_len == 0)
        return 0; /* no body at all */
    return d->done ? 0 : -EBADMSG;
}
