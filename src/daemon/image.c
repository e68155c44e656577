/*
 * image.c - `ephemerald image build`: the sandbox's root file system.
 *
 * The image is Debian (the host's release) with sh, coreutils, python3, curl and ca-certificates,
 * and a user worker with uid 1000, built by mmdebstrap from the machine's own apt sources (the
 * repository names no mirror). It is cached outside the clone, under a key that hashes the recipe
 * and the apt sources: a changed recipe builds a new image, an unchanged one is reused at once.
 * The image directory the server uses (var/images/default) is a symbolic link to the cached one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/id.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/text.h"
#include "daemon/commands.h"
#include "daemon/image_vm.h"
#include "image/image.h"

/* The recipe: every word of it goes into the cache key. Changing it rebuilds the image. */
#define RECIPE_VERSION "3"
static const char *const recipe_packages = "python3,curl,ca-certificates";
static const char *const recipe_hooks[] = {
    /* The worker of docs/SANDBOX.md: uid and gid 1000, home in /home/worker. */
    "chroot \"$1\" groupadd --gid 1000 worker",
    "chroot \"$1\" useradd --uid 1000 --gid 1000 --create-home --shell /bin/sh worker",
    /* No resolver configuration: inside a sandbox without network, names do not resolve. */
    "rm -f \"$1/etc/resolv.conf\" \"$1/etc/hostname\"",
    /* Mount points the jail uses. */
    "mkdir -p \"$1/proc\" \"$1/dev\" \"$1/tmp\" \"$1/sys\"",
    /* Mount points the gvisor backend uses: /.ephemeral (ephemeral-init and its statx compat
     * library) and /etc/ld.so.preload (empty here, so nothing is preloaded under the other
     * backends; gvisor mounts over it a file naming that library). They must be in the image:
     * runsc's gofer creates a missing mount point in the image directory on the host. */
    "mkdir -p \"$1/.ephemeral\" && : > \"$1/etc/ld.so.preload\"",
};
/* Run by `sh -c` on the finished tree ($1) once mmdebstrap is done (its hooks run while its own
 * /dev is still in use). The image lies on the host, readable: no set-id program in it may run
 * for a host user (the sandbox cannot use them anyway, under no_new_privs), and no device node
 * (every backend makes its own /dev; mmdebstrap's dev/console is 0666). */
static const char *const recipe_post[] = {
    "find \"$1\" -xdev -type f -perm /6000 -exec chmod ug-s {} +",
    "find \"$1/dev\" -xdev -mindepth 1 \\( -type c -o -type b -o -type p \\) -delete",
};
static const char *const recipe_dpkg_opts[] = {
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
};

const char *eph_default_init_path(void)
{
    static char path[PATH_MAX];
    const char *env = getenv("EPHEMERAL_INIT");
    if (env && *env)
        return env;
    /* Beside the program (a build directory), else where `make install` puts it: BINDIR's
     * ../lib/ephemeral (docs/DEPLOY.md). */
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
    if (n <= 0)
        return "ephemeral-init";
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    char *name = slash ? slash + 1 : path;
    snprintf(name, 64, "ephemeral-init");
    if (access(path, X_OK) == 0)
        return path;
    snprintf(name, 64, "../lib/ephemeral/ephemeral-init");
    if (access(path, X_OK) == 0)
        return path;
    snprintf(name, 64, "ephemeral-init");
    return path;
}

const char *eph_default_image_path(void)
{
    const char *env = getenv("EPHEMERAL_IMAGE");
    return env && *env ? env : "var/images/default";
}

