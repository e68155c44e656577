/*
 * egress.c - a run's way out. See egress.h.
 */
#include "run/egress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "broker/broker.h"
#include "broker/event.h"
#include "broker/http.h"
#include "common/log.h"
#include "common/secret.h"

struct eph_egress {
    struct eph_broker *broker;
    struct eph_live *live;
    struct eph_store *store;
    bool zdr;
};

bool eph_egress_wanted(const struct eph_run *r)
{
    return r->web || (r->connections && json_array_size(r->connections) > 0);
}

struct eph_broker *eph_egress_broker(struct eph_egress *e)
{
    return e ? e->broker : NULL;
}

/* Whether name is one of the run's connections: an org's, checked when the run started. */
static bool run_has_conn(void *arg, const char *name)
{
    struct eph_egress *e = arg;
    struct eph_broker_conn_rules c;
    for (size_t i = 0; e->broker && eph_broker_conn_rules(e->broker, i, &c); i++)
        if (strcmp(c.name, name) == 0)
            return true;
    return false;
}

/* The timeline's record of one request (docs/BROKER.md "Events"; with zero data retention,
 * docs/API.md: what broker/event.h lists and nothing else): called from the broker's threads. */
static void on_event(void *arg, const struct eph_broker_event *ev)
{
    struct eph_egress *e = arg;
    const char *source = ev->connection ? "connection" : "web";
    const char *type = ev->connection ? "connection.request" : "web.request";
    char msg[EPH_BROKER_EVENT_MSG_MAX];
    json_t *data = eph_broker_event_data(ev, e->zdr, run_has_conn, e, msg, sizeof(msg));
    if (!data) {
        /* Not an event without its data: the request is not recorded, and that is said. */
        EPH_ERROR("egress", "cannot record a %s event: out of memory", type);
        return;
    }
    eph_live_emit(e->live, e->store, source, type, data, "%s", msg);
}

/* The connections a run names, from the store, credentials unsealed. */
struct loaded {
    struct eph_broker_conn *conns;
    size_t n;
    struct eph_connection *rows;
    json_t **creds; /* the unsealed credentials */
    const char ***hnames, ***hvalues, ***qnames, ***qvalues, ***methods, ***prefixes;
};

/* Wipes every string value of an unsealed credential object, nested objects included. */
static void wipe_values(json_t *o)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (json_is_string(v))
            sodium_memzero((char *)json_string_value(v), json_string_length(v));
        else if (json_is_object(v))
            wipe_values(v);
    }
}

static void loaded_release(struct loaded *l)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->creds && l->creds[i]) {
            wipe_values(l->creds[i]);
            json_decref(l->creds[i]);
        }
        if (l->rows)
            eph_connection_release(&l->rows[i]);
        if (l->hnames)
            free(l->hnames[i]);
        if (l->hvalues)
            free(l->hvalues[i]);
        if (l->qnames)
            free(l->qnames[i]);
        if (l->qvalues)
            free(l->qvalues[i]);
        if (l->methods)
            free(l->methods[i]);
        if (l->prefixes)
            free(l->prefixes[i]);
    }
    free(l->conns);
    free(l->rows);
    free(l->creds);
    free(l->hnames);
    free(l->hvalues);
    free(l->qnames);
    free(l->qvalues);
    free(l->methods);
    free(l->prefixes);
    memset(l, 0, sizeof(*l));
}

static const char **strings_of(json_t *arr, size_t *n)
{
    *n = json_is_array(arr) ? json_array_size(arr) : 0;
    const char **v = calloc(*n + 1, sizeof(char *));
    for (size_t i = 0; v && i < *n; i++) {
        json_t *s = json_array_get(arr, i);
        v[i] = json_is_string(s) ? json_string_value(s) : "";
    }
    return v;
}

/* The string members of o (may be NULL) as two vectors borrowing from it. */
static int string_pairs(json_t *o, const char ***names, const char ***values, size_t *n)
{
    size_t max = json_is_object(o) ? json_object_size(o) : 0;
    *n = 0;
    *names = calloc(max + 1, sizeof(char *));
    *values = calloc(max + 1, sizeof(char *));
    if (!*names || !*values)
        return -ENOMEM;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (!json_is_string(v))
            continue;
        (*names)[*n] = k;
        (*values)[*n] = json_string_value(v);
        (*n)++;
    }
    return 0;
}

