/*
 * layer.c - tar layers applied to a root, and image archives read without a registry. See
 * image.h and docs/IMAGES.md.
 *
 * Everything here reads hostile input: every length is checked before it is used, every path is
 * cleaned (absolute and ".." refused) and written through tree.c, which never follows a symbolic
 * link, so no entry can land outside the root. Device nodes and FIFOs are left out; set-id bits
 * are never written.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <zlib.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/text.h"
#include "image/image.h"

#define BLOCK 512
#define MAX_META (64u << 10) /* a long name, long link or PAX header */
#define MAX_JSON (1u << 20)  /* manifest.json, index.json, an OCI manifest */
#define MAX_MEMBERS 100000u  /* entries of an archive's outer tar */
#define MAX_ENTRIES 4000000u /* entries of the layers together */
#define MAX_LAYERS 256u

#define FAIL(rc, ...) (snprintf(err, errlen, __VA_ARGS__), (rc) < 0 ? (rc) : -EIO)

/* ---- a byte source: a range of a file, plain or gzip ---- */

struct src {
    int fd;
    uint64_t pos, end; /* of the file */
    bool gz;
    bool gz_done;
    z_stream z;
    unsigned char in[65536];
};

static int raw_read(struct src *s, void *buf, size_t n, size_t *got)
{
    size_t left = s->end - s->pos < n ? (size_t)(s->end - s->pos) : n;
    *got = 0;
    while (*got < left) {
        ssize_t r = pread(s->fd, (char *)buf + *got, left - *got, (off_t)s->pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        *got += (size_t)r;
        s->pos += (uint64_t)r;
    }
    return 0;
}

static int src_open(struct src *s, int fd, uint64_t pos, uint64_t len)
{
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->pos = pos;
    struct stat sb;
    if (fstat(fd, &sb))
        return -errno;
    uint64_t size = (uint64_t)sb.st_size;
    s->end = (len == UINT64_MAX || pos + len > size) ? size : pos + len;
    unsigned char magic[2];
    ssize_t r = pread(fd, magic, 2, (off_t)pos);
    if (r == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
        s->gz = true;
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
            return -ENOMEM;
    }
    return 0;
}

static void src_close(struct src *s)
{
    if (s->gz)
        inflateEnd(&s->z);
}

/* Reads exactly n bytes: 0, -ENODATA at a clean end before any byte, -EPROTO for a cut or
 * corrupt stream. */
static int src_read(struct src *s, void *buf, size_t n)
{
    if (!s->gz) {
        size_t got;
        int rc = raw_read(s, buf, n, &got);
        if (rc)
            return rc;
        return got == n ? 0 : got == 0 ? -ENODATA : -EPROTO;
    }
    s->z.next_out = buf;
    s->z.avail_out = (uInt)n;
    while (s->z.avail_out) {
        if (s->gz_done)
            return s->z.avail_out == n ? -ENODATA : -EPROTO;
        if (!s->z.avail_in) {
            size_t got;
            int rc = raw_read(s, s->in, sizeof(s->in), &got);
            if (rc)
                return rc;
            if (!got)
                return -EPROTO;
            s->z.next_in = s->in;
            s->z.avail_in = (uInt)got;
        }
        int zr = inflate(&s->z, Z_NO_FLUSH);
        if (zr == Z_STREAM_END)
            s->gz_done = true;
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            return -EPROTO;
    }
    return 0;
}

static int src_skip(struct src *s, uint64_t n)
{
    if (!s->gz) {
        if (s->end - s->pos < n)
            return -EPROTO;
        s->pos += n;
        return 0;
    }
    char buf[8192];
    while (n) {
        size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
        int rc = src_read(s, buf, k);
        if (rc)
            return rc == -ENODATA ? -EPROTO : rc;
        n -= k;
    }
    return 0;
}

/* ---- tar headers ---- */

struct hdr {
    char path[4096];
    char link[4096];
    char type;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    uint64_t size;
};

static int octal(const unsigned char *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) { /* base-256 */
        if (f[0] != 0x80)
            return -EPROTO;
        for (size_t i = 1; i < n; i++) {
            if (v >> 55)
                return -EPROTO;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && (f[i] == ' ' || f[i] == '\0'))
        i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -EPROTO;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -EPROTO;
    *out = v;
    return 0;
}

static void field(char *out, size_t outlen, const unsigned char *f, size_t n)
{
    size_t k = strnlen((const char *)f, n);
    if (k >= outlen)
        k = outlen - 1;
    memcpy(out, f, k);
    out[k] = '\0';
}

/* Reads a metadata entry's content (a long name or PAX records) of size bytes. */
static int read_meta(struct src *s, uint64_t size, char *buf, size_t cap)
{
    if (size >= cap || size > MAX_META)
        return -E2BIG;
    uint64_t padded = (size + BLOCK - 1) / BLOCK * BLOCK;
    int rc = src_read(s, buf, (size_t)size);
    if (!rc)
        rc = src_skip(s, padded - size);
    buf[size] = '\0';
    return rc == -ENODATA ? -EPROTO : rc;
}

/* PAX records "LEN key=value\n": path, linkpath and size override the header's. */
static int pax(const char *rec, size_t len, char *path, char *link, uint64_t *size, bool *has_size)
{
    size_t i = 0;
    while (i < len) {
        char *end;
        unsigned long n = strtoul(rec + i, &end, 10);
        if (end == rec + i || *end != ' ' || n == 0 || n > len - i || rec[i + n - 1] != '\n')
            return -EPROTO;
        const char *kv = end + 1;
        size_t kvlen = (size_t)(rec + i + n - 1 - kv);
        const char *eq = memchr(kv, '=', kvlen);
        if (!eq)
            return -EPROTO;
        size_t klen = (size_t)(eq - kv), vlen = kvlen - klen - 1;
        if (vlen >= 4096)
            return -E2BIG;
        if (klen == 4 && !memcmp(kv, "path", 4)) {
            memcpy(path, eq + 1, vlen);
            path[vlen] = '\0';
        } else if (klen == 8 && !memcmp(kv, "linkpath", 8)) {
            memcpy(link, eq + 1, vlen);
            link[vlen] = '\0';
        } else if (klen == 4 && !memcmp(kv, "size", 4)) {
            char num[32];
            if (vlen >= sizeof(num))
                return -EPROTO;
            memcpy(num, eq + 1, vlen);
            num[vlen] = '\0';
            *size = strtoull(num, &end, 10);
            if (*end)
                return -EPROTO;
            *has_size = true;
        }
        i += n;
    }
    return 0;
}

/* The next real entry (long names, long links and PAX headers folded into it). 0, -ENODATA at
 * the end of the archive, or -EPROTO with a corrupt header. */
static int next_header(struct src *s, struct hdr *h)
{
    char long_path[4096] = "", long_link[4096] = "";
    uint64_t pax_size = 0;
    bool has_pax_size = false;
    EPH_AUTOFREE char *meta = malloc(MAX_META + 1);
    if (!meta)
        return -ENOMEM;
    for (unsigned guard = 0; guard < 16; guard++) {
        unsigned char b[BLOCK];
        int rc = src_read(s, b, BLOCK);
        if (rc)
            return rc;
        bool zero = true;
        for (int i = 0; i < BLOCK && zero; i++)
            zero = b[i] == 0;
        if (zero)
            return -ENODATA;
        uint64_t sum, want = 0;
        if (octal(b + 148, 8, &sum))
            return -EPROTO;
        for (int i = 0; i < BLOCK; i++)
            want += (i >= 148 && i < 156) ? ' ' : b[i];
        if (sum != want)
            return -EPROTO;
        uint64_t size, mode, uid, gid;
        if (octal(b + 124, 12, &size) || octal(b + 100, 8, &mode) || octal(b + 108, 8, &uid) ||
            octal(b + 116, 8, &gid))
            return -EPROTO;
        char type = (char)b[156];
        if (type == 'L' || type == 'K' || type == 'x' || type == 'g') {
            if ((rc = read_meta(s, size, meta, MAX_META + 1)))
                return rc;
            if (type == 'L')
                snprintf(long_path, sizeof(long_path), "%s", meta);
            else if (type == 'K')
                snprintf(long_link, sizeof(long_link), "%s", meta);
            else if (type == 'x' &&
                     (rc = pax(meta, (size_t)size, long_path, long_link, &pax_size, &has_pax_size)))
                return rc;
            continue;
        }
        memset(h, 0, sizeof(*h));
        h->type = type;
        h->mode = (mode_t)(mode & 07777);
        h->uid = (uid_t)uid;
        h->gid = (gid_t)gid;
        h->size = has_pax_size ? pax_size : size;
        if (*long_path)
            snprintf(h->path, sizeof(h->path), "%s", long_path);
        else {
            char name[101], prefix[156];
            field(name, sizeof(name), b, 100);
            field(prefix, sizeof(prefix), b + 345, 155);
            if (!memcmp(b + 257, "ustar", 5) && *prefix)
                snprintf(h->path, sizeof(h->path), "%s/%s", prefix, name);
            else
                snprintf(h->path, sizeof(h->path), "%s", name);
        }
        if (*long_link)
            snprintf(h->link, sizeof(h->link), "%s", long_link);
        else
            field(h->link, sizeof(h->link), b + 157, 100);
        return 0;
    }
    return -EPROTO;
}

static int skip_data(struct src *s, uint64_t size)
{
    return src_skip(s, (size + BLOCK - 1) / BLOCK * BLOCK);
}

/* ---- the paths one layer wrote (for opaque directories) ---- */

struct pathset {
    char **slot;
    size_t cap, n;
};

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool set_has(const struct pathset *p, const char *s)
{
    if (!p->cap)
        return false;
    for (size_t i = fnv(s) & (p->cap - 1);; i = (i + 1) & (p->cap - 1)) {
        if (!p->slot[i])
            return false;
        if (!strcmp(p->slot[i], s))
            return true;
    }
}

static int set_add(struct pathset *p, const char *s)
{
    if (set_has(p, s))
        return 0;
    if ((p->n + 1) * 2 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 1024;
        char **slot = calloc(cap, sizeof(char *));
        if (!slot)
            return -ENOMEM;
        for (size_t i = 0; i < p->cap; i++) {
            if (!p->slot[i])
                continue;
            size_t j = fnv(p->slot[i]) & (cap - 1);
            while (slot[j])
                j = (j + 1) & (cap - 1);
            slot[j] = p->slot[i];
        }
        free(p->slot);
        p->slot = slot;
        p->cap = cap;
    }
    size_t j = fnv(s) & (p->cap - 1);
    while (p->slot[j])
        j = (j + 1) & (p->cap - 1);
    if (!(p->slot[j] = strdup(s)))
        return -ENOMEM;
    p->n++;
    return 0;
}

static void set_free(struct pathset *p)
{
    for (size_t i = 0; i < p->cap; i++)
        free(p->slot[i]);
    free(p->slot);
}

/* ---- applying one entry ---- */

/* An opaque directory: what lower layers put in dir (rel) goes; what this layer wrote stays. */
static int opaque(int root_fd, const char *rel, const struct pathset *mine)
{
    char probe[8192];
    snprintf(probe, sizeof(probe), "%s%sx", rel, *rel ? "/" : "");
    const char *base;
    EPH_AUTOCLOSE int parent = eph_image_open_parent(root_fd, probe, true, &base);
    if (parent < 0)
        return parent;
    int fd = fcntl(parent, F_DUPFD_CLOEXEC, 3);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -errno;
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(probe, sizeof(probe), "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        if (!set_has(mine, probe))
            rc = eph_image_remove_at(parent, e->d_name);
    }
    closedir(d);
    return rc;
}

static int copy_data(struct src *s, int fd, uint64_t size)
{
    char buf[65536];
    uint64_t left = size;
    while (left) {
        size_t k = left < sizeof(buf) ? (size_t)left : sizeof(buf);
        int rc = src_read(s, buf, k);
        if (rc)
            return rc == -ENODATA ? -EPROTO : rc;
        if ((rc = eph_fileio_write_all(fd, buf, k)))
            return rc;
        left -= k;
    }
    return src_skip(s, (size + BLOCK - 1) / BLOCK * BLOCK - size);
}

static const char *why_path(int rc)
{
    return rc == -ELOOP     ? "it passes through a symbolic link"
           : rc == -ENOTDIR ? "a component of it is not a directory"
                            : strerror(-rc);
}

/* A whiteout (".wh.NAME": NAME removed from the layers below) or an opaque directory
 * (".wh..wh..opq": what the layers below put in it hidden). */
static int apply_whiteout(int root_fd, struct src *s, const struct hdr *h, const char *rel,
                          const char *slash, struct eph_image_import_stats *st,
                          struct pathset *mine, char *err, size_t errlen)
{
    const char *name = slash ? slash + 1 : rel;
    int rc;
    st->whiteouts++;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - rel) : 0, rel);
    if (!strcmp(name, ".wh..wh..opq")) {
        rc = opaque(root_fd, dir, mine);
    } else {
        char victim[4096];
        if (!name[4])
            return FAIL(-EINVAL, "whiteout '%.200s' names nothing", h->path);
        if (eph_text_format(victim, sizeof(victim), "%s%s%s", dir, *dir ? "/" : "", name + 4))
            return FAIL(-EINVAL, "whiteout '%.200s': path too long", h->path);
        const char *base;
        EPH_AUTOCLOSE int parent = eph_image_open_parent(root_fd, victim, false, &base);
        rc = parent == -ENOENT ? 0 : parent < 0 ? parent : eph_image_remove_at(parent, base);
    }
    if (rc)
        return FAIL(rc, "whiteout '%.200s' cannot be applied: %s", h->path, why_path(rc));
    return skip_data(s, h->size);
}

