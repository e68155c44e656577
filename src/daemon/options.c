#include "daemon/options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"

static const char *const server_opts[] = {
    "--listen",    "--db", "--sandbox", "--config", "--log-format", "--max-concurrent-runs",
    "--log-level", NULL};

int eph_options_load(struct eph_config *cfg, int argc, char **argv, int first,
                     const char *const *extra, const char **extra_values)
{
    char err[512];
    int rc = eph_config_defaults(cfg);
    if (rc)
        return rc;
    const char *vals[8] = {0};
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const char *value = NULL;
        int idx = -1;
        size_t alen = strcspn(a, "=");
        for (int k = 0; server_opts[k]; k++)
            if (strlen(server_opts[k]) == alen && strncmp(a, server_opts[k], alen) == 0)
                idx = k;
        int eidx = -1;
        for (int k = 0; idx < 0 && extra && extra[k]; k++)
            if (strlen(extra[k]) == alen && strncmp(a, extra[k], alen) == 0)
                eidx = k;
        if (idx < 0 && eidx < 0) {
            fprintf(stderr, "ephemerald: unknown option '%s'\n", a);
            return -EINVAL;
        }
        if (a[alen] == '=')
            value = a + alen + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        else {
            fprintf(stderr, "ephemerald: option '%s' needs a value\n", a);
            return -EINVAL;
        }
        if (idx >= 0)
            vals[idx] = value;
        else
            extra_values[eidx] = value;
    }
    /* config file, then environment, then flags */
    const char *config = vals[3] ? vals[3] : getenv("EPHEMERALD_CONFIG");
    if (config && (rc = eph_config_load_file(cfg, config, err, sizeof(err)))) {
        fprintf(stderr, "ephemerald: %s\n", err);
        return rc;
    }
    if ((rc = eph_config_load_env(cfg, err, sizeof(err)))) {
        fprintf(stderr, "ephemerald: %s\n", err);
        return rc;
    }
    if ((vals[0] && eph_config_set(&cfg->listen, vals[0])) ||
        (vals[1] && eph_config_set(&cfg->db, vals[1])) ||
        (vals[2] && eph_config_set(&cfg->sandbox.backend, vals[2])) ||
        (vals[4] && eph_config_set(&cfg->log_format, vals[4])) ||
        (vals[6] && eph_config_set(&cfg->log_level, vals[6])))
        return -ENOMEM;
    if (vals[5]) {
        char *end;
        unsigned long n = strtoul(vals[5], &end, 10);
        if (*end || n < 1 || n > 4096) {
            fprintf(stderr, "ephemerald: --max-concurrent-runs must be from 1 to 4096\n");
            return -EINVAL;
        }
        cfg->max_concurrent_runs = (unsigned)n;
    }
    enum eph_log_level lvl;
    if (eph_log_level_parse(cfg->log_level, &lvl) || eph_log_configure(lvl, cfg->log_format)) {
        fprintf(stderr, "ephemerald: log_format must be text or json, log_level debug, info, "
                        "warn or error\n");
        return -EINVAL;
    }
    return 0;
}

void eph_options_ensure_db_dir(const char *db)
{
    if (strstr(db, "://"))
        return;
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", db);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
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