static int load_connections(struct eph_service *svc, const struct eph_run *r, struct loaded *l,
                            char *err, size_t errlen)
{
    size_t n = r->connections ? json_array_size(r->connections) : 0;
    memset(l, 0, sizeof(*l));
    if (n == 0)
        return 0;
    l->conns = calloc(n, sizeof(*l->conns));
    l->rows = calloc(n, sizeof(*l->rows));
    l->creds = calloc(n, sizeof(*l->creds));
    l->hnames = calloc(n, sizeof(*l->hnames));
    l->hvalues = calloc(n, sizeof(*l->hvalues));
    l->qnames = calloc(n, sizeof(*l->qnames));
    l->qvalues = calloc(n, sizeof(*l->qvalues));
    l->methods = calloc(n, sizeof(*l->methods));
    l->prefixes = calloc(n, sizeof(*l->prefixes));
    if (!l->conns || !l->rows || !l->creds || !l->hnames || !l->hvalues || !l->qnames ||
        !l->qvalues || !l->methods || !l->prefixes)
        return -ENOMEM;
    struct eph_secret key;
    int rc = eph_secret_load(svc->cfg->secret_key_file, false, &key, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_array_get(r->connections, i));
        l->n = i + 1;
        rc = name ? svc->store->ops->conn_get(svc->store, r->org_id, name, &l->rows[i]) : -EINVAL;
        if (rc) {
            snprintf(err, errlen, "the connection '%.64s' is not available", name ? name : "?");
            break;
        }
        unsigned char *plain = NULL;
        size_t plen = 0;
        rc = eph_secret_open(&key, l->rows[i].sealed, l->rows[i].sealed_len, &plain, &plen);
        if (rc) {
            snprintf(err, errlen, "the credential of connection '%.64s' cannot be opened", name);
            break;
        }
        l->creds[i] = json_loadb((const char *)plain, plen, 0, NULL);
        sodium_memzero(plain, plen);
        free(plain);
        if (!json_is_object(l->creds[i])) {
            snprintf(err, errlen, "the credential of connection '%.64s' is malformed", name);
            rc = -EINVAL;
            break;
        }
        /* {"headers": {...}, "query": {...}}, or a connection made before query parameters:
         * the headers object alone (its values are all strings). */
        json_t *hs = json_object_get(l->creds[i], "headers");
        json_t *qs = json_object_get(l->creds[i], "query");
        if (!json_is_object(hs) && !json_is_object(qs))
            hs = l->creds[i], qs = NULL;
        struct eph_broker_conn *c = &l->conns[i];
        if ((rc = string_pairs(hs, &l->hnames[i], &l->hvalues[i], &c->nheaders)) ||
            (rc = string_pairs(qs, &l->qnames[i], &l->qvalues[i], &c->nquery)))
            break;
        c->name = l->rows[i].name;
        c->base_url = l->rows[i].base_url;
        l->methods[i] = strings_of(l->rows[i].methods, &c->nmethods);
        l->prefixes[i] = strings_of(l->rows[i].path_prefixes, &c->nprefixes);
        if (!l->methods[i] || !l->prefixes[i]) {
            rc = -ENOMEM;
            break;
        }
        c->methods = l->methods[i];
        c->prefixes = l->prefixes[i];
        c->header_names = l->hnames[i];
        c->header_values = l->hvalues[i];
        c->query_names = l->qnames[i];
        c->query_values = l->qvalues[i];
    }
    eph_secret_clear(&key);
    return rc;
}

void eph_egress_learn_own(struct eph_service *svc)
{
    const struct eph_config *cfg = svc->cfg;
    struct eph_guard_own *own = &svc->broker_own;
    memset(own, 0, sizeof(*own));
    struct eph_http_authority listen;
    if (cfg->listen &&
        eph_http_parse_authority(cfg->listen, strlen(cfg->listen), 0, &listen) == 0 &&
        listen.host.literal) {
        struct sockaddr_storage ss;
        eph_guard_sockaddr(&listen.host.addr, listen.port, &ss);
        if (eph_guard_own_add(own, (struct sockaddr *)&ss))
            EPH_WARN("egress", "the broker cannot refuse the API's address");
    } else {
        EPH_WARN("egress", "listen address '%s' has no fixed port: the broker cannot refuse it",
                 cfg->listen ? cfg->listen : "");
    }
    if (cfg->db && eph_store_target_is_postgres(cfg->db)) {
        struct sockaddr_storage pg[8];
        size_t n = eph_store_postgres_servers(cfg->db, pg, sizeof(pg) / sizeof(pg[0]));
        for (size_t i = 0; i < n; i++)
            if (eph_guard_own_add(own, (struct sockaddr *)&pg[i]) == -ENOSPC)
                EPH_WARN("egress", "too many store servers: the broker refuses the first %d",
                         EPH_GUARD_MAX_OWN);
    }
}

