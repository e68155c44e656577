/*
 * image_vm.c - the microvm backend's root disk and kernel, built next to the image. See
 * image_vm.h.
 */
#include "daemon/image_vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/fileio.h"
#include "common/text.h"

/* Changing how root.img is made (or what the marker means) rebuilds it. */
#define DISK_RECIPE "1"
/* The metapackage that names the current cloud kernel of the release. */
#define KERNEL_META "linux-image-cloud-amd64"
#define OUTPUT_CAP (1u << 20)

/* What the guest needs from the kernel, in load order: a symbol the config must set to y (built
 * in: nothing to do) or m (the module at that path under lib/modules/<version>/ goes into the
 * initramfs). virtio_ring has no symbol of its own: CONFIG_VIRTIO builds it beside virtio. */
static const struct {
    const char *symbol;
    const char *path;
} needed[] = {
    {"CONFIG_VIRTIO", "kernel/drivers/virtio/virtio_ring.ko"},
    {"CONFIG_VIRTIO", "kernel/drivers/virtio/virtio.ko"},
    {"CONFIG_VIRTIO_MMIO", "kernel/drivers/virtio/virtio_mmio.ko"},
    {"CONFIG_VIRTIO_BLK", "kernel/drivers/block/virtio_blk.ko"},
    {"CONFIG_VIRTIO_CONSOLE", "kernel/drivers/char/virtio_console.ko"},
    {"CONFIG_CRC16", "kernel/lib/crc16.ko"},
    {"CONFIG_CRYPTO_CRC32C", "kernel/crypto/crc32c_generic.ko"},
    {"CONFIG_FS_MBCACHE", "kernel/fs/mbcache.ko"},
    {"CONFIG_JBD2", "kernel/fs/jbd2/jbd2.ko"},
    {"CONFIG_EXT4_FS", "kernel/fs/ext4/ext4.ko"},
};

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return -errno;
    return 0;
}

/* Runs argv in cwd (NULL: ours). With out, its stdout is collected there (capped); else it goes
 * to ours unless quiet. stderr stays ours: the tools' own messages are the best diagnosis. */
static int run(char *const argv[], const char *cwd, struct eph_buf *out, bool quiet)
{
    int p[2] = {-1, -1};
    if (out && pipe2(p, O_CLOEXEC) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        if (out) {
            close(p[0]);
            close(p[1]);
        }
        return e;
    }
    if (pid == 0) {
        if (cwd && chdir(cwd) != 0)
            _exit(126);
        if (out)
            dup2(p[1], 1);
        else if (quiet) {
            int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (null >= 0)
                dup2(null, 1);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "ephemerald: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int rc = 0;
    if (out) {
        close(p[1]);
        char chunk[4096];
        for (;;) {
            ssize_t n = read(p[0], chunk, sizeof(chunk));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            if (!rc)
                rc = eph_buf_append(out, chunk, (size_t)n);
        }
        close(p[0]);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -errno;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        return -EIO;
    return rc;
}

static void rm_rf(const char *path)
{
    char *argv[] = {"rm", "-rf", "--one-file-system", (char *)path, NULL};
    (void)run(argv, NULL, NULL, true);
}

static int copy_file(const char *src, const char *dst, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int outfd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (outfd < 0) {
        int e = -errno;
        close(in);
        return e;
    }
    int rc = eph_fileio_copy_fd(in, outfd);
    close(in);
    if (close(outfd) != 0 && !rc)
        rc = -errno;
    return rc;
}

static int write_text(const char *path, const char *text)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.new", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    size_t n = strlen(text);
    ssize_t w;
    do
        w = write(fd, text, n);
    while (w < 0 && errno == EINTR);
    int rc = w == (ssize_t)n ? 0 : -EIO;
    if (close(fd) != 0 && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path) != 0)
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}

/* True when path holds exactly text. */
static bool file_is(const char *path, const char *text)
{
    char buf[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return strcmp(buf, text) == 0;
}

/* The first file in dir whose name starts with prefix, as dir/name. */
static int find_prefixed(const char *dir, const char *prefix, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int rc = -ENOENT;
    struct dirent *e;
    while (rc && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(out, cap, "%s/%s", dir, e->d_name);
            rc = 0;
        }
    }
    closedir(d);
    return rc;
}

/* ---- the kernel ------------------------------------------------------------------------ */

/* "  Depends: linux-image-6.1.0-57-cloud-amd64" out of `apt-cache depends`. */
static int kernel_package(char *pkg, size_t cap)
{
    struct eph_buf out;
    eph_buf_init(&out, OUTPUT_CAP);
    char *argv[] = {"apt-cache", "depends", KERNEL_META, NULL};
    int rc = run(argv, NULL, &out, true);
    if (!rc) {
        rc = -ENOENT;
        for (char *line = out.data; line && *line;
             line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
            char name[128];
            if (sscanf(line, " Depends: %127[A-Za-z0-9.+-]", name) == 1 &&
                strncmp(name, "linux-image-", 12) == 0) {
                snprintf(pkg, cap, "%s", name);
                rc = 0;
                break;
            }
        }
    }
    eph_buf_release(&out);
    return rc;
}

static int package_version(const char *pkg, char *ver, size_t cap)
{
    struct eph_buf out;
    eph_buf_init(&out, OUTPUT_CAP);
    char *argv[] = {"apt-cache", "show", "--no-all-versions", (char *)pkg, NULL};
    int rc = run(argv, NULL, &out, true);
    if (!rc) {
        char *v = strstr(out.data ? out.data : "", "\nVersion: ");
        if (!v && out.data && strncmp(out.data, "Version: ", 9) == 0)
            v = out.data - 1;
        rc = -ENOENT;
        if (v) {
            v += 10;
            size_t n = strcspn(v, "\n");
            if (n && n < cap) {
                /* A cache directory name: an epoch's ':' and anything odd become '_'. */
                for (size_t i = 0; i < n; i++) {
                    char c = v[i];
                    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '.' || c == '+' || c == '~' ||
                              c == '-';
                    ver[i] = ok ? c : '_';
                }
                ver[n] = '\0';
                rc = 0;
            }
        }
    }
    eph_buf_release(&out);
    return rc;
}

/* The value of a symbol in a kernel config: 'y', 'm', or 0 when it is not set. */
static char config_value(const char *config, const char *symbol)
{
    size_t n = strlen(symbol);
    for (const char *p = config; (p = strstr(p, symbol)) != NULL; p += n) {
        if ((p == config || p[-1] == '\n') && p[n] == '=')
            return p[n + 1] == 'y' || p[n + 1] == 'm' ? p[n + 1] : 0;
    }
    return 0;
}

static int read_all(const char *path, struct eph_buf *b)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char chunk[16384];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0)
                rc = -errno;
            break;
        }
        if ((rc = eph_buf_append(b, chunk, (size_t)n)))
            break;
    }
    close(fd);
    return rc;
}

