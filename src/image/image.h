/*
 * image.h - images: named root file systems that runs use instead of the default (docs/IMAGES.md).
 *
 * recipe.c   names, recipes ({packages, npm, files, run}) checked and made canonical, and the
 *            digest that names a recipe's build in the cache
 * tree.c     a root directory written through its descriptor only: every path is walked one
 *            component at a time with openat(O_NOFOLLOW), so nothing written can leave the root
 * layer.c    tar layers (plain or gzip) applied to such a root, with OCI whiteouts, and image
 *            archives (`docker save`, OCI layout) read without a registry
 * cache.c    where images are kept (also linked by ephemeral-sandbox)
 * build.c    the build itself, in a process of its own inside new namespaces (never the server's
 *            process), and the parent side that starts it under a time limit and waits for it
 *
 * The image module knows nothing of the store or the API: it takes a recipe and a destination and
 * answers with a root directory or the reason why not.
 */
#ifndef EPH_IMAGE_H
#define EPH_IMAGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

/* Caps on a recipe (each refused past it with a message naming it). */
#define EPH_IMAGE_MAX_PACKAGES 256
#define EPH_IMAGE_MAX_FILES 256
#define EPH_IMAGE_MAX_RUN 64
#define EPH_IMAGE_MAX_FILE_BYTES (4u << 20)
#define EPH_IMAGE_MAX_RUN_BYTES 4096
/* "sha256:" and 64 hex digits. */
#define EPH_IMAGE_DIGEST_LEN 71

/* `[a-z0-9][a-z0-9-]{0,62}`. "default" is valid here; callers refuse it where it is reserved. */
bool eph_image_name_valid(const char *name);

/* Checks a recipe (a JSON object: "packages", "npm", "files", "run"; "name" is ignored) and makes
 * its canonical form in *out: packages and npm sorted and without duplicates, files sorted by path
 * with content as base64 and mode as a number, run in its order, every key present. 0, or
 * -EINVAL with the reason in err. */
