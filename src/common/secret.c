/*
 * secret.c - the key file and crypto_secretbox sealing.
 */
#include "common/secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "common/cleanup.h"

_Static_assert(EPH_SECRET_KEY_BYTES == crypto_secretbox_KEYBYTES, "secretbox key size");

static void make_parents(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0700);
            *p = '/';
        }
    }
    mkdir(dir, 0700);
}

static int read_key(int fd, const char *path, struct eph_secret *out, char *err, size_t errlen)
{
    struct stat sb;
    if (fstat(fd, &sb)) {
        snprintf(err, errlen, "cannot stat secret key file '%s': %s", path, strerror(errno));
        return -errno;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "secret key file '%s' is not a regular file", path);
        return -EINVAL;
    }
    if (sb.st_mode & 077) {
        snprintf(err, errlen, "secret key file '%s' may be read by others (mode %03o): chmod 600",
                 path, (unsigned)(sb.st_mode & 0777));
        return -EPERM;
    }
    unsigned char buf[EPH_SECRET_KEY_BYTES + 1];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t n = EPH_RETRY_EINTR(read(fd, buf + got, sizeof(buf) - got));
        if (n < 0) {
            snprintf(err, errlen, "cannot read secret key file '%s': %s", path, strerror(errno));
            sodium_memzero(buf, sizeof(buf));
            return -EIO;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    if (got != EPH_SECRET_KEY_BYTES) {
        sodium_memzero(buf, sizeof(buf));
        snprintf(err, errlen, "secret key file '%s' must hold exactly %d bytes", path,
                 EPH_SECRET_KEY_BYTES);
        return -EINVAL;
    }
    memcpy(out->key, buf, EPH_SECRET_KEY_BYTES);
    sodium_memzero(buf, sizeof(buf));
    return 0;
}

static int create_key(const char *path, struct eph_secret *out, char *err, size_t errlen)
{
    make_parents(path);
    EPH_AUTOCLOSE int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno; /* -EEXIST: someone else created it first; the caller reads theirs */
    randombytes_buf(out->key, sizeof(out->key));
    size_t done = 0;
    while (done < sizeof(out->key)) {
        ssize_t n = EPH_RETRY_EINTR(write(fd, out->key + done, sizeof(out->key) - done));
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    int rc = done == sizeof(out->key) && fsync(fd) == 0 ? 0 : -EIO;
    if (rc) {
        snprintf(err, errlen, "cannot write secret key file '%s': %s", path, strerror(errno));
        unlink(path);
        eph_secret_clear(out);
    }
    return rc;
}

int eph_secret_load(const char *path, bool create, struct eph_secret *out, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        EPH_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0)
            return read_key(fd, path, out, err, errlen);
        if (errno != ENOENT || !create) {
            snprintf(err, errlen, "cannot open secret key file '%s': %s", path, strerror(errno));
            return -errno;
        }
        int rc = create_key(path, out, err, errlen);
        if (rc != -EEXIST) {
            if (rc && rc != -EIO)
                snprintf(err, errlen, "cannot create secret key file '%s': %s", path,
                         strerror(-rc));
            return rc;
        }
    }
    snprintf(err, errlen, "cannot open secret key file '%s'", path);
    return -EIO;
}

void eph_secret_clear(struct eph_secret *s)
{
    sodium_memzero(s->key, sizeof(s->key));
}

int eph_secret_seal(const struct eph_secret *s, const void *plain, size_t len, unsigned char **out,
                    size_t *outlen)
{
    size_t n = crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + len;
    unsigned char *b = malloc(n);
    if (!b)
        return -ENOMEM;
    randombytes_buf(b, crypto_secretbox_NONCEBYTES);
    if (crypto_secretbox_easy(b + crypto_secretbox_NONCEBYTES, plain, len, b, s->key)) {
        free(b);
        return -EIO;
    }
    *out = b;
    *outlen = n;
    return 0;
}

int eph_secret_open(const struct eph_secret *s, const unsigned char *sealed, size_t len,
                    unsigned char **out, size_t *outlen)
{
    if (len < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES)
        return -EBADMSG;
    size_t n = len - crypto_secretbox_NONCEBYTES - crypto_secretbox_MACBYTES;
    unsigned char *p = malloc(n + 1);
    if (!p)
        return -ENOMEM;
    if (crypto_secretbox_open_easy(p, sealed + crypto_secretbox_NONCEBYTES,
                                   len - crypto_secretbox_NONCEBYTES, sealed, s->key)) {
        free(p);
        return -EBADMSG;
    }
    p[n] = '\0';
    *out = p;
    *outlen = n;
    return 0;
}
