/*
 * tree.c - a root directory written through its descriptor only. See image.h.
 *
 * Every path is walked one component at a time from the root's descriptor, each directory opened
 * with O_NOFOLLOW: a symbolic link met on the way is refused, never followed, so an archive that
 * plants "etc -> /etc" and then writes "etc/passwd" writes nothing outside the root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "image/image.h"

#define MAX_DEPTH 128

int eph_image_path_clean(const char *in, bool allow_absolute, char *out, size_t outlen, char *err,
                         size_t errlen)
{
    size_t o = 0;
    const char *p = in;
    if (*p == '/' && !allow_absolute) {
        snprintf(err, errlen, "absolute path refused");
        return -EINVAL;
    }
    while (*p) {
        while (*p == '/')
            p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 0)
            break;
        if (n == 1 && p[0] == '.') {
            p += n;
            continue;
        }
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            snprintf(err, errlen, "a '..' component refused");
            return -EINVAL;
        }
        if (n > 255 || o + n + 2 > outlen) {
            snprintf(err, errlen, "path too long");
            return -EINVAL;
        }
        if (o)
            out[o++] = '/';
        memcpy(out + o, p, n);
        o += n;
        p += n;
    }
    if (o == 0) {
        snprintf(err, errlen, "empty path");
        return -EINVAL;
    }
    out[o] = '\0';
    return 0;
}

int eph_image_open_parent(int root_fd, const char *rel, bool create, const char **base)
{
    int fd = fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    const char *p = rel;
    char comp[256];
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash)
            break;
        size_t n = (size_t)(slash - p);
        if (n == 0 || n >= sizeof(comp)) {
            close(fd);
            return -EINVAL;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        struct stat sb;
        if (fstatat(fd, comp, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT || !create || (mkdirat(fd, comp, 0755) && errno != EEXIST)) {
                int e = -errno;
                close(fd);
                return e;
            }
        } else if (S_ISLNK(sb.st_mode)) {
            close(fd);
            return -ELOOP;
        } else if (!S_ISDIR(sb.st_mode)) {
            close(fd);
            return -ENOTDIR;
        }
        int next = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = -errno;
        close(fd);
        if (next < 0)
            return e == -ENOTDIR ? -ELOOP : e;
        fd = next;
        p = slash + 1;
    }
    *base = p;
    return fd;
}

static int remove_tree(int dir_fd, const char *name, int depth)
{
    struct stat sb;
    if (fstatat(dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(sb.st_mode))
        return unlinkat(dir_fd, name, 0) ? -errno : 0;
    if (depth > MAX_DEPTH)
        return -ELOOP;
    int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        rc = remove_tree(dirfd(d), e->d_name, depth + 1);
    }
    closedir(d);
    if (!rc && unlinkat(dir_fd, name, AT_REMOVEDIR))
        rc = -errno;
    return rc;
}

int eph_image_remove_at(int dir_fd, const char *name)
{
    return remove_tree(dir_fd, name, 0);
}

int eph_image_create_file(int root_fd, const char *rel, mode_t mode)
{
    const char *base;
    EPH_AUTOCLOSE int dir = eph_image_open_parent(root_fd, rel, true, &base);
    if (dir < 0)
        return dir;
    int rc = eph_image_remove_at(dir, base);
    if (rc)
        return rc;
    int fd = openat(dir, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    if (fd < 0)
        return -errno;
    if (fchmod(fd, mode & 0777)) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int eph_image_write_file(int root_fd, const char *rel, const void *data, size_t len, mode_t mode)
{
    EPH_AUTOCLOSE int fd = eph_image_create_file(root_fd, rel, mode);
    if (fd < 0)
        return fd;
    return eph_fileio_write_all(fd, data, len);
}

/* Opens path inside the root as the sandbox would see it: symbolic links resolved against the
 * root, never beyond it. */
static int open_in_root(int root_fd, const char *path, int flags)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = RESOLVE_IN_ROOT};
    int fd = (int)syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
    return fd < 0 ? -errno : fd;
}

/* A directory at the top of the root, whatever stood there before. */
static int top_dir(int root_fd, const char *name, mode_t mode)
{
    struct stat sb;
    if (fstatat(root_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sb.st_mode)) {
        int rc = eph_image_remove_at(root_fd, name);
        if (rc)
            return rc;
    }
    if (mkdirat(root_fd, name, mode) && errno != EEXIST)
        return -errno;
    return fchmodat(root_fd, name, mode, 0) ? -errno : 0;
}

/* Appends line to rel when no line of it starts with prefix (the user or group name). */
static int add_line(int root_fd, const char *rel, const char *prefix, const char *line,
                    const char *first)
{
    const char *base;
    EPH_AUTOCLOSE int dir = eph_image_open_parent(root_fd, rel, true, &base);
    if (dir < 0)
        return dir;
    struct stat sb;
    if (fstatat(dir, base, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode))
        return -EINVAL;
    EPH_AUTOCLOSE int fd = openat(dir, base, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    char buf[65536];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    size_t plen = strlen(prefix);
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, prefix, plen))
            return 0;
    if (lseek(fd, 0, SEEK_END) < 0)
        return -errno;
    int rc = 0;
    if (n == 0 && first)
        rc = eph_fileio_write_all(fd, first, strlen(first));
    else if (n > 0 && buf[n - 1] != '\n')
        rc = eph_fileio_write_all(fd, "\n", 1);
    return rc ? rc : eph_fileio_write_all(fd, line, strlen(line));
}