int eph_image_recipe_canonical(const json_t *recipe, json_t **out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The digest of a canonical recipe built on a base (the default image's recipe key, which
 * covers the host's release and apt sources): "sha256:" and 64 hex digits. */
int eph_image_recipe_digest(const json_t *canonical, const char *base_key,
                            char out[EPH_IMAGE_DIGEST_LEN + 1]) __attribute__((warn_unused_result));

/* ---- tree.c: writing under a root descriptor ---- */

/* Checks a path from an archive or a recipe and makes it relative: leading "/" and "./" are
 * dropped when allow_absolute, else a leading "/" is refused; "..", empty and over-long paths are
 * refused. 0, or -EINVAL with the reason in err. */
int eph_image_path_clean(const char *in, bool allow_absolute, char *out, size_t outlen, char *err,
                         size_t errlen) __attribute__((warn_unused_result));
/* Opens the directory that will hold the last component of rel (a cleaned path), walking from
 * root_fd without following a symbolic link; with create, missing directories are made (0755).
 * Returns the descriptor and points *base at the last component, or a negative errno (-ELOOP: a
 * component is a symbolic link; -ENOTDIR: it is not a directory). */
int eph_image_open_parent(int root_fd, const char *rel, bool create, const char **base)
    __attribute__((warn_unused_result));
/* Removes name under dir_fd, a whole directory tree included, without following links. */
int eph_image_remove_at(int dir_fd, const char *name);
/* Creates a regular file at rel (replacing what was there; mode & 0777) and returns its
 * descriptor open for writing, or a negative errno. */
int eph_image_create_file(int root_fd, const char *rel, mode_t mode)
    __attribute__((warn_unused_result));
/* Writes a regular file at rel (replacing what was there) with mode & 0777 (set-id bits never
 * kept) from data. */
int eph_image_write_file(int root_fd, const char *rel, const void *data, size_t len, mode_t mode)
    __attribute__((warn_unused_result));
/* What a sandbox needs, added to any root whatever it holds: the mount points (/proc, /dev,
 * /sys, /tmp, /.ephemeral), an empty /etc/ld.so.preload, the worker user (uid and gid 1000) and
 * its home, the host's CA bundle where the image has none; then every set-id bit is cleared and
 * every device node and FIFO removed. Needs /bin/sh in the root. 0, or -errno with why. */
int eph_image_finish_root(int root_fd, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Bytes of the regular files under root_fd (not following links). */
int eph_image_tree_size(int root_fd, uint64_t *bytes) __attribute__((warn_unused_result));

/* ---- layer.c: tar layers and image archives ---- */

struct eph_image_import_stats {
    uint64_t bytes;       /* file bytes written */
    unsigned entries;     /* entries applied */
    unsigned skipped_dev; /* device nodes and FIFOs left out */
    unsigned setid_strip; /* files whose set-id bits were dropped */
    unsigned whiteouts;   /* whiteouts and opaque directories applied */
    unsigned layers;      /* layers applied */
};

/* Applies one tar layer read from fd (plain or gzip, told by its first bytes; at most len bytes
 * from its current offset, UINT64_MAX: to the end) to root_fd. max_bytes caps the file bytes of
 * the whole import (st->bytes carries over between layers). 0, or -errno with why. */
int eph_image_apply_layer(int root_fd, int fd, uint64_t len, uint64_t max_bytes,
                          struct eph_image_import_stats *st, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Imports an image archive: a `docker save` tar (manifest.json) or an OCI image layout in a tar
 * (index.json, blobs/sha256/...), its first image's layers applied in order. digest gets the
 * sha256 of the archive file. 0, or -errno with why. */
int eph_image_import_archive(int root_fd, const char *archive, uint64_t max_bytes,
                             struct eph_image_import_stats *st,
                             char digest[EPH_IMAGE_DIGEST_LEN + 1], char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* The sha256 of an archive file, as "sha256:HEX": an imported image's digest. */
int eph_image_archive_digest(const char *path, char out[EPH_IMAGE_DIGEST_LEN + 1])
    __attribute__((warn_unused_result));

/* ---- cache.c ---- */

/* The image cache: $EPHEMERAL_CACHE_DIR, else /var/cache/ephemeral as root, else the user's. */
const char *eph_image_cache_root(void);
/* Runs argv (PATH searched) to its end: 0 when it exited 0, -EIO otherwise, or -errno. */
int eph_image_run(char *const argv[]);

/* ---- build.c ---- */
/* CACHE/images/KEY, where KEY is the digest's first 16 hex digits. */
int eph_image_dir(const char *digest, char *out, size_t len) __attribute__((warn_unused_result));

struct eph_image_build_limits {
    unsigned timeout_seconds;
    uint64_t max_bytes;
};

/* The child's side: builds the canonical recipe in recipe_file (or imports the archive, when
 * archive is set) into dest (a directory that must not exist: dest.tmp is built, then renamed),
 * writing its log to stderr. Runs as root in new mount, PID, IPC and UTS namespaces where every
 * path of hide is covered with an empty tmpfs. codename and sources: the host's release and apt
 * source files, for mmdebstrap. Returns the exit status. */
struct eph_image_build_job {
    const char *recipe_file; /* the canonical recipe, or NULL */
    const char *archive;     /* an image archive to import, or NULL */
    const char *dest;        /* CACHE/images/KEY/rootfs */
    const char *codename;
    char *const *sources;
    size_t nsources;
    const char *const *hide;
    size_t nhide;
    const char *self_exe;         /* this program, for the files hook (image build-files) */
    const char *const *base_opts; /* the default image's mmdebstrap options and hooks, NULL-ended */
    const char *base_packages;    /* the default image's packages, "a,b,c" */
    /* Run in the build's namespaces once the root is in place (the microvm disk), or NULL. */
    void (*after)(const char *dest);
    struct eph_image_build_limits limits;
};
int eph_image_build_child(const struct eph_image_build_job *job);
/* `image build-files RECIPE ROOT`: the recipe's files written into ROOT (mmdebstrap's hook). */
int eph_image_build_files(const char *recipe_file, const char *root);

/* The parent's side: runs argv (this program's `image build-recipe` or `image import`) with its
 * stdout and stderr appended to log_fd, kills it (the whole PID namespace with it) after
 * timeout_seconds or once *cancel (may be NULL) is set, and waits. The child gets a fixed
 * environment (PATH, LANG, HOME, EPHEMERAL_CACHE_DIR), none of the caller's. The child prints the
 * image's size on stdout: *size_bytes. 0 on success; else -ETIMEDOUT, or -EIO with why. */
int eph_image_run_build(char *const argv[], int log_fd, unsigned timeout_seconds,
                        const atomic_bool *cancel, uint64_t *size_bytes, char *why, size_t whylen)
    __attribute__((warn_unused_result));

#endif
