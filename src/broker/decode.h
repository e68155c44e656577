/*
 * decode.h - the Content-Encoding of a connection's answer, undone under a cap (docs/SECURITY.md,
 * docs/BROKER.md): gzip (also several members, and x-gzip), deflate (zlib's wrapper or a raw
 * stream, as servers send both) and br, so that the redactor reads the text the upstream meant.
 *
 * The output is a capped eph_buf: an answer that inflates past its cap (a bomb) fails with
 * -EMSGSIZE as soon as it does, without growing further. A stream that is corrupt, has bytes
 * after its end, or ends early fails with -EBADMSG. Pure code on zlib and libbrotlidec.
 */
#ifndef EPH_BROKER_DECODE_H
#define EPH_BROKER_DECODE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

enum eph_decode_kind {
    EPH_DECODE_IDENTITY,
    EPH_DECODE_GZIP,
    EPH_DECODE_DEFLATE,
    EPH_DECODE_BR,
    EPH_DECODE_UNSUPPORTED, /* an unknown coding, or more than one */
};

/* Adds one Content-Encoding header's value (a comma-separated list) to *kind, which starts as
 * EPH_DECODE_IDENTITY: "identity" changes nothing, a second coding makes it unsupported. */
void eph_decode_add_header(enum eph_decode_kind *kind, const char *value, size_t n);

struct eph_decoder {
    enum eph_decode_kind kind;
    void *state;           /* z_stream or BrotliDecoderState */
    unsigned char head[2]; /* deflate: the first bytes, to tell zlib's wrapper from raw */
    size_t head_len;
    bool started, done;
};

/* 0, -ENOTSUP for identity or an unsupported kind, -ENOMEM. */
int eph_decoder_init(struct eph_decoder *d, enum eph_decode_kind kind)
    __attribute__((warn_unused_result));
/* Decodes n more bytes into out. 0, -EBADMSG, -EMSGSIZE (out's cap), -ENOMEM. */
int eph_decoder_feed(struct eph_decoder *d, const void *data, size_t n, struct eph_buf *out)
    __attribute__((warn_unused_result));
/* The input has ended: 0 when the stream was whole, -EBADMSG when it was cut short. */
int eph_decoder_finish(struct eph_decoder *d, struct eph_buf *out)
    __attribute__((warn_unused_result));
void eph_decoder_release(struct eph_decoder *d);

#endif