/* From the unpacked package in x/ to a kernel directory in out/: vmlinuz, config, modules/. */
static int kernel_assemble(const char *x, const char *out)
{
    char boot[PATH_MAX], src[PATH_MAX], dst[PATH_MAX + 64], mods[PATH_MAX];
    int rc = eph_text_format(boot, sizeof(boot), "%s/boot", x);
    if (!rc)
        rc = mkdir_p(out);
    if (rc)
        return rc;
    if ((rc = find_prefixed(boot, "vmlinuz-", src, sizeof(src)))) {
        fprintf(stderr, "ephemerald: the kernel package has no /boot/vmlinuz-*\n");
        return rc;
    }
    char kver[128];
    if ((rc = eph_text_format(kver, sizeof(kver), "%s",
                              strrchr(src, '/') + 1 + strlen("vmlinuz-"))) ||
        (rc = eph_text_format(dst, sizeof(dst), "%s/vmlinuz", out)) ||
        (rc = copy_file(src, dst, 0644)))
        return rc;
    if ((rc = eph_text_format(src, sizeof(src), "%s/config-%s", boot, kver)) ||
        (rc = eph_text_format(dst, sizeof(dst), "%s/config", out)))
        return rc;
    if ((rc = copy_file(src, dst, 0644))) {
        fprintf(stderr, "ephemerald: the kernel package has no /boot/config-%s\n", kver);
        return rc;
    }
    struct eph_buf config;
    eph_buf_init(&config, 4u << 20);
    if ((rc = read_all(dst, &config))) {
        eph_buf_release(&config);
        return rc;
    }
    if ((rc = eph_text_format(mods, sizeof(mods), "%s/modules", out)) || (rc = mkdir_p(mods))) {
        eph_buf_release(&config);
        return rc;
    }
    int nmod = 0;
    for (size_t i = 0; !rc && i < sizeof(needed) / sizeof(needed[0]); i++) {
        char v = config_value(config.data ? config.data : "", needed[i].symbol);
        if (v == 'y')
            continue;
        if (v != 'm') {
            fprintf(stderr, "ephemerald: the cloud kernel %s lacks %s\n", kver, needed[i].symbol);
            rc = -ENOTSUP;
            break;
        }
        const char *base = strrchr(needed[i].path, '/') + 1;
        if ((rc = eph_text_format(src, sizeof(src), "%s/lib/modules/%s/%s", x, kver,
                                  needed[i].path)) ||
            (rc = eph_text_format(dst, sizeof(dst), "%s/%02d-%s", mods, nmod++, base)) ||
            (rc = copy_file(src, dst, 0644)))
            fprintf(stderr, "ephemerald: cannot copy the module '%s': %s\n", src, strerror(-rc));
    }
    eph_buf_release(&config);
    return rc;
}

