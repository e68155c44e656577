/*
 * outputs.c - GET /v1/runs/{id}/outputs and GET /v1/runs/{id}/outputs/{path} (docs/API.md,
 * "Outputs"): the files a run brought back, from the store, or from the live entry for a
 * zero-data-retention run (held there only for a waiting client: Prefer: wait on the list parks
 * until the run ends and answers with the bytes inline).
 *
 * A path is served only when it is, byte for byte, one the run's listing has: anything else is
 * 404, so that no path the client writes reaches anything but that comparison. The bytes go out
 * with a type from a fixed list (run/outputs.h), nosniff, a sandboxing CSP, and as an attachment
 * unless they are text or a raster image.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>
#include <sodium.h>

#include "api/api.h"
#include "api/validate.h"
#include "common/clock.h"
#include "common/id.h"
#include "run/cluster.h"
#include "run/live.h"
#include "run/outputs.h"
#include "run/service.h"

/* The run of this org, or an answer (404/503); true when *zdr is set. */
static bool own_run(struct eph_api_req *req, const char *id, bool *zdr)
{
    struct eph_store *st = req->svc->store;
    struct eph_run r;
    int rc = eph_id_is_run(id) ? st->ops->run_get(st, id, req->org_id, &r) : -ENOENT;
    if (rc == -ENOENT) {
        eph_api_reply_error(req, 404, "not_found_error", "run_not_found", NULL,
                            "no such run '%.40s'", id);
        return false;
    }
    if (rc) {
        eph_api_reply_store_unavailable(req);
        return false;
    }
    *zdr = r.zdr;
    eph_run_release(&r);
    if (id != req->run_id) /* a resumed request passes its own */
        snprintf(req->run_id, sizeof(req->run_id), "%s", id);
    return true;
}

static json_t *output_json(const struct eph_output *o)
{
    json_t *j =
        json_pack("{s:s, s:s, s:I}", "path", o->path, "type", o->type, "size", (json_int_t)o->size);
    if (!j)
        return NULL;
    json_object_set_new(j, "sha256", o->sha256[0] ? json_string(o->sha256) : json_null());
    json_object_set_new(j, "content_type",
                        o->content_type ? json_string(o->content_type) : json_null());
    if (o->target)
        json_object_set_new(j, "target", json_string(o->target));
    return j;
}

/* The list as it is now (after a long poll, or at once). A zero-data-retention run's comes from
 * the live entry the request holds, with each file's bytes inline (content_base64): once the run
 * is settled the entry goes, and no later request could fetch them. */
static int outputs_resume(struct eph_api_req *req)
{
    bool zdr;
    if (!own_run(req, req->run_id, &zdr))
        return MHD_YES;
    struct eph_outputs all = {0};
    int rc = 0;
    if (zdr) {
        if (req->live && eph_live_zdr_outputs_list(req->live, &all) != 0)
            eph_outputs_release(&all); /* none held: an empty list */
    } else if (req->svc->store->ops->run_outputs_list) {
        rc = req->svc->store->ops->run_outputs_list(req->svc->store, req->run_id, &all);
    }
    if (rc)
        return eph_api_reply_store_unavailable(req);
    json_t *data = json_array();
    for (size_t i = 0; data && i < all.n; i++) {
        json_t *o = output_json(&all.v[i]);
        struct eph_output full = {0};
        if (o && zdr && strcmp(all.v[i].type, "file") == 0 &&
            eph_live_zdr_output_get(req->live, all.v[i].path, &full) == 0) {
            size_t blen = sodium_base64_ENCODED_LEN(full.len, sodium_base64_VARIANT_ORIGINAL);
            char *b64 = malloc(blen);
            if (b64) {
                sodium_bin2base64(b64, blen, full.content ? full.content : (unsigned char *)"",
                                  full.len, sodium_base64_VARIANT_ORIGINAL);
                json_object_set_new(o, "content_base64", json_string(b64));
                free(b64);
            }
            eph_output_release(&full);
        }
        json_array_append_new(data, o);
    }
    eph_outputs_release(&all);
    return eph_api_reply_list(req, data, false);
}

int eph_api_runs_outputs(struct eph_api_req *req, const char *id)
{
    bool zdr;
    if (!own_run(req, id, &zdr))
        return MHD_YES;
    /* A live reference: to wait for the run to end, or for what a ZDR run holds in memory. */
    req->live = eph_cluster_follow(req->svc, id);
    unsigned wait;
    if (!eph_api_prefer_wait(req, EPH_API_WAIT_MAX, &wait))
        return MHD_YES;
    if (wait &&
        eph_api_park_until_settled(req, eph_clock_mono_ns() + wait * 1000000000ull, outputs_resume))
        return MHD_YES;
    return outputs_resume(req);
}

int eph_api_runs_output(struct eph_api_req *req, const char *id)
{
    bool zdr;
    if (!own_run(req, id, &zdr))
        return MHD_YES;
    /* The route matched "/v1/runs/<id>/outputs/" and at least one byte more. */
    const char *mark = strstr(req->path, "/outputs/");
    const char *path = mark ? mark + 9 : "";
    struct eph_output o = {0};
    int rc = -ENOENT;
    if (zdr) {
        req->live = eph_cluster_follow(req->svc, id);
        if (req->live)
            rc = eph_live_zdr_output_get(req->live, path, &o);
    } else if (req->svc->store->ops->run_output_get) {
        rc = req->svc->store->ops->run_output_get(req->svc->store, id, path, &o);
    }
    if (rc == -ENOENT || (!rc && strcmp(o.type, "file") != 0)) {
        /* Not listed, or a symlink (listed, with nothing to serve). */
        eph_output_release(&o);
        return eph_api_reply_error(req, 404, "not_found_error", "output_not_found", NULL,
                                   "run '%s' has no output file '%.200s'", id, path);
    }
    if (rc)
        return eph_api_reply_store_unavailable(req);
    const char *type = eph_outputs_content_type(o.path);
    char disposition[320];
    const char *base = strrchr(o.path, '/');
    base = base ? base + 1 : o.path;
    /* The name in the header is the file's own, with anything that could end the quoted string
     * or the header replaced. */
    char name[256];
    size_t k = 0;
    for (const char *p = base; *p && k + 1 < sizeof(name); p++)
        name[k++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20 || *p == 0x7f) ? '_' : *p;
    name[k] = '\0';
    snprintf(disposition, sizeof(disposition), "attachment; filename=\"%s\"", name);
    unsigned char *data = o.content;
    size_t len = o.len;
    o.content = NULL;
    eph_output_release(&o);
    return eph_api_reply_bytes(req, type, data, len,
                               eph_outputs_inline_type(type) ? NULL : disposition);
}
