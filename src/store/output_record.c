/*
 * output_record.c - a run's outputs as plain data (output_record.h).
 */
#include "store/output_record.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void eph_output_release(struct eph_output *o)
{
    free(o->path);
    free(o->content_type);
    free(o->target);
    free(o->content);
    memset(o, 0, sizeof(*o));
}

void eph_outputs_release(struct eph_outputs *o)
{
    for (size_t i = 0; i < o->n; i++)
        eph_output_release(&o->v[i]);
    free(o->v);
    o->v = NULL;
    o->n = 0;
}

int eph_outputs_add(struct eph_outputs *all, const struct eph_output *o, bool with_content)
{
    struct eph_output *nv = realloc(all->v, (all->n + 1) * sizeof(*nv));
    if (!nv)
        return -ENOMEM;
    all->v = nv;
    struct eph_output *c = &nv[all->n];
    memset(c, 0, sizeof(*c));
    memcpy(c->type, o->type, sizeof(c->type));
    memcpy(c->sha256, o->sha256, sizeof(c->sha256));
    c->size = o->size;
    c->path = strdup(o->path);
    c->content_type = o->content_type ? strdup(o->content_type) : NULL;
    c->target = o->target ? strdup(o->target) : NULL;
    if (with_content && o->content) {
        c->content = malloc(o->len ? o->len : 1);
        if (c->content) {
            memcpy(c->content, o->content, o->len);
            c->len = o->len;
        }
    }
    if (!c->path || (o->content_type && !c->content_type) || (o->target && !c->target) ||
        (with_content && o->content && !c->content)) {
        eph_output_release(c);
        return -ENOMEM;
    }
    all->n++;
    return 0;
}