/* CACHE/kernels/<package>_<version>, fetched and unpacked unless it is there already. */
/* A system user's uid from /etc/passwd itself (fgetpwent, not getpwnam): no NSS modules, so that
 * the statically linked ephemeral-sandbox, which links this file, stays free of them. */
static int system_user_uid(const char *name, uid_t *uid)
{
    FILE *f = fopen("/etc/passwd", "re");
    if (!f)
        return -errno;
    int rc = -ENOENT;
    struct passwd *pw;
    while ((pw = fgetpwent(f)))
        if (strcmp(pw->pw_name, name) == 0) {
            *uid = pw->pw_uid;
            rc = 0;
            break;
        }
    fclose(f);
    return rc;
}

static int kernel_fetch(const char *cache, char *kdir, size_t cap, bool quiet)
{
    char pkg[128], ver[96];
    int rc = kernel_package(pkg, sizeof(pkg));
    if (rc) {
        fprintf(stderr,
                "ephemerald: apt knows no %s (is the package index current? apt-get "
                "update)\n",
                KERNEL_META);
        return rc;
    }
    if ((rc = package_version(pkg, ver, sizeof(ver)))) {
        fprintf(stderr, "ephemerald: apt has no version of %s\n", pkg);
        return rc;
    }
    snprintf(kdir, cap, "%s/kernels/%s_%s", cache, pkg, ver);
    char marker[PATH_MAX + 16], tmp[PATH_MAX + 16], x[PATH_MAX + 32], out[PATH_MAX + 32];
    snprintf(marker, sizeof(marker), "%s/complete", kdir);
    if (access(marker, F_OK) == 0)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s.tmp", kdir);
    rm_rf(tmp);
    if ((rc = mkdir_p(tmp)))
        return rc;
    /* apt drops to _apt to download; let it write here rather than warn and do it as root. */
    uid_t apt = 0;
    if (system_user_uid("_apt", &apt) == 0 && chown(tmp, apt, 0) != 0)
        fprintf(stderr, "ephemerald: cannot hand '%s' to _apt: %s\n", tmp, strerror(errno));
    fprintf(stderr, "image: fetching the kernel %s %s for the microvm backend\n", pkg, ver);
    char *dl[] = {"apt-get", "download", quiet ? "-qq" : "-q", pkg, NULL};
    if ((rc = run(dl, tmp, NULL, quiet))) {
        fprintf(stderr, "ephemerald: apt-get download %s failed\n", pkg);
        rm_rf(tmp);
        return rc;
    }
    char deb[PATH_MAX + 64], prefix[160];
    snprintf(prefix, sizeof(prefix), "%s_", pkg);
    if ((rc = find_prefixed(tmp, prefix, deb, sizeof(deb)))) {
        fprintf(stderr, "ephemerald: apt-get download left no %s*.deb\n", prefix);
        rm_rf(tmp);
        return rc;
    }
    snprintf(x, sizeof(x), "%s/x", tmp);
    snprintf(out, sizeof(out), "%s/out", tmp);
    char *unpack[] = {"dpkg-deb", "-x", deb, x, NULL};
    if ((rc = run(unpack, NULL, NULL, quiet))) {
        fprintf(stderr, "ephemerald: dpkg-deb -x %s failed\n", deb);
        rm_rf(tmp);
        return rc;
    }
    rc = kernel_assemble(x, out);
    if (!rc) {
        char text[300];
        if (!(rc = eph_text_format(text, sizeof(text), "%s %s\n", pkg, ver)) &&
            !(rc = eph_text_format(marker, sizeof(marker), "%s/complete", out)))
            rc = write_text(marker, text);
    }
    if (!rc) {
        rm_rf(kdir);
        if (rename(out, kdir) != 0)
            rc = -errno;
    }
    rm_rf(tmp);
    if (!rc)
        fprintf(stderr, "image: kernel in %s\n", kdir);
    return rc;
}

/* ---- the root disk --------------------------------------------------------------------- */

static uint64_t tree_bytes, tree_inodes;

static int tree_count(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    tree_inodes++;
    /* Whole blocks, as ext4 stores them, plus an inode's worth for the metadata. */
    tree_bytes += (((uint64_t)st->st_size + 4095u) & ~(uint64_t)4095u) + 256u;
    return 0;
}

