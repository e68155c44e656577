#include "common/id.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <sodium.h>

#include "common/cleanup.h"

int eph_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t got = EPH_RETRY_EINTR(getrandom(p, n, 0));
        if (got < 0)
            return -errno;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int eph_id_hex(const char *prefix, size_t nbytes, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[64];
    size_t plen = strlen(prefix);
    if (nbytes > sizeof(raw) || outlen < plen + 2 * nbytes + 1)
        return -EINVAL;
    int rc = eph_random_bytes(raw, nbytes);
    if (rc)
        return rc;
    memcpy(out, prefix, plen);
    for (size_t i = 0; i < nbytes; i++) {
        out[plen + 2 * i] = hex[raw[i] >> 4];
        out[plen + 2 * i + 1] = hex[raw[i] & 15];
    }
    out[plen + 2 * nbytes] = '\0';
    return 0;
}

int eph_id_base62(const char *prefix, size_t n, char *out, size_t outlen)
{
    static const char alphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t plen = strlen(prefix);
    if (outlen < plen + n + 1)
        return -EINVAL;
    memcpy(out, prefix, plen);
    size_t o = 0;
    while (o < n) {
        unsigned char raw[64];
        int rc = eph_random_bytes(raw, sizeof(raw));
        if (rc)
            return rc;
        for (size_t i = 0; i < sizeof(raw) && o < n; i++) {
            if (raw[i] >= 248) /* 248 = 4 x 62: reject to stay unbiased */
                continue;
            out[plen + o++] = alphabet[raw[i] % 62];
        }
    }
    out[plen + n] = '\0';
    return 0;
}

void eph_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, data, n);
    sodium_bin2hex(out, 65, h, sizeof(h));
}

int eph_ct_equal(const void *a, const void *b, size_t n)
{
    return sodium_memcmp(a, b, n) == 0;
}

static int id_is(const char *s, const char *prefix)
{
    if (strncmp(s, prefix, 4) != 0 || strlen(s) != EPH_RUN_ID_LEN)
        return 0;
    for (const char *p = s + 4; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

int eph_id_is_run(const char *s)
{
    return id_is(s, "run_");
}

int eph_id_is_sandbox(const char *s)
{
    return id_is(s, "sbx_");
}

int eph_id_is_event(const char *s)
{
    return id_is(s, "evt_");
}

int eph_id_is_api_key(const char *s)
{
    if (strncmp(s, "eph_", 4) != 0 || strlen(s) != EPH_API_KEY_LEN)
        return 0;
    for (const char *p = s + 4; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return 0;
    return 1;
}