static int apply_entry(int root_fd, struct src *s, const struct hdr *h, uint64_t max_bytes,
                       struct eph_image_import_stats *st, struct pathset *mine, char *err,
                       size_t errlen)
{
    char rel[4096], why[96];
    /* "./" alone is the root itself: nothing to write. */
    if (!strcmp(h->path, ".") || !strcmp(h->path, "./"))
        return skip_data(s, h->size);
    if (eph_image_path_clean(h->path, false, rel, sizeof(rel), why, sizeof(why)))
        return FAIL(-EINVAL, "entry '%.200s' refused: %s", h->path, why);
    const char *slash = strrchr(rel, '/');
    const char *name = slash ? slash + 1 : rel;
    int rc;
    if (!strncmp(name, ".wh.", 4))
        return apply_whiteout(root_fd, s, h, rel, slash, st, mine, err, errlen);
    const char *base;
    EPH_AUTOCLOSE int dir = eph_image_open_parent(root_fd, rel, true, &base);
    if (dir < 0)
        return FAIL(dir, "entry '%.200s' refused: %s", h->path, why_path(dir));
    mode_t mode = h->mode & 0777;
    if (h->mode & 06000)
        st->setid_strip++;
    switch (h->type) {
    case '0':
    case '\0':
    case '7': {
        if (h->size > max_bytes || st->bytes + h->size > max_bytes)
            return FAIL(-EFBIG, "the image is larger than its limit of %llu bytes",
                        (unsigned long long)max_bytes);
        st->bytes += h->size;
        if ((rc = eph_image_remove_at(dir, base)))
            return FAIL(rc, "cannot replace '%.200s': %s", rel, strerror(-rc));
        EPH_AUTOCLOSE int fd =
            openat(dir, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return FAIL(-errno, "cannot create '%.200s': %s", rel, strerror(errno));
        if ((rc = copy_data(s, fd, h->size)))
            return FAIL(rc, "cannot write '%.200s': %s", rel,
                        rc == -EPROTO ? "the archive is cut short or corrupt" : strerror(-rc));
        if (fchown(fd, h->uid, h->gid) || fchmod(fd, mode))
            return FAIL(-errno, "cannot set the owner of '%.200s': %s", rel, strerror(errno));
        break;
    }
    case '5': {
        struct stat sb;
        if (fstatat(dir, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sb.st_mode) &&
            (rc = eph_image_remove_at(dir, base)))
            return FAIL(rc, "cannot replace '%.200s': %s", rel, strerror(-rc));
        if (mkdirat(dir, base, 0755) && errno != EEXIST)
            return FAIL(-errno, "cannot make '%.200s': %s", rel, strerror(errno));
        if (fchownat(dir, base, h->uid, h->gid, AT_SYMLINK_NOFOLLOW) ||
            fchmodat(dir, base, h->mode & 01777, 0))
            return FAIL(-errno, "cannot set the owner of '%.200s': %s", rel, strerror(errno));
        if ((rc = skip_data(s, h->size)))
            return FAIL(rc, "the archive is cut short or corrupt");
        break;
    }
    case '2':
        /* A symbolic link may point anywhere: it is resolved only inside the sandbox, against
         * the sandbox's own root, and this importer never follows one. */
        if (!*h->link)
            return FAIL(-EINVAL, "symbolic link '%.200s' has no target", rel);
        if ((rc = eph_image_remove_at(dir, base)))
            return FAIL(rc, "cannot replace '%.200s': %s", rel, strerror(-rc));
        if (symlinkat(h->link, dir, base) ||
            fchownat(dir, base, h->uid, h->gid, AT_SYMLINK_NOFOLLOW))
            return FAIL(-errno, "cannot make '%.200s': %s", rel, strerror(errno));
        if ((rc = skip_data(s, h->size)))
            return FAIL(rc, "the archive is cut short or corrupt");
        break;
    case '1': {
        char target[4096];
        if (eph_image_path_clean(h->link, false, target, sizeof(target), why, sizeof(why)))
            return FAIL(-EINVAL, "hard link '%.200s' to '%.200s' refused: %s", rel, h->link, why);
        const char *tbase;
        EPH_AUTOCLOSE int tdir = eph_image_open_parent(root_fd, target, false, &tbase);
        struct stat sb;
        if (tdir < 0 || fstatat(tdir, tbase, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode))
            return FAIL(-EINVAL, "hard link '%.200s' to '%.200s' refused: not a file of the image",
                        rel, h->link);
        if (!strcmp(target, rel))
            return skip_data(s, h->size);
        if ((rc = eph_image_remove_at(dir, base)))
            return FAIL(rc, "cannot replace '%.200s': %s", rel, strerror(-rc));
        if (linkat(tdir, tbase, dir, base, 0))
            return FAIL(-errno, "cannot link '%.200s': %s", rel, strerror(errno));
        if ((rc = skip_data(s, h->size)))
            return FAIL(rc, "the archive is cut short or corrupt");
        break;
    }
    case '3':
    case '4':
    case '6':
        st->skipped_dev++;
        return skip_data(s, h->size) ? FAIL(-EPROTO, "the archive is cut short or corrupt") : 0;
    default:
        return skip_data(s, h->size) ? FAIL(-EPROTO, "the archive is cut short or corrupt") : 0;
    }
    st->entries++;
    if (st->entries > MAX_ENTRIES)
        return FAIL(-E2BIG, "the image has more than %u entries", MAX_ENTRIES);
    return set_add(mine, rel) ? FAIL(-ENOMEM, "out of memory") : 0;
}

int eph_image_apply_layer(int root_fd, int fd, uint64_t len, uint64_t max_bytes,
                          struct eph_image_import_stats *st, char *err, size_t errlen)
{
    struct src *s = malloc(sizeof(*s));
    if (!s)
        return FAIL(-ENOMEM, "out of memory");
    off_t here = lseek(fd, 0, SEEK_CUR);
    int rc = src_open(s, fd, here < 0 ? 0 : (uint64_t)here, len);
    if (rc) {
        free(s);
        return FAIL(rc, "cannot read the layer: %s", strerror(-rc));
    }
    struct pathset mine = {0};
    struct hdr *h = malloc(sizeof(*h));
    rc = h ? 0 : FAIL(-ENOMEM, "out of memory");
    bool any = false;
    while (!rc) {
        rc = next_header(s, h);
        if (rc == -ENODATA && any) {
            rc = 0;
            break;
        }
        if (rc) {
            rc = FAIL(rc, rc == -ENODATA ? "the layer is empty or not a tar archive"
                          : rc == -E2BIG ? "a tar header's long name is too long"
                                         : "the layer is not a tar archive, or it is corrupt");
            break;
        }
        any = true;
        rc = apply_entry(root_fd, s, h, max_bytes, st, &mine, err, errlen);
    }
    if (!rc)
        st->layers++;
    free(h);
    set_free(&mine);
    src_close(s);
    free(s);
    return rc;
}

/* ---- image archives ---- */

struct member {
    char *name;
    uint64_t off, size;
};

struct archive {
    int fd;
    struct member *m;
    size_t n;
};

static void archive_free(struct archive *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->m[i].name);
    free(a->m);
}

