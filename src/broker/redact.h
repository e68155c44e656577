/*
 * redact.h - the streaming redactor (docs/BROKER.md, docs/SECURITY.md): every credential value, in
 * every form in which an upstream may echo it, becomes "[REDACTED]" in what an upstream answers
 * before a byte enters the sandbox, also when an echo is split across reads.
 *
 * The forms of one value (docs/BROKER.md, "What is redacted"):
 *  - the raw value, its letters in any case;
 *  - percent-encoded: any mix of literal bytes and %XX escapes (either case of hex), '+' for a
 *    space; this covers curl_easy_escape, form encoding, encodeURIComponent and the like;
 *  - JSON-escaped: any mix of literal bytes and escapes (\/, \", \\, \b \f \n \r \t, \uXXXX of
 *    an ASCII byte, of a UTF-8 character or a surrogate pair, or of a byte read as Latin-1);
 *  - hex, either case;
 *  - base64 and base64url, padded or not, of the value alone; and, for values of 7 bytes or more,
 *    the characters that the value alone decides when it sits at any of the three byte
 *    alignments inside a larger base64 text (at most 4 bits of the value stay at each end).
 * Letters match in any case in the raw, percent and JSON forms and in hex; base64 matches
 * exactly (case carries bits there).
 *
 * It holds back at most the longest input a form can match minus one byte (a tail that could be
 * the start of a form), so it adds bounded buffering and no delay beyond that. Where two forms
 * could match at the same place, the longest input wins. The number of values is bounded by the
 * caller's own limits (a connection's headers and query), not here. Pure code; the redactor owns
 * copies of every form and wipes them on release.
 */
#ifndef EPH_BROKER_REDACT_H
#define EPH_BROKER_REDACT_H

#include <stddef.h>

#include "common/buf.h"

#define EPH_REDACTED "[REDACTED]"
/* Each value at most this long (a credential, not a document). */
#define EPH_REDACT_MAX_VALUE 8192

struct eph_redact_form;

struct eph_redactor {
    struct eph_redact_form *forms;
    size_t nforms, forms_cap;
    size_t *index;     /* form numbers grouped by a byte that may start them */
    size_t start[257]; /* index[start[c]..start[c + 1]) may start with byte c */
    size_t maxin;      /* the longest input any form can match */
    char *hold;        /* maxin - 1 bytes: a tail that may start a form */
    size_t hold_len;
    char *scratch; /* hold + one input chunk, reused */
    size_t scratch_cap;
};

/* Copies the values and their forms (empty ones are skipped): eph_redactor_begin, one
 * eph_redactor_add per value, eph_redactor_seal. 0, -ENOMEM, or -EINVAL for a value past
 * EPH_REDACT_MAX_VALUE. */
int eph_redactor_init(struct eph_redactor *r, const char *const *values, size_t n)
    __attribute__((warn_unused_result));

/* The same in steps: begin, add values, seal; then feed. On an error the redactor is released. */
void eph_redactor_begin(struct eph_redactor *r);
int eph_redactor_add(struct eph_redactor *r, const char *value, size_t len)
    __attribute__((warn_unused_result));
/* A header's value: the value, the token after its scheme ("Bearer X": X), and for "Basic X" the
 * decoded "user:password", the user and the password. */
int eph_redactor_add_header_value(struct eph_redactor *r, const char *value)
    __attribute__((warn_unused_result));
int eph_redactor_seal(struct eph_redactor *r) __attribute__((warn_unused_result));

/* Redacts n more bytes into out (appended). 0, or out's error (-EMSGSIZE, -ENOMEM). */
int eph_redactor_feed(struct eph_redactor *r, const void *data, size_t n, struct eph_buf *out)
    __attribute__((warn_unused_result));
/* The end of a stream: what was held back goes out, redacted as far as it matches whole. The
 * redactor may then start another stream. */
int eph_redactor_finish(struct eph_redactor *r, struct eph_buf *out)
    __attribute__((warn_unused_result));
void eph_redactor_release(struct eph_redactor *r);

#endif