static int disk_build(const char *rootfs, const char *img, bool quiet)
{
    tree_bytes = tree_inodes = 0;
    if (nftw(rootfs, tree_count, 64, FTW_PHYS | FTW_MOUNT) != 0) {
        fprintf(stderr, "ephemerald: cannot walk '%s': %s\n", rootfs, strerror(errno));
        return -EIO;
    }
    /* Room for ext4's own metadata and a margin; nothing is ever written to it. */
    uint64_t mib = (tree_bytes + tree_bytes / 4) / (1u << 20) + 64;
    char tmp[PATH_MAX + 8], size[32], inodes[32];
    if (eph_text_format(tmp, sizeof(tmp), "%s.tmp", img))
        return -ENAMETOOLONG;
    snprintf(size, sizeof(size), "%lluM", (unsigned long long)mib);
    snprintf(inodes, sizeof(inodes), "%llu",
             (unsigned long long)(tree_inodes + tree_inodes / 4 + 1024));
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    close(fd);
    fprintf(stderr, "image: making the microvm root disk (%s, ext4)\n", size);
    /* No journal: the disk is attached read-only and never written; -d copies the tree with its
     * owners and modes without mounting anything. */
    char *argv[] = {"mkfs.ext4",
                    "-q",
                    "-F",
                    "-O",
                    "^has_journal",
                    "-m",
                    "0",
                    "-N",
                    inodes,
                    "-L",
                    "ephemeral-root",
                    "-E",
                    "root_owner=0:0",
                    "-d",
                    (char *)rootfs,
                    tmp,
                    size,
                    NULL};
    int rc = run(argv, NULL, NULL, quiet);
    if (rc) {
        fprintf(stderr, "ephemerald: mkfs.ext4 -d failed (e2fsprogs 1.43 or later is needed)\n");
        unlink(tmp);
        return rc;
    }
    if (chmod(tmp, 0644) != 0 || rename(tmp, img) != 0) {
        rc = -errno;
        unlink(tmp);
    }
    return rc;
}

static int point_link(const char *link, const char *target)
{
    char tmp[PATH_MAX + 8], cur[PATH_MAX];
    ssize_t n = readlink(link, cur, sizeof(cur) - 1);
    if (n > 0) {
        cur[n] = '\0';
        if (strcmp(cur, target) == 0)
            return 0;
    }
    if (eph_text_format(tmp, sizeof(tmp), "%s.new", link))
        return -ENAMETOOLONG;
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return -errno;
    if (rename(tmp, link) != 0) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

int eph_image_vm_build(const char *cache, const char *image_dir, bool quiet)
{
    struct utsname u;
    if (uname(&u) == 0 && strcmp(u.machine, "x86_64") != 0) {
        fprintf(stderr, "ephemerald: the microvm backend is x86_64 only; not building its disk\n");
        return -ENOTSUP;
    }
    char kdir[PATH_MAX], rootfs[PATH_MAX + 16], vmdir[PATH_MAX + 16], img[PATH_MAX + 32];
    char link[PATH_MAX + 32], marker[PATH_MAX + 32], text[PATH_MAX + 64];
    int rc = kernel_fetch(cache, kdir, sizeof(kdir), quiet);
    if (rc)
        return rc;
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs", image_dir);
    snprintf(vmdir, sizeof(vmdir), "%s/microvm", image_dir);
    snprintf(img, sizeof(img), "%s/root.img", vmdir);
    snprintf(link, sizeof(link), "%s/kernel", vmdir);
    snprintf(marker, sizeof(marker), "%s/complete", vmdir);
    snprintf(text, sizeof(text), "disk %s\nkernel %s\n", DISK_RECIPE, kdir);
    if (file_is(marker, text))
        return 0;
    if ((rc = mkdir_p(vmdir)))
        return rc;
    /* The disk depends only on the (immutable) rootfs and its recipe: a new kernel alone does not
     * rebuild it. */
    char disk_marker[PATH_MAX + 32];
    snprintf(disk_marker, sizeof(disk_marker), "%s/root.img.recipe", vmdir);
    if (!file_is(disk_marker, "disk " DISK_RECIPE "\n") || access(img, R_OK) != 0) {
        unlink(marker);
        if ((rc = disk_build(rootfs, img, quiet)))
            return rc;
        if ((rc = write_text(disk_marker, "disk " DISK_RECIPE "\n")))
            return rc;
    }
    if ((rc = point_link(link, kdir)))
        return rc;
    if ((rc = write_text(marker, text)))
        return rc;
    fprintf(stderr, "image: microvm disk and kernel ready in %s\n", vmdir);
    return 0;
}
