/*
 * redact.h - the streaming redactor (SPEC 7, docs/BROKER.md): every exact occurrence of a
 * credential value in what an upstream answers becomes "[REDACTED]" before a byte enters the
 * sandbox, also when a value is split across two reads.
 *
 * It holds back at most the longest value minus one byte (a tail that could be the start of a
 * value), so it adds bounded buffering and no delay beyond that. Where two values could match at
 * the same place, the longest wins. Pure code; the redactor owns copies of the values and wipes
 * them on release.
 */
#ifndef EPH_BROKER_REDACT_H
#define EPH_BROKER_REDACT_H

#include <stddef.h>

#include "common/buf.h"

#define EPH_REDACTED "[REDACTED]"
/* At most this many values, each at most this long (a credential, not a document). */
#define EPH_REDACT_MAX_VALUES 64
#define EPH_REDACT_MAX_VALUE 8192

struct eph_redactor {
    char *values[EPH_REDACT_MAX_VALUES];
    size_t lens[EPH_REDACT_MAX_VALUES];
    size_t n;
    size_t maxlen;
    char *hold; /* maxlen - 1 bytes: a tail that may start a value */
    size_t hold_len;
    char *scratch; /* hold + one input chunk, reused */
    size_t scratch_cap;
};

/* Copies the values (empty ones are skipped). 0, -ENOMEM, or -EINVAL past the caps above. */
int eph_redactor_init(struct eph_redactor *r, const char *const *values, size_t n)
    __attribute__((warn_unused_result));
/* Redacts n more bytes into out (appended). 0, or out's error (-EMSGSIZE, -ENOMEM). */
int eph_redactor_feed(struct eph_redactor *r, const void *data, size_t n, struct eph_buf *out)
    __attribute__((warn_unused_result));
/* The end of the stream: what was held back goes out as it is (it was no whole value). */
int eph_redactor_finish(struct eph_redactor *r, struct eph_buf *out)
    __attribute__((warn_unused_result));
void eph_redactor_release(struct eph_redactor *r);

#endif