static int read_file_into(const char *path, struct eph_buf *b)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    char chunk[4096];
    size_t n;
    int rc = 0;
    while (!rc && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        rc = eph_buf_append(b, chunk, n);
    fclose(f);
    return rc;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The machine's apt source files, in a stable order. */
static int apt_sources(char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    struct stat sb;
    if (stat("/etc/apt/sources.list", &sb) == 0 && sb.st_size > 0) {
        *out = calloc(1, sizeof(char *));
        (*out)[(*n)++] = strdup("/etc/apt/sources.list");
    }
    struct dirent **ents;
    int m = scandir("/etc/apt/sources.list.d", &ents, NULL, alphasort);
    for (int i = 0; i < m; i++) {
        const char *name = ents[i]->d_name;
        if (ends_with(name, ".list") || ends_with(name, ".sources")) {
            char **p = realloc(*out, (*n + 1) * sizeof(char *));
            if (p) {
                *out = p;
                if (asprintf(&p[*n], "/etc/apt/sources.list.d/%s", name) >= 0)
                    (*n)++;
            }
        }
        free(ents[i]);
    }
    if (m > 0)
        free(ents);
    return *n ? 0 : -ENOENT;
}

static int host_codename(char *out, size_t len)
{
    FILE *f = fopen("/etc/os-release", "re");
    if (!f)
        return -errno;
    char line[256];
    int rc = -ENOENT;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VERSION_CODENAME=", 17) == 0) {
            char *v = line + 17;
            v[strcspn(v, "\"\n")] = '\0';
            if (*v == '"')
                v++;
            rc = *v ? eph_text_format(out, len, "%s", v) : -ENOENT;
        }
    }
    fclose(f);
    return rc;
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return -errno;
    return 0;
}

/* Points link at target, replacing an older link. */
static int point_link(const char *link, const char *target)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", link);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        int rc = mkdir_p(dir);
        if (rc)
            return rc;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.new", link);
    unlink(tmp);
    if (symlink(target, tmp))
        return -errno;
    if (rename(tmp, link)) {
        int e = -errno;
        unlink(tmp);
        return e;
    }
    return 0;
}

/* Takes the build lock of one cached image; returns its descriptor, or -1 with a message. */
static int lock_cache(const char *base)
{
    char path[PATH_MAX];
    if (eph_text_format(path, sizeof(path), "%s/.lock", base)) {
        fprintf(stderr, "ephemerald: the image cache path '%s' is too long\n", base);
        return -1;
    }
    EPH_AUTOCLOSE int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "ephemerald: cannot open '%s': %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return eph_steal_fd(&fd);
    if (errno == EWOULDBLOCK) {
        fprintf(stderr, "image: another build of this image is under way; waiting for it\n");
        if (EPH_RETRY_EINTR(flock(fd, LOCK_EX)) == 0)
            return eph_steal_fd(&fd);
    }
    fprintf(stderr, "ephemerald: cannot lock '%s': %s\n", path, strerror(errno));
    return -1;
}

static void free_sources(char **sources, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(sources[i]);
    free(sources);
}

/* The recipe's cache key (16 hex digits) from the recipe, the host's release and its apt
 * sources; the release and the source files are returned for the build. 0, or a negative errno
 * with a reason in why. */
static int recipe_key(char hash[17], char *codename, size_t codelen, char ***sources,
                      size_t *nsources, char *why, size_t whylen)
{
    if (host_codename(codename, codelen)) {
        snprintf(why, whylen, "cannot tell the host's Debian release from /etc/os-release");
        return -ENOENT;
    }
    if (apt_sources(sources, nsources)) {
        snprintf(why, whylen, "this machine has no apt sources to build the image from");
        return -ENOENT;
    }
    /* The key: recipe, release, and the sources' contents. */
    struct eph_buf key;
    eph_buf_init(&key, 1u << 20);
    int rc = eph_buf_appendf(&key, "recipe %s\nsuite %s\npackages %s\n", RECIPE_VERSION, codename,
                             recipe_packages);
    for (size_t i = 0; !rc && i < sizeof(recipe_hooks) / sizeof(recipe_hooks[0]); i++)
        rc = eph_buf_appendf(&key, "hook %s\n", recipe_hooks[i]);
    for (size_t i = 0; !rc && i < sizeof(recipe_post) / sizeof(recipe_post[0]); i++)
        rc = eph_buf_appendf(&key, "post %s\n", recipe_post[i]);
    for (size_t i = 0; !rc && i < sizeof(recipe_dpkg_opts) / sizeof(recipe_dpkg_opts[0]); i++)
        rc = eph_buf_appendf(&key, "dpkg %s\n", recipe_dpkg_opts[i]);
    for (size_t i = 0; !rc && i < *nsources; i++)
        rc = read_file_into((*sources)[i], &key);
    if (rc) {
        snprintf(why, whylen, "cannot read the apt sources: %s", strerror(-rc));
        eph_buf_release(&key);
        free_sources(*sources, *nsources);
        *sources = NULL;
        *nsources = 0;
        return rc;
    }
    char full[65];
    eph_sha256_hex(key.data, key.len, full);
    eph_buf_release(&key);
    memcpy(hash, full, 16);
    hash[16] = '\0';
    return 0;
}

