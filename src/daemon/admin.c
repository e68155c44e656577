/*
 * admin.c - `ephemerald admin ...`: organizations, keys, credit and connections, straight on the
 * store, with or without a running server.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "api/api.h"
#include "common/error.h"
#include "common/id.h"
#include "common/money.h"
#include "daemon/commands.h"
#include "daemon/options.h"
#include "store/store.h"

static int open_store(struct eph_config *cfg, struct eph_store **st)
{
    char err[512];
    eph_options_ensure_db_dir(cfg->db);
    int rc = eph_store_open(cfg->db, st, err, sizeof(err));
    if (rc)
        fprintf(stderr, "ephemerald: %s\n", err);
    return rc;
}

static int parse_micros(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || *end || end == s || n <= 0)
        return -EINVAL;
    *out = n;
    return 0;
}

/* Makes a key for an org and prints it alone on one line. */
static int new_key(struct eph_store *st, const char *org_id, const char *role)
{
    char key[EPH_API_KEY_LEN + 1], hash[65];
    int rc = eph_id_base62("eph_", 40, key, sizeof(key));
    if (rc)
        return rc;
    eph_sha256_hex(key, strlen(key), hash);
    char prefix[16];
    snprintf(prefix, sizeof(prefix), "%.8s", key);
    rc = st->ops->key_insert(st, org_id, hash, role, prefix, NULL, 0);
    if (rc) {
        fprintf(stderr, "ephemerald: cannot store the key: %s\n", eph_strerror(rc));
        return rc;
    }
    printf("%s\n", key);
    fflush(stdout);
    sodium_memzero(key, sizeof(key));
    return 0;
}

static int admin_init(int argc, char **argv)
{
    static const char *const extra[] = {"--org", "--credit-micros", NULL};
    const char *vals[2] = {NULL, NULL};
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int status = 1;
    if (eph_options_load(&cfg, argc, argv, 2, extra, vals))
        goto out;
    const char *org = vals[0] ? vals[0] : "default";
    int64_t credit = 100000000; /* $100 */
    /* The first credit obeys the bound of every other (common/money.h). */
    const char *why = vals[1] && parse_micros(vals[1], &credit)
                          ? "must be a positive integer"
                          : eph_money_credit_refusal(credit, 0);
    if (why) {
        fprintf(stderr, "ephemerald: --credit-micros: %s\n", why);
        goto out;
    }
    if (open_store(&cfg, &st))
        goto out;
    char org_id[48];
    bool created;
    int rc = st->ops->org_ensure(st, org, credit, org_id, sizeof(org_id), &created);
    if (rc) {
        fprintf(stderr, "ephemerald: cannot create org '%s': %s\n", org, eph_strerror(rc));
        goto out;
    }
    fprintf(stderr,
            created ? "admin: created org '%s' with its credit\n"
                    : "admin: org '%s' exists; adding an admin key\n",
            org);
    if (new_key(st, org_id, "admin") == 0)
        status = 0;
out:
    if (st)
        st->ops->close(st);
    eph_config_release(&cfg);
    return status;
}

static int admin_key(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[2], "create") != 0) {
        fprintf(stderr, "usage: ephemerald admin key create --org NAME [--role admin|member]\n");
        return 2;
    }
    static const char *const extra[] = {"--org", "--role", NULL};
    const char *vals[2] = {NULL, NULL};
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int status = 1;
    if (eph_options_load(&cfg, argc, argv, 3, extra, vals))
        goto out;
    const char *role = vals[1] ? vals[1] : "member";
    if (!vals[0] || (strcmp(role, "admin") && strcmp(role, "member"))) {
        fprintf(stderr, "usage: ephemerald admin key create --org NAME [--role admin|member]\n");
        status = 2;
        goto out;
    }
    if (open_store(&cfg, &st))
        goto out;
    char org_id[48];
    int rc = st->ops->org_find(st, vals[0], org_id, sizeof(org_id));
    if (rc) {
        fprintf(stderr, "ephemerald: no org '%s'\n", vals[0]);
        goto out;
    }
    if (new_key(st, org_id, role) == 0)
        status = 0;
