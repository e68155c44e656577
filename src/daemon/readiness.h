/*
 * readiness.h - whether the server can do its work, part by part: the store, the sandbox image
 * (with its guest agent) and the sandbox backend.
 *
 * `serve` checks every part at start-up and either refuses to start or starts not ready, as the
 * configuration's "on_unready" says; /healthz reports each part and answers 503 while one is
 * unusable. Each unusable part carries a message that says what to do ("no sandbox image at
 * var/images/default: run `make image` or `ephemerald image build`"). docs/CONFIG.md, "Readiness",
 * says what each check proves.
 */
#ifndef EPH_READINESS_H
#define EPH_READINESS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "sandbox/sandbox.h"

struct eph_service;
struct eph_readiness;

/* The image at image (a directory; `image build` makes it a link into the image cache) and the
 * guest agent at init_path: the image exists and has /bin/sh and the mount points the backends
 * use; the guest agent is a static executable; an image from the cache was built from this
 * host's current recipe (a directory of another origin has no recipe to compare). recipe is this
 * host's recipe key (eph_image_recipe_hash), or NULL when it could not be computed. 0, or a
 * negative errno with what to do in why. */
int eph_readiness_check_image(const char *image, const char *init_path, const char *recipe,
                              char *why, size_t whylen);
/* A real sandbox on ops: created, a command run in it, destroyed. 0, or a negative errno with the
 * reason in why. */
int eph_readiness_check_backend(const struct eph_sandbox_ops *ops,
                                const struct eph_sandbox_config *cfg, char *why, size_t whylen);

/* The readiness state of one server; owned by its caller (eph_readiness_free). */
int eph_readiness_new(struct eph_readiness **out);
void eph_readiness_free(struct eph_readiness *r);
/* Records that no backend could be chosen (svc->sandbox_ops stays NULL), with the reason. */
void eph_readiness_no_backend(struct eph_readiness *r, const char *why);
/* Checks every part now and logs each unusable one with what to do; true when all are usable. */
bool eph_readiness_check(struct eph_readiness *r, struct eph_service *svc);
/* Whether a run could be started now: the image and the backend are usable (an unusable one is
 * checked again first, as for the report). When not, what is missing and what to do is in why.
 * The store is not part of it: a create that cannot store its run answers for itself. */
bool eph_readiness_can_run(struct eph_readiness *r, struct eph_service *svc, char *why,
                           size_t whylen);
/* eph_readiness_can_run and eph_readiness_report, for the service (run/service.h). */
extern const struct eph_readiness_ops eph_readiness_ops;
/* The report for /healthz: {"status", "store": {...}, "image": {...}, "backend": {...},
 * "shutting_down"}, each part {"ok", "message" when not}. The store and the image are checked
 * again at each call (both are cheap); an unusable backend is tried again at most every few
 * seconds. *ready is false while a part is unusable or the server is shutting down. Returns a new
 * reference, or NULL when out of memory. */
json_t *eph_readiness_report(struct eph_readiness *r, struct eph_service *svc, bool *ready);

#endif