int eph_egress_start(struct eph_service *svc, struct eph_run *r, struct eph_live *live,
                     struct eph_budget *budget, struct eph_sandbox *sb, struct eph_egress **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    if (!eph_egress_wanted(r))
        return 0;
    if (!sb->ops->open_tunnel) {
        snprintf(err, errlen, "the %s backend has no way out for web or connections",
                 sb->ops->name);
        return -ENOTSUP;
    }
    const struct eph_config *cfg = svc->cfg;
    struct eph_broker_settings s;
    eph_broker_settings_default(&s);
    for (size_t i = 0; i < cfg->broker.nallow_private_cidrs && i < EPH_BROKER_MAX_ALLOW_CIDRS; i++)
        if (eph_cidr_parse(cfg->broker.allow_private_cidrs[i],
                           &s.allow_private[s.nallow_private]) == 0)
            s.nallow_private++;
    for (size_t i = 0; i < cfg->broker.nweb_private_cidrs && i < EPH_BROKER_MAX_ALLOW_CIDRS; i++)
        if (eph_cidr_parse(cfg->broker.web_private_cidrs[i], &s.web_private[s.nweb_private]) == 0)
            s.nweb_private++;
    s.own = svc->broker_own;
    s.extra_ca_file = cfg->broker.extra_ca_file;
    s.max_request_bytes = cfg->broker.max_request_bytes;
    s.max_response_bytes = cfg->broker.max_response_bytes;
    s.request_timeout_seconds = cfg->broker.request_timeout_seconds;
    s.max_tunnels_per_run = cfg->broker.max_tunnels_per_run;
    s.micros_per_request = cfg->prices.web_micros_per_request;
    s.micros_per_mib = cfg->prices.web_micros_per_mib;
    s.record_body_max_bytes = cfg->broker.record_body_max_bytes;

    struct eph_egress *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    e->live = live;
    e->store = svc->store;
    e->zdr = r->zdr;
    struct loaded l;
    int rc = load_connections(svc, r, &l, err, errlen);
    size_t nallow = 0;
    const char **allow = r->web_allow ? strings_of(r->web_allow, &nallow) : NULL;
    if (!rc && r->web_allow && !allow)
        rc = -ENOMEM;
    if (!rc) {
        struct eph_broker_run run = {.web = r->web,
                                     .record = !r->zdr,
                                     .zdr = r->zdr,
                                     .web_allow = allow,
                                     .nweb_allow = nallow,
                                     .conns = l.conns,
                                     .nconns = l.n,
                                     .budget = budget,
                                     .on_event = on_event,
                                     .event_arg = e};
        rc = eph_broker_new(&s, &run, &e->broker);
        if (rc)
            snprintf(err, errlen, "the broker could not start: %s", strerror(-rc));
    }
    loaded_release(&l);
    free(allow);
    if (!rc) {
        struct eph_sandbox_tunnel t = {.port = EPH_BROKER_PORT,
                                       .max_streams = s.max_tunnels_per_run,
                                       .on_stream = eph_broker_on_stream,
                                       .on_bytes = eph_broker_on_bytes,
                                       .arg = e->broker};
        rc = sb->ops->open_tunnel(sb, &t);
        if (rc)
            snprintf(err, errlen, "the sandbox's proxy listener could not open: %s", strerror(-rc));
    }
    if (rc) {
        eph_broker_free(e->broker);
        free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void eph_egress_stop(struct eph_egress *e, struct eph_run *r)
{
    if (!e)
        return;
    eph_broker_close(e->broker);
    uint64_t web = 0, conn = 0;
    eph_broker_counts(e->broker, &web, &conn);
    r->usage.web_requests += web;
    r->usage.connection_requests += conn;
}

void eph_egress_free(struct eph_egress *e)
{
    if (!e)
        return;
    eph_broker_free(e->broker);
    free(e);
}
