/*
 * images.c - /v1/images (admin keys): an org's images, built from a recipe in the background
 * (src/image/service.h), listed with the operator's, their build log streamed while they build.
 * docs/IMAGES.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api/api.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "image/service.h"
#include "store/store.h"

/* Logs followed at once: each holds one of the server's threads a quarter second at a time. */
#define MAX_LOG_FOLLOWERS 4
static atomic_uint followers;

static int bad(struct eph_api_req *req, const char *param, const char *why)
{
    return eph_api_reply_error(req, 400, "invalid_request_error", "invalid_parameter", param, "%s",
                               why);
}

static bool images_here(struct eph_api_req *req)
{
    if (req->svc->images)
        return true;
    eph_api_reply_error(req, 503, "api_error", "images_unavailable", NULL,
                        "this server cannot build images (see its log at start-up)");
    return false;
}

int eph_api_images_create(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req) || !images_here(req))
        return MHD_YES;
    EPH_AUTOJSON json_t *body = eph_api_body_object(req);
    if (!body)
        return MHD_YES;
    json_t *name = json_object_get(body, "name");
    if (!json_is_string(name))
        return bad(req, "name", "an image needs a 'name' string");
    const char *n = json_string_value(name);
    if (!eph_image_name_valid(n) || strlen(n) != json_string_length(name))
        return bad(req, "name",
                   "an image name is 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit");
    if (!strcmp(n, "default"))
        return bad(req, "name", "'default' is the default image's name and cannot be defined");
    EPH_AUTOJSON json_t *canonical = NULL;
    char err[512];
    if (eph_image_recipe_canonical(body, &canonical, err, sizeof(err)))
        return bad(req, NULL, err);
    struct eph_image_rec r;
    int rc = eph_images_create(req->svc->images, req->org_id, n, canonical, NULL, false, &r, err,
                               sizeof(err));
    if (rc == -EEXIST)
        return eph_api_reply_error(req, 409, "invalid_request_error", "image_exists", "name",
                                   "an image named '%s' exists: delete it first", n);
    if (rc == -EINVAL)
        return bad(req, "name", err);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    EPH_INFO("api", "image %s of org %s: %s (%s)", r.name, req->org_id, r.status, r.digest);
    json_t *o = eph_image_json(&r);
    eph_image_rec_release(&r);
    return o ? eph_api_reply_json(req, 202, o, NULL, NULL) : MHD_NO;
}

static int list_cb(const struct eph_image_rec *r, void *ctx)
{
    json_t *o = eph_image_json(r);
    return o && !json_array_append_new(ctx, o) ? 0 : -ENOMEM;
}

int eph_api_images_list(struct eph_api_req *req)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    json_t *data = json_array();
    int rc = data ? st->ops->image_list(st, req->org_id, list_cb, data) : -ENOMEM;
    if (rc) {
        json_decref(data);
        return rc == -ENOMEM ? MHD_NO : eph_api_reply_store_unavailable(req);
    }
    return eph_api_reply_list(req, data, false);
}

/* The image of that name the org sees, or an answer (404, 503) and false. */
static bool load_image(struct eph_api_req *req, const char *name, struct eph_image_rec *r)
{
    struct eph_store *st = req->svc->store;
    int rc = eph_image_name_valid(name) ? st->ops->image_get(st, req->org_id, name, r) : -ENOENT;
    if (!rc)
        return true;
    if (rc == -ENOENT)
        eph_api_reply_error(req, 404, "not_found_error", "image_not_found", NULL,
                            "no image named '%.64s'", name);
    else
        eph_api_reply_store_unavailable(req);
    return false;
}

int eph_api_images_get(struct eph_api_req *req, const char *name)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_image_rec r;
    if (!load_image(req, name, &r))
        return MHD_YES;
    json_t *o = eph_image_json(&r);
    eph_image_rec_release(&r);
    return o ? eph_api_reply_json(req, 200, o, NULL, NULL) : MHD_NO;
}

int eph_api_images_delete(struct eph_api_req *req, const char *name)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_store *st = req->svc->store;
    struct eph_image_rec r;
    if (!load_image(req, name, &r))
        return MHD_YES;
    bool operators = !r.org_id[0];
    eph_image_rec_release(&r);
    if (operators)
        return eph_api_reply_error(req, 403, "permission_error", "operator_image", NULL,
                                   "'%s' is the operator's image: `ephemerald image rm` removes it",
                                   name);
    int rc = st->ops->image_delete(st, req->org_id, name);
    if (rc == -EBUSY)
        return eph_api_reply_error(req, 409, "invalid_request_error", "image_in_use", NULL,
                                   "image '%s' is used by a run that has not finished", name);
    if (rc == -ENOENT)
        return eph_api_reply_error(req, 404, "not_found_error", "image_not_found", NULL,
                                   "no image named '%.64s'", name);
    if (rc)
        return eph_api_reply_store_unavailable(req);
    EPH_INFO("api", "image %s of org %s deleted", name, req->org_id);
    return eph_api_reply_json(
        req, 200, json_pack("{s:s, s:s, s:b}", "object", "image", "name", name, "deleted", 1), NULL,
        NULL);
}

/* ---- the build log ---- */

struct log_stream {
    struct eph_images *images; /* NULL: not following (the build is over) */
    char *path;
    int fd;
    bool counted;
};

static ssize_t log_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct log_stream *s = cls;
    for (int tries = 0;; tries++) {
        ssize_t n = pread(s->fd, buf, max, (off_t)pos);
        if (n > 0)
            return n;
        if (n < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        /* At the end: done unless the build is still writing it. Read once more after it ends,
         * for its last lines. */
        if (!s->images || !eph_images_building(s->images, s->path)) {
            if (s->images) {
                s->images = NULL;
                continue;
            }
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        eph_images_wait(s->images, 250);
        if (tries > 0)
            return 0;
    }
}

static void log_free(void *cls)
{
    struct log_stream *s = cls;
    if (s->counted)
        atomic_fetch_sub(&followers, 1);
    close(s->fd);
    free(s->path);
    free(s);
}

int eph_api_images_log(struct eph_api_req *req, const char *name)
{
    if (!eph_api_require_admin(req))
        return MHD_YES;
    struct eph_image_rec r;
    if (!load_image(req, name, &r))
        return MHD_YES;
    int fd = r.log_path ? open(r.log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd < 0) {
        eph_image_rec_release(&r);
        return eph_api_reply_error(req, 404, "not_found_error", "log_not_found", NULL,
                                   "image '%s' has no build log on this node", name);
    }
    struct log_stream *s = calloc(1, sizeof(*s));
    if (!s || !(s->path = strdup(r.log_path))) {
        free(s);
        close(fd);
        eph_image_rec_release(&r);
        return MHD_NO;
    }
    s->fd = fd;
    bool building = !strcmp(r.status, "building");
    eph_image_rec_release(&r);
    if (building && req->svc->images) {
        if (atomic_fetch_add(&followers, 1) >= MAX_LOG_FOLLOWERS) {
            atomic_fetch_sub(&followers, 1);
            log_free(s);
            req->retry_after = 5;
            return eph_api_reply_error(req, 429, "rate_limit_error", "too_many_log_streams", NULL,
                                       "%d build logs are followed already; try again later",
                                       MAX_LOG_FOLLOWERS);
        }
        s->counted = true;
        s->images = req->svc->images;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, log_read, s, log_free);
    if (!resp) {
        log_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    eph_api_add_common_headers(req, resp, 200);
    int rc = MHD_queue_response(req->conn, 200, resp);
    MHD_destroy_response(resp);
    req->answered = true;
    req->status = 200;
    return rc;
}
