/*
 * postgres_images.c - the PostgreSQL store's images: an org's and the operator's
 * (docs/IMAGES.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "store/postgres_store.h"
#include "store/store.h"

#define IMAGE_COLUMNS                                                                              \
    "org_id, name, status, digest, size_bytes, recipe, created_at, error, log_path"

static int row_to_image(const PGresult *r, int i, struct eph_image_rec *out)
{
    memset(out, 0, sizeof(*out));
    pg_col_copy(r, i, 0, out->org_id, sizeof(out->org_id));
    pg_col_copy(r, i, 1, out->name, sizeof(out->name));
    pg_col_copy(r, i, 2, out->status, sizeof(out->status));
    pg_col_copy(r, i, 3, out->digest, sizeof(out->digest));
    out->size_bytes = pg_col_i64(r, i, 4);
    out->recipe = pg_col_json(r, i, 5);
    out->created_at_ms = pg_col_i64(r, i, 6);
    out->error = pg_col_strdup(r, i, 7);
    out->log_path = pg_col_strdup(r, i, 8);
    if (!out->recipe) {
        eph_image_rec_release(out);
        return -ENOMEM;
    }
    return 0;
}

static int pg_image_write(struct eph_store *base, const struct eph_image_rec *im, bool insert)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, im->org_id);
    p_text(&p, im->name);
    p_text(&p, im->status);
    p_text(&p, im->digest);
    p_i64(&p, im->size_bytes);
    p_json(&p, im->recipe, "{}");
    p_text(&p, im->error);
    p_text(&p, im->log_path);
    p_i64(&p, im->created_at_ms);
    unsigned long n = 0;
    int rc =
        WITH_CONN(s, pg_changed_once(s, c,
                                     insert ? "INSERT INTO images (" IMAGE_COLUMNS
                                              ") VALUES ($1, $2, $3, $4, $5, $6, $9, $7, $8)"
                                            : "UPDATE images SET status = $3, digest = $4, "
                                              "size_bytes = $5, recipe = $6, error = $7, "
                                              "log_path = $8 WHERE org_id = $1 AND name = $2 AND "
                                              "created_at = $9",
                                     &p, &n, insert ? "image insert" : "image update"));
    p_free(&p);
    return rc ? rc : n ? 0 : -ENOENT;
}

int pg_image_insert(struct eph_store *base, const struct eph_image_rec *r)
{
    return pg_image_write(base, r, true);
}

int pg_image_update(struct eph_store *base, const struct eph_image_rec *r)
{
    return pg_image_write(base, r, false);
}

int pg_image_get(struct eph_store *base, const char *org_id, const char *name,
                 struct eph_image_rec *out)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    PGresult *r = NULL;
    int rc =
        WITH_CONN(s, pg_select_once(s, c,
                                    "SELECT " IMAGE_COLUMNS " FROM images WHERE name = $2 AND "
                                    "(org_id = $1 OR org_id = '') ORDER BY org_id = '' LIMIT 1",
                                    &p, &r, "image get"));
    if (!rc)
        rc = PQntuples(r) ? row_to_image(r, 0, out) : -ENOENT;
    PQclear(r);
    return rc;
}

int pg_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    PGresult *r = NULL;
    int rc =
        WITH_CONN(s, pg_select_once(s, c,
                                    "SELECT " IMAGE_COLUMNS " FROM images WHERE org_id = $1 OR "
                                    "(org_id = '' AND name NOT IN (SELECT name FROM images "
                                    "WHERE org_id = $1)) ORDER BY name",
                                    &p, &r, "image list"));
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_image_rec im;
        if (!(rc = row_to_image(r, i, &im))) {
            rc = cb(&im, ctx);
            eph_image_rec_release(&im);
        }
    }
    PQclear(r);
    return rc;
}

int pg_image_delete(struct eph_store *base, const char *org_id, const char *name)
{
    struct pg_store *s = P(base);
    struct params p = {0};
    p_text(&p, org_id);
    p_text(&p, name);
    unsigned long n = 0;
    /* One statement: the image goes only when no unfinished run names it. */
    int rc = WITH_CONN(s, pg_changed_once(s, c,
                                          "DELETE FROM images WHERE org_id = $1 AND name = $2 AND "
                                          "NOT EXISTS (SELECT 1 FROM runs WHERE image = $2 AND "
                                          "($1 = '' OR org_id = $1) AND "
                                          "status IN ('queued', 'starting', 'running'))",
                                          &p, &n, "image delete"));
    if (rc || n)
        return rc;
    /* Nothing deleted: missing, or in use. */
    PGresult *r = NULL;
    rc = WITH_CONN(s, pg_select_once(s, c, "SELECT 1 FROM images WHERE org_id = $1 AND name = $2",
                                     &p, &r, "image delete"));
    if (!rc)
        rc = PQntuples(r) ? -EBUSY : -ENOENT;
    PQclear(r);
    return rc;
}
