/*
 * sqlite_images.c - the SQLite store's images: an org's and the operator's (docs/IMAGES.md).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "store/sqlite_store.h"
#include "store/store.h"

#define IMAGE_COLUMNS                                                                              \
    "org_id, name, status, digest, size_bytes, recipe, created_at, error, log_path"
/* The images an org sees: its own, and the operator's ('') of a name it has none of. */
#define IMAGE_VISIBLE                                                                              \
    "(org_id = ?1 OR (org_id = '' AND name NOT IN (SELECT name FROM images WHERE org_id = ?1)))"

static int row_to_image(sqlite3_stmt *st, struct eph_image_rec *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->org_id, sizeof(r->org_id), "%s", sqlite3_column_text(st, 0));
    snprintf(r->name, sizeof(r->name), "%s", sqlite3_column_text(st, 1));
    snprintf(r->status, sizeof(r->status), "%s", sqlite3_column_text(st, 2));
    snprintf(r->digest, sizeof(r->digest), "%s", sqlite3_column_text(st, 3));
    r->size_bytes = sqlite3_column_int64(st, 4);
    r->recipe = sq_col_json(st, 5);
    r->created_at_ms = sqlite3_column_int64(st, 6);
    r->error = sq_col_strdup(st, 7);
    r->log_path = sq_col_strdup(st, 8);
    if (!r->recipe) {
        eph_image_rec_release(r);
        return -ENOMEM;
    }
    return 0;
}

static void bind_image(sqlite3_stmt *st, const struct eph_image_rec *r)
{
    sqlite3_bind_text(st, 1, r->org_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, r->status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, r->digest, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, r->size_bytes);
    sq_bind_json(st, 6, r->recipe);
    sqlite3_bind_int64(st, 7, r->created_at_ms);
    if (r->error)
        sqlite3_bind_text(st, 8, r->error, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 8);
    if (r->log_path)
        sqlite3_bind_text(st, 9, r->log_path, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 9);
}

static int sq_image_write(struct eph_store *base, const struct eph_image_rec *r, bool insert)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        insert ? "INSERT INTO images (" IMAGE_COLUMNS
                                 ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
                               : "UPDATE images SET status = ?3, digest = ?4, size_bytes = ?5, "
                                 "recipe = ?6, error = ?8, log_path = ?9 "
                                 "WHERE org_id = ?1 AND name = ?2 AND created_at = ?7",
                        &st);
    if (!rc) {
        bind_image(st, r);
        rc = sq_step_done(s, st, insert ? "image insert" : "image update");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_image_insert(struct eph_store *base, const struct eph_image_rec *r)
{
    return sq_image_write(base, r, true);
}

int sq_image_update(struct eph_store *base, const struct eph_image_rec *r)
{
    return sq_image_write(base, r, false);
}

int sq_image_get(struct eph_store *base, const char *org_id, const char *name,
                 struct eph_image_rec *out)
{
    struct sq_conn *s = READER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT " IMAGE_COLUMNS " FROM images WHERE name = ?2 AND "
                        "(org_id = ?1 OR org_id = '') ORDER BY org_id = '' LIMIT 1",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW    ? row_to_image(st, out)
             : r == SQLITE_DONE ? -ENOENT
                                : sq_db_err(s, r, "image get");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sq_image_list(struct eph_store *base, const char *org_id, eph_image_cb cb, void *ctx)
{
    struct sq_conn *s = READER(base);
    struct eph_image_rec *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(
        s, "SELECT " IMAGE_COLUMNS " FROM images WHERE " IMAGE_VISIBLE " ORDER BY name", &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        int r;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 16;
                struct eph_image_rec *p = realloc(rows, ncap * sizeof(*rows));
                if (!p) {
                    rc = -ENOMEM;
                    break;
                }
                rows = p;
                cap = ncap;
            }
            if ((rc = row_to_image(st, &rows[n])))
                break;
            n++;
        }
        if (!rc && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "image list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = cb(&rows[i], ctx);
        eph_image_rec_release(&rows[i]);
    }
    free(rows);
    return rc;
}

int sq_image_delete(struct eph_store *base, const char *org_id, const char *name)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_begin(s);
    if (!rc)
        rc = sq_prepare(s,
                        "SELECT 1 FROM runs WHERE image = ?2 AND (?1 = '' OR org_id = ?1) AND "
                        "status IN ('queued', 'starting', 'running') LIMIT 1",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        rc = r == SQLITE_ROW ? -EBUSY : r == SQLITE_DONE ? 0 : sq_db_err(s, r, "image in use");
        sq_done(st);
    }
    if (!rc && !(rc = sq_prepare(s, "DELETE FROM images WHERE org_id = ?1 AND name = ?2", &st))) {
        sqlite3_bind_text(st, 1, org_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
        rc = sq_step_done(s, st, "image delete");
        if (!rc && sqlite3_changes(s->db) == 0)
            rc = -ENOENT;
    }
    if (!rc)
        rc = sq_commit(s);
    if (rc)
        sq_rollback(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}
