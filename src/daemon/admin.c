/*
 * admin.c - `ephemerald admin ...`: organizations, keys and credit, straight on the store, with or
 * without a running server.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "common/error.h"
#include "common/id.h"
#include "daemon/commands.h"
#include "daemon/options.h"
#include "store/store.h"

/* Creates the directory that holds a SQLite database path, if any. */
static void ensure_db_dir(const char *db)
{
    if (strstr(db, "://"))
        return;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", db);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0700);
            *p = '/';
        }
    }
    mkdir(dir, 0700);
}

static int open_store(struct eph_config *cfg, struct eph_store **st)
{
    char err[512];
    ensure_db_dir(cfg->db);
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
    rc = st->ops->key_insert(st, org_id, hash, role, NULL, 0);
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
    if (vals[1] && parse_micros(vals[1], &credit)) {
        fprintf(stderr, "ephemerald: --credit-micros must be a positive integer\n");
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
    fprintf(stderr, created ? "admin: created org '%s' with its credit\n"
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
    int rc = st->ops->credit_add(st, org_id, micros);
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
    fprintf(stderr, "usage: ephemerald admin init|key create|credit ...\n");
    return 2;
}
