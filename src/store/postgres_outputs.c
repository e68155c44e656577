/*
 * postgres_outputs.c - a run's outputs in PostgreSQL (store.h: run_outputs_put, run_outputs_list,
 * run_output_get): one row per file or symlink, the bytes as bytea.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/postgres_store.h"

static int put_once(struct pg_store *s, struct pg_conn *c, const char *run_id,
                    const struct eph_outputs *o)
{
    int rc = pg_begin(s, c);
    if (rc)
        return rc;
    struct params p = {0};
    p_text(&p, run_id);
    if ((rc = pg_exec(s, c, "DELETE FROM run_outputs WHERE run_id = $1", &p, NULL, NULL,
                      "outputs delete")))
        return rc;
    for (size_t i = 0; i < o->n; i++) {
        const struct eph_output *f = &o->v[i];
        struct params q = {0};
        p_text(&q, run_id);
        p_text(&q, f->path);
        p_text(&q, f->type);
        p_i64(&q, (int64_t)f->size);
        p_text(&q, f->sha256[0] ? f->sha256 : NULL);
        p_text(&q, f->content_type);
        p_text(&q, f->target);
        if (f->content)
            p_blob(&q, f->content, f->len);
        else
            p_text(&q, NULL);
        rc = pg_exec(s, c,
                     "INSERT INTO run_outputs (run_id, path, type, size, sha256, content_type, "
                     "target, content) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::bytea)",
                     &q, NULL, NULL, "output insert");
        p_free(&q);
        if (rc)
            return rc;
    }
    return pg_commit(s, c);
}

int pg_run_outputs_put(struct eph_store *base, const char *run_id, const struct eph_outputs *o)
{
    struct pg_store *s = P(base);
    return WITH_CONN(s, put_once(s, c, run_id, o));
}

/* Columns 0..5: path, type, size, sha256, content_type, target. */
/* 0, or -ENOMEM (o then holds what was copied, to release). */
static int row_to_output(const PGresult *r, int i, struct eph_output *o)
{
    memset(o, 0, sizeof(*o));
    if (pg_col_dup(r, i, 0, &o->path) || !o->path)
        return -ENOMEM;
    snprintf(o->type, sizeof(o->type), "%s", pg_val(r, i, 1));
    o->size = (uint64_t)pg_col_i64(r, i, 2);
    snprintf(o->sha256, sizeof(o->sha256), "%s", pg_isnull(r, i, 3) ? "" : pg_val(r, i, 3));
    if (pg_col_dup(r, i, 4, &o->content_type) || pg_col_dup(r, i, 5, &o->target))
        return -ENOMEM;
    return 0;
}

static int list_once(struct pg_store *s, struct pg_conn *c, const char *run_id,
                     struct eph_outputs *out)
{
    eph_outputs_release(out);
    struct params p = {0};
    p_text(&p, run_id);
    PGresult *r = NULL;
    int rc = pg_exec(s, c,
                     "SELECT path, type, size, sha256, content_type, target FROM run_outputs "
                     "WHERE run_id = $1 ORDER BY path",
                     &p, &r, NULL, "outputs list");
    for (int i = 0; !rc && i < PQntuples(r); i++) {
        struct eph_output o;
        rc = row_to_output(r, i, &o);
        if (!rc)
            rc = eph_outputs_add(out, &o, false);
        eph_output_release(&o);
    }
    PQclear(r);
    return rc;
}

int pg_run_outputs_list(struct eph_store *base, const char *run_id, struct eph_outputs *out)
{
    struct pg_store *s = P(base);
    out->v = NULL;
    out->n = 0;
    int rc = WITH_CONN(s, list_once(s, c, run_id, out));
    if (rc)
        eph_outputs_release(out);
    return rc;
}

static int get_once(struct pg_store *s, struct pg_conn *c, const char *run_id, const char *path,
                    struct eph_output *out)
{
    eph_output_release(out);
    struct params p = {0};
    p_text(&p, run_id);
    p_text(&p, path);
    PGresult *r = NULL;
    int rc = pg_exec(s, c,
                     "SELECT path, type, size, sha256, content_type, target, content FROM "
                     "run_outputs WHERE run_id = $1 AND path = $2",
                     &p, &r, NULL, "output get");
    if (!rc && PQntuples(r) == 0)
        rc = -ENOENT;
    if (!rc) {
        int copied = row_to_output(r, 0, out);
        if (!pg_isnull(r, 0, 6)) {
            size_t len = 0;
            unsigned char *b = PQunescapeBytea((const unsigned char *)pg_val(r, 0, 6), &len);
            out->content = b ? malloc(len ? len : 1) : NULL;
            if (out->content) {
                memcpy(out->content, b, len);
                out->len = len;
            }
            PQfreemem(b);
            if (!out->content)
                rc = -ENOMEM;
        }
        if (copied)
            rc = -ENOMEM;
    }
    PQclear(r);
    return rc;
}

int pg_run_output_get(struct eph_store *base, const char *run_id, const char *path,
                      struct eph_output *out)
{
    struct pg_store *s = P(base);
    memset(out, 0, sizeof(*out));
    int rc = WITH_CONN(s, get_once(s, c, run_id, path, out));
    if (rc)
        eph_output_release(out);
    return rc;
}