out:
    if (st)
        st->ops->close(st);
    eph_config_release(&cfg);
    return status;
}

static int admin_credit(int argc, char **argv)
{
    static const char *const extra[] = {"--org", "--micros", NULL};
    const char *vals[2] = {NULL, NULL};
    struct eph_config cfg;
    struct eph_store *st = NULL;
    int status = 1;
    int64_t micros;
    if (eph_options_load(&cfg, argc, argv, 2, extra, vals))
        goto out;
    if (!vals[0] || !vals[1] || parse_micros(vals[1], &micros)) {
        fprintf(stderr, "usage: ephemerald admin credit --org NAME --micros N (N > 0)\n");
        status = 2;
        goto out;
    }
    if (open_store(&cfg, &st))
        goto out;
    char org_id[48];
    if (st->ops->org_find(st, vals[0], org_id, sizeof(org_id))) {
        fprintf(stderr, "ephemerald: no org '%s'\n", vals[0]);
        goto out;
    }
    struct eph_balance before;
    int rc = st->ops->balance(st, org_id, &before);
    if (rc) {
        fprintf(stderr, "ephemerald: cannot read the balance: %s\n", eph_strerror(rc));
        goto out;
    }
    /* The API's bound (common/money.h): no total can overflow. */
    const char *why = eph_money_credit_refusal(micros, before.balance_micros);
    if (why) {
        fprintf(stderr, "ephemerald: credit refused: %s\n", why);
        status = 2;
        goto out;
    }
    rc = st->ops->credit_add(st, org_id, micros);
    if (rc) {
        fprintf(stderr, "ephemerald: cannot add credit: %s\n", eph_strerror(rc));
        goto out;
    }
    struct eph_balance b;
    if (st->ops->balance(st, org_id, &b) == 0)
        printf("%lld\n", (long long)b.available_micros);
    status = 0;
out:
    if (st)
        st->ops->close(st);
    eph_config_release(&cfg);
    return status;
}

#define CONNECTION_USAGE                                                                           \
    "usage: ephemerald admin connection add --org NAME --name N --base-url URL --methods "         \
    "GET,POST\n"                                                                                   \
    "                                       [--path-prefix P]... [--header 'Name: value']...\n"    \
    "                                       [--query 'name=value']...\n"

/* A repeatable option's name at a, alone or as "--name=value". */
static bool is_option(const char *a, const char *name)
{
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

/* Splits "name<sep>value" into obj[name] = value (spaces after sep skipped). False when there is
 * no name. The value is a credential: it goes into the sealed blob only. */
static bool put_pair(json_t *obj, const char *v, char sep)
{
    const char *at = strchr(v, sep);
    if (!at || at == v || (size_t)(at - v) >= 160)
        return false;
    char name[160];
    snprintf(name, sizeof(name), "%.*s", (int)(at - v), v);
    const char *val = at + 1;
    while (*val == ' ' || *val == '\t')
        val++;
    json_object_set_new(obj, name, json_string(val));
    return true;
}

/* Moves the repeatable options (--path-prefix, --header, --query) out of argv into arrays,
 * leaving the rest for eph_options_load. Returns the new argc, or -1 on a missing value. */
static int take_repeated(int argc, char **argv, json_t *prefixes, json_t *headers, json_t *query,
                         bool *bad)
{
    int out = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool is_prefix = is_option(a, "--path-prefix");
        bool is_header = is_option(a, "--header");
        bool is_query = is_option(a, "--query");
        if (!is_prefix && !is_header && !is_query) {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v)
            return -1;
        if (is_prefix)
            json_array_append_new(prefixes, json_string(v));
        else if (!put_pair(is_header ? headers : query, v, is_header ? ':' : '='))
            *bad = true;
    }
    return out;
}