static int archive_index(struct archive *a, char *err, size_t errlen)
{
    struct src *s = malloc(sizeof(*s));
    struct hdr *h = malloc(sizeof(*h));
    int rc = s && h ? src_open(s, a->fd, 0, UINT64_MAX) : -ENOMEM;
    if (!rc && s->gz)
        rc = FAIL(-EINVAL, "the archive is compressed: give the plain tar that `docker save` "
                           "or `skopeo copy ... oci-archive:` writes");
    bool opened = !rc;
    while (!rc) {
        rc = next_header(s, h);
        if (rc == -ENODATA) {
            rc = a->n ? 0 : FAIL(-EINVAL, "the archive is empty or not a tar archive");
            break;
        }
        if (rc) {
            rc = FAIL(rc, "the archive is not a tar archive, or it is corrupt");
            break;
        }
        if (h->type == '0' || h->type == '\0' || h->type == '7') {
            char rel[4096], why[96];
            if (a->n >= MAX_MEMBERS) {
                rc = FAIL(-E2BIG, "the archive has more than %u members", MAX_MEMBERS);
                break;
            }
            if (!eph_image_path_clean(h->path, true, rel, sizeof(rel), why, sizeof(why))) {
                struct member *m = realloc(a->m, (a->n + 1) * sizeof(*m));
                if (!m || !(m[a->n].name = strdup(rel))) {
                    if (m)
                        a->m = m;
                    rc = FAIL(-ENOMEM, "out of memory");
                    break;
                }
                a->m = m;
                m[a->n].off = s->pos;
                m[a->n].size = h->size;
                a->n++;
            }
        }
        if (!rc && skip_data(s, h->size))
            rc = FAIL(-EPROTO, "the archive is cut short");
    }
    if (opened)
        src_close(s);
    free(s);
    free(h);
    return rc;
}

