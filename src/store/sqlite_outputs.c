/*
 * sqlite_outputs.c - a run's outputs in SQLite (store.h: run_outputs_put, run_outputs_list,
 * run_output_get): one row per file or symlink, the bytes as a BLOB.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_store.h"

static int put_one(struct sq_conn *s, const char *run_id, const struct eph_output *o)
{
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "INSERT INTO run_outputs (run_id, path, type, size, sha256, content_type, "
                        "target, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        &st);
    if (rc)
        return rc;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, o->path, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, o->type, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)o->size);
    sq_bind_text(st, 5, o->sha256[0] ? o->sha256 : NULL);
    sq_bind_text(st, 6, o->content_type);
    sq_bind_text(st, 7, o->target);
    if (o->content)
        sqlite3_bind_blob64(st, 8, o->len ? o->content : (const void *)"", o->len,
                            SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 8);
    return sq_step_done(s, st, "output insert");
}

int sq_run_outputs_put(struct eph_store *base, const char *run_id, const struct eph_outputs *o)
{
    struct sq_conn *s = WRITER(base);
    pthread_mutex_lock(&s->lock);
    int rc = sq_begin(s);
    if (rc)
        goto out;
    sqlite3_stmt *st;
    if ((rc = sq_prepare(s, "DELETE FROM run_outputs WHERE run_id = ?", &st)))
        goto fail;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    if ((rc = sq_step_done(s, st, "outputs delete")))
        goto fail;
    for (size_t i = 0; i < o->n; i++)
        if ((rc = put_one(s, run_id, &o->v[i])))
            goto fail;
    if (!(rc = sq_commit(s)))
        goto out;
fail:
    sq_rollback(s);
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Columns 0..5: path, type, size, sha256, content_type, target. */
/* 0, or -ENOMEM (o then holds what was copied, to release). */
static int row_to_output(sqlite3_stmt *st, struct eph_output *o)
{
    memset(o, 0, sizeof(*o));
    if (sq_col_dup(st, 0, &o->path) || !o->path)
        return -ENOMEM;
    const char *type = (const char *)sqlite3_column_text(st, 1);
    snprintf(o->type, sizeof(o->type), "%s", type ? type : "");
    o->size = (uint64_t)sqlite3_column_int64(st, 2);
    const char *sha = (const char *)sqlite3_column_text(st, 3);
    snprintf(o->sha256, sizeof(o->sha256), "%s", sha ? sha : "");
    if (sq_col_dup(st, 4, &o->content_type) || sq_col_dup(st, 5, &o->target))
        return -ENOMEM;
    return 0;
}

int sq_run_outputs_list(struct eph_store *base, const char *run_id, struct eph_outputs *out)
{
    struct sq_conn *s = READER(base);
    out->v = NULL;
    out->n = 0;
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT path, type, size, sha256, content_type, target FROM run_outputs "
                        "WHERE run_id = ? ORDER BY path",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
        int r;
        while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
            struct eph_output o;
            rc = row_to_output(st, &o);
            if (!rc)
                rc = eph_outputs_add(out, &o, false);
            eph_output_release(&o);
        }
        if (!rc && r != SQLITE_DONE)
            rc = sq_db_err(s, r, "outputs list");
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        eph_outputs_release(out);
    return rc;
}

int sq_run_output_get(struct eph_store *base, const char *run_id, const char *path,
                      struct eph_output *out)
{
    struct sq_conn *s = READER(base);
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&s->lock);
    sqlite3_stmt *st;
    int rc = sq_prepare(s,
                        "SELECT path, type, size, sha256, content_type, target, content FROM "
                        "run_outputs WHERE run_id = ? AND path = ?",
                        &st);
    if (!rc) {
        sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
        int r = sqlite3_step(st);
        if (r == SQLITE_ROW) {
            int copied = row_to_output(st, out);
            const void *b = sqlite3_column_blob(st, 6);
            size_t len = (size_t)sqlite3_column_bytes(st, 6);
            if (sqlite3_column_type(st, 6) != SQLITE_NULL) {
                out->content = malloc(len ? len : 1);
                if (out->content && len)
                    memcpy(out->content, b, len);
                out->len = len;
            }
            if (copied || (sqlite3_column_type(st, 6) != SQLITE_NULL && !out->content))
                rc = -ENOMEM;
        } else {
            rc = r == SQLITE_DONE ? -ENOENT : sq_db_err(s, r, "output get");
        }
        sq_done(st);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc)
        eph_output_release(out);
    return rc;
}
