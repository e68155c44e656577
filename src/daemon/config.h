/*
 * config.h - the server's configuration: built-in defaults, then the JSON config file, then the
 * environment (EPHEMERALD_*), then flags — later sources win. Defaults work with no file at all:
 * SQLite under var/, the auto-chosen sandbox, the replay model over examples/.
 */
#ifndef EPH_CONFIG_H
#define EPH_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "agent/model.h"
#include "sandbox/sandbox.h"

struct eph_config {
    char *listen;                     /* "127.0.0.1:8080" */
    char *db;                         /* "var/ephemeral.db" */
    char *log_format;                 /* "text" | "json" */
    char *log_level;                  /* "info" */
    unsigned retention_days;          /* 30 */
    unsigned retention_seconds;       /* 0; when set, overrides retention_days (tests, short-lived
                                         deployments) */
    unsigned reaper_interval_ms;      /* 60000: how often expired logs are purged */
    unsigned max_concurrent_runs;     /* 64 */
    unsigned max_queued_per_org;      /* 1000 */
    unsigned max_timeout_seconds;     /* 3600 */
    size_t max_body_bytes;            /* 16 MiB */
    unsigned turn_limit;              /* 30 */
    unsigned shutdown_grace_seconds;  /* 30 */
    char *secret_key_file;            /* "var/secret.key": seals connection credentials */
    unsigned idempotency_ttl_seconds; /* 86400: how long an Idempotency-Key is remembered */
    unsigned sse_keepalive_seconds;   /* 15: comment lines on an idle event stream */
    char *node_id;                    /* NULL: the host name; names this node's run leases */
    unsigned lease_seconds;           /* 30: a run whose lease is older is lost (worker_lost) */
    unsigned lease_renew_seconds;     /* 10: renewal and compute checkpoint interval */
    unsigned db_pool_size;            /* 4: PostgreSQL connections per node */
    char *on_unready;                 /* "refuse": serve exits when the image or the backend is
                                         unusable at start-up; "serve": it starts not ready */
    struct {
        char *backend;   /* "auto" */
        char *image;     /* "var/images/default" */
        char *init_path; /* beside the binary */
        struct eph_sandbox_limits limits;
        unsigned command_timeout_seconds; /* 60 */
        unsigned output_cap_bytes;        /* 16384 */
        unsigned warm_pool;               /* 2: sandboxes created ahead of runs (0: none) */
    } sandbox;
    struct {
        uint64_t compute_micros_per_second; /* 240 */
        uint64_t web_micros_per_request;    /* 100 */
        uint64_t web_micros_per_mib;        /* 50 */
    } prices;
    struct {
        char **allow_private_cidrs;       /* none: only public addresses (SPEC 7) */
        size_t nallow_private_cidrs;      /* at most 64, each checked at load */
        char *extra_ca_file;              /* PEM added to the system store, or NULL */
        uint64_t max_request_bytes;       /* 10 MiB */
        uint64_t max_response_bytes;      /* 50 MiB */
        unsigned request_timeout_seconds; /* 60 */
        unsigned max_tunnels_per_run;     /* 16 */
        uint64_t record_body_max_bytes;   /* 256 KiB of each body kept in the record */
    } broker;
    char *default_model;
    struct eph_model_config *models;
    size_t nmodels;
};

/* Fills cfg with the defaults. */
int eph_config_defaults(struct eph_config *cfg);
/* Merges a JSON config file; unknown keys are an error (typos must not pass silently). */
int eph_config_load_file(struct eph_config *cfg, const char *path, char *err, size_t errlen);
/* The same from len bytes in memory; name stands for the file in messages (the fuzz driver). */
int eph_config_load_buffer(struct eph_config *cfg, const char *data, size_t len, const char *name,
                           char *err, size_t errlen);
/* Merges EPHEMERALD_LISTEN, _DB, _SANDBOX, _LOG_FORMAT, _MAX_CONCURRENT_RUNS, ... */
int eph_config_load_env(struct eph_config *cfg, char *err, size_t errlen);
void eph_config_release(struct eph_config *cfg);
const struct eph_model_config *eph_config_model(const struct eph_config *cfg, const char *id);
/* Replaces a string field (copies value). */
int eph_config_set(char **field, const char *value);

#endif