static const struct member *member(const struct archive *a, const char *name)
{
    for (size_t i = a->n; i-- > 0;) /* the last of a name wins, as tar would extract it */
        if (!strcmp(a->m[i].name, name))
            return &a->m[i];
    return NULL;
}

static json_t *member_json(const struct archive *a, const char *name, char *err, size_t errlen)
{
    const struct member *m = member(a, name);
    if (!m) {
        snprintf(err, errlen, "the archive has no %s", name);
        return NULL;
    }
    if (m->size > MAX_JSON) {
        snprintf(err, errlen, "%s is larger than %u bytes", name, MAX_JSON);
        return NULL;
    }
    EPH_AUTOFREE char *buf = malloc(m->size + 1);
    if (!buf || pread(a->fd, buf, m->size, (off_t)m->off) != (ssize_t)m->size) {
        snprintf(err, errlen, "cannot read %s", name);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(buf, m->size, 0, &je);
    if (!j)
        snprintf(err, errlen, "%s is not JSON: %s", name, je.text);
    return j;
}

/* "sha256:HEX" → "blobs/sha256/HEX", refusing anything else. */
static int blob_path(const json_t *digest, char *out, size_t len)
{
    const char *d = json_string_value(digest);
    if (!d || strncmp(d, "sha256:", 7) || strlen(d) != 71)
        return -EINVAL;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return -EINVAL;
    snprintf(out, len, "blobs/sha256/%s", d + 7);
    return 0;
}

/* The layer member names, in order, into *layers (a JSON array of strings). */
static int find_layers(const struct archive *a, json_t **layers, char *err, size_t errlen)
{
    *layers = json_array();
    if (member(a, "manifest.json")) { /* docker save */
        EPH_AUTOJSON json_t *man = member_json(a, "manifest.json", err, errlen);
        json_t *list = man ? json_object_get(json_array_get(man, 0), "Layers") : NULL;
        if (!json_is_array(list))
            return man ? FAIL(-EINVAL, "manifest.json names no layers") : -EINVAL;
        size_t i;
        json_t *l;
        json_array_foreach(list, i, l)
        {
            char rel[4096], why[96];
            if (!json_is_string(l) || eph_image_path_clean(json_string_value(l), true, rel,
                                                           sizeof(rel), why, sizeof(why)))
                return FAIL(-EINVAL, "manifest.json names a layer that is not a path");
            json_array_append_new(*layers, json_string(rel));
        }
        return 0;
    }
    if (!member(a, "index.json"))
        return FAIL(-EINVAL, "not an image archive: it has neither manifest.json (docker save) "
                             "nor index.json (OCI layout)");
    EPH_AUTOJSON json_t *doc = member_json(a, "index.json", err, errlen);
    if (!doc)
        return -EINVAL;
    /* index.json → a manifest (or a nested index, once) → its layers. */
    for (int depth = 0; depth < 3; depth++) {
        json_t *layer_list = json_object_get(doc, "layers");
        if (json_is_array(layer_list)) {
            size_t i;
            json_t *l;
            json_array_foreach(layer_list, i, l)
            {
                const char *mt = json_string_value(json_object_get(l, "mediaType"));
                char path[128];
                if (mt && strstr(mt, "zstd"))
                    return FAIL(-EINVAL,
                                "layer %zu is zstd-compressed, which is not supported: "
                                "save the image with gzip layers",
                                i);
                if (blob_path(json_object_get(l, "digest"), path, sizeof(path)))
                    return FAIL(-EINVAL, "layer %zu has no sha256 digest", i);
                json_array_append_new(*layers, json_string(path));
            }
            return 0;
        }
        json_t *first = json_array_get(json_object_get(doc, "manifests"), 0);
        char path[128];
        if (!first || blob_path(json_object_get(first, "digest"), path, sizeof(path)))
            return FAIL(-EINVAL, "index.json names no manifest with a sha256 digest");
        json_t *next = member_json(a, path, err, errlen);
        if (!next)
            return -EINVAL;
        json_decref(doc);
        doc = next;
    }
    return FAIL(-EINVAL, "index.json nests indexes too deeply");
}

static int file_digest(int fd, char *out)
{
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    unsigned char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof(buf), off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        crypto_hash_sha256_update(&st, buf, (unsigned long long)n);
        off += n;
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&st, h);
    memcpy(out, "sha256:", 7);
    sodium_bin2hex(out + 7, 65, h, sizeof(h));
    return 0;
}

