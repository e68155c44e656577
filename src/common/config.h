/*
 * config.h - the server's configuration as a plain struct that every module may read: the
 * models, the sandbox's limits, prices and policies. Filled at start-up by daemon/config.c
 * (built-in defaults, the JSON config file, the environment, flags) and read-only after; no module
 * below daemon/ parses configuration or includes daemon/.
 */
#ifndef EPH_COMMON_CONFIG_H
#define EPH_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One model a run may name (agent/model.h opens it). */
struct eph_model_config {
    char *id;          /* "openai/gpt-6-luna" */
    char *provider;    /* "openai", "anthropic", "replay" */
    char *base_url;    /* e.g. "https://api.openai.com/v1"; NULL for replay */
    char *api_key_env; /* name of the environment variable holding the key */
    char *transcripts; /* replay: folder of recorded examples */
    uint64_t input_micros_per_mtok;
    uint64_t output_micros_per_mtok;       /* reasoning tokens are output tokens */
    uint64_t cached_input_micros_per_mtok; /* cache reads (default: the input price) */
    uint64_t cache_write_micros_per_mtok;  /* 5-minute cache writes (see docs/MODELS.md) */
    uint64_t cache_write_1h_micros_per_mtok;
    uint64_t input_overhead_tokens; /* what the provider adds to the input (tool-use system
                                       prompt, message framing), for the input bound */
    uint32_t max_output_tokens;
    uint32_t timeout_seconds; /* idle time allowed between bytes of an answer (default 120) */
    char *upstream_model;     /* model name sent on the wire (default: id after the last '/'
                                 for openai, id for anthropic) */
    bool stream;              /* "stream": ask for Server-Sent Events (openai, anthropic) */
};

/* What a sandbox may use (sandbox/sandbox.h enforces it). */
struct eph_sandbox_limits {
    unsigned vcpus;       /* CPU quota in whole CPUs (default 1) */
    unsigned memory_mib;  /* memory without swap (default 512) */
    unsigned pids;        /* processes and threads (default 256) */
    unsigned disk_mib;    /* the writable tmpfs for /tmp and scratch (default 1024) */
    unsigned nofile;      /* open files per process (default 1024) */
    uint64_t fsize_bytes; /* largest file a process may write (default = disk) */
};

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
    unsigned max_running_per_org;     /* 0 (no cap): claimed runs an org may have at once */
    unsigned max_timeout_seconds;     /* 3600 */
    size_t max_body_bytes;            /* 16 MiB */
    unsigned turn_limit;              /* 30 */
    unsigned shutdown_grace_seconds;  /* 30 */
    char *secret_key_file;            /* "var/secret.key": seals connection credentials */
    unsigned idempotency_ttl_seconds; /* 86400: how long an Idempotency-Key is remembered */
    unsigned sse_keepalive_seconds;   /* 15: comment lines on an idle event stream */
    char *node_id;                    /* NULL: the host name; names this node's run leases */
    char *node_url;                   /* NULL: http://<listen> (the host name for a wildcard
                                         address): where the other nodes reach this API */
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
        unsigned live_output_bytes;       /* 65536: shell.output text per command (0: none) */
        unsigned warm_pool;               /* sandboxes created ahead of runs (0: none);
                                             EPH_WARM_POOL_AUTO: 2 on namespaces, else 0 */
    } sandbox;
#define EPH_WARM_POOL_AUTO (~0u)
    struct {
        uint64_t compute_micros_per_second; /* 240 */
        uint64_t web_micros_per_request;    /* 100 */
        uint64_t web_micros_per_mib;        /* 50 */
    } prices;
    struct {
        char **allow_private_cidrs;  /* connections' base_urls only; none: only public
                                        addresses (docs/BROKER.md) */
        size_t nallow_private_cidrs; /* at most 64, each checked at load */
        char **web_private_cidrs;    /* the same for web requests and web_fetch */
        size_t nweb_private_cidrs;
        char *extra_ca_file;              /* PEM added to the system store, or NULL */
        uint64_t max_request_bytes;       /* 10 MiB */
        uint64_t max_response_bytes;      /* 50 MiB */
        unsigned request_timeout_seconds; /* 60 */
        unsigned max_tunnels_per_run;     /* 16 */
        uint64_t record_body_max_bytes;   /* 256 KiB of each body kept in the record */
    } broker;
    struct {
        unsigned max_connections;             /* 4096: every client together */
        unsigned max_connections_per_address; /* 256: one IPv4 address or IPv6 /64 */
        unsigned request_head_seconds;        /* 10: to send a whole request head (and an
                                                 unauthenticated request its body) */
        unsigned auth_failures_per_minute;    /* 30 per address, then 429 (0: no limit) */
    } http;
    struct {
        unsigned build_timeout_seconds; /* 1800: a build killed past it (docs/IMAGES.md) */
        unsigned max_size_mib;          /* 4096: the largest image a build or import makes */
        unsigned max_concurrent_builds; /* 1: builds at once on this node; more wait */
    } images;
    struct {
        unsigned max_files; /* 100: files collected from a run's scratch directory (outputs) */
        uint64_t max_bytes; /* 50 MiB: their bytes in all */
    } outputs;
    struct {
        char **allow_private_cidrs;  /* non-public ranges an endpoint may point into; none: only
                                        public addresses (docs/WEBHOOKS.md) */
        size_t nallow_private_cidrs; /* at most 64, each checked at load */
        unsigned timeout_seconds;    /* 10: an endpoint's default time for one attempt */
        unsigned retry_base_ms;      /* 30000: the first retry's delay, doubled after each */
        unsigned max_age_seconds;    /* 86400: retried until the event is this old */
    } webhooks;
    struct {
        unsigned max_live_per_org;    /* 10: sandboxes an org has starting or ready at once */
        unsigned max_timeout_seconds; /* 86400: the longest life a create may ask */
        uint64_t max_upload_bytes;    /* 64 MiB: one PUT of a file */
        uint64_t max_download_bytes;  /* 64 MiB: one GET of a file */
    } sandboxes;
    char *default_model;
    struct eph_model_config *models;
    size_t nmodels;
    bool models_configured; /* the configuration file has "models": nothing is added to them */
};

/* The model configured under id, or NULL. */
const struct eph_model_config *eph_config_model(const struct eph_config *cfg, const char *id);

#endif