int eph_image_base_recipe(struct eph_image_base *b, char *why, size_t whylen)
{
    memset(b, 0, sizeof(*b));
    int rc = recipe_key(b->key, b->codename, sizeof(b->codename), &b->sources, &b->nsources, why,
                        whylen);
    if (rc)
        return rc;
    /* The default image's options and hooks, as the custom images' mmdebstrap gets them; its
     * post steps are done by eph_image_finish_root(). */
    static char dpkg[sizeof(recipe_dpkg_opts) / sizeof(recipe_dpkg_opts[0])][256];
    static char hooks[sizeof(recipe_hooks) / sizeof(recipe_hooks[0])][512];
    size_t a = 0;
    b->opts[a++] = "--variant=minbase";
    b->opts[a++] = "--mode=root";
    b->opts[a++] = "--format=directory";
    for (size_t i = 0; i < sizeof(recipe_dpkg_opts) / sizeof(recipe_dpkg_opts[0]); i++) {
        snprintf(dpkg[i], sizeof(dpkg[i]), "--dpkgopt=%s", recipe_dpkg_opts[i]);
        b->opts[a++] = dpkg[i];
    }
    for (size_t i = 0; i < sizeof(recipe_hooks) / sizeof(recipe_hooks[0]); i++) {
        snprintf(hooks[i], sizeof(hooks[i]), "--customize-hook=%s", recipe_hooks[i]);
        b->opts[a++] = hooks[i];
    }
    b->opts[a] = NULL;
    b->packages = recipe_packages;
    return 0;
}

void eph_image_base_release(struct eph_image_base *b)
{
    free_sources(b->sources, b->nsources);
    b->sources = NULL;
    b->nsources = 0;
}

int eph_image_recipe_hash(char hash[17], char *why, size_t whylen)
{
    char codename[64];
    char **sources;
    size_t nsources;
    int rc = recipe_key(hash, codename, sizeof(codename), &sources, &nsources, why, whylen);
    if (!rc)
        free_sources(sources, nsources);
    return rc;
}

/* The cache is root's alone: no host user may read the image or run its programs, and the
 * microvm backend hands QEMU its kernel and disk as descriptors instead of paths. Done at every
 * build, so that a cache made world-readable by an older version is closed too. */
static int cache_make_private(void)
{
    if (chmod(eph_image_cache_root(), 0700) != 0) {
        fprintf(stderr, "ephemerald: cannot make the image cache '%s' private: %s\n",
                eph_image_cache_root(), strerror(errno));
        return 1;
    }
    return 0;
}

