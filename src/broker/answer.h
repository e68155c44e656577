/*
 * answer.h - a connection's answer on its way to the program (docs/BROKER.md, docs/SECURITY.md):
 * the head and the body as libcurl hands them over, made into what the sandbox may see.
 *
 *  - 1xx heads are skipped; the final head is held until it is whole, its framing (Connection,
 *    Keep-Alive, Transfer-Encoding, Content-Length, Proxy-*) dropped and "Connection: close" set.
 *  - A body in Content-Encoding gzip, deflate or br is decoded (decode.h), redacted and relayed
 *    whole, without its Content-Encoding and with its own Content-Length. An encoding the broker
 *    cannot read, a stream that does not decode, or one whose decoded size passes the cap is
 *    refused before a byte of it reaches the program (refused and reason say why).
 *  - Any other body is relayed as it comes.
 *  - Everything, head and body, goes through the redactor (redact.h).
 *  - Header lines after the head (a chunked body's trailer) are dropped: never part of the body.
 *
 * Lifecycle: eph_answer_init; the caller adds the credential values to a->red and seals it;
 * eph_answer_header per header line and eph_answer_body per piece of body, as libcurl delivers
 * them; eph_answer_end when the transfer succeeded; eph_answer_release always. Not thread-safe.
 */
#ifndef EPH_BROKER_ANSWER_H
#define EPH_BROKER_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/decode.h"
#include "broker/redact.h"
#include "common/buf.h"

/* Writes to the program: 0 or a negative error. */
typedef int (*eph_answer_write_fn)(void *arg, const void *data, size_t n);

struct eph_answer {
    struct eph_redactor red; /* the caller adds the values and seals it */
    int status;              /* of the final head; 0 before it */
    bool head_sent;          /* bytes reached the program: no error answer may follow */
    const char *refused;     /* set with an error that the caller answers with 502: its code */
    const char *reason;      /* and the message for the program */
    /* private */
    eph_answer_write_fn write;
    void *arg;
    uint64_t max_bytes, sent, decoded, encoded;
    struct eph_buf head, out, tmp;
    enum eph_decode_kind enc;
    struct eph_decoder dec;
    bool skip_block, head_done, decoding;
};

/* max_bytes caps what the program gets (head and body) and a decoded body. */
void eph_answer_init(struct eph_answer *a, uint64_t max_bytes, eph_answer_write_fn write,
                     void *arg);
/* One header line with its CRLF (or the blank line that ends a head). 0, or an error: -ENOTSUP
 * (an encoding it cannot read; refused set), -EMSGSIZE, -ENOMEM, or the write's. */
int eph_answer_header(struct eph_answer *a, const char *line, size_t n)
    __attribute__((warn_unused_result));
/* A piece of the body. 0, or an error: -EMSGSIZE past the cap (refused set when nothing was sent
 * yet), -EBADMSG (refused set), -ENOMEM, or the write's. */
int eph_answer_body(struct eph_answer *a, const char *data, size_t n)
    __attribute__((warn_unused_result));
/* The transfer is complete: the rest goes out. 0, or an error as above. */
int eph_answer_end(struct eph_answer *a) __attribute__((warn_unused_result));
void eph_answer_release(struct eph_answer *a);

#endif
