/*
 * id.h - random identifiers and secrets, from getrandom(2).
 */
#ifndef EPH_ID_H
#define EPH_ID_H

#include <stddef.h>

#define EPH_RUN_ID_LEN 36  /* "run_" + 32 hex */
#define EPH_API_KEY_LEN 44 /* "eph_" + 40 base62 */

/* Fills buf with n cryptographically random bytes. 0 or a negative errno. */
int eph_random_bytes(void *buf, size_t n) __attribute__((warn_unused_result));
/* prefix + 2*nbytes lowercase hex characters into out (size >= strlen(prefix)+2*nbytes+1). */
int eph_id_hex(const char *prefix, size_t nbytes, char *out, size_t outlen)
    __attribute__((warn_unused_result));
/* prefix + n base62 characters, unbiased. */
int eph_id_base62(const char *prefix, size_t n, char *out, size_t outlen)
    __attribute__((warn_unused_result));
/* Lowercase hex SHA-256 of data into out[65]. */
void eph_sha256_hex(const void *data, size_t n, char out[65]);
/* Constant-time comparison of two equal-length byte strings. 1 when equal. */
int eph_ct_equal(const void *a, const void *b, size_t n);

/* Checks "run_" + 32 lowercase hex. */
int eph_id_is_run(const char *s);
/* Checks "sbx_" + 32 lowercase hex (a sandbox: the same length as a run's id). */
int eph_id_is_sandbox(const char *s);
/* Checks "evt_" + 32 lowercase hex (a webhook event). */
int eph_id_is_event(const char *s);
/* Checks "eph_" + 40 base62. */
int eph_id_is_api_key(const char *s);

#endif