static int image_build(const char *dir, bool quiet)
{
    char codename[64], hash[17], why[256];
    char **sources;
    size_t nsources;
    int rc = recipe_key(hash, codename, sizeof(codename), &sources, &nsources, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "ephemerald: %s\n", why);
        return 1;
    }

    char base[PATH_MAX], rootfs[PATH_MAX], tmp[PATH_MAX], marker[PATH_MAX];
    if (eph_text_format(base, sizeof(base), "%s/images/%s", eph_image_cache_root(), hash) ||
        eph_text_format(rootfs, sizeof(rootfs), "%s/rootfs", base) ||
        eph_text_format(marker, sizeof(marker), "%s/complete", base) ||
        eph_text_format(tmp, sizeof(tmp), "%s/rootfs.tmp", base)) {
        fprintf(stderr, "ephemerald: the image cache path '%s' is too long\n",
                eph_image_cache_root());
        return 1;
    }
    if ((rc = mkdir_p(base))) {
        fprintf(stderr, "ephemerald: cannot create '%s': %s\n", base, strerror(-rc));
        return 1;
    }
    /* Two builds of one recipe at once (two clones, two `make image`) would remove each other's
     * half-built root: the second waits for the first, then finds the image complete. The lock
     * is held until the microvm disk is built too, and released on return. */
    EPH_AUTOCLOSE int lock = lock_cache(base);
    if (lock < 0)
        return 1;
    struct stat sb;
    if (stat(marker, &sb) != 0) {
        /* A half-built image of an interrupted build is removed first. */
        char *rm[] = {"rm", "-rf", "--one-file-system", tmp, rootfs, NULL};
        eph_image_run(rm);
        fprintf(stderr, "image: building %s (Debian %s) with mmdebstrap, about a minute\n", hash,
                codename);
        char *argv[64];
        char hooks[sizeof(recipe_hooks) / sizeof(recipe_hooks[0])][512];
        char dpkg[sizeof(recipe_dpkg_opts) / sizeof(recipe_dpkg_opts[0])][256];
        char include[256];
        int a = 0;
        argv[a++] = "mmdebstrap";
        argv[a++] = "--variant=minbase";
        argv[a++] = "--mode=root";
        argv[a++] = "--format=directory";
        argv[a++] = quiet ? "--quiet" : "--verbose";
        snprintf(include, sizeof(include), "--include=%s", recipe_packages);
        argv[a++] = include;
        for (size_t i = 0; i < sizeof(recipe_dpkg_opts) / sizeof(recipe_dpkg_opts[0]); i++) {
            snprintf(dpkg[i], sizeof(dpkg[i]), "--dpkgopt=%s", recipe_dpkg_opts[i]);
            argv[a++] = dpkg[i];
        }
        for (size_t i = 0; i < sizeof(recipe_hooks) / sizeof(recipe_hooks[0]); i++) {
            snprintf(hooks[i], sizeof(hooks[i]), "--customize-hook=%s", recipe_hooks[i]);
            argv[a++] = hooks[i];
        }
        argv[a++] = codename;
        argv[a++] = tmp;
        for (size_t i = 0; i < nsources && a < 62; i++)
            argv[a++] = sources[i];
        argv[a] = NULL;
        if ((rc = eph_image_run(argv))) {
            fprintf(stderr, "ephemerald: mmdebstrap failed; the image was not built\n");
            return 1;
        }
        for (size_t i = 0; i < sizeof(recipe_post) / sizeof(recipe_post[0]); i++) {
            char *post[] = {"sh", "-c", (char *)recipe_post[i], "sh", tmp, NULL};
            if ((rc = eph_image_run(post))) {
                fprintf(stderr, "ephemerald: '%s' failed; the image was not built\n",
                        recipe_post[i]);
                return 1;
            }
        }
        if (rename(tmp, rootfs)) {
            fprintf(stderr, "ephemerald: cannot move the image into place: %s\n", strerror(errno));
            return 1;
        }
        int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dprintf(fd, "%s\n", hash);
            close(fd);
        }
        fprintf(stderr, "image: built %s\n", rootfs);
    }
    free_sources(sources, nsources);
    if ((rc = point_link(dir, rootfs))) {
        fprintf(stderr, "ephemerald: cannot point '%s' at the image: %s\n", dir, strerror(-rc));
        return 1;
    }
    /* The microvm backend's root disk and kernel, next to the image (src/daemon/image_vm.c).
     * Only that backend needs them: failing here is a warning, not a failed build. */
    if (eph_image_vm_build(eph_image_cache_root(), base, quiet) != 0)
        fprintf(stderr, "image: the microvm backend's disk and kernel were not built (see above); "
                        "the other backends are unaffected\n");
    return cache_make_private();
}

int eph_cmd_image(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "build") != 0) {
        fprintf(stderr, "usage: ephemerald image build [--dir DIR] [--verbose]\n");
        return 2;
    }
    const char *dir = eph_default_image_path();
    bool quiet = true;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--verbose") == 0)
            quiet = false;
        else {
            fprintf(stderr, "ephemerald image build: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (geteuid() != 0) {
        fprintf(stderr, "ephemerald image build: must run as root (mmdebstrap --mode=root)\n");
        return 1;
    }
    return image_build(dir, quiet);
}
