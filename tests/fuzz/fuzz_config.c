/* libFuzzer driver: the server's configuration file (ephemerald --config) parsed from memory over
 * the defaults. Checks that an accepted file leaves a configuration the server can use (its
 * default model is one of its models) and that a refusal says why. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The field names the structure-aware mutator adds (json_mutator.h). */
#define JSON_MUTATOR_KEYS                                                                          \
    {                                                                                              \
        "allow_private_cidrs", "api_key_env", "auth_failures_per_minute", "backend", "base_url",   \
            "broker", "cached_input_micros_per_mtok", "command_timeout_seconds",                   \
            "compute_micros_per_second", "db", "default_model", "disk_mib", "extra_ca_file",       \
            "http", "id", "idempotency_ttl_seconds", "image", "init_path",                         \
            "input_micros_per_mtok", "listen", "log_format", "log_level", "max_body_bytes",        \
            "max_concurrent_runs", "max_concurrent_runs_per_org", "max_connections",               \
            "max_connections_per_address", "max_output_tokens", "max_queued_runs_per_org",         \
            "max_request_bytes", "max_response_bytes", "max_timeout_seconds",                      \
            "max_tunnels_per_run", "memory_mib", "models", "nofile", "on_unready",                 \
            "output_cap_bytes", "output_micros_per_mtok", "pids", "prices", "provider",            \
            "reaper_interval_ms", "record_body_max_bytes", "request_head_seconds",                 \
            "request_timeout_seconds", "retention_days", "retention_seconds", "sandbox",           \
            "secret_key_file", "shutdown_grace_seconds", "sse_keepalive_seconds", "stream",        \
            "timeout_seconds", "transcripts", "turn_limit", "upstream_model", "vcpus",             \
            "warm_pool", "web_micros_per_mib", "web_micros_per_request", "web_private_cidrs"       \
    }
#include "json_mutator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eph_config cfg;
    if (eph_config_defaults(&cfg))
        abort();
    char err[512] = "";
    int rc = eph_config_load_buffer(&cfg, (const char *)data, size, "fuzz.json", err, sizeof(err));
    if (rc == 0 && !eph_config_model(&cfg, cfg.default_model))
        abort();
    if (rc && rc != -12 && !err[0])
        abort();
    eph_config_release(&cfg);
    return 0;
}
