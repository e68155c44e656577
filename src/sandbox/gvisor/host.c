/*
 * host.c - the gvisor backend's host state beyond one sandbox: the shared guest files and the
 * probe records. See host.h.
 *
 * A shared directory is made whole under a temporary name (<tag>-<pid>-gv<n>, which the orphan
 * sweep of gvisor.c removes if its maker dies) and renamed into place, so a reader sees it
 * complete or not at all; its key file, written last, says what it was made from. A process
 * opens it, takes a shared flock and checks that the directory it locked is still the one at the
 * path (a sweep moves a directory aside under an exclusive lock before removing it) and that its
 * key is the expected one; it keeps the descriptor, and so the lock, until it exits.
 */
#include "sandbox/gvisor/host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fileio.h"
#include "common/id.h"
#include "common/log.h"
#include "sandbox/gvisor/gvisor.h"

#define COMPONENT "sandbox"
#define SHARED_PREFIX "guest-"
#define KEY_CAP 1024
#define PROBE_RECORDS_MAX 64

/* ---- files --------------------------------------------------------------------------------- */

int eph_gvisor_write_file_at(int dfd, const char *name, const char *data, size_t len, mode_t mode)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    int rc = eph_fileio_write_all(fd, data, len);
    if (close(fd) != 0 && !rc)
        rc = -errno;
    return rc;
}

static int copy_file_at(const char *src, int dfd, const char *name, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (out < 0) {
        int e = errno;
        close(in);
        return -e;
    }
    int rc = eph_fileio_copy_fd(in, out);
    close(in);
    if (close(out) != 0 && !rc)
        rc = -errno;
    return rc;
}

static int rm_tree_at(int dfd, const char *name, int depth)
{
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    if (depth <= 0)
        return -ELOOP;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    int first = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int rc = rm_tree_at(dirfd(d), e->d_name, depth - 1);
        if (rc && !first)
            first = rc;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && !first)
        first = -errno;
    return first;
}

int eph_gvisor_rm_tree(const char *path)
{
    return rm_tree_at(AT_FDCWD, path, 4);
}

