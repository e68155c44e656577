/*
 * secret.h - the server's secret key and sealing with it.
 *
 * The key is 32 random bytes in a file (default var/secret.key) that is created with mode 0600 on
 * first use and refused when anyone but its owner may read it. Sealing is libsodium's
 * crypto_secretbox (XSalsa20-Poly1305) with a fresh random nonce: sealed = nonce || box. It keeps
 * connection credentials encrypted at rest: they are sealed before they reach the store and
 * opened only where they are used (the broker), never returned by the API, never logged.
 *
 * Ownership: buffers returned through out parameters are the caller's; a caller that opens a
 * credential zeroes it (sodium_memzero) before freeing it. sodium_init() must have run.
 */
#ifndef EPH_SECRET_H
#define EPH_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#define EPH_SECRET_KEY_BYTES 32

struct eph_secret {
    unsigned char key[EPH_SECRET_KEY_BYTES];
};

/* Reads the key file, or creates it (0600, parent directories 0700) when create is set and it does
 * not exist. -EPERM when the file is readable by group or others, -EINVAL when it is not exactly a
 * key; err says why. */
int eph_secret_load(const char *path, bool create, struct eph_secret *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void eph_secret_clear(struct eph_secret *s);

/* *out = nonce || secretbox(plain), malloc'd. */
int eph_secret_seal(const struct eph_secret *s, const void *plain, size_t len, unsigned char **out,
                    size_t *outlen) __attribute__((warn_unused_result));
/* The reverse: -EBADMSG when the blob was altered or sealed with another key. *out is malloc'd
 * with a NUL after the *outlen bytes. */
int eph_secret_open(const struct eph_secret *s, const unsigned char *sealed, size_t len,
                    unsigned char **out, size_t *outlen) __attribute__((warn_unused_result));

#endif