/* Wipes the credentials an object held in the clear. */
static void wipe_values(json_t *obj)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (json_is_string(v))
            sodium_memzero((char *)json_string_value(v), json_string_length(v));
    }
}

static int admin_connection(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[2], "add") != 0) {
        fputs(CONNECTION_USAGE, stderr);
        return 2;
    }
    static const char *const extra[] = {"--org", "--name", "--base-url", "--methods", NULL};
    const char *vals[4] = {NULL, NULL, NULL, NULL};
    struct eph_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    struct eph_store *st = NULL;
    int status = 1;
    json_t *prefixes = json_array(), *headers = json_object(), *query = json_object(), *body = NULL;
    bool bad_pair = false;
    int n = take_repeated(argc, argv, prefixes, headers, query, &bad_pair);
    if (n < 0 || bad_pair) {
        fprintf(stderr, "ephemerald: --header takes 'Name: value', --query 'name=value', "
                        "--path-prefix a path\n");
        status = 2;
        goto out;
    }
    if (eph_options_load(&cfg, n, argv, 3, extra, vals))
        goto out;
    if (!vals[0] || !vals[1] || !vals[2] || !vals[3]) {
        fputs(CONNECTION_USAGE, stderr);
        status = 2;
        goto out;
    }
    json_t *methods = json_array();
    char mbuf[256];
    snprintf(mbuf, sizeof(mbuf), "%s", vals[3]);
    for (char *save = NULL, *m = strtok_r(mbuf, ",", &save); m; m = strtok_r(NULL, ",", &save))
        json_array_append_new(methods, json_string(m));
    body =
        json_pack("{s:s, s:s, s:o, s:O, s:O, s:O}", "name", vals[1], "base_url", vals[2], "methods",
                  methods, "path_prefixes", prefixes, "headers", headers, "query", query);
    if (!body)
        goto out;
    struct eph_connection c;
    const char *param;
    char err[256];
    int rc = eph_api_connection_build(body, cfg.secret_key_file, &c, &param, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "ephemerald: %s\n", err);
        status = rc == -EINVAL && param ? 2 : 1;
        goto out;
    }
    if (open_store(&cfg, &st)) {
        eph_connection_release(&c);
        goto out;
    }
    char org_id[48];
    if (st->ops->org_find(st, vals[0], org_id, sizeof(org_id))) {
        fprintf(stderr, "ephemerald: no org '%s'\n", vals[0]);
        eph_connection_release(&c);
        goto out;
    }
    rc = st->ops->conn_insert(st, org_id, &c, c.id, sizeof(c.id));
    if (rc == -EEXIST)
        fprintf(stderr, "ephemerald: org '%s' has a connection named '%s' already\n", vals[0],
                c.name);
    else if (rc)
        fprintf(stderr, "ephemerald: cannot store the connection: %s\n", eph_strerror(rc));
    else {
        printf("%s\n", c.id);
        fprintf(stderr,
                "admin: connection '%s' added to org '%s' (%zu headers, %zu query parameters, "
                "sealed)\n",
                c.name, vals[0], json_array_size(c.header_names), json_array_size(c.query_names));
        status = 0;
    }
    eph_connection_release(&c);
out:;
    /* The headers and parameters held credentials in the clear: wipe them. */
    wipe_values(headers);
    wipe_values(query);
    json_decref(body);
    json_decref(prefixes);
    json_decref(headers);
    json_decref(query);
    if (st)
        st->ops->close(st);
    eph_config_release(&cfg);
    return status;
}

int eph_cmd_admin(int argc, char **argv)
{
    if (sodium_init() < 0) {
        fprintf(stderr, "ephemerald: libsodium failed to start\n");
        return 1;
    }
    if (argc >= 2 && strcmp(argv[1], "init") == 0)
        return admin_init(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "key") == 0)
        return admin_key(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "credit") == 0)
        return admin_credit(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "connection") == 0)
        return admin_connection(argc, argv);
    fprintf(stderr, "usage: ephemerald admin init|key create|credit|connection add ...\n");
    return 2;
}