static int mkdir_ok(const char *path, mode_t mode)
{
    if (mkdir(path, mode) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* "label dev ino size mtime ctime\n" of path, appended at out + *len. */
static int ident_append(const char *label, const char *path, char *out, size_t cap, size_t *len)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    int n = snprintf(out + *len, cap - *len, "%s %llu %llu %lld %lld.%09ld %lld.%09ld\n", label,
                     (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                     (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
    if (n < 0 || (size_t)n >= cap - *len)
        return -ENAMETOOLONG;
    *len += (size_t)n;
    return 0;
}

/* The first 32 hex digits of the SHA-256 of s: a file name. */
static void hash_name(const char *s, char out[33])
{
    char hex[65];
    eph_sha256_hex(s, strlen(s), hex);
    memcpy(out, hex, 32);
    out[32] = '\0';
}

/* Up to cap-1 bytes of dfd/name, NUL-terminated; the length or a negative errno. */
static ssize_t read_small_at(int dfd, const char *name, char *buf, size_t cap, struct stat *st)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t n = -EINVAL;
    if (!st || fstat(fd, st) == 0)
        n = read(fd, buf, cap - 1);
    if (n < 0 && n != -EINVAL)
        n = -errno;
    close(fd);
    if (n >= 0)
        buf[n] = '\0';
    return n;
}

static atomic_uint tmp_seq;

/* A fresh temporary name in the run directory that the orphan sweep recognises. */
static void tmp_path(char *out, size_t cap)
{
    snprintf(out, cap, EPH_GVISOR_RUN_DIR "/sharedtmp-%d-gv%u", (int)getpid(),
             atomic_fetch_add(&tmp_seq, 1));
}

/* ---- the shared guest files ---------------------------------------------------------------- */

struct shared {
    struct shared *next;
    char key[KEY_CAP];
    char dir[PATH_MAX];
    int fd; /* the directory, LOCK_SH held for the process's life */
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;

static int shared_key(const char *init, const char *compat, char *key)
{
    size_t len = 0;
    int rc = ident_append("init", init, key, KEY_CAP, &len);
    if (!rc)
        rc = ident_append("compat", compat, key, KEY_CAP, &len);
    return rc;
}

/* Moves path aside and removes it, if no process holds it. True when it was removed. */
static bool shared_discard_at(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool removed = false;
    struct stat a, b;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
        fstatat(parent, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev) {
        char tmp[PATH_MAX];
        tmp_path(tmp, sizeof(tmp));
        if (renameat(parent, name, AT_FDCWD, tmp) == 0)
            removed = eph_gvisor_rm_tree(tmp) == 0;
    }
    close(fd);
    return removed;
}

/* The directory the descriptor holds: 0 when it is still at path, root's and private, with the
 * expected key; -ESTALE when a sweep moved it away; -EINVAL when it is not what it should be. */
static int shared_check(int fd, const char *path, const char *key)
{
    struct stat a, b, k;
    if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return -ESTALE;
    if (!S_ISDIR(a.st_mode) || a.st_uid != 0 || (a.st_mode & 077))
        return -EINVAL;
    char buf[KEY_CAP];
    ssize_t n = read_small_at(fd, "key", buf, sizeof(buf), &k);
    if (n < 0 || k.st_uid != 0 || (k.st_mode & 022) || strcmp(buf, key) != 0)
        return -EINVAL;
    return 0;
}

/* Makes the directory under a temporary name and renames it into place. 0 also when another
 * process made it first. */
static int shared_make(const char *path, const char *key, const char *init, const char *compat)
{
    char tmp[PATH_MAX];
    tmp_path(tmp, sizeof(tmp));
    if (mkdir(tmp, 0700) != 0)
        return -errno;
    int rc = 0, dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    int gfd = -1;
    if (dfd < 0 || mkdirat(dfd, "guest", 0755) != 0 ||
        (gfd = openat(dfd, "guest", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)) < 0)
        rc = -errno;
    if (!rc && (rc = copy_file_at(init, gfd, "init", 0755)) != 0)
        EPH_ERROR(COMPONENT, "cannot copy ephemeral-init '%s': %s", init, strerror(-rc));
    if (!rc && (rc = copy_file_at(compat, gfd, EPH_GVISOR_COMPAT_NAME, 0644)) != 0)
        EPH_ERROR(COMPONENT, "cannot copy the gvisor compat library '%s': %s", compat,
                  strerror(-rc));
    static const char preload[] = EPH_GVISOR_GUEST_MOUNT "/" EPH_GVISOR_COMPAT_NAME "\n";
    if (!rc)
        rc = eph_gvisor_write_file_at(dfd, "ld.so.preload", preload, sizeof(preload) - 1, 0644);
    /* A source that changed while it was copied: the copies may be of neither version. */
    char now[KEY_CAP];
    if (!rc && (shared_key(init, compat, now) != 0 || strcmp(now, key) != 0))
        rc = -EAGAIN;
    if (!rc)
        rc = eph_gvisor_write_file_at(dfd, "key", key, strlen(key), 0600);
    if (gfd >= 0)
        close(gfd);
    if (dfd >= 0)
        close(dfd);
    if (!rc && rename(tmp, path) != 0)
        rc = (errno == EEXIST || errno == ENOTEMPTY) ? 1 : -errno;
    if (rc) {
        (void)eph_gvisor_rm_tree(tmp);
        return rc > 0 ? 0 : rc;
    }
    EPH_DEBUG(COMPONENT, "made the shared gVisor guest files '%s'", path);
    (void)eph_gvisor_shared_sweep(); /* a new build: the old one's copies are idle now */
    return 0;
}

/* Opens (making it first if need be) and locks the shared directory for key. */
static int shared_open(struct shared *e, const char *init, const char *compat)
{
    char name[sizeof(SHARED_PREFIX) + 33];
    memcpy(name, SHARED_PREFIX, sizeof(SHARED_PREFIX) - 1);
    hash_name(e->key, name + sizeof(SHARED_PREFIX) - 1);
    snprintf(e->dir, sizeof(e->dir), EPH_GVISOR_RUN_DIR "/%s", name);
    int rc = mkdir_ok(EPH_GVISOR_RUN_ROOT, 0755);
    if (!rc)
        rc = mkdir_ok(EPH_GVISOR_RUN_DIR, 0700);
    for (int tries = 0; !rc && tries < 4; tries++) {
        int fd = open(e->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            rc = errno == ENOENT ? shared_make(e->dir, e->key, init, compat) : -errno;
            if (rc == -EAGAIN)
                rc = 0;
            continue;
        }
        while ((rc = flock(fd, LOCK_SH)) != 0 && errno == EINTR)
            ;
        rc = rc ? -errno : shared_check(fd, e->dir, e->key);
        if (!rc) {
            (void)futimens(fd, NULL); /* taken up now: not idle */
            e->fd = fd;
            return 0;
        }
        close(fd);
        if (rc == -EINVAL) {
            EPH_WARN(COMPONENT, "'%s' is not the expected copy of the guest files; replaced",
                     e->dir);
            (void)shared_discard_at(AT_FDCWD, e->dir);
        }
        rc = 0; /* moved away or discarded: look again */
    }
    return rc ? rc : -EAGAIN;
}

int eph_gvisor_shared_get(const char *init, const char *compat, char *dir, size_t cap)
{
    struct shared *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    int rc = shared_key(init, compat, e->key);
    if (rc) {
        free(e);
        return rc;
    }
    pthread_mutex_lock(&shared_mu);
    for (struct shared *s = shared_list; s; s = s->next) {
        if (strcmp(s->key, e->key) == 0) {
            snprintf(dir, cap, "%s", s->dir);
            pthread_mutex_unlock(&shared_mu);
            free(e);
            return 0;
        }
    }
    rc = shared_open(e, init, compat);
    if (!rc) {
        e->next = shared_list;
        shared_list = e;
        snprintf(dir, cap, "%s", e->dir);
    }
    pthread_mutex_unlock(&shared_mu);
    if (rc)
        free(e);
    return rc;
}

int eph_gvisor_shared_sweep(void)
{
    DIR *d = opendir(EPH_GVISOR_RUN_DIR);
    if (!d)
        return 0;
    int removed = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (strncmp(e->d_name, SHARED_PREFIX, sizeof(SHARED_PREFIX) - 1) != 0 ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            now - st.st_mtime < EPH_GVISOR_SHARED_IDLE_S)
            continue;
        if (shared_discard_at(dirfd(d), e->d_name)) {
            EPH_DEBUG(COMPONENT, "removed the idle shared gVisor guest files '%s'", e->d_name);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

/* ---- probe records ------------------------------------------------------------------------- */

int eph_gvisor_probe_ident(const char *runsc, const char *init, const char *compat,
                           const char *root, char *out, size_t cap)
{
    const char *files[] = {runsc, init, compat, root};
    char boot[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, boot, sizeof(boot) - 1);
        boot[n > 0 ? n : 0] = '\0';
        boot[strcspn(boot, "\n")] = '\0';
        close(fd);
    }
    int len = snprintf(out, cap, "boot %s\n", boot);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        struct stat st;
        if (len < 0 || (size_t)len >= cap || stat(files[i], &st) != 0)
            return -ENOENT;
        len += snprintf(out + len, cap - (size_t)len, "%s %llu %llu %lld.%09ld %lld\n", files[i],
                        (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                        (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_size);
    }
    return len > 0 && (size_t)len < cap ? 0 : -ENAMETOOLONG;
}

static void record_name(const char *ident, char out[33])
{
    hash_name(ident, out);
}

int eph_gvisor_probe_recorded_version(const char *ident, char *version, size_t cap)
{
    char name[33], buf[512];
    record_name(ident, name);
    int dfd = open(EPH_GVISOR_PROBE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return -ENOENT;
    ssize_t n = read_small_at(dfd, name, buf, sizeof(buf), NULL);
    close(dfd);
    if (n <= 0)
        return -ENOENT;
    size_t len = strcspn(buf, "\n");
    if (buf[len] != '\n' || len >= cap || strncmp(buf, "runsc version ", 14) != 0)
        return -ENOENT;
    memcpy(version, buf, len);
    version[len] = '\0';
    return 0;
}

bool eph_gvisor_probe_remembered(const char *version, const char *ident)
{
    char name[33], buf[4096];
    struct stat st;
    record_name(ident, name);
    int dfd = open(EPH_GVISOR_PROBE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return false;
    ssize_t n = read_small_at(dfd, name, buf, sizeof(buf), &st);
    close(dfd);
    /* Only a regular file of root's that no one else may write counts. */
    if (n <= 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
        return false;
    size_t vlen = strlen(version);
    return strncmp(buf, version, vlen) == 0 && buf[vlen] == '\n' &&
           strcmp(buf + vlen + 1, ident) == 0;
}

/* Past PROBE_RECORDS_MAX records (one per build of the init, runsc or image on this boot), all
 * but the newest are removed: a later process of theirs probes again. */
static void records_prune(int dfd, const char *keep)
{
    DIR *d = fdopendir(dup(dfd));
    if (!d)
        return;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        count += e->d_name[0] != '.';
    if (count > PROBE_RECORDS_MAX) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.' && strcmp(e->d_name, keep) != 0)
                (void)unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

void eph_gvisor_probe_remember(const char *version, const char *ident)
{
    char name[33], tmp[64];
    record_name(ident, name);
    if (mkdir_ok(EPH_GVISOR_RUN_ROOT, 0755) != 0 || mkdir_ok(EPH_GVISOR_PROBE_DIR, 0755) != 0)
        return;
    int dfd = open(EPH_GVISOR_PROBE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return;
    snprintf(tmp, sizeof(tmp), ".%s.%d", name, (int)getpid());
    size_t vlen = strlen(version), ilen = strlen(ident);
    char *text = malloc(vlen + 1 + ilen + 1);
    int rc = text ? 0 : -ENOMEM;
    if (text) {
        memcpy(text, version, vlen);
        text[vlen] = '\n';
        memcpy(text + vlen + 1, ident, ilen + 1);
        (void)unlinkat(dfd, tmp, 0);
        rc = eph_gvisor_write_file_at(dfd, tmp, text, vlen + 1 + ilen, 0644);
        free(text);
    }
    if (rc || renameat(dfd, tmp, dfd, name) != 0)
        (void)unlinkat(dfd, tmp, 0);
    else
        records_prune(dfd, name);
    close(dfd);
}
