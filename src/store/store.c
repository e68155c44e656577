#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

bool eph_store_target_is_postgres(const char *target)
{
    return strncmp(target, "postgres://", 11) == 0 || strncmp(target, "postgresql://", 13) == 0;
}

int eph_store_open(const char *target, struct eph_store **out, char *err, size_t errlen)
{
    if (eph_store_target_is_postgres(target))
        return eph_store_postgres_ops.open(target, out, err, errlen);
    return eph_store_sqlite_ops.open(target, out, err, errlen);
}

int eph_store_open_pool(const char *target, unsigned pool_size, struct eph_store **out, char *err,
                        size_t errlen)
{
    if (!eph_store_target_is_postgres(target) || !pool_size || strstr(target, "pool_size="))
        return eph_store_open(target, out, err, errlen);
    char *t = NULL;
    if (asprintf(&t, "%s%cpool_size=%u", target, strchr(target, '?') ? '&' : '?', pool_size) < 0)
        return -ENOMEM;
    int rc = eph_store_open(t, out, err, errlen);
    free(t);
    return rc;
}

void eph_event_release(struct eph_event *e)
{
    free(e->message);
    json_decref(e->data);
    free(e->wire);
    e->wire = NULL;
    e->message = NULL;
    e->data = NULL;
}

json_t *eph_event_stored_data(const char *wire, const char *data_column)
{
    json_t *data = NULL;
    json_error_t err;
    if (wire || data_column) {
        json_t *v = json_loads(wire ? wire : data_column, wire ? 0 : JSON_DECODE_ANY, &err);
        if (!v && json_error_code(&err) == json_error_out_of_memory)
            return NULL;
        data = wire ? json_incref(json_object_get(v, "data")) : json_incref(v);
        json_decref(v);
    }
    if (data && !json_is_object(data)) {
        json_decref(data);
        data = NULL;
    }
    return data ? data : json_object();
}

void eph_image_rec_release(struct eph_image_rec *r)
{
    json_decref(r->recipe);
    free(r->error);
    free(r->log_path);
    memset(r, 0, sizeof(*r));
}

void eph_connection_release(struct eph_connection *c)
{
    free(c->base_url);
    json_decref(c->methods);
    json_decref(c->path_prefixes);
    json_decref(c->header_names);
    json_decref(c->query_names);
    if (c->sealed)
        memset(c->sealed, 0, c->sealed_len);
    free(c->sealed);
    c->base_url = NULL;
    c->methods = c->path_prefixes = c->header_names = c->query_names = NULL;
    c->sealed = NULL;
    c->sealed_len = 0;
}

int eph_store_health(struct eph_store *s, char *reason, size_t len)
{
    int rc = s->ops->ping(s);
    if (rc && reason && len)
        snprintf(reason, len, "%s store unreachable: %s", s->ops->name,
                 rc == -ENOTCONN ? "no connection to the database" : strerror(-rc));
    else if (reason && len)
        reason[0] = '\0';
    return rc;
}

void eph_webhook_release(struct eph_webhook *w)
{
    free(w->url);
    json_decref(w->events);
    free(w->secret_sealed);
    memset(w, 0, sizeof(*w));
}

void eph_webhook_delivery_release(struct eph_webhook_delivery *d)
{
    free(d->last_error);
    free(d->body);
    free(d->url);
    free(d->secret_sealed);
    memset(d, 0, sizeof(*d));
}