struct walk {
    uint64_t bytes;
    dev_t dev;
    bool clean; /* strip set-id bits, remove device nodes, FIFOs and sockets */
};

static int walk(int dir_fd, struct walk *w, int depth)
{
    if (depth > MAX_DEPTH)
        return -ELOOP;
    int fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    /* The duplicate shares dir_fd's offset, which an earlier walk left at the end. */
    rewinddir(d);
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat sb;
        if (fstatat(dir_fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            break;
        }
        if (sb.st_dev != w->dev)
            continue; /* a mount point: not part of the image */
        if (S_ISDIR(sb.st_mode)) {
            if (w->clean && (sb.st_mode & 06000) &&
                fchmodat(dir_fd, e->d_name, sb.st_mode & 01777, 0))
                rc = -errno;
            int sub = openat(dir_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (!rc && sub < 0)
                rc = -errno;
            if (!rc)
                rc = walk(sub, w, depth + 1);
            if (sub >= 0)
                close(sub);
        } else if (S_ISREG(sb.st_mode)) {
            w->bytes += (uint64_t)sb.st_size;
            if (w->clean && (sb.st_mode & 06000) &&
                fchmodat(dir_fd, e->d_name, sb.st_mode & 0777, 0))
                rc = -errno;
        } else if (!S_ISLNK(sb.st_mode) && w->clean) {
            if (unlinkat(dir_fd, e->d_name, 0))
                rc = -errno;
        }
    }
    closedir(d);
    return rc;
}

int eph_image_tree_size(int root_fd, uint64_t *bytes)
{
    struct stat sb;
    if (fstat(root_fd, &sb))
        return -errno;
    struct walk w = {.dev = sb.st_dev};
    int rc = walk(root_fd, &w, 0);
    *bytes = w.bytes;
    return rc;
}

#define FAIL(rc, ...) (snprintf(err, errlen, __VA_ARGS__), (rc) < 0 ? (rc) : -EIO)

int eph_image_finish_root(int root_fd, char *err, size_t errlen)
{
    int rc;
    EPH_AUTOCLOSE int sh = open_in_root(root_fd, "/bin/sh", O_RDONLY);
    if (sh < 0)
        return FAIL(sh, "the image has no /bin/sh: a sandbox runs every command with it");
    static const struct {
        const char *name;
        mode_t mode;
    } dirs[] = {{"proc", 0555}, {"dev", 0755}, {"sys", 0555}, {"tmp", 01777}, {".ephemeral", 0755}};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        if ((rc = top_dir(root_fd, dirs[i].name, dirs[i].mode)))
            return FAIL(rc, "cannot make /%s: %s", dirs[i].name, strerror(-rc));
    if ((rc = eph_image_write_file(root_fd, "etc/ld.so.preload", "", 0, 0644)))
        return FAIL(rc, "cannot write /etc/ld.so.preload: %s", strerror(-rc));
    if ((rc = add_line(root_fd, "etc/passwd",
                       "worker:", "worker:x:1000:1000:worker:/home/worker:/bin/sh\n",
                       "root:x:0:0:root:/root:/bin/sh\n")) ||
        (rc = add_line(root_fd, "etc/group", "worker:", "worker:x:1000:\n", "root:x:0:\n")))
        return FAIL(rc, "cannot add the worker user: %s", strerror(-rc));
    if ((rc = top_dir(root_fd, "home", 0755)))
        return FAIL(rc, "cannot make /home: %s", strerror(-rc));
    {
        EPH_AUTOCLOSE int home =
            openat(root_fd, "home", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (home < 0)
            return FAIL(-errno, "cannot open /home: %s", strerror(errno));
        struct stat sb;
        if (fstatat(home, "worker", &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(sb.st_mode) &&
            (rc = eph_image_remove_at(home, "worker")))
            return FAIL(rc, "cannot make /home/worker: %s", strerror(-rc));
        if ((mkdirat(home, "worker", 0755) && errno != EEXIST) ||
            fchownat(home, "worker", 1000, 1000, AT_SYMLINK_NOFOLLOW))
            return FAIL(-errno, "cannot make /home/worker: %s", strerror(errno));
    }
    /* The CA bundle the sandbox's programs check TLS with (through the broker's tunnels). */
    EPH_AUTOCLOSE int ca = open_in_root(root_fd, "/etc/ssl/certs/ca-certificates.crt", O_RDONLY);
    if (ca < 0) {
        EPH_AUTOCLOSE int host = open("/etc/ssl/certs/ca-certificates.crt", O_RDONLY | O_CLOEXEC);
        EPH_AUTOCLOSE int out = -1;
        rc = host < 0 ? -errno : 0;
        if (!rc &&
            (out = eph_image_create_file(root_fd, "etc/ssl/certs/ca-certificates.crt", 0644)) < 0)
            rc = out;
        if (!rc)
            rc = eph_fileio_copy_fd(host, out);
        if (rc)
            return FAIL(rc, "cannot add the CA bundle: %s", strerror(-rc));
    }
    struct stat sb;
    if (fstat(root_fd, &sb))
        return FAIL(-errno, "cannot stat the root: %s", strerror(errno));
    struct walk w = {.dev = sb.st_dev, .clean = true};
    if ((rc = walk(root_fd, &w, 0)))
        return FAIL(rc, "cannot clear set-id bits and device nodes: %s", strerror(-rc));
    return 0;
}