int eph_image_import_archive(int root_fd, const char *path, uint64_t max_bytes,
                             struct eph_image_import_stats *st,
                             char digest[EPH_IMAGE_DIGEST_LEN + 1], char *err, size_t errlen)
{
    EPH_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return FAIL(-errno, "cannot open '%.200s': %s", path, strerror(errno));
    int rc = file_digest(fd, digest);
    if (rc)
        return FAIL(rc, "cannot read '%.200s': %s", path, strerror(-rc));
    struct archive a = {.fd = fd};
    EPH_AUTOJSON json_t *layers = NULL;
    rc = archive_index(&a, err, errlen);
    if (!rc)
        rc = find_layers(&a, &layers, err, errlen);
    if (!rc && json_array_size(layers) == 0)
        rc = FAIL(-EINVAL, "the image has no layers");
    if (!rc && json_array_size(layers) > MAX_LAYERS)
        rc = FAIL(-E2BIG, "the image has more than %u layers", MAX_LAYERS);
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        if (rc)
            break;
        const struct member *m = member(&a, json_string_value(l));
        if (!m) {
            rc = FAIL(-EINVAL, "layer %zu (%.100s) is not in the archive", i, json_string_value(l));
            break;
        }
        if (lseek(fd, (off_t)m->off, SEEK_SET) < 0) {
            rc = FAIL(-errno, "cannot read layer %zu", i);
            break;
        }
        char why[512];
        rc = eph_image_apply_layer(root_fd, fd, m->size, max_bytes, st, why, sizeof(why));
        if (rc)
            snprintf(err, errlen, "layer %zu: %s", i, why);
    }
    archive_free(&a);
    return rc;
}

int eph_image_archive_digest(const char *path, char out[EPH_IMAGE_DIGEST_LEN + 1])
{
    EPH_AUTOCLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : file_digest(fd, out);
}
