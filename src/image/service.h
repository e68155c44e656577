/*
 * service.h - images as the server and `ephemerald image` create them (service.c): the record in
 * the store and its build, at most max_concurrent at a time, each in a process of its own
 * (image.h, build.c). docs/IMAGES.md.
 */
#ifndef EPH_IMAGE_SERVICE_H
#define EPH_IMAGE_SERVICE_H

#include "image/image.h"
#include "store/store.h"

struct eph_images_config {
    const char *self_exe; /* the ephemerald program the builds run */
    const char *base_key; /* the default image's recipe key (its release and apt sources) */
    unsigned timeout_seconds;
    uint64_t max_bytes;
    unsigned max_concurrent;
    const char *const *hide; /* the server's state, covered in the build's mount namespace */
    size_t nhide;
};

struct eph_images;
int eph_images_new(struct eph_store *st, const struct eph_images_config *cfg,
                   struct eph_images **out) __attribute__((warn_unused_result));
/* Kills the builds under way and gives up the waiting ones (each recorded as failed), then frees.
 */
void eph_images_free(struct eph_images *im);

/* Defines an image of org_id ("" or NULL: the operator's) from a canonical recipe, or from an
 * image archive (archive set, canonical NULL). Found in the cache: ready at once. Else it builds,
 * in the background (wait false: *out says "building") or before it returns (wait true). *out is
 * the record as stored. -EINVAL (a bad name; err says why), -EEXIST (the name is taken), or
 * another store error. */
int eph_images_create(struct eph_images *im, const char *org_id, const char *name,
                      const json_t *canonical, const char *archive, bool wait,
                      struct eph_image_rec *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* The default image's digest: the empty recipe's on this host's base. */
int eph_images_default_digest(struct eph_images *im, char out[EPH_IMAGE_DIGEST_LEN + 1])
    __attribute__((warn_unused_result));
/* Whether the root of digest is built and complete in the cache. */
bool eph_images_in_cache(const char *digest);
/* Whether the build writing log_path is under way here. */
bool eph_images_building(struct eph_images *im, const char *log_path);
/* Waits until a build starts or ends, or ms pass. */
void eph_images_wait(struct eph_images *im, unsigned ms);

/* The image object of the API: {"object": "image", name, status, digest, size_bytes, packages,
 * created_at, error, owner}. */
json_t *eph_image_json(const struct eph_image_rec *r);

#endif
